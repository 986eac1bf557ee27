"""The twin's HTML report as text: escaped, offline, and honest about what it drew."""

from __future__ import annotations

import re
import sys
from datetime import UTC, datetime, timedelta
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from hyperguard_twin.report import CHARTS_META, render_report, write_report

ALL_CHARTS = {
    "chart-recoveries",
    "chart-gpu-use",
    "chart-executions",
    "chart-tradeoff",
    "chart-gameday",
}
START = datetime(2026, 11, 22, 9, 0, tzinfo=UTC)


def _at(minutes: float) -> str:
    return (START + timedelta(minutes=minutes)).isoformat()


def _phases(begin: float, durations: dict[str, float]) -> list[dict[str, str]]:
    phases, t = [], begin
    for name, minutes in durations.items():
        phases.append({"name": name, "start": _at(t), "end": _at(t + minutes)})
        t += minutes
    return phases


def _pct_lost(instances: int, downtime_min: float, mtbf_h: float, checkpoint_min: float) -> float:
    failures_per_h = instances / mtbf_h
    return min(100.0, 100 * failures_per_h * (downtime_min + checkpoint_min / 2) / 60)


def sample_data() -> dict[str, Any]:
    """What the demo reports after its scenario: three incidents, three teams' GPUs."""
    sizes = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
    downtimes = {"wait_for_repair": 39.0, "elastic_shrink": 10.0, "hot_spare": 25.0}
    return {
        "title": "HyperGuard twin demo",
        "subtitle": "twin-cluster, us-east-1 (simulated), cluster clock at x60",
        "generated_at": _at(75),
        "summary": [
            {
                "event": "SageMaker HyperPod Cluster Node Health Event",
                "classification": "gpu_fault",
                "action": "replace",
                "outcome": "resolved: i-0a1b2c3d4e5f60001 replaced",
            },
            {
                "event": "EC2 Spot Instance Interruption Warning",
                "classification": "spot_interruption",
                "action": "drain",
                "outcome": "resolved: jobs moved to burst capacity",
            },
            {
                "event": "AWS Health Event (scheduled retirement)",
                "classification": "scheduled_retirement",
                "action": "reboot",
                "outcome": "resolved",
            },
            {
                "event": "EC2 Spot Instance Interruption Warning (malformed)",
                "classification": "invalid",
                "action": "none",
                "outcome": "counted, dropped",
            },
        ],
        "recoveries": [
            {
                "incident_id": "hyperpod-node-health#i-0a1b2c3d4e5f60001",
                "instance_id": "i-0a1b2c3d4e5f60001",
                "outcome": "resolved",
                "phases": _phases(
                    2, {"detect": 1.5, "cordon": 0.5, "drain": 3, "repair": 15, "resume": 23.5}
                ),
            },
            {
                "incident_id": "ec2-spot-interruption#i-0e9f8d7c6b5a40002",
                "instance_id": "i-0e9f8d7c6b5a40002",
                "outcome": "moved",
                "phases": _phases(10, {"detect": 0.5, "cordon": 0.3, "drain": 1.5, "resume": 5}),
            },
            {
                "incident_id": "aws-health-retirement#i-0123456789abc0003",
                "instance_id": "i-0123456789abc0003",
                "outcome": "resolved",
                "phases": _phases(20, {"cordon": 0.3, "drain": 2, "repair": 5}),
            },
        ],
        "gpu_use": {
            "times": [_at(m) for m in range(0, 80, 5)],
            "teams": {
                "llm-pretrain": [32, 32, 24, 24, 24, 24, 24, 24, 24, 32, 32, 32, 32, 32, 32, 32],
                "vision": [16, 16, 16, 8, 8, 16, 16, 16, 16, 16, 16, 16, 8, 8, 8, 8],
                "speech": [0, 8, 8, 8, 8, 8, 8, 0, 0, 0, 8, 8, 8, 8, 0, 0],
            },
            "capacity": 64,
        },
        "jobs": [
            {
                "job": "llama3-70b-pretrain",
                "team": "llm-pretrain",
                "step": 1480,
                "interruptions": 1,
                "steps_lost": 27,
                "seconds_down": 412.5,
                "resumed_from": [1400],
            },
            {
                "job": "vit-h14",
                "team": "vision",
                "step": 700,
                "interruptions": 0,
                "steps_lost": 0,
                "seconds_down": 0.0,
                "resumed_from": [],
            },
        ],
        "executions": [
            {
                "name": "hyperpod-node-health-i-0a1b2c3d4e5f60001",
                "state_machine": "NodeRecovery",
                "status": "SUCCEEDED",
                "start": _at(2),
                "stop": _at(45.5),
                "states": 23,
            },
            {
                "name": "ec2-spot-interruption-i-0e9f8d7c6b5a40002",
                "state_machine": "NodeRecovery",
                "status": "SUCCEEDED",
                "start": _at(10),
                "stop": _at(17.3),
                "states": 14,
            },
            {
                "name": "aws-health-retirement-i-0123456789abc0003",
                "state_machine": "NodeRecovery",
                "status": "FAILED",
                "start": _at(20),
                "stop": _at(27.3),
                "states": 11,
            },
            {
                "name": "aws-health-retirement-i-0123456789abc0003-retry",
                "state_machine": "NodeRecovery",
                "status": "RUNNING",
                "start": _at(70),
                "stop": None,
                "states": 4,
            },
        ],
        "tradeoff": {
            "sizes": sizes,
            "strategies": {
                name: {
                    "downtime_min": minutes,
                    "pct_time_lost": [_pct_lost(n, minutes, 8760, 30) for n in sizes],
                }
                for name, minutes in downtimes.items()
            },
            "inputs": {"instance MTBF (h)": 8760, "checkpoint interval (min)": 30},
        },
        "gameday": {
            "failures": 3,
            "strategies": {
                "wait_for_repair": {
                    "goodput_pct": 81.2,
                    "downtime_per_failure_min": 39.0,
                    "formula_goodput_pct": 83.0,
                    "formula_downtime_per_failure_min": 37.5,
                },
                "hot_spare": {
                    "goodput_pct": 88.9,
                    "downtime_per_failure_min": 25.0,
                    "formula_goodput_pct": 89.5,
                },
                "elastic_shrink": {
                    "goodput_pct": 94.1,
                    "downtime_per_failure_min": 10.0,
                    "formula_goodput_pct": 95.2,
                },
            },
        },
        "next_steps": [
            "hyperguard incidents list",
            "hyperguard executions list",
            "hyperguard plan --help",
        ],
    }


