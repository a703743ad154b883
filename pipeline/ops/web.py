"""The web server of the scheduler and of ``--serve``: ``/metrics`` (Prometheus), ``/healthz``
and the dashboard at ``/``. Standard library HTTP, one thread per request, bound to
METRICS_HOST (loopback by default); every answer comes from one cached observation.
With ``METRICS_TOKEN`` set, every path but ``/healthz`` (load balancers probe it without
credentials) needs ``Authorization: Bearer <token>``. HEAD is answered like GET, without a body.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import logging
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from pipeline import actions
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
                              f"{actions.METRICS_PORT}); METRICS_PORT=0 turns the scheduler's server "
                              "off.") from None
        # request threads are joined when the server closes: a process exiting while one is
        # inside DuckDB or libpq aborts ("terminate called without an active exception", exit 134)
        self.httpd.daemon_threads = False
        self.httpd.block_on_close = True
        self._thread: threading.Thread | None = None
        if observer is None:  # its own: refreshed on a timer, so a probe asked rarely gets a fresh answer
            self.observer.start()
        if settings.metrics_token is None and not _loopback(settings.metrics_host):
            log.warning("serving on %s without METRICS_TOKEN: anyone who reaches this address reads the "
                        "dashboard and /metrics; set METRICS_TOKEN to require a bearer token",
                        settings.metrics_host)

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host!s}:{port}/"

    def start(self) -> WebServer:
        """Serve in a background thread (the scheduler's jobs keep the main thread)."""
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="web", daemon=True)
        self._thread.start()
        log.info("serving the dashboard at %s (/metrics, /healthz)", self.url)
        return self

    def stop(self) -> None:
        """Stop accepting, then wait for the answers in flight and a running lake read."""
        self.httpd.shutdown()
        self.httpd.server_close()
        self.observer.close()


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


class _Handler(BaseHTTPRequestHandler):
    web: WebServer  # set on the subclass WebServer makes
    head_only = False

    def do_HEAD(self) -> None:
        self.head_only = True
        self.do_GET()

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path != "/healthz" and not self._authorized():
            self.send_response(HTTPStatus.UNAUTHORIZED)
            self.send_header("WWW-Authenticate", 'Bearer realm="event-lake"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if path == "/metrics":
            self._send(HTTPStatus.OK, metrics.CONTENT_TYPE, metrics.exposition(self.web.observer))
        elif path == "/healthz":
            self._healthz()
        elif path in ("/", "/index.html"):
            settings = self.web.settings
            page = dashboard.render(self.web.observer.latest(),
                                    ", ".join(settings.lake_table(table) for table in settings.tables))
            self._send(HTTPStatus.OK, "text/html; charset=utf-8", page.encode())
        else:
            self._send(HTTPStatus.NOT_FOUND, "text/plain; charset=utf-8",
                       b"not found: try /, /metrics or /healthz\n")

    def _healthz(self) -> None:
        """200 when healthy; 503 when stale, failing or unreadable (the --status judgement)."""
        obs = self.web.observer.latest()
        body: dict[str, object] = ({"state": "unknown", "exit_code": None, "reasons": [obs.error]}
                                   if obs.status is None else obs.status.health.as_dict())
        # the answer's age, and when reading is slow, that it is (a slow reading is no failure)
        body["answer_age_seconds"] = round(obs.age_seconds, 1)
        if obs.slow:
            body["slow"] = obs.slow
        code = HTTPStatus.OK if body["state"] == "healthy" else HTTPStatus.SERVICE_UNAVAILABLE
        self._send(code, "application/json", json.dumps(body).encode())

    def _authorized(self) -> bool:
        token = self.web.settings.metrics_token
        if token is None:
            return True
        given = self.headers.get("Authorization", "")
        return hmac.compare_digest(given.encode(), f"Bearer {token.reveal()}".encode())

    def _send(self, code: HTTPStatus, content_type: str, body: bytes) -> None:
        try:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            if not self.head_only:
                self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            # the client hung up (a scraper's timeout): nothing to answer, nothing to report
            log.debug("web: %s hung up before the answer", self.client_address[0])

    def log_message(self, format: str, *args: object) -> None:
        log.debug("web: " + format, *args)
