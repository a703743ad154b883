"""The web server a user points Prometheus, a load balancer and a browser at: `--serve` as a
real subprocess on a real lake, scraped and parsed, and the page rendered in headless Chromium."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import time
from datetime import UTC, datetime

import pytest

from tests.conftest import ROOT
from tests.helpers import Proc, add_events, lake_query, run
from tests.helpers import http_get as get
from tests.helpers import metric_samples as samples
from tests.spark_services import free_port


@pytest.fixture
def serving(lake_env):
    """`events_pipeline.py --serve` on a free port; yields (base url, process)."""
    port = free_port()
    server = Proc("events_pipeline.py", "--serve", "--metrics-port", str(port), env=lake_env)
    try:
        server.wait_for("Serving the dashboard", timeout=120)
        yield f"http://127.0.0.1:{port}", server
    finally:
        assert server.terminate() == 0, server.output


def _observed(base: str, batches: int, timeout: float = 90) -> dict:
    """/metrics once the server's observation (refreshed on its own timer) holds ``batches``."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        code, text = get(base + "/metrics")
        assert code == 200
        values = samples(text)
        if values.get(("event_lake_batches_promoted_total", ())) == batches or time.monotonic() > deadline:
            return values
        time.sleep(0.5)


def test_metrics_and_healthz_report_a_loaded_lake(settings, lake_env, serving):
    for rows, seed in ((400, 1), (250, 2)):
        add_events(settings, rows, seed=seed)
        run(settings, engine="dlt", record_as="load")
    base, _ = serving
    values = _observed(base, 2)
    lake_rows = lake_query(settings, "SELECT count(*) FROM lake.main.events")[0][0]
    assert values[("event_lake_up", ())] == 1
    assert values[("event_lake_rows_loaded_total", ())] == lake_rows == 650
    assert values[("event_lake_batches_promoted_total", ())] == 2
    assert values[("event_lake_health", ())] == 0
    assert values[("event_lake_job_runs_total", (("status", "success"), ("task", "load")))] == 2
    assert values[("event_lake_job_runs_total", (("status", "failed"), ("task", "load")))] == 0
    last = values[("event_lake_job_last_success_timestamp_seconds", (("task", "load"),))]
    assert abs(datetime.now(UTC).timestamp() - last) < 300
    assert values[("event_lake_job_last_duration_seconds", (("task", "load"),))] > 0
    assert values[("event_lake_data_files", ())] >= 1 and values[("event_lake_lag_seconds", ())] >= 0
    # the second load read only the 250 that arrived; its rows' arrival -> commit seconds
    assert values[("event_lake_rows_read_per_inserted", ())] == 1.0
    assert 0 < values[("event_lake_freshness_p50_seconds", ())] <= \
        values[("event_lake_freshness_p95_seconds", ())] < 300
    code, body = get(base + "/healthz")
    assert code == 200 and json.loads(body)["state"] == "healthy"
    assert get(base + "/nope")[0] == 404
    assert "<span>loader</span>none running on this host" in get(base + "/")[1]  # it said nothing of it


def test_healthz_is_503_while_the_source_waits_unloaded(settings, serving):
    import time

    add_events(settings, 50, seed=5)  # rows in the source, nothing loaded: stale
    base, _ = serving
    deadline = time.monotonic() + 90
    while True:  # the server's observation is renewed on its timer: the table appears in one
        code, body = get(base + "/healthz")
        if json.loads(body)["state"] == "stale" or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert code == 503 and json.loads(body)["state"] == "stale", body
    assert samples(get(base + "/metrics")[1])[("event_lake_health", ())] == 1


