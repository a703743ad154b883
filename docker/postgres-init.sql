-- Databases and roles for docker-compose.yml: the source events and the DuckLake catalog.
CREATE ROLE events LOGIN PASSWORD 'events';
CREATE DATABASE events OWNER events;
CREATE ROLE lake LOGIN PASSWORD 'lake';
CREATE DATABASE ducklake_catalog OWNER lake;
