#!/bin/sh
# The compose stack's secrets, one file each, made once with fresh random values:
#   sh docker/make-secrets.sh [FOLDER]        (default: $SECRETS_DIR, else ./secrets)
# A file that exists is kept, so running it again only adds what is missing. The connection
# strings the pipeline and the generator read (SOURCE_PG_DSN_FILE, DUCKLAKE_CATALOG_FILE …) are
# made from the same passwords Postgres' first start gives its roles. The folder is private to
# you (0700); the files in it are 0644 because compose mounts each one into the container that
# needs it, where a non-root user must read it.
set -eu
dir=${1:-${SECRETS_DIR:-./secrets}}
mkdir -p "$dir"
chmod 700 "$dir"

random() { od -An -tx1 -N18 /dev/urandom | tr -d ' \n'; }
put() {  # put NAME VALUE: writes the file unless it exists
  if [ ! -s "$dir/$1" ]; then
    (umask 022 && printf '%s' "$2" > "$dir/$1.new" && mv "$dir/$1.new" "$dir/$1")
    echo "made $dir/$1"
  fi
}
read_secret() { cat "$dir/$1"; }

for name in postgres_password events_password event_reader_password lake_password \
            lake_reader_password minio_root_password s3_lake_secret metrics_token; do
  put "$name" "$(random)"
done
# who connects to what as whom (service names of docker-compose.yml)
put events_dsn "postgresql://events:$(read_secret events_password)@postgres:5432/events"
put source_dsn "postgresql://event_reader:$(read_secret event_reader_password)@postgres:5432/events"
put catalog_dsn "postgresql://lake:$(read_secret lake_password)@postgres:5432/ducklake_catalog"
put catalog_reader_dsn "postgresql://lake_reader:$(read_secret lake_reader_password)@postgres:5432/ducklake_catalog"
