"""torchdag trainer: the training entry point that goes into the user's image.

Run it with ``torchrun ... trainer/train.py`` (or the legacy
``python -m torch.distributed.launch ... trainer/train.py``); run
``python trainer/preflight.py`` before torchrun to check the node.
"""
