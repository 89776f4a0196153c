"""Pod-side agents: small programs the rendered Workflow runs in the training image beside
the trainer, standard library only (no torch, no Kubernetes client):

    preflight.py   checks a node before the launcher and resolves `nic: auto`
    gangwatch.py   stops the Workflow, naming the unplaced pods, if the gang is not placed in time
    kubeapi.py     the in-cluster API client gangwatch.py talks through

Each runs by path (python3 /opt/torchdag/trainer/agents/NAME.py) and imports its siblings
the way the whole trainer/ package does: `from trainer.agents.kubeapi import …`, after the
same sys.path lines trainer/train.py starts with.
"""
