"""The one exception root of the trainer.

Every error it raises on purpose is a TrainerError: LaunchError (the launcher's
environment, exit 2) with CheckpointError, DeviceError (a device or backend this node
cannot use) and checkpoint.Unreadable (one unusable checkpoint file). Anything else is a
failure whose traceback the rank prints. The pod helpers have their own root, AgentError
(torchdag/agents/kubeapi.py): they run without the trainer.
"""


class TrainerError(Exception):
    """The root of the trainer's own errors."""
