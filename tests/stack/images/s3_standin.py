"""Test stand-in for the stack's S3 server: moto's server (objects in memory) made to keep its
objects in the /data volume across restarts, as MinIO does: loaded at start, written back when the
container is stopped (SIGTERM: `compose stop` and `down` send it). Not for production: a killed
container loses what it held since its start.

    python s3_standin.py serve              # on :9000
    python s3_standin.py make-bucket lake   # what the minio-bucket job does, against the server
"""

from __future__ import annotations

import shutil
import signal
import sys
import threading
import time
from pathlib import Path

import boto3
from moto.server import ThreadedMotoServer

DATA = Path("/data")
PORT = 9000


def _client(endpoint: str):
    return boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="standin",
                        aws_secret_access_key="standin", region_name="us-east-1")


def _load(s3) -> int:
    saved, count = DATA / "objects", 0
    if not saved.is_dir():
        return 0
    for bucket in sorted(p for p in saved.iterdir() if p.is_dir()):
        s3.create_bucket(Bucket=bucket.name)
        for path in sorted(p for p in bucket.rglob("*") if p.is_file()):
            s3.put_object(Bucket=bucket.name, Key=path.relative_to(bucket).as_posix(), Body=path.read_bytes())
            count += 1
    return count


def _dump(s3) -> int:
    """Every object into /data/objects, written beside it first and then swapped in whole."""
    fresh, current, count = DATA / "objects.new", DATA / "objects", 0
    shutil.rmtree(fresh, ignore_errors=True)
    for bucket in s3.list_buckets()["Buckets"]:
        name = bucket["Name"]
        (fresh / name).mkdir(parents=True, exist_ok=True)
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=name):
            for item in page.get("Contents", []):
                target = fresh / name / item["Key"]
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(s3.get_object(Bucket=name, Key=item["Key"])["Body"].read())
                count += 1
    shutil.rmtree(current, ignore_errors=True)
    fresh.rename(current)
    return count


def serve() -> None:
    server = ThreadedMotoServer(ip_address="0.0.0.0", port=PORT)
    server.start()
    s3 = _client(f"http://127.0.0.1:{PORT}")
    print(f"s3 stand-in: {_load(s3)} object(s) loaded from {DATA}; serving on :{PORT}", flush=True)
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    signal.signal(signal.SIGINT, lambda *_: stopping.set())
    stopping.wait()
    print(f"s3 stand-in: {_dump(s3)} object(s) saved to {DATA}", flush=True)
    server.stop()


def make_bucket(name: str, endpoint: str = f"http://minio:{PORT}") -> None:
    s3 = _client(endpoint)
    for _ in range(120):
        try:
            s3.create_bucket(Bucket=name)
            print(f"bucket {name} ready", flush=True)
            return
        except s3.exceptions.BucketAlreadyOwnedByYou:
            print(f"bucket {name} ready", flush=True)
            return
        except Exception:  # noqa: BLE001  the server is starting: try again
            time.sleep(1)
    raise SystemExit(f"no S3 server at {endpoint}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        serve()
    elif sys.argv[1:2] == ["make-bucket"]:
        make_bucket(sys.argv[2])
    else:
        raise SystemExit(__doc__)
