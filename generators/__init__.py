"""Realistic fake application events for the source Postgres table."""
