"""Where the docs explain what the program printed: every error names its troubleshooting
section (a test checks that each section exists, so a hint never points at nothing)."""

from __future__ import annotations

from pipeline.errors import PipelineError

TROUBLESHOOTING = "docs/troubleshooting.md"
SETTINGS = "docs/reference/settings.md"
UNEXPECTED = f"{TROUBLESHOOTING}#unexpected-errors"


def for_error(exc: BaseException) -> str:
    """The section for ``exc``: its own class's, else its nearest ancestor's that has one."""
    for cls in type(exc).__mro__:
        if issubclass(cls, PipelineError):
            return f"{TROUBLESHOOTING}#{cls.__name__.lower()}"
    return UNEXPECTED
