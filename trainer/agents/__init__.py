"""Pod-side agents: small programs the rendered Workflow runs in the training image beside
the trainer, standard library only (no torch, no Kubernetes client):

    preflight.py   checks a node before the launcher and resolves `nic: auto`
    gangwatch.py   stops the Workflow, naming the unplaced pods, if the gang is not placed in time
    kubeapi.py     the in-cluster API client gangwatch.py talks through

and two that run the user's script, beside it in the training process:

    record.py        runs the script under torchelastic's error recording
    torchdag_ddp.py  the lines a user's DDP script calls (docs/byo.md), standard library and
                     torch; torchdag's trainer takes its gradient exchange from it too

Each runs by path (python3 /opt/torchdag/trainer/agents/NAME.py) and imports its siblings
the way the whole trainer/ package does: `from trainer.agents.kubeapi import …`, after the
same sys.path lines trainer/train.py starts with.
"""
