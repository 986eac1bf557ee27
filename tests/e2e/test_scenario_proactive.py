"""`twin scenario proactive-move`: a retirement announced ahead, measured on the simulated
cluster's timeline."""

from __future__ import annotations

import pytest
from tests.e2e.scenario_cli import run_cli


@pytest.mark.xfail(
    strict=False,
    reason=(
        "issue 33, open: on the upstream control plane the controllers' wall-time "
        "latency, multiplied by the x60 clock, makes this comparison flaky on 2 loaded "
        "cores (CI run of 2026-11-26: 1 == 0); the closing note has it"
    ),
)
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
    # Shrinking and growing back are each one rescale of the simulated operator, plus what
    # the upstream controllers take to replace the pods (kube-scheduler binding, KWOK
    # starting them) in wall time, which the x60 clock multiplies: at most 5 wall seconds a
    # rescale on a loaded 2-core machine (1.4 s for both, alone).
    rescales = 2 * result["modelled"]["rescale_s"]
    controllers = 2 * 5.0 * result["time_scale"]
    assert rescales <= result["planned_pause_s"] <= rescales + controllers
