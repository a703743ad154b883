"""Where the docs explain what the program printed: every error names its troubleshooting
section (a test checks that each section exists, so a hint never points at nothing).

Links are named as in the checkout (``docs/troubleshooting.md#configerror``) and printed as a
file the user can open (:func:`readable`): the checkout's when the program runs from one, else
the copy the installed tool carries in its package (the wheel force-includes the pages linked
here; an installed tool has no docs folder, and a repository path pointed at nothing)."""

from __future__ import annotations

import os
from pathlib import Path

from pipeline.errors import PipelineError

TROUBLESHOOTING = "docs/troubleshooting.md"
SETTINGS = "docs/reference/settings.md"
UNEXPECTED = f"{TROUBLESHOOTING}#unexpected-errors"
PACKAGE = Path(__file__).resolve().parents[1]  # pipeline/: the installed pages are in pipeline/docs/
CHECKOUT = PACKAGE.parent


def for_error(exc: BaseException) -> str:
    """The section for ``exc``: its own class's, else its nearest ancestor's that has one."""
    for cls in type(exc).__mro__:
        if issubclass(cls, PipelineError):
            return readable(f"{TROUBLESHOOTING}#{cls.__name__.lower()}")
    return readable(UNEXPECTED)


def readable(link: str) -> str:
    """``link`` (``docs/…``) as a path this user can open: relative in the checkout's own folder,
    absolute elsewhere, the packaged copy in an installed tool."""
    page, hash_, anchor = link.partition("#")
    for root in (CHECKOUT, PACKAGE):
        if (root / page).is_file():
            path = page if root == CHECKOUT and Path(os.getcwd()).resolve() == CHECKOUT else str(root / page)
            return f"{path}{hash_}{anchor}"
    return link
