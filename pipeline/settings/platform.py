"""Variables of the platform rather than of event-lake: read here, beside every other
environment read, and never listed in ENV_KEYS (the product does not own them)."""

from __future__ import annotations

import os


def java_home() -> str | None:
    """``JAVA_HOME``: the Java that Spark's launcher starts when set (else ``java`` on PATH)."""
    return os.environ.get("JAVA_HOME") or None
