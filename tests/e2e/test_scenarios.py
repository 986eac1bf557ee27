"""The measured twin commands, run the way a user runs them: `twin scenario elastic-fault`
(one node fault under two identical elastic jobs, one shrinking and growing back, one
waiting for the repair), `twin scenario proactive-move` (a retirement announced ahead) and
`twin gameday`, each measured on the simulated cluster's timeline."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import ROOT

from hyperguard import planner
from hyperguard.twin.browser import chromium, rendered_charts


def run_cli(*args: str, timeout_s: float = 600) -> dict[str, Any]:
    """`hyperguard <args> --json` as a user runs it; its result object."""
    proc = subprocess.run(
        [sys.executable, "-m", "hyperguard.cli.main", *args, "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return dict(json.loads(proc.stdout[proc.stdout.index("{") :]))


def test_a_retirement_announced_ahead_moves_the_job_in_time_losing_no_step() -> None:
    """`hyperguard twin scenario proactive-move --json`: the AWS Health sample aimed at a node
    under an elastic job, its start moved ahead; HyperGuard acts the repair policy's lead
    before it. Before jobs moved ahead of the drain, the eviction cost the job the 5 steps
    since its last checkpoint; now it shrinks gracefully and loses none."""
    result = run_cli("twin", "scenario", "proactive-move")
    assert result["moved_before_deadline"] is True
    assert result["unplanned_downtime_s"] == 0.0
    assert result["job_steps_lost"] == 0
    assert result["incident_status"] == "resolved"
    assert result["strategy_applied"] == "elastic_shrink"
    # shrinking and growing back are each one rescale of the simulated operator
    assert result["planned_pause_s"] == 2 * result["modelled"]["rescale_s"]


def test_a_day_in_the_life_hybrid_bursts_absorbs_idle_gpus_and_scales_in() -> None:
    """`hyperguard twin scenario day-in-the-life --json`: the same day of demand on two fresh
    twins, hybrid (burst and elastic) and static. About 13 minutes."""
    result = run_cli("twin", "scenario", "day-in-the-life", timeout_s=1800)
    hybrid, static = result["hybrid"], result["static"]
    # The development spike burst onto EKS, was served, and the nodes were released.
    assert hybrid["burst_nodes_peak"] >= 1 and hybrid["burst_nodes_at_end"] == 0
    assert hybrid["gpu_hours_by_pool"].get("gpu-burst-on-demand", 0) > 0
    assert static["burst_nodes_peak"] == 0
    # Elastic training took the capacity static allocation leaves idle.
    assert hybrid["idle_gpu_hours"] < static["idle_gpu_hours"]
    assert hybrid["gpu_hours_used"] > static["gpu_hours_used"]
    assert hybrid["jobs_completed"] >= static["jobs_completed"]
    by_side = result["executions_by_side"]
    (counts,) = (c for name, c in by_side["hybrid"].items() if "BurstCapacity" in name)
    assert counts.get("SUCCEEDED", 0) >= 1 and set(counts) <= {"SUCCEEDED"}
    (static_counts,) = (c for name, c in by_side["static"].items() if "BurstCapacity" in name)
    assert static_counts == {}
    assert result["executions"] == {**by_side["hybrid"], **by_side["static"]}
    for side in (hybrid, static):
        assert set(side["avg_wait_s_by_priority"]) == {"inference", "training"}
        assert side["cost_usd_by_pool"]["workers"] == round(16 * 24 * 98.32, 2)


def test_the_elastic_fault_scenario_compares_shrinking_with_waiting() -> None:
    result = run_cli("twin", "scenario", "elastic-fault")
    strategies = result["strategies"]
    assert set(strategies) == {"elastic_shrink", "wait_for_repair"}
    keys = {"lost_gpu_minutes", "replicas_min_seen", "replicas_end", "checkpoint_step_kept"}
    for measured in strategies.values():
        assert keys <= set(measured)
        assert measured["replicas_end"] == 4 and measured["checkpoint_step_kept"] is True
        assert measured["job_status"] == "Running"
    shrink, wait = strategies["elastic_shrink"], strategies["wait_for_repair"]
    assert shrink["replicas_min_seen"] == 3  # kept training on the three healthy nodes
    # it trained through the repair, so it lost less; both lost GPU-time
    assert 0 < shrink["lost_gpu_minutes"] < wait["lost_gpu_minutes"]
    assert result["modelled"]["reboot_s"] == 300.0  # what the simulation was given


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
    downtime = {n: s["downtime_per_failure_min"] for n, s in strategies.items()}
    # waiting for the replacement costs the most; shrinking, which trains on, the least
    assert downtime["elastic_shrink"] < downtime["hot_spare"] < downtime["wait_for_repair"]
    assert result["modelled"]["job_restart_s"] == planner.RESUME_S
    if chromium() is not None or os.environ.get("CI"):
        rendered = rendered_charts(report)
        assert rendered["chart-gameday"] == 2 and rendered["chart-tradeoff"] == 4
