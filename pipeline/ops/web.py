"""The web server of the scheduler and of ``--serve``: ``/metrics`` (Prometheus), ``/healthz``
and the dashboard at ``/``. Standard library HTTP, one thread per request, bound to
METRICS_HOST (loopback by default); every answer comes from one cached observation."""

from __future__ import annotations

import json
import logging
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from pipeline.errors import ConfigError
from pipeline.ops import dashboard, metrics
from pipeline.ops.observe import Observer
from pipeline.settings import ResolvedSettings

log = logging.getLogger(__name__)


class WebServer:
    def __init__(self, settings: ResolvedSettings, observer: Observer | None = None) -> None:
        self.settings = settings
        self.observer = observer or Observer(settings)
        handler = type("Handler", (_Handler,), {"web": self})
        try:
            self.httpd = ThreadingHTTPServer((settings.metrics_host, settings.metrics_port), handler)
        except OSError as exc:
            raise ConfigError(f"Cannot serve on {settings.metrics_host}:{settings.metrics_port}: "
                              f"{exc.strerror or exc}.", "Pick a free port with METRICS_PORT (or "
                              "--metrics-port); METRICS_PORT=0 turns the scheduler's server off.") from None
        self.httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}/"

    def start(self) -> WebServer:
        """Serve in a background thread (the scheduler's jobs keep the main thread)."""
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="web", daemon=True)
        self._thread.start()
        log.info("serving the dashboard at %s (/metrics, /healthz)", self.url)
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class _Handler(BaseHTTPRequestHandler):
    web: WebServer  # set on the subclass WebServer makes

    def do_GET(self) -> None:  # noqa: N802  (the name http.server calls)
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            self._send(HTTPStatus.OK, metrics.CONTENT_TYPE, metrics.exposition(self.web.observer))
        elif path == "/healthz":
            self._healthz()
        elif path in ("/", "/index.html"):
            page = dashboard.render(self.web.observer.latest(), self.web.settings.events_table)
            self._send(HTTPStatus.OK, "text/html; charset=utf-8", page.encode())
        else:
            self._send(HTTPStatus.NOT_FOUND, "text/plain; charset=utf-8",
                       b"not found: try /, /metrics or /healthz\n")

    def _healthz(self) -> None:
        """200 when healthy; 503 when stale, failing or unreadable (the --status judgement)."""
        obs = self.web.observer.latest()
        if obs.status is None:
            body = {"state": "unknown", "exit_code": None, "reasons": [obs.error]}
        else:
            body = obs.status["health"]
        code = HTTPStatus.OK if body["state"] == "healthy" else HTTPStatus.SERVICE_UNAVAILABLE
        self._send(code, "application/json", json.dumps(body).encode())

    def _send(self, code: HTTPStatus, content_type: str, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002  (http.server's name)
        log.debug("web: " + format, *args)