def test_the_dashboard_renders_its_charts_from_a_real_lake_in_chromium(settings, lake_env, serving, tmp_path):
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("chromium not installed (.ci/run installs Debian's chromium)")
    for rows, seed in ((300, 11), (200, 12), (150, 13)):
        add_events(settings, rows, seed=seed)
        run(settings, engine="dlt", record_as="load")
    base, _ = serving
    _observed(base, 3)
    flags = ["--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1240,1000"]
    dom = subprocess.run([browser, *flags, "--dump-dom", base + "/"], capture_output=True, text=True,
                         timeout=120).stdout
    charts = dict(re.findall(r'<svg class="chart" role="img" aria-label="([^"]+)"[^>]*data-points="(\d+)"', dom))
    assert {name: int(n) for name, n in charts.items()} == {
        "rows per batch": 3, "lag when each batch landed": 3,
        "rows read per row inserted": 3, "arrival to lake, p95 of each load": 2,  # not the first load's
        "snapshots kept": len(lake_query(settings, "SELECT * FROM lake.snapshots()")),
        "live data files": len(lake_query(settings, "SELECT * FROM lake.snapshots()"))}
    assert dom.count('class="bar"') == 3 and dom.count('class="line"') == 5
    assert "<span>read per inserted (1h)</span>1.00<" in dom  # each load read only what arrived
    assert 'class="jobs" data-rows="3"' in dom and ">healthy<" in dom
    shot = tmp_path / "dashboard.png"
    subprocess.run([browser, *flags, f"--screenshot={shot}", base + "/"], capture_output=True, timeout=120)
    png = shot.read_bytes()
    # a blank page of this size compresses to a few kB; charts, labels and the table do not
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 30_000
    # the docs show this very page: UPDATE_SCREENSHOT=1 makes it the one README and docs/index.md
    # embed (a test run leaves the tracked file alone)
    if os.environ.get("UPDATE_SCREENSHOT") == "1":
        (ROOT / "docs" / "assets" / "dashboard.png").write_bytes(png)


def test_head_is_answered_like_get_and_a_token_guards_all_but_healthz(settings, lake_env):
    port = free_port()
    env = {**lake_env, "METRICS_TOKEN": "tok-6613"}
    server = Proc("events_pipeline.py", "--serve", "--metrics-port", str(port), env=env)
    try:
        server.wait_for("Serving the dashboard", timeout=120)
        base = f"http://127.0.0.1:{port}"
        assert get(base + "/metrics")[0] == 401 and get(base + "/")[0] == 401
        bearer = {"Authorization": "Bearer tok-6613"}
        assert get(base + "/metrics", headers={"Authorization": "Bearer wrong"})[0] == 401
        code, text = get(base + "/metrics", headers=bearer)
        assert code == 200 and "event_lake_up" in text
        assert get(base + "/healthz")[0] in (200, 503)  # probes need no token
        assert get(base + "/healthz", method="HEAD") == (get(base + "/healthz")[0], "")
        assert get(base + "/", method="HEAD", headers=bearer) == (200, "")
    finally:
        assert server.terminate() == 0, server.output
    assert "tok-6613" not in server.output


def test_an_unreachable_source_leaves_the_lake_series_and_status_says_failing(settings, lake_env, cli):
    from pipeline.ops.metrics import exposition
    from pipeline.ops.observe import Observer
    from pipeline.settings import load_settings
    from pipeline.settings.resolve import resolve

    add_events(settings, 120, seed=4)
    run(settings, engine="dlt", record_as="load")
    down = {**lake_env, "SOURCE_PG_DSN": "postgresql://app:pw_991@127.0.0.1:1/src"}
    result = cli("--status", "--json", env=down)
    status = json.loads(result.stdout)
    assert result.returncode == 2  # failing, not "stale"
    assert status["health"]["state"] == "failing" and status["source_up"] is False
    assert status["lake_rows"] == 120 and status["jobs"]["load"]["status"] == "success"
    assert "pw_991" not in result.stdout + result.stderr
    values = samples(exposition(Observer(resolve(load_settings(down)))).decode())
    assert values[("event_lake_source_up", ())] == 0 and values[("event_lake_up", ())] == 0
    assert values[("event_lake_lake_rows", ())] == 120 and values[("event_lake_health", ())] == 2
    assert values[("event_lake_job_runs_total", (("status", "success"), ("task", "load")))] == 1


