"""Extraction: read one window from the source into a staged batch (Spark or dlt)."""
