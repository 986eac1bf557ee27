"""The twin's HTML report: one offline page with the demo's tables and plotly charts.

The page is for someone who ran the demo on a laptop, maybe without network, and wants to
see what happened and share it: so it is a single file, plotly.js inlined once in <head>
(no CDN), every chart a plotly figure drawn by that script. A `hyperguard-charts` meta tag
lists the ids of the charts drawn, so a checker (`hyperguard_twin.browser`) knows which
divs a real browser must have rendered.

plotly is the `report` extra, imported only when a report is made: the Lambda layer never
ships it.

Input contract (every section optional except `title` and `generated_at`; a missing
section is left out, an empty one says so in a line, never an error):

    title: str; generated_at: str (ISO 8601); subtitle: str
    summary: [{"event", "classification", "action", "outcome": str}]       -> table
    recoveries: [{"incident_id", "instance_id", "outcome": str,
                  "phases": [{"name": str, "start": ISO, "end": ISO,
                              "wall_s": float}]}]  -> Gantt (cluster time; wall_s beside)
    jobs: [{"job", "team": str, "step", "interruptions", "steps_lost": int,
            "seconds_down": float, "resumed_from": [step]}]                  -> table
    gpu_use: {"times": [ISO], "teams": {team: [GPUs in use at each time]},
              "capacity": GPUs installed}          -> stacked area, capacity dashed
    executions: [{"name", "state_machine", "status": str, "start": ISO,
                  "stop": ISO | None, "states": int}]                       -> table, counts
    tradeoff: {"sizes": [instances],
               "strategies": {name: {"downtime_min": float,
                                     "pct_time_lost": [float per size]}},
               "inputs": {name: number}}                                     -> line chart
    gameday: {"failures": int,
              "strategies": {name: {"goodput_pct": float,
                                    "downtime_per_failure_min": float,
                                    "formula_goodput_pct": float,
                                    "formula_downtime_per_failure_min": float}}}
                                                         -> grouped bars, measured | formula
    next_steps: [command]                                                    -> <pre>

Times without an offset are taken as UTC; charts show UTC. Each figure says its clock: the
simulated cluster's (recoveries, jobs, GPU use: it runs faster than the wall clock) or the
wall clock (Step Functions executions, the service's own). Every string from the data is
escaped: for HTML with html.escape, and for chart labels too, since plotly reads a small
HTML subset (<b>, <br>, <a>) in them and decodes &lt; &gt; &amp; back for display.
"""

from __future__ import annotations

import html
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from plotly.graph_objects import Figure

CHARTS_META = "hyperguard-charts"
PLOTLY_CONFIG = {"displaylogo": False, "responsive": True}
STATUS_COLOURS = {
    "SUCCEEDED": "#2ca02c",
    "FAILED": "#d62728",
    "TIMED_OUT": "#ff7f0e",
    "ABORTED": "#8c564b",
    "RUNNING": "#1f77b4",
}

CSS = """
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif;
       color: #1f2933; max-width: 1200px; margin: 2em auto; padding: 0 1em; }
h1 { margin-bottom: 0.1em; }
h2 { margin-top: 2em; border-bottom: 1px solid #d9dee3; padding-bottom: 0.2em; }
.meta, .absent, .note { color: #616e7c; }
table { border-collapse: collapse; width: 100%; margin: 0.5em 0; }
th, td { text-align: left; padding: 0.3em 0.7em; border-bottom: 1px solid #e4e7eb; }
th { background: #f5f7fa; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
td.time { white-space: nowrap; font-variant-numeric: tabular-nums; }
pre { background: #f5f7fa; padding: 0.8em 1em; overflow-x: auto; }
"""


@dataclass(frozen=True)
class _Part:
    """A section's HTML and the ids of the charts in it."""

    html: str
    charts: tuple[str, ...] = ()


def _plotly() -> Any:
    """plotly.graph_objects, imported only when a report is made."""
    try:
        import plotly.graph_objects as go
    except ImportError as e:
        raise RuntimeError("the HTML report needs plotly: pip install 'hyperguard[report]'") from e
    return go


