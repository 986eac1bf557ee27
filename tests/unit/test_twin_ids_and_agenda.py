"""The twin's identifiers and agenda, without a control plane: the HyperPod cluster's id is
the one botocore's pattern allows, and nothing happens before its time, even when a
happening calls the world back. The nodes themselves are in
tests/integration/test_twin_nodes.py (they need the real API server)."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import cast

from hyperguard_twin.clock import ManualClock
from hyperguard_twin.cloud.core import World
from hyperguard_twin.ids import hyperpod_cluster_arn, hyperpod_cluster_id
from hyperguard_twin.plane.kube import KubeClient


def test_the_cluster_has_a_hyperpod_id_of_twelve() -> None:
    """botocore's ClusterArn pattern ends `cluster/[a-z0-9]{12}`: the id, not the name."""
    arn = hyperpod_cluster_arn("hyperguard-twin", "us-east-1", "123456789012")
    assert re.fullmatch(r"arn:aws:sagemaker:[a-z0-9-]+:[0-9]{12}:cluster/[a-z0-9]{12}", arn)
    cluster_id = arn.rsplit("/", 1)[-1]
    assert cluster_id == hyperpod_cluster_id("hyperguard-twin")
    assert cluster_id != hyperpod_cluster_id("another-cluster")


def test_a_call_back_while_settling_leaves_later_happenings_to_their_time() -> None:
    """A happening's handler that calls the world back (a controller reacting to its own
    change) acts at the moment being settled. It must not settle again: that took the next
    due happening from under the settling loop, which then popped a later one early, or an
    empty agenda (IndexError, seen in CI's day-in-the-life)."""
    clock = ManualClock()
    world = World(
        clock,
        cast(KubeClient, None),  # the agenda never reaches the API server
        effects=lambda _effect: None,
        hyperpod_cluster="hyperguard-twin",
        eks_cluster="hyperguard-eks",
        region="us-east-1",
        account="123456789012",
    )
    start = clock.now()
    seen: list[tuple[str, datetime, datetime]] = []

    def reacts(key: str, at: datetime) -> None:
        with world.settled() as moment:
            seen.append((key, at, moment))

    world.handle("reboot-done", reacts)
    for key, after_s in (("early", 10), ("next", 12), ("late", 20)):
        world.schedule(start, after_s, "reboot-done", key)

    def at(seconds: float) -> datetime:
        return start + timedelta(seconds=seconds)

    clock.advance(15)
    with world.settled() as now:
        assert now == at(15)
    assert seen == [("early", at(10), at(10)), ("next", at(12), at(12))]
    clock.advance(5)
    with world.settled():
        pass
    assert seen[-1] == ("late", at(20), at(20))
