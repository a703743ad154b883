"""The lake's catalog side: ATTACH SQL, connecting, tables, locks, ops tables, transactions,
maintenance, verification. The read-only SQL session is pipeline.sql_session."""
