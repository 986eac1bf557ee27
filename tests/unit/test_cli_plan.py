"""`hyperguard plan`, `plan mtbf`, `plan reduction`: the keys scripts rely on, pure JSON with
--json, tables without it, and every mistake a usage error (exit 2) without a traceback."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from tests.conftest import ROOT

from hyperguard.cli import main as cli

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
