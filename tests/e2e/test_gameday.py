"""`twin gameday`: each strategy's job through the real workflows, measured beside the
planner's formula, the report rendered."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from tests.deadlines import loaded
from tests.e2e.scenario_cli import run_cli

from hyperguard import planning
from hyperguard_twin.browser import chromium, rendered_charts


def test_the_gameday_measures_each_strategy_beside_the_planner(tmp_path: Path) -> None:
    """The command as a user runs it: each strategy's job through the real workflows, the
    applied strategy recorded by HyperGuard, downtime split by phase, the report rendered."""
    report = tmp_path / "gameday.html"
    result = run_cli(
        "twin", "gameday", "--days", "1", "--measure", "1", "--report", str(report), timeout_s=900
    )
    assert result["inputs"]["instances"] == 256 and result["failures"] >= 1
    assert result["measured_failures"] == 1
    strategies = result["strategies"]
    assert set(strategies) == {"auto", "wait_for_repair", "hot_spare", "elastic_shrink"}
    for name, measured in strategies.items():
        (round_,) = measured["rounds"]
        if name != "auto":
            assert round_["strategy"] == name  # what HyperGuard recorded on the incident
        gpus = 32
        by_phase = round_["badput_gpu_min_by_phase"]
        assert sum(by_phase.values()) == pytest.approx(round_["downtime_min"] * gpus, abs=1)
        assert {"detect", "cordon/drain"} <= set(by_phase)
        goodput = measured["scheduling_goodput_pct"] * measured["runtime_goodput_pct"] / 100
        assert goodput == pytest.approx(measured["goodput_pct"], abs=0.01)
        assert 0 < measured["goodput_pct"] < 100 and 0 < measured["formula_goodput_pct"] < 100
    assert result["modelled"]["job_restart_s"] == planning.RESUME_S
    if chromium() is not None or os.environ.get("CI"):
        rendered = rendered_charts(report, timeout_s=loaded(60))
        assert rendered["chart-gameday"] == 2 and rendered["chart-tradeoff"] == 4
    # Last, since the host's speed can decide it: waiting for the replacement costs the most.
    # Shrinking (which trains on) and a hot spare are not ordered here: on the upstream
    # control plane each restart of a job's pods (kube-scheduler, KWOK) takes wall seconds
    # that the x60 clock makes minutes, and a shrink restarts twice (down, then back up)
    # where a spare restarts once; their gap in this one-failure smoke is within that (37.4
    # against 33.3 minutes in one run on CI's 2-core machine). And on 2 loaded cores those
    # wall seconds can outweigh the replacement itself (a CI run of 2026-11-26: 54.16 against
    # 48.15 minutes). A run where it does not hold is reported with its figures, not failed;
    # BENCHMARKS.md has the full game day.
    downtime = {n: s["downtime_per_failure_min"] for n, s in strategies.items()}
    if max(downtime["elastic_shrink"], downtime["hot_spare"]) >= downtime["wait_for_repair"]:
        pytest.xfail(
            f"issue 33, open: at x60 on 2 loaded cores the host's speed decided {downtime}"
        )
