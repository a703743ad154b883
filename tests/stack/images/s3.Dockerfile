# Test stand-in for MinIO (no registry here): moto's S3 server from PyPI, at the version uv.lock
# pins, wrapped so its objects outlive the container (s3_standin.py).
ARG BASE_IMAGE
FROM ${BASE_IMAGE}
ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt
RUN apt-get update && apt-get install -y --no-install-recommends python3 python3-venv \
 && rm -rf /var/lib/apt/lists/* \
 && python3 -m venv /opt/s3 && /opt/s3/bin/pip install --no-cache-dir "moto[server]==5.2.5"
COPY s3_standin.py /opt/s3/s3_standin.py
# unprivileged, as docker-compose.yml runs MinIO: /data is its user's (a named volume takes it)
RUN useradd --system --uid 10002 --user-group --no-create-home s3 && mkdir /data && chown s3:s3 /data
USER 10002:10002
ENV PATH=/opt/s3/bin:${PATH}
CMD ["python", "/opt/s3/s3_standin.py", "serve"]
