"""`twin scenario day-in-the-life --side hybrid` at CI's smoke size: the hybrid side's day
(burst and elastic) compressed to four hours (every arrival and job scaled by 4/24, the
cluster's own timings unchanged), on a fresh twin through the CLI, as a user runs it. About
75 s and 62 CPU-seconds alone on this 2-vCPU machine (2026-12-04).

The comparison with static allocation and with on demand sized for the peak is a
measurement, not a smoke test: `make bench-scenarios` runs all three sides on the full day
and BENCHMARKS.md has its figures (D217). Each side is the same code with another `Side`
(tests/unit/test_day_sides.py checks the sides' set-ups, prices and ratios); the two other
sides' days took 110 of the three sides' 167 CPU-seconds in `make test` (BENCHMARKS.md,
2026-12-03)."""

from __future__ import annotations

import json

import pytest
from tests.e2e.scenario_cli import run_cli

SMOKE_HOURS = 4
IDLE_BURST_WALL_S = 20
"""The burst policy's cooldown at x240 (600 / 240 s), the scheduler's next pass and
Karpenter's deletion of the node on two loaded cores, with room to spare."""


def test_a_day_in_the_life_hybrid_bursts_absorbs_idle_gpus_and_scales_in() -> None:
    """`hyperguard twin scenario day-in-the-life --side hybrid --hours 4 --json`: the day of
    demand on a fresh twin with burst and elastic training."""
    run = run_cli(
        "twin",
        "scenario",
        "day-in-the-life",
        "--side",
        "hybrid",
        "--hours",
        str(SMOKE_HOURS),
        timeout_s=600,
    )
    # The whole summary, which pytest shows beside any failure: these races are told apart by it.
    print(json.dumps({k: v for k, v in run.items() if k != "demand"}, indent=1))
    assert run["side"] == "hybrid" and run["hours"] == SMOKE_HOURS
    # every arrival a sixth as late as on the full day: the spike at 01:50
    assert {d["name"]: d["at_h"] for d in run["demand"]}["spike-0"] == 11 * SMOKE_HOURS / 24
    hybrid = run["result"]
    # The development spike, with HyperPod full, preempted day jobs that asked for a burst onto
    # EKS (its executions below), and whatever the burst bought was released once idle.
    # Whether its nodes came up before the spike's jobs ended and freed HyperPod nodes is a
    # race of simulated minutes that at x240 the host's speed decides: here, on a host four
    # times slower than when this test was written, two hybrid runs in six sampled no burst
    # node (a burst that finds its jobs placed ends SUCCEEDED with capacity "not-needed").
    # So is whether a day job moved onto a burst node finishes before the compressed day's end
    # (a CI run of 2026-11-28 ended the day with one burst node left, without saying whether
    # it still held a job's pod), and whether one that did finish had its node released by
    # then (at x240 the day is 60 wall seconds; the scale-in cooldown is 2 of them, then
    # Karpenter deletes the node). What the service decides is that no burst node stays idle:
    # none at the end has held no job's pod for longer than the cooldown and a loaded host's
    # deletion. That the nodes come up, take the jobs and go is tests/e2e/test_burst.py's; the
    # full day's split is in BENCHMARKS.md.
    idle = hybrid["burst_idle_wall_s_at_end"]
    assert all(s <= IDLE_BURST_WALL_S for s in idle), idle
    spikes = sum(1 for d in run["demand"] if d["name"].startswith("spike-"))
    assert spikes == 6
    # Whether every job starts at all is a race, told before the checks below that need the
    # day to have run. Three `make test` runs of 2026-11-30, on a host twice as slow as the last
    # and loaded 10-12 (its load average) through the day, left hybrid jobs that never
    # stepped: one; 3 training and 5 inference, no burst node launched and 335 of 512
    # GPU-hours idle; 3 training. The side alone under a load of 8-12 (busy loops) started all
    # 12 and finished 7. What the service told the jobs left (2026-12-01, three of four runs
    # beside a full `make test`): the spike preempted them, and they waited on a burst still in
    # its first steps when the day ended. At a load of 21 the BurstFunction's first invocation
    # spent 8.7 s in init and 5.5 s planning: 14 wall seconds, 57 simulated minutes at x240,
    # before a NodeClaim was asked for.
    assert sum(hybrid["never_started_by_priority"].values()) == len(hybrid["never_started"])
    if hybrid["never_started"]:
        pytest.xfail(
            "issue 33, open: on a host loaded past 5 per core, the hybrid side left jobs that"
            f" never stepped: {hybrid['never_started']}"
        )
    (counts,) = (c for name, c in run["executions"].items() if "BurstCapacity" in name)
    assert counts.get("SUCCEEDED", 0) >= 1 and set(counts) <= {"SUCCEEDED"}
    assert set(hybrid["avg_wait_s_by_priority"]) == {"inference", "training"}
    # The committed 16 paid every hour, used or not: a Capacity Block's 39.33 an hour
    # (published), or HyperPod's assumed 98.32 with no commitment discount.
    assert hybrid["cost_usd_by_pool"]["workers"] == round(16 * SMOKE_HOURS * 39.33, 2)
    burst = sum(usd for pool, usd in hybrid["cost_usd_by_pool"].items() if pool != "workers")
    assert hybrid["cost_usd_by_basis"] == {
        "published": round(16 * SMOKE_HOURS * 39.33 + burst, 2),
        "hyperpod_assumed": round(16 * SMOKE_HOURS * 98.32 + burst, 2),
    }
    assert hybrid["cost_usd"] == hybrid["cost_usd_by_basis"]["published"]
    # Waits are exact: every job waited at least the cluster's modelled restart (60 s) after
    # its submission was sent, which a wait read from a sample could not show.
    waits = hybrid["wait_s_by_job"]
    assert set(waits) == {d["name"] for d in run["demand"]}
    assert min(waits.values()) >= 60
    # The service's own admission time is on the real clock, beside the stretched waits: a
    # fraction of a wall second per job on this machine, not minutes.
    admission = hybrid["max_admission_wall_s_by_priority"]
    assert set(admission) == {"inference", "training"}
    assert all(0 < s < 60 for s in admission.values())
    # Last, since the host's speed can decide it: whether the spike's six jobs finish, 20
    # simulated minutes of work each, 5 wall seconds at x240 (a `make test` run of 2026-11-28
    # had a side finish 5 of them by the day's end, 32 wall seconds after they arrived).
    if hybrid["jobs_completed"] < spikes:
        pytest.xfail(
            "issue 33, open: at x240 on 2 loaded cores the host's speed decides whether the"
            f" spike's {spikes} jobs finish within the compressed day: {hybrid['jobs_completed']}"
        )
