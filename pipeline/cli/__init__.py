"""``events_pipeline.py``: the parser, the handlers that call the library, and the output."""
