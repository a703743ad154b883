"""The dashboard page: one self-contained HTML document with SVG charts, drawn on the server.

No JavaScript and no files from a CDN: it renders the same in a browser on an air-gapped
host, in a headless one taking a screenshot, and in a terminal browser. Pure: an
:class:`~pipeline.ops.observe.Observation` in, HTML out; the page reloads itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from html import escape
from typing import Any

from pipeline.ops.observe import Observation
from pipeline.ops.scheduler_state import SchedulerState
from pipeline.source.window import iso
from pipeline.version import __version__

WIDTH, HEIGHT = 560, 210
LEFT, RIGHT, TOP, BOTTOM = 58, 14, 12, 30  # plot margins: room for the axis labels
REFRESH_SECONDS = 30
HEALTH_COLOURS = {"healthy": "#1a7f37", "stale": "#9a6700", "failing": "#cf222e"}

Point = tuple[datetime, float]


def render(obs: Observation, lake: str) -> str:
    series = obs.series
    reconciled = [b["engine"] == "reconcile" for b in series.batches]
    charts = [
        ("rows per batch", "rows", [(b["promoted_at"], b["rows_inserted"]) for b in series.batches], "bars",
         reconciled),
        ("lag when each batch landed", "seconds",
         [(b["promoted_at"], b["lag_seconds"]) for b in series.batches if b["lag_seconds"] is not None],
         "line", None),
        # ~1 when loads read only what arrived; the look-back's multiple when they re-read it
        ("rows read per row inserted", "rows", [(b["promoted_at"], b["rows_staged"] / b["rows_inserted"])
                                                for b in series.batches if b["rows_inserted"]], "line", None),
        ("arrival to lake, p95 of each load", "seconds",
         [(b["promoted_at"], b["freshness_p95"]) for b in series.batches
          if b.get("freshness_p95") is not None], "line", None),
        ("snapshots kept", "snapshots", kept_series(series.snapshots, series.expiries), "line", None),
        ("live data files", "files", [(s["snapshot_time"], s["data_files"]) for s in series.snapshots],
         "line", None),
    ]
    # one time range for every chart, so a moment lines up across them
    times = [t for _, _, points, _, _ in charts for t, _ in points]
    span = (min(times), max(times)) if times else None
    figures = "\n".join(
        f'<figure><figcaption>{escape(title)}</figcaption>'
        f"{chart(points, unit, kind, title, span=span, marked=marked)}</figure>"
        for title, unit, points, kind, marked in charts)
    legend = ('<p class="legend"><span style="color:#bf8700">&#9632;</span> reconcile batch (late events '
              "beyond the look-back)</p>" if any(reconciled) else "")
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="refresh" content="{REFRESH_SECONDS}">
<title>event-lake: {escape(lake)}</title>
<style>
body {{ font: 14px system-ui, sans-serif; margin: 24px; color: #1f2328; background: #fff; }}
h1 {{ font-size: 20px; margin: 0 0 4px; }}
.health {{ display: inline-block; padding: 2px 10px; border-radius: 10px; color: #fff; font-weight: 600; }}
.facts {{ display: flex; flex-wrap: wrap; gap: 8px 28px; margin: 14px 0 18px; }}
.facts div span {{ display: block; color: #59636e; font-size: 12px; }}
.charts {{ display: grid; grid-template-columns: repeat(auto-fill, minmax({WIDTH}px, 1fr)); gap: 18px; }}
figure {{ margin: 0; border: 1px solid #d1d9e0; border-radius: 6px; padding: 8px; }}
figcaption {{ font-weight: 600; margin-bottom: 4px; }}
svg text {{ font-size: 11px; fill: #59636e; }}
table {{ border-collapse: collapse; margin-top: 8px; }}
td, th {{ padding: 3px 10px; border-bottom: 1px solid #d1d9e0; text-align: left; font-size: 13px; }}
.failed {{ color: #cf222e; }} .success {{ color: #1a7f37; }}
.error {{ color: #cf222e; font-weight: 600; }}
</style></head>
<body>
<h1>event-lake · {escape(lake)}</h1>
{_header(obs)}
{legend}<div class="charts">
{figures}
</div>
<h2>job history</h2>
{_jobs_table(series.job_runs)}
<p style="color:#59636e;font-size:12px">event-lake {__version__} · read {obs.at:%Y-%m-%d %H:%M:%S} UTC
in {obs.seconds:.2f}s · reloads every {REFRESH_SECONDS}s · <a href="/metrics">/metrics</a> ·
<a href="/healthz">/healthz</a></p>
</body></html>
"""


