"""docker/probe.py, the containers' healthchecks, against real sockets and a real HTTP server."""

from __future__ import annotations

import http.server
import importlib.util
import json
import socket
import threading
from collections.abc import Iterator

import pytest

from tests.conftest import ROOT

spec = importlib.util.spec_from_file_location("probe", ROOT / "docker" / "probe.py")
assert spec is not None and spec.loader is not None
probe = importlib.util.module_from_spec(spec)
spec.loader.exec_module(probe)


@pytest.fixture
def server() -> Iterator[tuple[int, dict]]:
    """An HTTP server on loopback answering /json/ with ``answer`` and /healthz with its code."""
    answer: dict = {"json": {}, "healthz": 200}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            code = answer["healthz"] if self.path == "/healthz" else 200
            body = json.dumps(answer["json"]).encode()
            self.send_response(code)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield httpd.server_address[1], answer
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_a_port_that_accepts_is_healthy_and_a_closed_one_is_not(server):
    port, _ = server
    assert probe.main(["port", str(port)]) == 0
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]  # bound, not listening: refused
        assert probe.main(["port", str(closed)]) == 1


def test_http_is_healthy_on_2xx_only(server, capsys):
    port, answer = server
    assert probe.main(["http", f"http://127.0.0.1:{port}/healthz"]) == 0
    answer["healthz"] = 503
    assert probe.main(["http", f"http://127.0.0.1:{port}/healthz"]) == 1
    assert "503" in capsys.readouterr().err


def test_a_spark_master_is_healthy_once_alive_with_a_worker(server, capsys):
    port, answer = server
    ui = f"http://127.0.0.1:{port}/json/"
    answer["json"] = {"status": "ALIVE", "aliveworkers": 0}
    with pytest.raises(RuntimeError, match="no worker"):
        probe.spark_master(ui)
    answer["json"] = {"status": "STANDBY", "aliveworkers": 1}
    with pytest.raises(RuntimeError, match="STANDBY"):
        probe.spark_master(ui)
    answer["json"] = {"status": "ALIVE", "aliveworkers": 1}
    probe.spark_master(ui)


def test_an_unknown_check_says_how_to_call_it(capsys):
    assert probe.main(["nope"]) == 2
    assert "event-lake-probe port PORT" in capsys.readouterr().err
