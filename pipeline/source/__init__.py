"""The source Postgres: connecting, the pure window plan, window statistics, and its DDL."""