def _loader(scheduler: SchedulerState | None) -> str:
    """Whether anything loads this lake on this host: the page said nothing of it."""
    if not scheduler:
        return "none running on this host"
    load = scheduler.get("jobs", {}).get("load")
    every = load["every"] if load else "?"
    mode = scheduler.get("mode", "scheduler")
    more = f" (+{scheduler['running'] - 1} more)" if scheduler.get("running", 1) > 1 else ""
    return f"{mode} every {every}, pid {scheduler['pid']}{more}"


def _header(obs: Observation) -> str:
    status = obs.status
    if obs.error or status is None:
        return f'<p class="error">Cannot read the pipeline: {escape(obs.error or "no observation yet")}</p>'
    health = status.health
    reasons = "; ".join(health.reasons)
    lag = status.lag_seconds
    facts = {"lake rows": f"{status.lake_rows:,}", "snapshots": status.snapshot_count,
             "data files": f"{status.data_files:,}", "lag": f"{lag:.0f}s" if lag is not None else "-",
             "watermark": iso(status.watermark) if status.watermark else "-",
             "last successful load": health.last_success.isoformat() if health.last_success else "never",
             "waiting batches": status.staged_batches_waiting,
             "set aside": len(status.set_aside_batches),
             "source": "up" if status.source_up else "DOWN",
             "loader": _loader(status.scheduler)}
    hour = status.last_hour
    if hour is not None and hour["rows_read_per_inserted"] is not None:
        facts["read per inserted (1h)"] = f"{hour['rows_read_per_inserted']:.2f}"
    if hour is not None and hour["rows_behind_mark"]:
        facts["arrived behind the mark (1h)"] = f"{hour['rows_behind_mark']:,}"
    if hour is not None and hour["freshness_p95_seconds"] is not None:
        facts["arrival to lake p95 (1h)"] = f"{hour['freshness_p95_seconds']:.1f}s"
    if status.history is not None:  # a history read in parts: how far, and how long still
        facts["history"] = status.history.describe()
    for name, table in status.tables.items():  # SOURCE_TABLES: each table's rows and lag
        table_lag = f"lag {table.lag_seconds:.0f}s" if table.lag_seconds is not None else "not loaded yet"
        facts[f"table {name}"] = f"{table.lake_rows:,} rows, {table_lag}" + (
            f", {table.health.state}" if table.health.code else "") + (
            f", {table.history.describe()}" if table.history else "")
    cells = "".join(f"<div><span>{escape(k)}</span>{escape(str(v))}</div>" for k, v in facts.items())
    colour = HEALTH_COLOURS[health.state]
    return (f'<span class="health" style="background:{colour}">{escape(health.state)}</span> '
            f"{escape(reasons)}<div class=\"facts\">{cells}</div>")


def kept_series(snapshots: Sequence[dict[str, Any]], expiries: Sequence[dict[str, Any]]) -> list[Point]:
    """Snapshots kept over time: the surviving snapshots counted up to each one, plus those an
    expiry removed later, and a point at each expiry where the count drops (pure). Expired
    snapshots are gone from the catalog; the job history says when and which."""
    events: list[tuple[datetime, int]] = [(s["snapshot_time"], s["snapshot_id"]) for s in snapshots]
    if not events:
        return []
    first = events[0][0]
    marks = sorted([*events, *[(e["finished_at"], -1) for e in expiries if e["finished_at"] >= first]],
                   key=lambda p: p[0])
    points: list[Point] = []
    for at, _ in marks:
        newest = max((sid for t, sid in events if t <= at), default=None)
        alive = sum(1 for t, _ in events if t <= at)
        # expired before ``at``'s newest snapshot was taken, and removed only after ``at``
        pending = sum(1 for e in expiries if e["finished_at"] > at
                      for sid in e["snapshot_ids"] if newest is not None and sid < newest)
        points.append((at, alive + pending))
    return points


