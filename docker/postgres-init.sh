#!/bin/sh
# Databases and roles for docker-compose.yml, run once on a new data folder. Each role gets what its
# part needs and no more:
#   events        the application (the generator): owns the source database and its tables
#   event_reader  the pipeline's source role: SELECT on the application's tables, and
#                 pg_read_all_stats so a run reads only what arrived
#   lake          the pipeline's catalog role: owns the DuckLake catalog database
#   lake_reader   read-only --sql: SELECT on the catalog's tables, read-only transactions, no
#                 advisory locks (the promotion lock), as `--doctor` prints for an own catalog
# Passwords are read from the mounted secrets (docker/make-secrets.sh makes them) by psql itself,
# so they appear in no command line and no environment.
set -eu
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname postgres <<'SQL'
\set events_pw `cat /run/secrets/events_password`
\set event_reader_pw `cat /run/secrets/event_reader_password`
\set lake_pw `cat /run/secrets/lake_password`
\set lake_reader_pw `cat /run/secrets/lake_reader_password`
CREATE ROLE events LOGIN PASSWORD :'events_pw';
CREATE ROLE event_reader LOGIN PASSWORD :'event_reader_pw';
CREATE ROLE lake LOGIN PASSWORD :'lake_pw';
CREATE ROLE lake_reader LOGIN PASSWORD :'lake_reader_pw';
CREATE DATABASE events OWNER events;
CREATE DATABASE ducklake_catalog OWNER lake;
-- no role reaches a database it has no business in
REVOKE ALL ON DATABASE events FROM PUBLIC;
REVOKE ALL ON DATABASE ducklake_catalog FROM PUBLIC;
REVOKE CONNECT ON DATABASE postgres FROM PUBLIC;  -- the superuser's alone
GRANT CONNECT ON DATABASE events TO event_reader;
GRANT CONNECT ON DATABASE ducklake_catalog TO lake_reader;
GRANT pg_read_all_stats TO event_reader;
ALTER ROLE lake_reader IN DATABASE ducklake_catalog SET default_transaction_read_only = on;

\connect events
-- the tables the application creates later are readable by the pipeline
ALTER DEFAULT PRIVILEGES FOR ROLE events IN SCHEMA public GRANT SELECT ON TABLES TO event_reader;

\connect ducklake_catalog
-- the lake's metadata schema and tables, made by the pipeline's first load as `lake`
ALTER DEFAULT PRIVILEGES FOR ROLE lake GRANT USAGE ON SCHEMAS TO lake_reader;
ALTER DEFAULT PRIVILEGES FOR ROLE lake GRANT SELECT ON TABLES TO lake_reader;
-- the promotion lock is an advisory lock: the writer's alone (each taking function, both
-- signatures: what pipeline/sql_session/catalog_reader.py revokes for an own catalog)
DO $$
DECLARE f regprocedure;
BEGIN
  FOR f IN SELECT oid::regprocedure FROM pg_proc
           WHERE proname LIKE 'pg\_%advisory%lock%' AND proname NOT LIKE '%unlock%' LOOP
    EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', f);
    EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO lake', f);
  END LOOP;
END $$;
SQL