def test_the_cache_answers_at_once_while_a_slow_read_refreshes_it(settings, monkeypatch):
    import time

    from pipeline.ops import observe as observing
    from pipeline.settings.resolve import resolve

    calls = []

    def slow_observe(_observer):
        calls.append(time.monotonic())
        if len(calls) > 1:
            time.sleep(2)  # a busy machine: one read took 5.2 s, past Prometheus's timeout
        return observing.Observation(datetime.now(UTC), error=f"read {len(calls)}")

    monkeypatch.setattr(observing.Observer, "observe", slow_observe)
    observer = observing.Observer(resolve(settings), ttl=0.0)
    assert observer.latest().error == "read 1"  # the first answer waits for the first read
    started = time.monotonic()
    assert observer.latest().error == "read 1"  # stale: answered from the cache, refresh started
    assert time.monotonic() - started < 0.5
    observer.close()  # waits for the refresh in flight
    assert observer.latest().error == "read 2" and len(calls) == 2


def test_sigterm_while_pages_are_being_read_always_exits_0(settings, lake_env):
    import threading

    add_events(settings, 50, seed=6)
    run(settings, engine="dlt")
    for attempt in range(10):
        port = free_port()
        server = Proc("events_pipeline.py", "--serve", "--metrics-port", str(port), env=lake_env)
        server.wait_for("Serving the dashboard", timeout=120)
        base = f"http://127.0.0.1:{port}"
        scrapers = [threading.Thread(target=_quietly, args=(base + path,), daemon=True)
                    for path in ("/metrics", "/", "/healthz")]
        for scraper in scrapers:
            scraper.start()
        time.sleep(0.2 * (attempt % 3))  # inside the first lake read
        assert server.terminate(timeout=30) == 0, server.output


def _quietly(url: str) -> None:
    with contextlib.suppress(OSError):  # the server stopping mid-answer is this test's point
        get(url)


def test_readme_queries_work_in_a_real_prometheus_scraping_a_real_lake(settings, lake_env, serving, tmp_path):
    """Prometheus owns the label ``job`` (it would store ours as ``exported_job``, and a query
    written from the docs would return nothing): every query docs/running.md gives returns series."""
    from tests.conftest import ROOT

    prometheus = shutil.which("prometheus")
    if prometheus is None:
        pytest.skip("prometheus not installed (.ci/run installs Debian's prometheus)")
    for rows, seed in ((100, 1), (50, 2)):
        add_events(settings, rows, seed=seed)
        run(settings, engine="dlt", record_as="load")
    base, _ = serving
    target = base.removeprefix("http://")
    (tmp_path / "prometheus.yml").write_text(
        "global: {scrape_interval: 1s}\n"
        f"scrape_configs: [{{job_name: event-lake, static_configs: [{{targets: ['{target}']}}]}}]\n")
    port = free_port()
    server = subprocess.Popen([prometheus, f"--config.file={tmp_path / 'prometheus.yml'}",
                               f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    page = (ROOT / "docs" / "running.md").read_text()
    block = page.split("```promql\n", 1)[1].split("```", 1)[0]
    queries = [line.split("#", 1)[0].strip() for line in block.splitlines() if line.strip()]
    assert len(queries) >= 5

    def query(expr: str) -> list[dict]:
        import urllib.parse

        code, body = get(f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
        assert code == 200, body
        return json.loads(body)["data"]["result"]

    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                if query('event_lake_job_runs_total{task="load", status="success"}'):
                    break
            time.sleep(0.5)
        [loads] = query('event_lake_job_runs_total{task="load", status="success"}')
        assert loads["value"][1] == "2" and loads["metric"]["job"] == "event-lake"
        assert "exported_job" not in loads["metric"]
        for expr in queries:
            assert query(expr), f"docs/running.md query returns nothing: {expr}"
    finally:
        server.terminate()
        server.wait(30)
