"""Scheduler intervals from flags and the environment (kept apart so ``--help`` stays fast)."""

from __future__ import annotations

import argparse
import os

from pipeline.durations import parse_duration

SHUTDOWN_SECONDS = 60  # bound on exit after SIGTERM, printed in --help


def intervals_from(args: argparse.Namespace, env: dict[str, str] | None = None):
    """Flags win over LOAD_EVERY / EXPIRE_EVERY / COMPACT_EVERY / RETENTION, then defaults."""
    from pipeline.scheduler import Intervals

    env = dict(os.environ) if env is None else env
    defaults = Intervals()

    def pick(flag: str | None, key: str, default):
        value = flag or (env.get(key) or "").strip()
        return parse_duration(value, f"--{key.lower().replace('_', '-')}") if value else default

    return Intervals(load=pick(args.load_every, "LOAD_EVERY", defaults.load),
                     expire=pick(args.expire_every, "EXPIRE_EVERY", defaults.expire),
                     compact=pick(args.compact_every, "COMPACT_EVERY", defaults.compact),
                     retention=pick(args.retention, "RETENTION", defaults.retention))
