"""Incremental event pipeline: Postgres -> staging Parquet -> DuckLake."""

__version__ = "0.1.0"  # kept equal to pyproject.toml's version (a test checks)
