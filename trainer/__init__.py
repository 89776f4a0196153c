"""torchdag trainer: the training entry point that goes into the user's image.

Run it with ``torchrun ... trainer/train.py`` (or the legacy
``python -m torch.distributed.launch ... trainer/train.py``); the pod-side agents are in
``trainer/agents/`` (``python3 trainer/agents/preflight.py`` checks a node before torchrun).

One import convention: every module imports its siblings as ``from trainer.… import …``;
a file run by path (train.py, agents/gangwatch.py) first puts the folder above trainer/
on sys.path. One exception root: trainer/errors.py.
"""