class _Page(HTMLParser):
    """The tags of a page (a <script>'s body is text, not tags)."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def charts(self) -> list[str]:
        meta = next(a for t, a in self.tags if t == "meta" and a.get("name") == CHARTS_META)
        return (meta.get("content") or "").split()

    def ids(self, tag: str) -> set[str]:
        return {str(a["id"]) for t, a in self.tags if t == tag and a.get("id")}


def test_a_full_report_lists_every_chart_and_has_a_div_for_each() -> None:
    page = _Page(render_report(sample_data()))
    assert set(page.charts()) == ALL_CHARTS
    assert set(page.charts()) <= page.ids("div")


def test_strings_from_the_data_are_escaped_in_tables_and_charts() -> None:
    data = sample_data()
    hostile = "<script>alert(1)</script>"
    data["recoveries"][0]["incident_id"] = hostile
    data["summary"][0]["event"] = hostile
    data["executions"][0]["name"] = hostile
    text = render_report(data)
    assert hostile not in text
    assert text.count("&lt;script&gt;alert(1)&lt;/script&gt;") >= 2  # summary and executions
    assert "&lt;script&gt;alert(1)&lt;\\u002fscript&gt;" in text  # the Gantt's row label


def test_the_page_loads_nothing_from_anywhere() -> None:
    page = _Page(render_report(sample_data()))
    scripts = [a for t, a in page.tags if t == "script"]
    assert scripts and not [a for a in scripts if "src" in a]
    links = [
        (t, name, value)
        for t, a in page.tags
        for name, value in a.items()
        if name in ("src", "href") and value and re.match(r"\s*(https?:)?//", value)
    ]
    assert links == []


def test_plotly_js_is_inlined_once() -> None:
    text = render_report(sample_data())
    assert text.count("Plotly.newPlot(") == len(ALL_CHARTS)
    assert len(re.findall(r"plotly\.js v\d", text)) == 1


@pytest.mark.parametrize(
    ("key", "empty", "chart"),
    [
        ("recoveries", None, "chart-recoveries"),
        (
            "recoveries",
            [{"incident_id": "x", "instance_id": "i", "phases": []}],
            "chart-recoveries",
        ),
        ("gpu_use", {"times": [], "teams": {}}, "chart-gpu-use"),
        ("executions", [], "chart-executions"),
        ("tradeoff", {"sizes": [1, 2], "strategies": {}}, "chart-tradeoff"),
        ("gameday", {}, "chart-gameday"),
    ],
)
def test_a_missing_or_empty_section_is_a_note_and_not_in_the_meta(
    key: str, empty: Any, chart: str
) -> None:
    data = sample_data()
    if empty is None:
        del data[key]
    else:
        data[key] = empty
    text = render_report(data)
    page = _Page(text)
    assert set(page.charts()) == ALL_CHARTS - {chart}
    assert chart not in page.ids("div")
    # an empty section says so; one the run does not have is left out
    assert text.count('class="absent"') == (0 if empty is None else 1)


def test_title_and_time_are_enough(tmp_path: Path) -> None:
    path = write_report(tmp_path / "out" / "report.html", {"title": "t", "generated_at": _at(0)})
    page = _Page(path.read_text(encoding="utf-8"))
    assert page.charts() == []
    assert not any(a.get("class") == "absent" for _t, a in page.tags)


def test_without_plotly_the_error_says_how_to_get_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "plotly.graph_objects", None)
    with pytest.raises(RuntimeError, match=r"hyperguard\[report\]"):
        render_report(sample_data())


def test_the_gameday_chart_says_which_bar_is_which_and_over_how_many_failures() -> None:
    page = render_report(sample_data())
    assert "measured: the twin" in page and "formula: the planner" in page  # the legend
    assert "Both bars charge the same 3 failures drawn" in page
    assert "39 measured \\u002f 37.5 formula min" in page  # in the chart's JSON


def test_each_recovery_phase_shows_its_wall_seconds_beside_the_cluster_time() -> None:
    """Detection of 5 cluster minutes that took 5 wall seconds (x60) must read as the
    service's 5 s, not as 5 minutes of HyperGuard's detection time."""
    data = {
        "title": "t",
        "generated_at": "2026-11-22T09:00:00+00:00",
        "recoveries": [
            {
                "incident_id": "inc-1",
                "instance_id": "i-1",
                "outcome": "replaced",
                "phases": [
                    phase | {"wall_s": wall}
                    for phase, wall in zip(
                        _phases(0, {"detect": 5, "repair": 15.7}), (5.0, 15.7), strict=True
                    )
                ],
            }
        ],
    }
    page = render_report(data)
    assert "300 s (5.0 s wall)" in page and "942 s (15.7 s wall)" in page
    assert "the service&#x27;s own time" in page


def test_each_job_says_what_it_lost_and_the_gpu_chart_draws_the_capacity() -> None:
    text = render_report(sample_data())
    jobs = text[text.index("Jobs: what each lost") : text.index("GPU use by team")]
    assert re.search(r"llama3-70b-pretrain.*?1480.*?>1<.*?>27<.*?412\.5.*?1400", jobs, re.S)
    assert re.search(r"vit-h14.*?>0<.*?>0<.*?>0\.0<.*?>-<", jobs, re.S)
    assert '"name":"HyperPod capacity"' in text and '"y":[64,64]' in text
