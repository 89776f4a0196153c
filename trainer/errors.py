"""The one exception root of the trainer and its pod-side agents.

Every error they raise on purpose is a TrainerError: the trainer's LaunchError (the
launcher's environment, exit 2) with CheckpointError, DeviceError (a device or backend
this node cannot use), checkpoint.Unreadable (one unusable checkpoint file), and the
agents' Exit and ApiError (trainer/agents/kubeapi.py). Anything else is a failure whose
traceback the rank prints.
"""


class TrainerError(Exception):
    """The root of the trainer's own errors."""
