"""A job's own pace and the slow flag (D100): the pure rules over its recent checkpoints."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from statistics import median

from hypothesis import given
from hypothesis import strategies as st

from hyperguard.governance.pace import (
    MIN_EARLIER,
    PACE_POINTS,
    lagging_node,
    next_pace,
    rates,
    verdict,
)
from hyperguard.models.jobs import Checkpoint, PacePoint

T0 = datetime(2026, 11, 24, tzinfo=UTC)
NODES = {"i-0aaaaaaaaaaaaaaa1": 1.0, "i-0bbbbbbbbbbbbbbb2": 1.02, "i-0ccccccccccccccc3": 0.98}


def checkpoint(step: int, minutes: float) -> Checkpoint:
    return Checkpoint(
        step=step, uri=f"s3://b/c/{step}/", completed_at=T0 + timedelta(minutes=minutes)
    )


def paced(*minutes: float, run: int = 0) -> list[PacePoint]:
    """A checkpoint every 100 steps, completed at these minutes."""
    pace: list[PacePoint] = []
    for i, at in enumerate(minutes):
        pace = next_pace(pace, run, checkpoint(100 * (i + 1), at))
    return pace


def test_the_pace_keeps_the_current_runs_latest_checkpoints() -> None:
    pace = paced(*range(0, 100, 10))
    assert len(pace) == PACE_POINTS and pace[-1].step == 1000
    assert next_pace(pace, 1, checkpoint(1100, 200)) == [
        PacePoint(run=1, step=1100, at=T0 + timedelta(minutes=200))
    ]
    assert next_pace(pace, 0, checkpoint(900, 200)) == pace  # an older report adds nothing
    assert rates(paced(0, 10, 30)) == [600.0, 300.0]


def test_a_job_is_slow_when_its_newest_interval_falls_below_the_ratio_of_its_usual() -> None:
    steady = paced(0, 10, 20, 30, 40)
    assert verdict(steady, 0.5, None) is None
    flag = verdict(paced(0, 10, 20, 30, 55), 0.5, None)
    assert flag is not None
    assert (flag.steps_per_hour, flag.usual_steps_per_hour, flag.lagging_node) == (240, 600, None)
    assert flag.reason == "slow: 240 steps/h against its usual 600 (40%)"
    assert flag.since == T0 + timedelta(minutes=55)
    assert verdict(paced(0, 10, 20, 30, 45), 0.5, None) is None  # 60 %: not below half
    assert verdict(paced(0, 10, 20, 45), 0.5, None) is None  # too few earlier intervals
    assert verdict(paced(0, 10, 20, 30, 55), 0, None) is None  # the ratio 0: never


def test_the_node_that_lags_is_named_and_an_earlier_flag_keeps_its_start_and_measure() -> None:
    lagging = {**NODES, "i-0ddddddddddddddd4": 2.5}
    first = verdict(paced(0, 10, 20, 30, 55), 0.5, lagging)
    assert first is not None and first.lagging_node == "i-0ddddddddddddddd4"
    assert first.reason.endswith("; node i-0ddddddddddddddd4 lags: 2.50 s/step against 1.00")
    # Slow for long: its recent intervals are all slow, but the usual rate it was flagged
    # against stays the measure, and the flag its start.
    slow_for_long = paced(0, 25, 50, 75, 100)
    assert verdict(slow_for_long, 0.5, lagging) is None  # judged afresh: this is its pace
    kept = verdict(slow_for_long, 0.5, lagging, first)
    assert kept is not None and kept.since == first.since and kept.usual_steps_per_hour == 600
    assert verdict(paced(0, 25, 50, 75, 85), 0.5, NODES, first) is None  # back at 600/h
    assert lagging_node(NODES) is None  # within 25 % of each other
    assert lagging_node({"i-0aaaaaaaaaaaaaaa1": 9.0}) is None  # one node: no one to compare


@given(
    st.lists(st.floats(min_value=1, max_value=120), min_size=2, max_size=PACE_POINTS - 1),
    st.floats(min_value=0.05, max_value=0.95),
)
def test_flagged_exactly_when_the_newest_rate_is_below_the_ratio_of_the_median(
    gaps: list[float], ratio: float
) -> None:
    minutes = [0.0]
    for gap in gaps:
        minutes.append(minutes[-1] + gap)
    pace = paced(*minutes)
    measured = rates(pace)
    flag = verdict(pace, ratio, None)
    if len(measured) < MIN_EARLIER + 1:
        assert flag is None
    else:
        assert (flag is not None) == (measured[-1] < ratio * median(measured[:-1]))
