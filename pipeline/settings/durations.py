"""Parse and print human durations such as ``15m``, ``1h``, ``7d``, ``1w``."""

from __future__ import annotations

import re
from datetime import timedelta

from pipeline.errors import ConfigError

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
# the longest duration any setting takes: ``now() - LOOKBACK`` and the like must stay a date
# every engine represents (999999d crashed a load with "date value out of range")
LONGEST = timedelta(days=36500)
_PATTERN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$", re.I)


def parse_duration(text: str | int | float, what: str = "duration") -> timedelta:
    """``"15m"`` -> 15 minutes. Units: s, m, h, d, w. A number without a unit is refused (but 0):
    ``--retention 7`` meant as a week would have expired every snapshot older than 7 seconds."""
    match = _PATTERN.match(str(text))
    if not match and str(text).strip().startswith("-"):
        raise ConfigError(f"{what} {text!r} is negative: a duration counts back from now, so it is given "
                          "as a positive one.", f"Give {what} a positive duration, like 15m or 7d.")
    if not match:
        raise ConfigError(
            f"{what} {text!r} is not a duration: expected a number with a unit, like 30s, 15m, 1h, "
            "7d or 1w.", f"Fix {what} in the environment, .env or the command line.")
    if not match.group(2) and float(match.group(1)) != 0:
        number = match.group(1)
        raise ConfigError(f"{what} {str(text).strip()!r} has no unit: {number}s, {number}m, {number}h or "
                          f"{number}d?", f"Give {what} a unit, e.g. {what} {number}d for {number} days.")
    value, unit = float(match.group(1)), (match.group(2) or "s").lower()
    seconds = value * _UNITS[unit]
    if seconds > LONGEST.total_seconds():
        raise ConfigError(f"{what} {text!r} is longer than the longest duration accepted "
                          f"({format_duration(LONGEST)}, about 100 years).",
                          f"Give {what} a shorter duration, like 7d or 1w.")
    return timedelta(seconds=seconds)


def format_duration(delta: timedelta) -> str:
    """The shortest exact form: 900 s -> ``15m``; 5400 s -> ``90m``."""
    seconds = delta.total_seconds()
    for unit in ("w", "d", "h", "m"):
        size = _UNITS[unit]
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"
