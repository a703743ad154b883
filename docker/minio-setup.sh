#!/bin/sh
# The minio-bucket job of docker-compose.yml: the lake's bucket, and the pipeline's own S3 user
# (lake-pipeline) that may read, write and list that bucket and nothing else; the root key stays
# with MinIO and this job. Safe to run again. Secrets come from the mounted files, through mc's
# environment (MC_HOST_*); the new user's secret is an argument of mc in this one-shot container.
set -eu
root_password=$(cat /run/secrets/minio_root_password)
export MC_HOST_local="http://minio:${root_password}@minio:9000"
until mc ready local >/dev/null 2>&1; do echo "waiting for minio:9000"; sleep 1; done
mc mb --ignore-existing local/lake
# the policy is docker/lake-bucket-policy.json (the stack tests' S3 stand-in enforces the same)
mc admin policy create local lake-bucket /opt/lake-bucket-policy.json
mc admin user add local lake-pipeline "$(cat /run/secrets/s3_lake_secret)"
mc admin policy attach local lake-bucket --user lake-pipeline 2>/dev/null || true  # attached before
echo "bucket lake ready; user lake-pipeline limited to it"
