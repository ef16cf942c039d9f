"""Errors raised by the rig launchers.

A flat tree: `RigError` is the root, `ComponentStartError` says a component did not come up
(with the reason and the tail of its log), `ComponentNotFoundError` says what to install.
"""


class RigError(Exception):
    """Root of the rig's errors."""


class ComponentStartError(RigError):
    """A component exited early or did not answer its readiness probe before the deadline.

    The message names the component, the reason, the exit code if it exited, the log file, and
    the last lines of its log, so a failure report can be read without opening the file.
    """

    def __init__(
        self,
        name: str,
        reason: str,
        *,
        log_tail: str = "",
        log_path: str | None = None,
        returncode: int | None = None,
    ) -> None:
        self.name = name
        self.reason = reason
        self.log_tail = log_tail
        self.log_path = log_path
        self.returncode = returncode
        lines = [f"{name} did not start: {reason}"]
        if returncode is not None:
            lines.append(f"exit code: {returncode}")
        if log_path is not None:
            lines.append(f"log: {log_path}")
        if log_tail:
            lines.append("--- log tail ---")
            lines.append(log_tail.rstrip("\n"))
        super().__init__("\n".join(lines))

    @property
    def exited(self) -> bool:
        """Whether the process had already exited (as opposed to missing its deadline)."""
        return self.returncode is not None


class ComponentNotFoundError(ComponentStartError):
    """A binary, jar or runtime that a component needs is not installed.

    A subclass of `ComponentStartError` so a caller catching start failures sees this too.
    """

    def __init__(self, name: str, reason: str) -> None:
        super().__init__(name, reason)
