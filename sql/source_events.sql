-- Source table the generator writes and the pipeline reads (the README's source table contract).
-- {schema}, {table} and {index} are filled in as quoted identifiers by pipeline/source/ddl.py.
CREATE SCHEMA IF NOT EXISTS {schema};

CREATE TABLE IF NOT EXISTS {schema}.{table} (
    event_id        uuid        PRIMARY KEY,
    event_type      text        NOT NULL,
    event_timestamp timestamptz NOT NULL,
    details         jsonb,
    created_at      timestamptz DEFAULT now()
);

-- event_id included: the identity check (pipeline/ops/proof.py) sums the ids of a time range index-only
CREATE INDEX IF NOT EXISTS {index} ON {schema}.{table} (event_timestamp) INCLUDE (event_id);
-- arrival time: a load reads only the rows that arrived since the last one (SOURCE_ARRIVAL_COLUMN)
CREATE INDEX IF NOT EXISTS {arrival_index} ON {schema}.{table} (created_at);
