"""torchdag trainer: the training entry point that goes into the user's image.

Run it with ``torchrun ... trainer/train.py`` (or the legacy
``python -m torch.distributed.launch ... trainer/train.py``); the pod helpers it shares code
with (device detection, the gradient exchange, the recorder) are ``torchdag/agents/``, the
runtime the Workflow ships, imported as ``torchdag.agents``.

One import convention: every module imports its siblings as ``from trainer.… import …``;
a file run by path (train.py) first puts the folder above trainer/ on sys.path. One
exception root: trainer/errors.py.
"""
