#!/usr/bin/python3
"""Container healthchecks for docker-compose.yml and docker/kubernetes, with nothing but Python's
standard library. Each check is a word and plain arguments: podman 4.3 splits a healthcheck's
arguments on spaces, so a `python -c "…"` one-liner never ran there.

    event-lake-probe port PORT      a TCP port on 127.0.0.1 accepts a connection
    event-lake-probe http URL       the URL answers 2xx (the pipeline's /healthz)
    event-lake-probe spark-master   the master's /json/ says ALIVE, with a worker alive

Exit 0 when healthy, 1 with the reason on stderr when not.
"""

from __future__ import annotations

import json
import socket
import sys
import urllib.request

TIMEOUT = 5.0


def port(number: str) -> None:
    socket.create_connection(("127.0.0.1", int(number)), TIMEOUT).close()


def http(url: str) -> None:
    with urllib.request.urlopen(url, timeout=25) as response:  # 4xx/5xx raise
        response.read()


def spark_master(ui: str = "http://127.0.0.1:8080/json/") -> None:
    with urllib.request.urlopen(ui, timeout=TIMEOUT) as response:
        state = json.load(response)
    if state.get("status") != "ALIVE":
        raise RuntimeError(f"master status {state.get('status')}")
    if not state.get("aliveworkers"):
        raise RuntimeError("no worker registered yet")


CHECKS = {"port": port, "http": http, "spark-master": spark_master}


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in CHECKS:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        CHECKS[argv[0]](*argv[1:])
    except Exception as exc:  # noqa: BLE001  any failure is "unhealthy", said
        print(f"unhealthy: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
