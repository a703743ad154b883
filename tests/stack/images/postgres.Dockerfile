# Test stand-in for the public postgres image (no registry here): Debian's PostgreSQL 15 with the
# parts of that image's contract the stack uses — POSTGRES_USER/POSTGRES_PASSWORD(_FILE), PGDATA at
# /var/lib/postgresql/data and the scripts in /docker-entrypoint-initdb.d run once, on a new
# data folder.
ARG BASE_IMAGE
FROM ${BASE_IMAGE}
RUN apt-get update && apt-get install -y --no-install-recommends postgresql \
 && rm -rf /var/lib/apt/lists/*
ENV PGDATA=/var/lib/postgresql/data PATH=/usr/lib/postgresql/15/bin:${PATH}
COPY postgres-entrypoint.sh /usr/local/bin/postgres-entrypoint.sh
ENTRYPOINT ["sh", "/usr/local/bin/postgres-entrypoint.sh"]
