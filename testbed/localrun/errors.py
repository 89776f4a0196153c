"""Exit statuses and the runner's one error class (rooted in torchdag.errors.TorchdagError)."""

from __future__ import annotations

from torchdag.errors import EXIT_INTERRUPTED, TorchdagError

EXIT_OK, EXIT_FAILED, EXIT_INVALID, EXIT_REFUSED, EXIT_TIMEOUT = 0, 1, 2, 3, 124


def stopped_code(interrupted: bool, timed_out: bool) -> int | None:
    """The status of a run that was stopped (an interrupt wins over a timeout), or None."""
    if interrupted:
        return EXIT_INTERRUPTED
    if timed_out:
        return EXIT_TIMEOUT
    return None


class LocalRunError(TorchdagError):
    """The Workflow cannot be run here as written. `exit_code` is 3 (refused: it cannot
    run faithfully on this machine) or 2 (invalid: Argo would refuse it too); `lines()`
    are what `torchdag.errors.report` prints, one per problem."""

    def __init__(self, message: str, code: int = EXIT_REFUSED):
        super().__init__(message)
        self.exit_code = code

    @property
    def code(self) -> int:
        return self.exit_code

    def lines(self) -> list[str]:
        prefix = "localrun: refused: " if self.exit_code == EXIT_REFUSED else "localrun: "
        return [prefix + line for line in str(self).splitlines()]
