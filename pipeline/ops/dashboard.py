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

from pipeline import __version__
from pipeline.ops.observe import Observation

WIDTH, HEIGHT = 560, 210
LEFT, RIGHT, TOP, BOTTOM = 58, 14, 12, 30  # plot margins: room for the axis labels
REFRESH_SECONDS = 30
HEALTH_COLOURS = {"healthy": "#1a7f37", "stale": "#9a6700", "failing": "#cf222e"}

Point = tuple[datetime, float]


def render(obs: Observation, lake: str) -> str:
    status = obs.status or {}
    charts = [
        ("rows per batch", "rows", [(b["promoted_at"], b["rows_inserted"]) for b in obs.batches], "bars"),
        ("lag when each batch landed", "seconds",
         [(b["promoted_at"], b["lag_seconds"]) for b in obs.batches if b["lag_seconds"] is not None], "line"),
        ("snapshots kept", "snapshots", [(s["snapshot_time"], s["snapshots_kept"]) for s in obs.snapshots],
         "line"),
        ("live data files", "files", [(s["snapshot_time"], s["data_files"]) for s in obs.snapshots], "line"),
    ]
    figures = "\n".join(f'<figure><figcaption>{escape(title)}</figcaption>{chart(points, unit, kind, title)}'
                        "</figure>" for title, unit, points, kind in charts)
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
{_header(obs, status)}
<div class="charts">
{figures}
</div>
<h2>job history</h2>
{_jobs_table(obs.job_runs)}
<p style="color:#59636e;font-size:12px">event-lake {__version__} · read {obs.at:%Y-%m-%d %H:%M:%S} UTC
in {obs.seconds:.2f}s · reloads every {REFRESH_SECONDS}s · <a href="/metrics">/metrics</a> ·
<a href="/healthz">/healthz</a></p>
</body></html>
"""


def _header(obs: Observation, status: dict[str, Any]) -> str:
    if obs.error:
        return f'<p class="error">Cannot read the pipeline: {escape(obs.error)}</p>'
    health = status["health"]
    reasons = "; ".join(health["reasons"])
    lag = status["lag_seconds"]
    facts = {"lake rows": f"{status['lake_rows']:,}", "snapshots": status["snapshot_count"],
             "data files": f"{status['data_files']:,}", "lag": f"{lag:.0f}s" if lag is not None else "-",
             "watermark": status["watermark"] or "-",
             "last successful load": health["last_successful_load"] or "never",
             "waiting batches": status["staged_batches_waiting"],
             "set aside": len(status["set_aside_batches"]),
             "source": "up" if status.get("source_up", True) else "DOWN"}
    cells = "".join(f"<div><span>{escape(k)}</span>{escape(str(v))}</div>" for k, v in facts.items())
    colour = HEALTH_COLOURS[health["state"]]
    return (f'<span class="health" style="background:{colour}">{escape(health["state"])}</span> '
            f"{escape(reasons)}<div class=\"facts\">{cells}</div>")


def chart(points: Sequence[Point], unit: str, kind: str, title: str = "") -> str:
    """An SVG chart of ``points`` (time, value): bars or a line, with value and time axes.
    ``data-points`` carries the number of points drawn (what a test checks)."""
    head = (f'<svg class="chart" role="img" aria-label="{escape(title)}" data-kind="{kind}" '
            f'data-points="{len(points)}" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}">')
    if not points:
        return f'{head}<text x="{WIDTH / 2}" y="{HEIGHT / 2}" text-anchor="middle">no data yet</text></svg>'
    xs = [t.timestamp() for t, _ in points]
    ys = [float(v) for _, v in points]
    x0, x1 = min(xs), max(xs)
    top = max(ys) * 1.1 or 1.0
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    width = max(1.5, min(24.0, plot_w / len(points) * 0.7))  # of a bar
    inset = width / 2 + 3 if kind == "bars" else 4.0  # the first and last mark stay off the axis labels

    def x(at: float) -> float:
        span = plot_w - 2 * inset
        return LEFT + inset + (span / 2 if x1 == x0 else (at - x0) / (x1 - x0) * span)

    def y(value: float) -> float:
        return TOP + plot_h - max(value, 0.0) / top * plot_h

    parts = [head, _axes(points, top, unit)]
    if kind == "bars":
        parts += [f'<rect class="bar" x="{x(a) - width / 2:.1f}" y="{y(v):.1f}" width="{width:.1f}" '
                  f'height="{TOP + plot_h - y(v):.1f}" fill="#0969da"><title>{v:,.0f} {unit}</title></rect>'
                  for a, v in zip(xs, ys, strict=True)]
    else:
        line = " ".join(f"{x(a):.1f},{y(v):.1f}" for a, v in zip(xs, ys, strict=True))
        parts.append(f'<polyline class="line" points="{line}" fill="none" stroke="#0969da" '
                     'stroke-width="2"/>')
        if len(points) <= 60:
            parts += [f'<circle cx="{x(a):.1f}" cy="{y(v):.1f}" r="2.5" fill="#0969da"/>'
                      for a, v in zip(xs, ys, strict=True)]
    return "".join(parts) + "</svg>"


def _axes(points: Sequence[Point], top: float, unit: str) -> str:
    bottom, right = HEIGHT - BOTTOM, WIDTH - RIGHT
    ticks = "".join(
        f'<line x1="{LEFT}" x2="{right}" y1="{TOP + (1 - f) * (bottom - TOP):.1f}" '
        f'y2="{TOP + (1 - f) * (bottom - TOP):.1f}" stroke="#eaeef2"/>'
        f'<text x="{LEFT - 6}" y="{TOP + (1 - f) * (bottom - TOP) + 4:.1f}" text-anchor="end">'
        f"{_short(top * f)}</text>" for f in (0, 0.5, 1))
    first, last = points[0][0].astimezone(UTC), points[-1][0].astimezone(UTC)
    return (f'{ticks}<line x1="{LEFT}" x2="{right}" y1="{bottom}" y2="{bottom}" stroke="#8c959f"/>'
            f'<text x="{LEFT}" y="{HEIGHT - 10}">{first:%m-%d %H:%M}</text>'
            f'<text x="{right}" y="{HEIGHT - 10}" text-anchor="end">{last:%m-%d %H:%M} UTC</text>'
            f'<text x="{(LEFT + right) / 2}" y="{HEIGHT - 10}" text-anchor="middle">{escape(unit)}</text>')


def _short(value: float) -> str:
    for suffix, size in (("M", 1e6), ("k", 1e3)):
        if value >= size:
            return f"{value / size:.1f}{suffix}"
    return f"{value:.0f}" if value >= 10 or value == 0 else f"{value:.1f}"


def _jobs_table(runs: list[dict[str, Any]]) -> str:
    if not runs:
        return '<table class="jobs" data-rows="0"><tr><td>no job has run yet</td></tr></table>'
    rows = "".join(
        f'<tr><td>{escape(r["job"])}</td><td class="{escape(r["status"])}">{escape(r["status"])}</td>'
        f"<td>{r['started_at'].astimezone(UTC):%Y-%m-%d %H:%M:%S}</td><td>{r['seconds']:.1f}s</td>"
        f"<td>{escape(r['host'] or '')}</td><td>{escape(r['error'] or '')}</td></tr>" for r in runs)
    return (f'<table class="jobs" data-rows="{len(runs)}"><tr><th>job</th><th>result</th><th>started (UTC)'
            f"</th><th>took</th><th>where</th><th>error</th></tr>{rows}</table>")
