"""The pod helpers: the runtime a rendered Workflow ships (catalog `agents`, a ConfigMap it
owns, mounted at /opt/torchdag/torchdag/agents) or torchdag's training image carries there.
They run in the user's image beside the training script, which has python3 (and torch) but
nothing of torchdag: standard library only, torch where a helper runs inside training.

    preflight.py        checks a node before the launcher and resolves `nic: auto`
    gangwatch.py        stops the Workflow, naming the unplaced pods, if they are not placed in time,
                        and keeps watching for pods re-created on a lost host
    gangargs.py         gangwatch.py's command line
    gangpods.py         what gangwatch.py reads from the pods
    kubeapi.py          the in-cluster API client gangwatch.py talks through
    torchdag_device.py  which accelerator this node has (preflight, torchdag_ddp and the trainer)

and three that run in the training process:

    record.py           runs the script under torchelastic's error recording
    torchdag_flight.py  every rank's collectives and steps, started by record.py
    torchdag_ddp.py     the lines a user's DDP script calls (docs/byo.md); torchdag's trainer takes
                        its gradient exchange from it too

Each runs by path (python3 /opt/torchdag/torchdag/agents/NAME.py) and imports its siblings by
name, as they lie beside it in the ConfigMap (`import torchdag_device`); imported as this
package (torchdag's trainer, the tests) the same lines read `from . import torchdag_device`.
torchdag itself never imports them: it reads their text (torchdag/plan_agents.py).
"""
