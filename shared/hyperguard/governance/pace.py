"""A job's own pace, and when it runs far below it (D100): a pure core over the checkpoints
the job completed in its current run.

Each checkpoint adds a point (run, step, completion time) to a short history. The step
rate of an interval is its steps over its hours. A job is slow when its newest interval's
rate is below the repair policy's `slowJobRatio` of the median of the run's earlier
intervals (at least `MIN_EARLIER` of them, so that a warm-up or one noisy interval says
nothing). A new run (a restart, a resize) starts a new pace: its size, and so its rate,
may differ. When the newest checkpoint carries per-node timings (each node's compute
seconds per step), the node whose time is `LAG_RATIO` or more above the median of the
others is named: in synchronous data-parallel training every step waits for the slowest
node, so one throttled or degraded GPU slows the whole job.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import pairwise
from statistics import median

from hyperguard.models.jobs import Checkpoint, PacePoint, SlowFlag

PACE_POINTS = 8
"""Checkpoints of the current run kept: seven intervals."""
MIN_EARLIER = 3
"""Earlier intervals of the same run needed before the newest can be judged."""
LAG_RATIO = 1.25
"""How far above the other nodes' median a node's seconds per step must be to be named."""


def next_pace(pace: Sequence[PacePoint], run: int, checkpoint: Checkpoint) -> list[PacePoint]:
    """The pace with `checkpoint` of `run` added: the current run's points only, newest last,
    at most PACE_POINTS; one not after the newest point (an older report) changes nothing."""
    return with_point(pace, PacePoint(run=run, step=checkpoint.step, at=checkpoint.completed_at))


def with_point(pace: Sequence[PacePoint], point: PacePoint) -> list[PacePoint]:
    """`next_pace` for any point of progress: a checkpoint's, or a heartbeat's (D165)."""
    kept = [p for p in pace if p.run == point.run]
    if kept and (point.step <= kept[-1].step or point.at <= kept[-1].at):
        return kept[-PACE_POINTS:]
    return [*kept, point][-PACE_POINTS:]


def rates(pace: Sequence[PacePoint]) -> list[float]:
    """Steps per hour of each interval between consecutive points, oldest first."""
    return [
        (b.step - a.step) / ((b.at - a.at).total_seconds() / 3600)
        for a, b in pairwise(pace)
        if b.at > a.at
    ]


def lagging_node(node_step_seconds: Mapping[str, float] | None) -> tuple[str, float, float] | None:
    """The node that lags (its seconds per step, the others' median), if one does."""
    if not node_step_seconds or len(node_step_seconds) < 2:
        return None
    node, worst = max(node_step_seconds.items(), key=lambda item: (item[1], item[0]))
    others = median(v for n, v in node_step_seconds.items() if n != node)
    return (node, worst, others) if worst >= LAG_RATIO * others else None


def verdict(
    pace: Sequence[PacePoint],
    ratio: float,
    node_step_seconds: Mapping[str, float] | None,
    was: SlowFlag | None = None,
) -> SlowFlag | None:
    """The flag for a job whose newest interval runs below `ratio` of its usual rate; None
    when it does not, or cannot yet be judged (`ratio` 0: never). While a flag `was` raised,
    its usual rate stays the measure (a job slow for long would otherwise make slowness its
    usual) and its start is kept."""
    measured = rates(pace)
    if not ratio or not measured:
        return None
    now = measured[-1]
    if was is not None:
        usual = was.usual_steps_per_hour
    elif len(measured) > MIN_EARLIER:
        usual = median(measured[:-1])
    else:
        return None
    if now >= ratio * usual:
        return None
    reason = f"slow: {now:,.0f} steps/h against its usual {usual:,.0f} ({now / usual:.0%})"
    lag = lagging_node(node_step_seconds)
    if lag is not None:
        node, worst, others = lag
        reason += f"; node {node} lags: {worst:.2f} s/step against {others:.2f}"
    return SlowFlag(
        since=was.since if was else pace[-1].at,
        steps_per_hour=round(now, 1),
        usual_steps_per_hour=round(usual, 1),
        lagging_node=lag[0] if lag else None,
        reason=reason,
    )
