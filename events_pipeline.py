#!/usr/bin/env python3
"""Event pipeline CLI: ``uv run events_pipeline.py --help`` (installed: ``event-lake --help``)."""

if __name__ == "__main__":
    try:
        import sys

        from pipeline.cli.launch import entry
    except KeyboardInterrupt:  # Ctrl-C while Python itself starts: its own handler is in place
        print("Stopped before the command started; nothing was done.", flush=True)
        raise SystemExit(130) from None
    sys.exit(entry())
