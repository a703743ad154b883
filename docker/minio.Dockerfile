# MinIO as an unprivileged user. Its image runs as root; a named volume takes the owner of the
# folder it is first mounted on, so that folder is made here, owned by the user the server runs as
# (the user docker-compose.yml gives it: 10002, beside the project images' 10001).
ARG MINIO_IMAGE=minio/minio:RELEASE.2024-10-13T13-34-11Z
FROM ${MINIO_IMAGE}
USER root
RUN mkdir -p /data && chown 10002:10002 /data
USER 10002:10002
