"""`hyperguard plan`, `plan mtbf`, `plan reduction`: the keys scripts rely on, pure JSON with
--json, tables without it, and every mistake a usage error (exit 2) without a traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from tests.conftest import ROOT

from hyperguard.cli import main as cli
from hyperguard.models import Incident, Node
from hyperguard.models.signals import Repair

PUBLISHED = [
    "plan",
    *("--instances", "256", "--gpus-per-instance", "8", "--failure-rate", "0.0005"),
    *("--gpu-hours", "10000000", "--downtime-min", "40", "--baseline-downtime-min", "280"),
    *("--gpu-hour-cost", "5"),
]
GRID = ["--sizes", "4,8,256", "--rates", "0.0001,0.0005"]
DOWNTIMES = ["--downtime-min", "40", "--baseline-downtime-min", "280"]


def exit_status(argv: list[str]) -> int:
    try:
        return cli.main(argv)
    except SystemExit as exc:  # argparse: usage errors, --help
        return int(exc.code or 0)


def json_of(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    assert exit_status(argv) == 0
    out = capsys.readouterr()
    assert out.err == ""
    result: dict[str, object] = json.loads(out.out)  # pure JSON: nothing else on stdout
    return result


def test_plan_json_has_the_keys_scripts_rely_on(capsys: pytest.CaptureFixture[str]) -> None:
    result = json_of([*PUBLISHED, "--json"], capsys)
    assert {
        "days_lost",
        "days_lost_baseline",
        "days_to_train",
        "days_to_train_baseline",
        "improvement_pct",
        "days_saved",
        "cost_saved_usd",
        "mtbf_hours",
        "hot_spares",
    } <= set(result)
    assert result["cost_saved_usd"] == 25_600_000
    assert result["mtbf_hours"] == 7.8125
    assert result["hot_spares"] == 1


def test_a_rate_may_be_typed_as_a_percentage(capsys: pytest.CaptureFixture[str]) -> None:
    as_fraction = json_of([*PUBLISHED, "--json"], capsys)
    argv = [*PUBLISHED, "--json"]
    argv[argv.index("0.0005")] = "0.05%"
    assert json_of(argv, capsys) == as_fraction


def test_replacement_time_and_target_change_the_spares(capsys: pytest.CaptureFixture[str]) -> None:
    result = json_of(
        [*PUBLISHED, "--target", "0.0001", "--replacement-min", "60", "--json"], capsys
    )
    assert isinstance(result["hot_spares"], int) and result["hot_spares"] > 1


def test_plan_prints_a_comparison_for_people(capsys: pytest.CaptureFixture[str]) -> None:
    assert exit_status(PUBLISHED) == 0
    out = capsys.readouterr().out
    assert "WITH (40 MIN/FAILURE)" in out and "WITHOUT (280 MIN/FAILURE)" in out
    assert "17.4" in out and "121.5" in out and "$25,600,000" in out and "32.1 %" in out
    assert "hot spares: 1" in out


def test_plan_mtbf_json(capsys: pytest.CaptureFixture[str]) -> None:
    result = json_of(["plan", "mtbf", *GRID, "--json"], capsys)
    assert result == {
        "sizes": [4, 8, 256],
        "grid": {"0.0001": [2500, 1250, 40], "0.0005": [500, 250, 8]},
    }
    # --json before the subcommand counts as well
    assert json_of(["plan", "--json", "mtbf", *GRID], capsys) == result


def test_plan_reduction_json(capsys: pytest.CaptureFixture[str]) -> None:
    result = json_of(["plan", "reduction", *GRID, *DOWNTIMES, "--json"], capsys)
    assert result["sizes"] == [4, 8, 256]
    grid = result["grid"]
    assert isinstance(grid, dict) and set(grid) == {"0.0001", "0.0005"}
    assert grid["0.0005"][2] == 32.05


def test_grids_print_tables(capsys: pytest.CaptureFixture[str]) -> None:
    assert exit_status(["plan", "mtbf", *GRID]) == 0
    out = capsys.readouterr().out
    assert "RATE \\ INSTANCES" in out and "2500" in out
    assert exit_status(["plan", "reduction", *GRID, *DOWNTIMES]) == 0
    assert "32.05" in capsys.readouterr().out


def test_a_bare_plan_prints_its_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert exit_status(["plan"]) == 0
    out = capsys.readouterr().out
    assert "--failure-rate" in out and "mtbf" in out and "reduction" in out


def _without(option: str) -> list[str]:
    i = PUBLISHED.index(option)
    return PUBLISHED[:i] + PUBLISHED[i + 2 :]


def _with(option: str, value: str) -> list[str]:
    argv = list(PUBLISHED)
    argv[argv.index(option) + 1] = value
    return argv


@pytest.mark.parametrize(
    ("argv", "complaint"),
    [
        (_without("--gpu-hours"), "missing --gpu-hours"),
        (["plan", "--instances", "4"], "missing --gpus-per-instance"),
        (_with("--instances", "0"), "0 is not a whole number from 1 to"),
        (_with("--instances", "2.5"), "2.5 is not a whole number"),
        (_with("--gpus-per-instance", "65"), "65 is not a whole number from 1 to 64"),
        (_with("--failure-rate", "0"), "0 is not a fraction in [1e-09, 1]"),
        # Found by schemathesis on POST /plan: MTBF overflowed to inf, a 500.
        (_with("--failure-rate", "5e-324"), "5e-324 is not a fraction in [1e-09, 1]"),
        (_with("--failure-rate", "1.5"), "1.5 is not a fraction"),
        (_with("--failure-rate", "nan"), "nan is not a fraction"),
        (_with("--failure-rate", "often"), "often is not a number"),
        (_with("--gpu-hours", "-1"), "-1 is not in [1, 1e+12]"),
        (_with("--gpu-hours", "inf"), "inf is not in [1, 1e+12]"),
        (_with("--downtime-min", "-5"), "-5 is not in [0, 525600]"),
        (_with("--baseline-downtime-min", "x"), "x is not a number"),
        (_with("--gpu-hour-cost", "-1"), "-1 is not in [0, 10000]"),
        ([*PUBLISHED, "--replacement-min", "0"], "0 is not in (0, 525600]"),
        ([*PUBLISHED, "--target", "0.9"], "0.9 is not in [1e-09, 0.5]"),
        (["plan", "mtbf", "--sizes", "4,8"], "required: --rates"),
        (["plan", "mtbf", "--sizes", "4,4", "--rates", "0.001"], "a value is given twice"),
        (["plan", "mtbf", "--sizes", "4,,8", "--rates", "0.001"], "has an empty value"),
        (["plan", "mtbf", "--sizes", "0", "--rates", "0.001"], "0 is not a whole number"),
        (["plan", "mtbf", "--sizes", "4", "--rates", "0.001,2"], "2 is not a fraction"),
        (
            ["plan", "mtbf", "--sizes", ",".join(map(str, range(1, 52))), "--rates", "0.1"],
            "give 1 to 50 values, not 51",
        ),
        (["plan", "reduction", *GRID], "required: --downtime-min, --baseline-downtime-min"),
        (["plan", "reduction", *GRID, *DOWNTIMES[:2], "--baseline-downtime-min", "-1"], "-1"),
        (["plan", "--instances", "4", "mtbf", *GRID], "--instances given before `mtbf`"),
        (
            ["plan", "--downtime-min", "4", "reduction", *GRID, *DOWNTIMES],
            "--downtime-min given before `reduction`",
        ),
        (["plan", "sideways"], "invalid choice"),
    ],
)
def test_usage_errors_exit_2_with_one_clear_complaint(
    argv: list[str], complaint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert exit_status(argv) == 2
    out = capsys.readouterr()
    assert out.out == ""
    assert complaint in out.err and "Traceback" not in out.err
    assert out.err.count("error:") == 1


def test_no_traceback_from_the_installed_command() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "hyperguard.cli.main", *_with("--failure-rate", "-1"), "--json"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stdout == "" and "Traceback" not in proc.stderr
    assert "--failure-rate: -1 is not a fraction" in proc.stderr


# ---- plan commitment ----------------------------------------------------------------------
DAY = [64] * 8 + [104] * 3 + [152] * 2 + [104] * 7 + [64] * 4
"""The day-in-the-life demand in GPUs, hour by hour (8 GPUs an instance: 8, 13, 19 instances)."""


def demand_file(tmp_path: Path, gpus: list[int] = DAY) -> str:
    path = tmp_path / "demand.csv"
    rows = [f"2026-11-23T{hour:02d}:00:00Z,{g}" for hour, g in enumerate(gpus)]
    path.write_text("timestamp,gpus\n" + "\n".join(rows) + "\n")
    return str(path)


def test_commitment_json_has_the_curve_the_minimum_and_its_burst_hours(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["plan", "commitment", "--demand", demand_file(tmp_path), "--json"]
    result = json_of([*argv, "--committed-usd-per-hour", "40"], capsys)
    assert result["peak_instances"] == 19
    assert [row["committed_instances"] for row in result["curve"]] == list(range(20))  # type: ignore[attr-defined]
    assert result["best_on_demand"] == {
        "committed_instances": 8,
        "total_usd": 11642.88,  # 8 x 24 x 40 + 72 burst instance-hours x 55.04
        "committed_usd": 7680.0,
        "burst_usd": 3962.88,
        "burst_instance_hours": 72.0,
        "burst_hours": 12.0,
        "break_even_utilisation": 0.7267,
        "saving_vs_peak_committed_pct": 36.17,
    }
    assert result["prices"]["on_demand_usd_per_hour"] == 55.04  # type: ignore[index]
    assert result["price_sources"]["committed"] == {  # type: ignore[index]
        "option": "given",
        "usd_per_hour": 40.0,
        "source": "--committed-usd-per-hour",
    }
    published = json_of(argv, capsys)
    assert published["region"] == "us-east-1"
    assert published["prices"]["committed_usd_per_hour"] == 39.33  # type: ignore[index]
    assert published["best_on_demand"]["committed_instances"] == 8  # type: ignore[index]
    sources = published["price_sources"]
    assert {n: s["option"] for n, s in sources.items()} == {  # type: ignore[attr-defined]
        "committed": "ec2-capacity-block",
        "on_demand": "ec2-on-demand",
        "spot": "ec2-spot",
    }
    assert all(s["url"].startswith("https://") for s in sources.values())  # type: ignore[attr-defined]
    assert all(s["read_on"] == "2026-11-26" for s in sources.values())  # type: ignore[attr-defined]


def test_commitment_prints_the_minimum_and_the_curve_for_people(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["plan", "commitment", "--demand", demand_file(tmp_path)]
    assert exit_status([*argv, "--committed-usd-per-hour", "40"]) == 0
    out = capsys.readouterr().out
    assert "peak 19 instances" in out and "commit 8 → $11,642.88" in out
    assert "more than 72.7 % of the time" in out and "TOTAL $ (SPOT BURST)" in out
    assert exit_status([*argv, "--committed-usd-per-hour", "98.32"]) == 0
    assert "committing never pays at these prices" in capsys.readouterr().out


def test_with_its_defaults_a_steady_base_and_weekday_peaks_commit_the_base_and_say_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A week from Monday: 8 instances all the time, 13 on weekdays 08:00-20:00. At the
    published defaults (a Capacity Block against on-demand) the base is committed, the peaks
    burst, and the output says which prices, from where, and why."""
    week = [104 if day < 5 and 8 <= hour < 20 else 64 for day in range(7) for hour in range(24)]
    path = tmp_path / "week.csv"
    start = datetime(2026, 11, 23, tzinfo=UTC)
    rows = [f"{(start + timedelta(hours=h)).isoformat()},{g}" for h, g in enumerate(week)]
    path.write_text("timestamp,gpus\n" + "\n".join(rows) + "\n")
    assert exit_status(["plan", "commitment", "--demand", str(path)]) == 0
    out = capsys.readouterr().out
    assert "committed $39.33 (paid every hour, used or not), burst on-demand $55.04" in out
    assert "ec2-capacity-block: Amazon EC2 Capacity Blocks for ML pricing" in out
    assert "burst on on-demand: commit 8 → $69,371.52" in out
    assert (
        "pays where demand reaches it more than 71.5 % of the time; demand reaches instance 8 "
        "100.0 % of the time: commit 8; instance 9 only 35.7 % (the peaks)"
    ) in out