def chart(points: Sequence[Point], unit: str, kind: str, title: str = "",
          span: tuple[datetime, datetime] | None = None, marked: Sequence[bool] | None = None) -> str:
    """An SVG chart of ``points`` (time, value): bars or a line, a value axis titled with the
    unit (whole-number ticks for counts), a time axis over ``span`` (default: the points' own)
    with four labels; ``marked`` bars are drawn in another colour (reconcile batches).
    ``data-points`` carries the number of points drawn (what a test checks)."""
    head = (f'<svg class="chart" role="img" aria-label="{escape(title)}" data-kind="{kind}" '
            f'data-points="{len(points)}" viewBox="0 0 {WIDTH} {HEIGHT}" style="width:100%;height:auto">')
    if not points:
        return f'{head}<text x="{WIDTH / 2}" y="{HEIGHT / 2}" text-anchor="middle">no data yet</text></svg>'
    xs = [t.timestamp() for t, _ in points]
    ys = [float(v) for _, v in points]
    x0, x1 = (span[0].timestamp(), span[1].timestamp()) if span else (min(xs), max(xs))
    ticks = nice_ticks(max(ys), whole=unit != "seconds")
    top = ticks[-1]
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    width = max(1.5, min(24.0, plot_w / len(points) * 0.7))  # of a bar
    inset = width / 2 + 3 if kind == "bars" else 4.0  # the first and last mark stay off the axis labels

    def x(at: float) -> float:
        span_w = plot_w - 2 * inset
        return LEFT + inset + (span_w / 2 if x1 == x0 else (at - x0) / (x1 - x0) * span_w)

    def y(value: float) -> float:
        return TOP + plot_h - max(value, 0.0) / top * plot_h

    parts = [head, _axes(ticks, unit, x0, x1, x)]
    if kind == "bars":
        flags = list(marked) if marked is not None else [False] * len(points)
        parts += [f'<rect class="bar{" marked" if flag else ""}" x="{x(a) - width / 2:.1f}" y="{y(v):.1f}" '
                  f'width="{width:.1f}" height="{TOP + plot_h - y(v):.1f}" '
                  f'fill="{"#bf8700" if flag else "#0969da"}"><title>{v:,.0f} {unit}</title></rect>'
                  for a, v, flag in zip(xs, ys, flags, strict=True)]
    else:
        for run in runs(xs):  # a line across a gap would draw values that were never measured
            line = " ".join(f"{x(xs[i]):.1f},{y(ys[i]):.1f}" for i in run)
            parts.append(f'<polyline class="line" points="{line}" fill="none" stroke="#0969da" '
                         'stroke-width="2"/>')
        if len(points) <= 60:
            parts += [f'<circle cx="{x(a):.1f}" cy="{y(v):.1f}" r="2.5" fill="#0969da"/>'
                      for a, v in zip(xs, ys, strict=True)]
    return "".join(parts) + "</svg>"


GAP_FACTOR = 3  # a step this many times the usual one is a gap (nothing loaded, nothing ran)
GAP_SHARE = 0.1  # ... and a tenth of the chart's span at least: bursts of seconds are no gap
GAP_POINTS = 6  # fewer points say too little about the usual step to call one a gap


