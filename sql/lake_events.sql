-- Lake tables, created on first use inside the attached DuckLake (see the README's "How it works").
-- {lake}, {table} and {ops} are filled in as quoted identifiers by pipeline/lake/schema.py.
CREATE SCHEMA IF NOT EXISTS {lake}.main;
CREATE SCHEMA IF NOT EXISTS {lake}.{ops};

-- {id_type} and {details_type}: UUID and JSON for a lake made in copy mode, VARCHAR (the canonical
-- UUID text, the source's JSON text) for one made in zero-copy mode, whose Parquet files Spark
-- writes and Spark has no UUID or JSON Parquet type (see pipeline/lake/zero_copy.py).
CREATE TABLE IF NOT EXISTS {lake}.main.{table} (
    event_id        {id_type},
    event_type      VARCHAR,
    event_timestamp TIMESTAMP WITH TIME ZONE,
    details         {details_type},
    created_at      TIMESTAMP WITH TIME ZONE{typed_columns}
);

-- One row per promoted batch; committed in the same transaction as the batch's rows, so the
-- watermark (max of max_event_timestamp) can never disagree with the data.
CREATE TABLE IF NOT EXISTS {lake}.{ops}.batches (
    batch_id            VARCHAR,
    table_name          VARCHAR,
    engine              VARCHAR,
    window_low          TIMESTAMP WITH TIME ZONE,
    window_upper        TIMESTAMP WITH TIME ZONE,
    rows_staged         BIGINT,
    rows_inserted       BIGINT,
    rows_duplicate      BIGINT,
    min_event_timestamp TIMESTAMP WITH TIME ZONE,
    max_event_timestamp TIMESTAMP WITH TIME ZONE,
    extract_seconds     DOUBLE,
    promote_seconds     DOUBLE,
    staged_at           TIMESTAMP WITH TIME ZONE,
    promoted_at         TIMESTAMP WITH TIME ZONE,
    promoted_by         VARCHAR,
    -- the columns below were added later; pipeline/lake/schema.py adds them to older lakes
    arrival_mark        TIMESTAMP WITH TIME ZONE,  -- rows arriving up to here were visible to its plan
    freshness_p50       DOUBLE,  -- seconds from arrival to commit of the rows it inserted (new arrivals)
    freshness_p95       DOUBLE,
    rows_behind_mark    BIGINT,  -- rows the completeness check found arrived behind the last mark
    source              VARCHAR, -- database.schema.table it was read from: a lake table has one source
    -- its proof: how many ids, and their checksum (pipeline/id_checksum.py), the planner's snapshot
    -- held dated in (window_low, window_upper]: what the lake holds there once the batch is in
    source_ids          BIGINT,
    source_id_checksum  VARCHAR,  -- 32 hex digits: the sums of the ids' high and low halves
    snapshot_xmin       BIGINT,  -- its plan snapshot's xmin: the next plan reads rows of newer transactions
    backfill            BOOLEAN, -- SOURCE_TABLES: a part of a table's catch-up (BACKFILL_BATCH_ROWS)
    -- the source table's storage (pg_class.relfilenode) as its plan read it: a rewrite (ALTER … TYPE,
    -- VACUUM FULL, CLUSTER) gives every row a new xmin, so the next plan does not go by snapshot_xmin
    source_filenode     BIGINT
);

-- Who this lake is: one random id, made when the lake's tables are first created. Staged
-- batches carry it in their manifest, so a run only ever promotes its own lake's batches
-- (two configurations sharing a staging folder never load each other's rows).
CREATE TABLE IF NOT EXISTS {lake}.{ops}.lake_identity (
    lake_id    VARCHAR,
    created_at TIMESTAMP WITH TIME ZONE
);
INSERT INTO {lake}.{ops}.lake_identity
SELECT uuid()::VARCHAR, now() WHERE NOT EXISTS (SELECT 1 FROM {lake}.{ops}.lake_identity);

-- Staged rows that cannot be loaded (NULL or non-UUID event_id, NULL event_timestamp, details
-- that are not JSON, the losing copy of an id staged twice with different contents), as raw
-- text with the reason; written in the same transaction as the batch's good rows. raw_hash
-- makes it idempotent: a bad row the look-back reads again is not quarantined twice.
CREATE TABLE IF NOT EXISTS {lake}.{ops}.quarantine (
    batch_id        VARCHAR,
    table_name      VARCHAR,
    reason          VARCHAR,
    event_id        VARCHAR,
    event_type      VARCHAR,
    event_timestamp VARCHAR,
    details         VARCHAR,
    created_at      VARCHAR,
    raw_hash        VARCHAR,
    quarantined_at  TIMESTAMP WITH TIME ZONE,
    source_columns  JSON  -- the table's other columns, as the source sent them (text), by name
);

-- Erasure receipts (--erase, pipeline/load/erasure.py): what was erased, never the value itself
-- (value_hash: HMAC-SHA256 of it under ERASURE_KEY, or the lake's id). state 'erasing' until every
-- copy is gone; a rerun of --erase completes an erasure a kill interrupted.
CREATE TABLE IF NOT EXISTS {lake}.{ops}.erasures (
    erasure_id        VARCHAR,
    requested_at      TIMESTAMP WITH TIME ZONE,
    completed_at      TIMESTAMP WITH TIME ZONE,
    state             VARCHAR,
    subject_keys      JSON,     -- table -> where its rows name the subject (SUBJECT_KEY)
    value_hash        VARCHAR,
    hash_key          VARCHAR,  -- which key made value_hash: ERASURE_KEY or lake_id
    rows_erased       JSON,     -- table -> rows removed (quarantined ones under "quarantine")
    ids_checksum      JSON,     -- table -> count and id checksum of the ids removed
    snapshot_id       BIGINT,   -- the snapshot from which no row of the subject is current
    snapshots_expired JSON,     -- the versions time travel lost (the only ones that could show the rows)
    files_rewritten   BIGINT,
    bytes_written     BIGINT,
    staged_batches_removed BIGINT,
    catalog_vacuum    VARCHAR,  -- 'full', or what is left to do in the catalog's pages and why
    holdings          JSON      -- the files (paths) and inlined rows (snapshot ranges) that held the
                                -- subject at the commit: what a rerun completes without the value
);

-- Tombstones: the identities (pipeline/id_checksum.py) of rows erased from a table. Loads,
-- --reconcile and --repair never load them again; every comparison counts them as intentionally
-- absent. Ids only: no value of the subject.
CREATE TABLE IF NOT EXISTS {lake}.{ops}.erased_ids (
    erasure_id VARCHAR,
    table_name VARCHAR,
    identity   UUID
);

-- Payload keys kept as typed columns beside details (pipeline/lake/payload_fields.py): one row per
-- key of a table. Its column holds details->>key for every row: made with the table (TYPED_KEYS=auto
-- decides before the first row), or added later in the commit that fills the rows the table held,
-- and written by every load since. So every snapshot from the column's first one (DuckLake's own
-- ducklake_column.begin_snapshot) holds it in every row: queries written with details->>'key' are
-- served from the column there and later, from the JSON before.
CREATE TABLE IF NOT EXISTS {lake}.{ops}.typed_keys (
    table_name     VARCHAR,
    payload_key    VARCHAR,
    column_name    VARCHAR,
    json_type      VARCHAR,  -- the JSON type its values had when it was typed (drift is a change of it)
    typed_on       TIMESTAMP WITH TIME ZONE
);

-- The source columns each table's lake columns follow, by identity (pipeline/promote/schema_changes.py):
-- the source table's oid and each column's attnum, which a rename keeps. Replaced in the commit of
-- the first batch whose plan read other ones.
CREATE TABLE IF NOT EXISTS {lake}.{ops}.source_columns (
    table_name  VARCHAR,
    source_oid  BIGINT,
    attnum      INTEGER,
    column_name VARCHAR,
    source_type VARCHAR,  -- its Postgres type (udt name)
    batch_id    VARCHAR   -- the batch whose plan read them
);

-- Each change of a source's schema the lake followed, with the batch whose commit carries it
-- (renamed: column_name was from_value; dropped; recreated: the table, from_value and to_value its oids).
CREATE TABLE IF NOT EXISTS {lake}.{ops}.schema_changes (
    table_name  VARCHAR,
    batch_id    VARCHAR,
    change      VARCHAR,
    column_name VARCHAR,
    from_value  VARCHAR,
    to_value    VARCHAR,
    changed_at  TIMESTAMP WITH TIME ZONE
);
