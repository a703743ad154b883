"""Error types shared by every stage.

Whether a retry can help is part of the type, never of the message text: the scheduler
retries :class:`TransientError` and reports :class:`TerminalError` until someone fixes it.
"""


class PipelineError(Exception):
    """Base class for every error the product reports to a user in plain words."""

    hint: str = ""

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.hint = hint or self.hint

    def __str__(self) -> str:
        text = super().__str__()
        return f"{text}\n  hint: {self.hint}" if self.hint else text


class TerminalError(PipelineError):
    """Retrying without a change (config, code, data) will fail the same way."""


class TransientError(PipelineError):
    """A service was busy or unreachable; the same call may succeed later."""


class ConfigError(TerminalError):
    """A setting is missing or malformed."""


class SourceUnavailable(TransientError):
    """The source Postgres could not be reached."""


class CatalogUnavailable(TransientError):
    """The DuckLake catalog database could not be reached."""


class LockBusy(TransientError):
    """Another process holds the lock for this job."""


_TRANSIENT_MARKERS = ("connection refused", "could not connect", "timeout", "timed out", "no route",
                      "server closed", "could not translate host", "the database system is starting",
                      "the database system is shutting down", "too many clients", "terminating connection")


def looks_transient(message: str) -> bool:
    """True for connection-level failures a retry can outlive (server down, restarting, busy),
    False for wrong settings (unknown database, bad password) that need a fix."""
    text = message.lower()
    return any(marker in text for marker in _TRANSIENT_MARKERS)
