"""Incremental event pipeline: Postgres -> staging Parquet -> DuckLake."""
