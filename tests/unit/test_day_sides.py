"""The day-in-the-life's three sides (hyperguard.twin.day): on-demand sized for the peak is
sized from the demand itself, and each side's quotas can hold its cluster."""

from __future__ import annotations

from hyperguard.twin.day import (
    DEMAND,
    NODES,
    PEAK_NODES,
    SIDE_SETUPS,
    SIDES,
    Demand,
    demand,
    peak_nodes,
)


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