def runs(xs: Sequence[float]) -> list[list[int]]:
    """The indexes of ``xs`` (ascending times) split where a step is more than GAP_FACTOR times
    the median step and GAP_SHARE of the whole span: each run is drawn as one line (pure)."""
    if len(xs) < GAP_POINTS:
        return [list(range(len(xs)))]
    steps = sorted(b - a for a, b in zip(xs, xs[1:], strict=False))
    gap = max(GAP_FACTOR * steps[len(steps) // 2], GAP_SHARE * (xs[-1] - xs[0]))
    found, current = [], [0]
    for i in range(1, len(xs)):
        if gap and xs[i] - xs[i - 1] > gap:
            found.append(current)
            current = []
        current.append(i)
    return [*found, current]


# time-axis steps, seconds: a tick falls on a round time (12:15, not 12:13 where a point was)
_TIME_STEPS = (60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400, 172800, 604800)


def time_ticks(x0: float, x1: float, most: int = 5) -> list[float]:
    """Round times (Unix seconds) inside [x0, x1], at most ``most`` of them, two or more where
    the span allows (pure)."""
    span = x1 - x0
    step = next((s for s in _TIME_STEPS if span / s <= most - 1), _TIME_STEPS[-1])
    first = -(-x0 // step) * step
    return [first + i * step for i in range(int((x1 - first) // step) + 1)]


def nice_ticks(highest: float, whole: bool) -> list[float]:
    """0 and evenly spaced round values up to just above ``highest`` (1, 2 or 5 times a power of
    ten apart; at least 1 apart for counts, so no tick reads 0.5 files)."""
    import math

    highest = max(highest, 1.0 if whole else 1e-9)
    raw = highest / 4
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    if whole:
        step = max(1.0, float(math.ceil(step)))
    count = math.ceil(highest / step - 1e-9)
    if count * step <= highest:
        count += 1  # room above the highest point
    return [i * step for i in range(count + 1)]


def _axes(ticks: Sequence[float], unit: str, x0: float, x1: float, x) -> str:
    bottom, right = HEIGHT - BOTTOM, WIDTH - RIGHT
    top = ticks[-1]
    grid = "".join(
        f'<line x1="{LEFT}" x2="{right}" y1="{TOP + (1 - v / top) * (bottom - TOP):.1f}" '
        f'y2="{TOP + (1 - v / top) * (bottom - TOP):.1f}" stroke="#eaeef2"/>'
        f'<text class="tick" x="{LEFT - 6}" y="{TOP + (1 - v / top) * (bottom - TOP) + 4:.1f}" '
        f'text-anchor="end">{_short(v)}</text>' for v in ticks)
    labels = []
    if x1 == x0:  # every point at one moment: that moment, in the middle
        when = datetime.fromtimestamp(x0, UTC)
        labels.append(f'<text class="time" x="{(LEFT + right) / 2:.1f}" y="{HEIGHT - 10}" '
                      f'text-anchor="middle">{when:%m-%d %H:%M} UTC</text>')
    else:
        times = time_ticks(x0, x1)
        for i, at in enumerate(times):
            when = datetime.fromtimestamp(at, UTC)
            day = i == 0 or when.hour == when.minute == 0  # the date where it changes, and first
            text = f"{when:%m-%d %H:%M}" if day else f"{when:%H:%M}"
            labels.append(f'<line x1="{x(at):.1f}" x2="{x(at):.1f}" y1="{bottom}" y2="{bottom + 4}" '
                          f'stroke="#8c959f"/><text class="time" x="{x(at):.1f}" y="{HEIGHT - 10}" '
                          f'text-anchor="middle">{text}{" UTC" if i == len(times) - 1 else ""}</text>')
    title = (f'<text class="unit" transform="rotate(-90)" x="{-(TOP + bottom) / 2:.1f}" y="12" '
             f'text-anchor="middle">{escape(unit)}</text>')
    return (f'{grid}<line x1="{LEFT}" x2="{right}" y1="{bottom}" y2="{bottom}" stroke="#8c959f"/>'
            + "".join(labels) + title)


def _short(value: float) -> str:
    for suffix, size in (("M", 1e6), ("k", 1e3)):
        if value >= size:
            return f"{value / size:.1f}{suffix}"
    if value >= 10 or float(value).is_integer():
        return f"{value:.0f}"
    return f"{value:.1f}"


def _took(run: dict[str, Any]) -> str:
    """A run's duration; a follower's record of many loads says it is the last load's."""
    loads = run.get("loads") or 1
    return f"{run['seconds']:.1f}s" + (f" (last of {loads} loads)" if loads > 1 else "")


def _jobs_table(runs: list[dict[str, Any]]) -> str:
    if not runs:
        return '<table class="jobs" data-rows="0"><tr><td>no job has run yet</td></tr></table>'
    rows = "".join(
        f'<tr><td>{escape(r["job"])}</td><td class="{escape(r["status"])}">{escape(r["status"])}</td>'
        f"<td>{r['started_at'].astimezone(UTC):%Y-%m-%d %H:%M:%S}</td><td>{_took(r)}</td>"
        f"<td>{escape(r['host'] or '')}</td><td>{escape(r['error'] or '')}</td></tr>" for r in runs)
    return (f'<table class="jobs" data-rows="{len(runs)}"><tr><th>job</th><th>result</th><th>started (UTC)'
            f"</th><th>took</th><th>where</th><th>error</th></tr>{rows}</table>")
