"""One invocation of the command line, as every action's handler receives it."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from pipeline.settings import Settings

# what a command's handler returns: ok (exit 0/1) or an exit code, and the last line it says
HandlerResult = tuple[bool | int, str]


@dataclass(frozen=True)
class Command:
    """The flags as parsed and the settings they and the environment made (not resolved yet: the
    :class:`~pipeline.ops.pipeline.Pipeline` a handler opens resolves them, once)."""

    args: argparse.Namespace
    settings: Settings

    @property
    def json(self) -> bool:
        """``--json`` (or ``--format json``): stdout holds one JSON document."""
        return bool(self.args.json)
