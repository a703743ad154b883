#!/bin/sh
# Databases and roles for docker-compose.yml: the source events and the DuckLake catalog.
# Passwords come from .env (EVENTS_PASSWORD, LAKE_PASSWORD); psql quotes them as literals.
set -eu
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" \
     -v events_pw="$EVENTS_PASSWORD" -v lake_pw="$LAKE_PASSWORD" <<'SQL'
CREATE ROLE events LOGIN PASSWORD :'events_pw';
CREATE DATABASE events OWNER events;
CREATE ROLE lake LOGIN PASSWORD :'lake_pw';
CREATE DATABASE ducklake_catalog OWNER lake;
SQL
