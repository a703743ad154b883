"""The read-only SQL session (``--sql``, ``Pipeline.sql()``): a trust boundary. A statement is
judged on DuckDB's parse tree before it runs (statement_judge), the session may touch only the
lake (sandbox), and a Postgres catalog is read as a role that can only read (catalog_reader)."""