def _esc(value: Any) -> str:
    return html.escape(str(value))


def _label(value: Any) -> str:
    """A string for a chart: plotly shows &lt; &gt; &amp; decoded, but &quot; as is."""
    return html.escape(str(value), quote=False)


def _utc(iso: str) -> datetime:
    moment = datetime.fromisoformat(iso)
    if moment.tzinfo is None:
        return moment
    return moment.astimezone(UTC).replace(tzinfo=None)


def _table(
    headers: Sequence[str], rows: Sequence[Sequence[Any]], classes: Sequence[str] = ()
) -> str:
    """A table; `classes`, if given, the CSS class of each column's cells ("" for none)."""
    head = "".join(f"<th>{_esc(h)}</th>" for h in headers)
    attrs = [f' class="{c}"' if c else "" for c in classes or [""] * len(headers)]
    body = "".join(
        "<tr>"
        + "".join(f"<td{a}>{_esc(cell)}</td>" for a, cell in zip(attrs, row, strict=True))
        + "</tr>"
        for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _chart(fig: Figure, chart_id: str) -> _Part:
    fig.update_layout(template="plotly_white", margin={"t": 40, "r": 20})
    div = fig.to_html(
        full_html=False, include_plotlyjs=False, div_id=chart_id, config=PLOTLY_CONFIG
    )
    return _Part(str(div), (chart_id,))


def _summary(rows: list[dict[str, Any]]) -> _Part:
    keys = ("event", "classification", "action", "outcome")
    return _Part(
        _table([k.capitalize() for k in keys], [[r.get(k, "") for k in keys] for r in rows])
    )


def _recoveries(incidents: list[dict[str, Any]]) -> _Part | None:
    """A Gantt chart: one row per incident, one bar per phase (base = start, length =
    duration), one trace per phase name so a phase has one colour and one legend entry."""
    go = _plotly()
    bars: dict[str, dict[str, list[Any]]] = {}
    rows = []
    for incident in incidents:
        row = (
            f"{_label(incident.get('incident_id', '?'))}<br>"
            f"{_label(incident.get('instance_id', '?'))} · {_label(incident.get('outcome', ''))}"
        )
        rows.append(row)
        for phase in incident.get("phases") or []:
            start, end = _utc(phase["start"]), _utc(phase["end"])
            seconds = (end - start).total_seconds()
            trace = bars.setdefault(
                _label(phase["name"]), {"y": [], "base": [], "x": [], "text": [], "customdata": []}
            )
            trace["y"].append(row)
            trace["base"].append(start.isoformat(sep=" "))
            trace["x"].append(seconds * 1000)
            wall = phase.get("wall_s")
            trace["text"].append(
                f"{seconds:.0f} s" + (f" ({wall:.1f} s wall)" if wall is not None else "")
            )
            trace["customdata"].append([f"{start:%H:%M:%S}", f"{end:%H:%M:%S}"])
    if not bars:
        return None
    fig = go.Figure()
    for name, trace in bars.items():
        fig.add_trace(
            go.Bar(
                name=name,
                orientation="h",
                textposition="inside",
                insidetextanchor="middle",
                hovertemplate=(
                    "%{y}<br>%{customdata[0]} to %{customdata[1]} UTC (%{text})"
                    "<extra>%{fullData.name}</extra>"
                ),
                **trace,
            )
        )
    fig.update_layout(
        barmode="overlay",
        height=max(260, 120 + 60 * len(rows)),
        xaxis={"type": "date", "title": "cluster time (UTC)"},
        yaxis={"autorange": "reversed", "categoryorder": "array", "categoryarray": rows},
        legend={"title": "phase", "orientation": "h", "x": 0, "y": 1.02, "yanchor": "bottom"},
        uniformtext={"minsize": 9, "mode": "hide"},
    )
    chart = _chart(fig, "chart-recoveries")
    note = (
        "Bars run on the simulated cluster's clock, which runs faster than the wall clock "
        "(x60 by default): a wall second of the service's own work (detection, cordon, "
        "drain, closing) is a cluster minute there, and a loaded host stretches it. Each "
        "bar's wall seconds, in brackets, are the service's own time."
    )
    return _Part(f"<p>{_esc(note)}</p>{chart.html}", chart.charts)


def _jobs(rows: list[dict[str, Any]]) -> _Part:
    headers = (
        "Job",
        "Team",
        "Step reached",
        "Interruptions",
        "Steps lost (redone)",
        "Seconds down",
        "Resumed from step",
    )
    cells = [
        [
            r.get("job", ""),
            r.get("team", ""),
            r.get("step", ""),
            r.get("interruptions", 0),
            r.get("steps_lost", 0),
            r.get("seconds_down", 0),
            ", ".join(str(s) for s in r.get("resumed_from") or []) or "-",
        ]
        for r in rows
    ]
    note = (
        '<p class="note">From the simulated cluster\'s ground truth (cluster time): a job '
        "is down from the moment it stopped training until it trained again; the steps it "
        "lost are those past the checkpoint it resumed from.</p>"
    )
    classes = ("", "", "num", "num", "num", "num", "")
    return _Part(_table(headers, cells, classes) + note)


def _gpu_use(use: dict[str, Any]) -> _Part | None:
    times = [_utc(t).isoformat(sep=" ") for t in use.get("times") or []]
    teams = use.get("teams") or {}
    if not times or not teams:
        return None
    go = _plotly()
    fig = go.Figure(
        [
            go.Scatter(
                x=times,
                y=counts,
                name=_label(team),
                stackgroup="gpus",
                line_shape="hv",
                mode="lines",
            )
            for team, counts in teams.items()
        ]
    )
    capacity = use.get("capacity")
    if capacity:
        fig.add_trace(
            go.Scatter(
                x=[times[0], times[-1]],
                y=[capacity, capacity],
                name="HyperPod capacity",
                mode="lines",
                line={"dash": "dash", "color": "#616e7c"},
            )
        )
    fig.update_layout(
        height=380,
        xaxis={"title": "cluster time (UTC)"},
        yaxis={"title": "GPUs in use"},
        legend={"title": "team"},
        hovermode="x unified",
    )
    return _chart(fig, "chart-gpu-use")


def _executions(executions: list[dict[str, Any]]) -> _Part:
    go = _plotly()
    counts = Counter(str(e.get("status", "?")) for e in executions)
    fig = go.Figure(
        go.Bar(
            x=[_label(s) for s in counts],
            y=list(counts.values()),
            marker_color=[STATUS_COLOURS.get(s, "#7f7f7f") for s in counts],
            text=list(counts.values()),
        )
    )
    fig.update_layout(height=260, width=520, yaxis={"title": "executions"}, showlegend=False)
    chart = _chart(fig, "chart-executions")
    table = _table(
        ["Name", "State machine", "Status", "Start (wall clock)", "Stop (wall clock)", "States"],
        [
            [
                e.get("name", ""),
                e.get("state_machine", ""),
                e.get("status", ""),
                e.get("start", ""),
                e.get("stop") or "—",
                e.get("states", ""),
            ]
            for e in executions
        ],
        ("", "", "", "time", "time", "num"),
    )
    return _Part(chart.html + table, chart.charts)


def _tradeoff(tradeoff: dict[str, Any]) -> _Part | None:
    sizes = tradeoff.get("sizes") or []
    strategies = tradeoff.get("strategies") or {}
    if not sizes or not strategies:
        return None
    go = _plotly()
    fig = go.Figure(
        [
            go.Scatter(
                x=sizes,
                y=s.get("pct_time_lost", []),
                name=f"{_label(name)} ({_minutes(s.get('downtime_min'))} min per failure)",
                mode="lines+markers",
            )
            for name, s in strategies.items()
        ]
    )
    fig.update_layout(
        height=420,
        xaxis={"type": "log", "title": "cluster size (instances)"},
        yaxis={"title": "% of training time lost to failures", "rangemode": "tozero"},
        legend={"title": "strategy"},
    )
    chart = _chart(fig, "chart-tradeoff")
    inputs = tradeoff.get("inputs") or {}
    note = ", ".join(f"{_esc(k)} = {_esc(v)}" for k, v in inputs.items())
    return _Part(chart.html + (f'<p class="note">Inputs: {note}</p>' if note else ""), chart.charts)


def _minutes(downtime: float | Sequence[float | None] | None) -> str:
    """One downtime, or the range of a downtime that varies with the cluster's size."""
    if downtime is None or isinstance(downtime, int | float):
        return f"{downtime or 0:.1f}"
    values = [d for d in downtime if d is not None]
    low, high = (min(values), max(values)) if values else (0.0, 0.0)
    return f"{low:.1f}" if low == high else f"{low:.1f}-{high:.1f}"


def _gameday(gameday: dict[str, Any]) -> _Part | None:
    strategies = gameday.get("strategies") or {}
    if not strategies:
        return None
    go = _plotly()
    failures = gameday.get("failures")
    names = [
        f"{_label(n)}<br>{s.get('downtime_per_failure_min', 0):g} measured / "
        f"{s.get('formula_downtime_per_failure_min', 0):g} formula min/failure"
        for n, s in strategies.items()
    ]
    bars = (
        ("measured: the twin's downtime per failure", "goodput_pct"),
        ("formula: the planner's downtime per failure", "formula_goodput_pct"),
    )
    fig = go.Figure(
        [
            go.Bar(
                name=label,
                x=names,
                y=[s.get(key) for s in strategies.values()],
                texttemplate="%{y:.1f}",
            )
            for label, key in bars
        ]
    )
    fig.update_layout(
        barmode="group",
        height=380,
        yaxis={"title": "goodput (%)", "range": [0, 100]},
        legend={"orientation": "h"},
    )
    note = (
        f"Both bars charge the same {failures} failures drawn over the period: the measured "
        "bar at the downtime per failure measured on the twin, the formula bar at the "
        "planner's downtime per failure for the same job."
        if failures is not None
        else "Both bars charge the same failures."
    )
    chart = _chart(fig, "chart-gameday")
    return _Part(f"<p>{_esc(note)}</p>{chart.html}", chart.charts)


def _next_steps(commands: list[str]) -> _Part:
    return _Part("<pre>" + "\n".join(_esc(c) for c in commands) + "</pre>")


SECTIONS: tuple[tuple[str, str, Callable[[Any], _Part | None]], ...] = (
    ("summary", "What happened", _summary),
    ("recoveries", "Recoveries", _recoveries),
    ("jobs", "Jobs: what each lost", _jobs),
    ("gpu_use", "GPU use by team", _gpu_use),
    ("executions", "Step Functions executions", _executions),
    ("tradeoff", "Recovery strategy trade-off", _tradeoff),
    ("gameday", "Game day: measured vs formula goodput", _gameday),
    ("next_steps", "Next steps", _next_steps),
)


def render_report(data: Mapping[str, Any]) -> str:
    """The page for `data` (the module docstring's contract)."""
    _plotly()  # no plotly: the install hint, before anything is built
    from plotly.offline import get_plotlyjs

    body: list[str] = []
    charts: list[str] = []
    for key, heading, build in SECTIONS:
        if key not in data:
            continue  # not this kind of run's (a game day has no event table)
        part = build(data[key]) if data[key] else None
        if part is None:
            body.append(f'<p class="absent">{_esc(heading)}: no data in this run.</p>')
            continue
        body.append(f"<section><h2>{_esc(heading)}</h2>{part.html}</section>")
        charts.extend(part.charts)
    subtitle = f"<p>{_esc(data['subtitle'])}</p>" if data.get("subtitle") else ""
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="{CHARTS_META}" content="{" ".join(charts)}">
<title>{_esc(data["title"])}</title>
<style>{CSS}</style>
<script>{get_plotlyjs()}</script>
</head>
<body>
<h1>{_esc(data["title"])}</h1>
{subtitle}<p class="meta">Generated {_esc(data["generated_at"])}</p>
{"".join(body)}
</body>
</html>
"""


def write_report(path: Path, data: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_report(data), encoding="utf-8")
    return path
