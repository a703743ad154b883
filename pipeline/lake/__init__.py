"""The lake: ATTACH SQL, connecting, tables, locks, promotion, ops tables, maintenance, queries."""
