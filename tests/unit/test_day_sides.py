"""The day-in-the-life's three sides (hyperguard_twin.day): on-demand sized for the peak is
sized from the demand itself, and each side's quotas can hold its cluster; the sides are
priced like for like; waits are measured exactly."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

from hyperguard_twin.cluster import Progress
from hyperguard_twin.day import (
    DEMAND,
    NODES,
    PEAK_NODES,
    PRICE_BASES,
    SIDE_SETUPS,
    SIDES,
    Demand,
    Ledger,
    Submission,
    _admission_wall_s,
    _by_priority,
    _waits,
    cost_ratios,
    demand,
    peak_nodes,
    side_costs,
)
from hyperguard_twin.scenarios import told


def test_the_peak_is_the_most_the_demand_asks_for_at_once() -> None:
    # 11:00-13:00: the training job's 8, the five day jobs and the six-job spike
    assert PEAK_NODES == 8 + 5 + 6
    assert peak_nodes(DEMAND, "product") == 11 and peak_nodes(DEMAND, "training") == 8
    assert peak_nodes(demand(6)) == PEAK_NODES  # a compressed day keeps its overlaps


def test_a_job_that_ended_does_not_count_towards_the_peak() -> None:
    one_after_another = (
        Demand(0, "a", "first", "production", "training", 4, 2),
        Demand(2, "a", "second", "production", "training", 3, 2),
    )
    assert peak_nodes(one_after_another) == 4


def test_every_side_is_set_up_and_only_on_demand_is_sized_for_the_peak() -> None:
    assert set(SIDE_SETUPS) == set(SIDES)
    assert SIDE_SETUPS["on_demand"].nodes == PEAK_NODES > NODES
    assert sum(SIDE_SETUPS["on_demand"].quotas.values()) == PEAK_NODES
    assert SIDE_SETUPS["on_demand"].burst_max_nodes == 0
    assert not SIDE_SETUPS["on_demand"].elastic and SIDE_SETUPS["hybrid"].elastic
    assert SIDE_SETUPS["static"].nodes == SIDE_SETUPS["hybrid"].nodes == NODES


class _Cluster:
    def __init__(self, timelines: dict[str, list[Progress]]) -> None:
        self.timelines = timelines

    def timeline(self, job_id: str) -> list[Progress]:
        return self.timelines.get(job_id, [])


def test_a_wait_runs_from_the_submission_sent_to_the_first_training_step() -> None:
    """Exact, not sampled: the simulated cluster's timeline (recorded out of order as its
    runs settle) gives the first step; a job that never stepped waits until the day's end
    and is listed."""
    t0 = datetime(2026, 11, 25, 11, 0, tzinfo=UTC)

    def at(seconds: float) -> datetime:
        return t0 + timedelta(seconds=seconds)

    ledger = Ledger(
        submitted={
            "a": Submission("spike-0", "inference", at(10)),
            "b": Submission("day-0", "training", at(0)),
            "c": Submission("spike-1", "inference", at(5)),
        }
    )
    twin = SimpleNamespace(
        cluster=_Cluster(
            {
                "a": [Progress(at(200), 0, 4), Progress(at(97.5), 1, 0), Progress(at(260), 1, 4)],
                "b": [Progress(at(61), 0, 0)],  # stopped before it ever stepped
            }
        )
    )
    waits, never = _waits(twin, ledger, end=at(1000))  # type: ignore[arg-type]
    assert waits == {"a": 87.5, "b": 1000.0, "c": 995.0}
    assert never == ["b", "c"]
    assert _by_priority(ledger, waits, max) == {"inference": 995.0, "training": 1000.0}


def test_a_job_that_never_stepped_is_told_as_the_api_tells_it() -> None:
    """Its status, the reason for it and its last five events, from GET /jobs/{id}."""
    job = {
        "status": "Preempted",
        "reason": "pending: burst capacity being raised",
        "history": [{"event": e} for e in ("submitted", "admitted", "dispatched", "x", "y", "z")],
        "run": 1,
    }
    assert told(job) == {
        "status": "Preempted",
        "reason": "pending: burst capacity being raised",
        "last": ["admitted", "dispatched", "x", "y", "z"],
    }
    assert told({}) == {"status": None, "reason": None, "last": []}


def test_the_admission_time_is_the_services_own_record_in_wall_seconds() -> None:
    ledger = Ledger(submitted={"a": Submission("spike-0", "inference", datetime.now(UTC))})
    jobs: list[dict[str, Any]] = [
        {
            "job_id": "a",
            "submitted_at": "2026-11-25T11:00:47.262349Z",
            "first_admitted_at": "2026-11-25T11:00:47.717534Z",
        },
        # not admitted yet, and a job the day did not submit: neither counts
        {"job_id": "b", "submitted_at": "2026-11-25T11:00:47Z", "first_admitted_at": None},
        {"job_id": "c", "submitted_at": "2026-11-25T11:00:47Z", "first_admitted_at": None},
    ]
    admission = _admission_wall_s(ledger, jobs)
    assert admission == {"a": 0.455185}
    assert _by_priority(ledger, admission, max, digits=3) == {"inference": 0.455}


def test_each_side_is_priced_like_for_like_the_base_all_day_and_burst_as_sampled() -> None:
    """The committed sides' HyperPod nodes at the committed rate, the on-demand side's at the
    on-demand rate of the same platform, every hour of the day, used or not; burst at the
    burst policy's EKS prices as the day sampled them, the same on every basis."""
    burst = {"gpu-burst-on-demand": 110.08}
    hybrid = side_costs(SIDE_SETUPS["hybrid"], 24, burst)
    on_demand = side_costs(SIDE_SETUPS["on_demand"], 24, {})
    # published: a Capacity Block (39.33) committed, EC2 On-Demand (55.04) for the peak
    assert hybrid["published"] == {"workers": round(16 * 24 * 39.33, 2), **burst}
    assert on_demand["published"] == {"workers": round(19 * 24 * 55.04, 2)}
    # no committed HyperPod rate was found: both at the assumed HyperPod on-demand price
    assert hybrid["hyperpod_assumed"] == {"workers": round(16 * 24 * 98.32, 2), **burst}
    assert on_demand["hyperpod_assumed"] == {"workers": round(19 * 24 * 98.32, 2)}
    for basis in PRICE_BASES.values():
        assert basis.committed.usd_per_hour <= basis.on_demand.usd_per_hour
        assert basis.committed.instance_type.removeprefix("ml.") == (
            basis.on_demand.instance_type.removeprefix("ml.")
        )


def test_the_ratio_to_on_demand_is_each_sides_cost_over_the_peak_sized_sides() -> None:
    results = {
        "hybrid": {"cost_usd_by_basis": {"published": 15_513.0, "hyperpod_assumed": 38_165.0}},
        "static": {"cost_usd_by_basis": {"published": 15_102.72, "hyperpod_assumed": 37_754.88}},
        "on_demand": {"cost_usd_by_basis": {"published": 25_098.24, "hyperpod_assumed": 44_833.92}},
    }
    ratios = cost_ratios(results)
    assert ratios["published"] == {"hybrid": 0.6181, "static": 0.6017, "on_demand": 1.0}
    assert ratios["hyperpod_assumed"]["hybrid"] == 0.8513
