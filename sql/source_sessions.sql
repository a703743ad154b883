-- The generator's sessions table (--sessions): a table with its own id and time columns, read with
-- SOURCE_TABLES=public.sessions:started_at:session_id (pipeline/columns.py). Each session's events
-- name it in details.session_id and are committed with it, in one transaction.
-- {schema}, {table} and {index} are filled in as quoted identifiers by pipeline/source/ddl.py.
CREATE SCHEMA IF NOT EXISTS {schema};

CREATE TABLE IF NOT EXISTS {schema}.{table} (
    session_id uuid        PRIMARY KEY,
    user_id    text        NOT NULL,
    started_at timestamptz NOT NULL,
    ip_address text,
    created_at timestamptz DEFAULT now()
);

-- session_id included: the identity check sums the ids of a time range index-only
CREATE INDEX IF NOT EXISTS {index} ON {schema}.{table} (started_at) INCLUDE (session_id);
-- arrival time: a load reads only the rows that arrived since the last one (SOURCE_ARRIVAL_COLUMN)
CREATE INDEX IF NOT EXISTS {arrival_index} ON {schema}.{table} (created_at);
