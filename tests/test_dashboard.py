"""The web server a user points Prometheus, a load balancer and a browser at: `--serve` as a
real subprocess on a real lake, scraped and parsed, and the page rendered in headless Chromium."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from datetime import UTC, datetime, timedelta

import pytest

from pipeline.ops.dashboard import chart
from pipeline.ops.run import run
from tests.helpers import Proc, add_events, lake_query
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


def test_metrics_and_healthz_report_a_loaded_lake(settings, lake_env, serving):
    for rows, seed in ((400, 1), (250, 2)):
        add_events(settings, rows, seed=seed)
        run(settings, engine="dlt", record_as="load")
    base, _ = serving
    code, text = get(base + "/metrics")
    assert code == 200
    values = samples(text)
    lake_rows = lake_query(settings, "SELECT count(*) FROM lake.main.events")[0][0]
    assert values[("event_lake_up", ())] == 1
    assert values[("event_lake_rows_loaded_total", ())] == lake_rows == 650
    assert values[("event_lake_batches_promoted_total", ())] == 2
    assert values[("event_lake_health", ())] == 0
    assert values[("event_lake_job_runs_total", (("job", "load"), ("status", "success")))] == 2
    assert values[("event_lake_job_runs_total", (("job", "load"), ("status", "failed")))] == 0
    last = values[("event_lake_job_last_success_timestamp_seconds", (("job", "load"),))]
    assert abs(datetime.now(UTC).timestamp() - last) < 300
    assert values[("event_lake_job_last_duration_seconds", (("job", "load"),))] > 0
    assert values[("event_lake_data_files", ())] >= 1 and values[("event_lake_lag_seconds", ())] >= 0
    code, body = get(base + "/healthz")
    assert code == 200 and json.loads(body)["state"] == "healthy"
    assert get(base + "/nope")[0] == 404


def test_healthz_is_503_while_the_source_waits_unloaded(settings, serving):
    add_events(settings, 50, seed=5)  # rows in the source, nothing loaded: stale
    base, _ = serving
    code, body = get(base + "/healthz")
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
    flags = ["--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1240,1000"]
    dom = subprocess.run([browser, *flags, "--dump-dom", base + "/"], capture_output=True, text=True,
                         timeout=120).stdout
    charts = dict(re.findall(r'<svg class="chart" role="img" aria-label="([^"]+)"[^>]*data-points="(\d+)"', dom))
    assert {name: int(n) for name, n in charts.items()} == {
        "rows per batch": 3, "lag when each batch landed": 3,
        "snapshots kept": len(lake_query(settings, "SELECT * FROM lake.snapshots()")),
        "live data files": len(lake_query(settings, "SELECT * FROM lake.snapshots()"))}
    assert dom.count('class="bar"') == 3 and dom.count('class="line"') == 3
    assert 'class="jobs" data-rows="3"' in dom and ">healthy<" in dom
    shot = tmp_path / "dashboard.png"
    subprocess.run([browser, *flags, f"--screenshot={shot}", base + "/"], capture_output=True, timeout=120)
    png = shot.read_bytes()
    # a blank page of this size compresses to a few kB; charts, labels and the table do not
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 30_000


def test_a_chart_without_points_says_so_and_one_point_sits_in_the_middle():
    assert 'data-points="0"' in chart([], "rows", "bars") and "no data yet" in chart([], "rows", "bars")
    one = chart([(datetime(2026, 11, 22, tzinfo=UTC), 5.0)], "rows", "bars")
    assert one.count('class="bar"') == 1
    many = chart([(datetime(2026, 11, 22, tzinfo=UTC) + timedelta(minutes=i), i) for i in range(100)], "s", "line")
    assert 'data-points="100"' in many and "<circle" not in many  # a dense line has no markers