def test_a_region_without_a_published_commitment_price_asks_for_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["plan", "commitment", "--demand", demand_file(tmp_path), "--region", "us-west-2"]
    assert exit_status(argv) == 2
    assert (
        "no published ec2-capacity-block price for ml.p5.48xlarge in us-west-2: give "
        "--committed-usd-per-hour"
    ) in capsys.readouterr().err
    assert exit_status([*argv, "--committed-usd-per-hour", "40", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["prices"]["spot_usd_per_hour"] == 21.7175


def test_commitment_of_no_demand_commits_nothing_and_says_nothing_undefined(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert exit_status(["plan", "commitment", "--demand", demand_file(tmp_path, [0, 0])]) == 0
    out = capsys.readouterr().out
    assert "peak 0 instances" in out and "commit 0 → $0.00," in out and "None" not in out


@pytest.mark.parametrize(
    ("lines", "extra", "complaint"),
    [
        (None, [], "No such file or directory"),
        ("timestamp,gpus\n2026-11-23T00:00:00Z,8\n2026-11-23T01:00:00Z,x\n", [], "line 3: 'x'"),
        ("gpus\n", [], "the first line must be the header timestamp,gpus"),
        (None, ["--instance-type", "ml.p9.96xlarge"], "no published ec2-capacity-block price"),
        (None, ["--on-demand-usd-per-hour", "-2"], "-2 is not in [0, 10000]"),
        (None, ["--spot-lost-hours", "25"], "25 is not a number from 0 to 24"),
    ],
)
def test_commitment_bad_input_exits_2_with_one_line(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    lines: str | None,
    extra: list[str],
    complaint: str,
) -> None:
    path = tmp_path / "demand.csv"
    if lines is not None:
        path.write_text(lines)
    elif extra:
        demand_file(tmp_path)
    assert exit_status(["plan", "commitment", "--demand", str(path), *extra]) == 2
    out = capsys.readouterr()
    assert out.out == "" and complaint in out.err and "Traceback" not in out.err
    assert out.err.count("error:") == 1


# ---- plan --from-deployment ---------------------------------------------------------------
NOW = datetime.now(UTC)
FLEET = [
    Node(
        instance_id=f"i-{n:02d}",
        cluster="hp",
        pool="workers",
        platform="hyperpod",
        instance_type="ml.p5.48xlarge",
        launch_time=NOW - timedelta(days=100),
    )
    for n in range(4)
]


def failure(n: int, resumed_s: float) -> Incident:
    at = NOW - timedelta(days=n + 1)
    return Incident(
        incident_id=f"inc-{n}",
        instance_id=f"i-0{n}",
        cluster="hp",
        kind="hyperpod_node_health",
        severity="fatal",
        repair=Repair.REPLACE,
        reason="GPU fell off the bus",
        opened_at=at,
        first_signal_at=at,
        timings={"signal_to_detected_s": 60.0, "signal_to_resumed_s": resumed_s},
    )


class Nodes:
    def all(self) -> list[Node]:
        return FLEET


def deployment(monkeypatch: pytest.MonkeyPatch, incidents: list[Incident]) -> list[int]:
    """The stack's stores, faked; returns the limits the incident store was read with."""
    limits: list[int] = []

    class Incidents:
        def recent(self, limit: int) -> list[Incident]:
            limits.append(limit)
            return incidents[:limit]

    monkeypatch.setattr(cli, "_incident_store", lambda _args: Incidents())
    monkeypatch.setattr(cli, "_view_stores", lambda _args: (None, None, Nodes(), None))
    return limits


FROM_DEPLOYMENT = [
    "plan",
    "--from-deployment",
    *("--instances", "256", "--gpus-per-instance", "8", "--gpu-hours", "10000000"),
    *("--baseline-downtime-min", "280", "--gpu-hour-cost", "5"),
]


def test_from_deployment_plans_with_the_measured_rate_and_downtime(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    limits = deployment(monkeypatch, [failure(n, 1800.0) for n in range(4)])
    result = json_of([*FROM_DEPLOYMENT, "--window-days", "30", "--json"], capsys)
    inputs = result["inputs"]
    assert isinstance(inputs, dict)
    assert inputs["incidents_considered"] == 4 and inputs["window_days"] == 30
    assert inputs["failure_rate"]["source"] == "measured"
    assert inputs["failure_rate"]["value"] == round(4 / (4 * 30 * 24), 8)
    assert inputs["downtime_min"] == {"value": 30.0, "source": "measured", "incidents": 4}
    assert inputs["instance_types"][0]["recovery_s"]["total"]["p50"] == 1800.0
    published = json_of([*PUBLISHED, "--json"], capsys)
    assert result["mtbf_hours"] != published["mtbf_hours"]
    assert limits == [1000]


def test_from_deployment_with_too_few_incidents_says_it_used_published_inputs(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    deployment(monkeypatch, [failure(0, 1800.0)])
    assert exit_status(FROM_DEPLOYMENT) == 0
    out = capsys.readouterr().out
    assert "1 unplanned incident(s); a figure needs 3 or it is the published one" in out
    assert "failure rate: 0.0005 failures per instance-hour — PUBLISHED (too few" in out
    assert "downtime min: 40 min — PUBLISHED (too few incidents), 1 incident(s)" in out
    # and the plan is then the published example's
    assert "WITH (40 MIN/FAILURE)" in out and "$25,600,000" in out


def test_from_deployment_refuses_the_inputs_it_measures(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    deployment(monkeypatch, [])
    assert exit_status([*FROM_DEPLOYMENT, "--failure-rate", "0.001"]) == 2
    err = capsys.readouterr().err
    assert "--from-deployment measures --failure-rate and --downtime-min: omit them" in err
