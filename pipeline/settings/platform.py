"""Variables of the platform rather than of event-lake: read here, beside every other
environment read, and never listed in ENV_KEYS (the product does not own them)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

# how to get the Java Spark needs, said the same way by doctor and by a failed Spark start
JAVA_FIX = ("Install Java 17+ (Debian/Ubuntu: apt-get install openjdk-17-jre-headless) and put it on "
            "PATH, or set JAVA_HOME.")


def user_cache() -> Path:
    """The user's cache folder: ``XDG_CACHE_HOME``, else ``~/.cache``."""
    return Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache").expanduser()


def user_data() -> Path:
    """The user's data folder: ``XDG_DATA_HOME``, else ``~/.local/share``."""
    return Path(os.environ.get("XDG_DATA_HOME") or "~/.local/share").expanduser()


CHECKOUT_HOME = ".lake"


def default_home() -> str:
    """Where the embedded default lives when EVENT_LAKE_HOME is unset: ``./.lake`` beside a
    checkout's scripts; for the installed tool, which runs from any folder, one folder per user
    (``$XDG_DATA_HOME/event-lake``) — it created a ``.lake`` and started a Postgres wherever it was
    run — unless the folder it runs in already has a ``.lake``."""
    from pipeline import invocation

    if not invocation.installed() or os.path.isdir(CHECKOUT_HOME):
        return CHECKOUT_HOME
    return str(user_data() / "event-lake")


def java_home() -> str | None:
    """``JAVA_HOME``: the Java that Spark's launcher starts when set (else ``java`` on PATH)."""
    return os.environ.get("JAVA_HOME") or None


def java_binary() -> str | None:
    """The ``java`` Spark's launcher runs: ``$JAVA_HOME/bin/java`` when JAVA_HOME is set, else
    the one on PATH; None when there is none."""
    home = java_home()
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    return java if java and os.path.exists(java) else None


def java_where() -> str:
    """Where :func:`java_binary` looked, for messages."""
    home = java_home()
    return f"JAVA_HOME={home}" if home else "PATH"
