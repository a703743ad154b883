"""Test stand-in for the stack's S3 server: moto's server (objects in memory) made to keep its
objects in the /data volume across restarts, as MinIO does: loaded at start, written back when the
container is stopped (SIGTERM: `compose stop` and `down` send it). Not for production: a killed
container loses what it held since its start.

Keys are checked as MinIO checks them: every request is signed by a known user and allowed by its
policy (moto's IAM enforcement). The root user is MINIO_ROOT_USER with the password in
/run/secrets/<MINIO_ROOT_PASSWORD_FILE>; the pipeline's user `lake-pipeline`, with the secret in
/run/secrets/s3_lake_secret, has docker/lake-bucket-policy.json — what docker/minio-setup.sh gives
it on MinIO (moto's IAM API makes its own keys, so the server makes this user itself).

    python s3_standin.py serve              # on :9000
    python s3_standin.py make-bucket lake   # what the minio-bucket job does, against the server
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import threading
import time
from pathlib import Path

import boto3

os.environ["INITIAL_NO_AUTH_ACTION_COUNT"] = "0"  # read at moto's import: check every request

from moto.core import DEFAULT_ACCOUNT_ID
from moto.iam.models import iam_backends
from moto.server import ThreadedMotoServer

DATA = Path("/data")
PORT = 9000
SECRETS = Path("/run/secrets")
ROOT_USER = os.environ.get("MINIO_ROOT_USER", "minio")
LAKE_USER, LAKE_POLICY = "lake-pipeline", Path("/opt/s3/lake-bucket-policy.json")
EVERYTHING = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}


def _root_password() -> str:
    return (SECRETS / os.environ.get("MINIO_ROOT_PASSWORD_FILE", "minio_root_password")).read_text().strip()


def _client(endpoint: str):
    return boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=ROOT_USER,
                        aws_secret_access_key=_root_password(), region_name="us-east-1")


def _user(name: str, secret: str, policy: dict) -> None:
    """A user whose access key id is its name, with ``secret`` and an inline ``policy``."""
    iam = iam_backends[DEFAULT_ACCOUNT_ID]["global"]
    iam.create_user(region_name="us-east-1", user_name=name, path="/", tags=[])
    key = iam.create_access_key(name)
    key.access_key_id, key.secret_access_key = name, secret
    iam.put_user_policy(name, "policy", json.dumps(policy))


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


def _as_moto_checks(path: Path) -> dict:
    """The policy, plus what moto asks for a multi-object delete: DeleteObject on the bucket itself
    (it authorizes the request before its keys; S3 and MinIO check each key against `bucket/*`,
    which the policy already allows). Without it every DeleteObjects of the pipeline was refused."""
    policy = json.loads(path.read_text())
    bucket = next(r for s in policy["Statement"] for r in s["Resource"] if not r.endswith("/*"))
    policy["Statement"].append({"Effect": "Allow", "Action": ["s3:DeleteObject"], "Resource": [bucket]})
    return policy


def serve() -> None:
    server = ThreadedMotoServer(ip_address="0.0.0.0", port=PORT)
    server.start()
    _user(ROOT_USER, _root_password(), EVERYTHING)
    _user(LAKE_USER, (SECRETS / "s3_lake_secret").read_text().strip(), _as_moto_checks(LAKE_POLICY))
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
