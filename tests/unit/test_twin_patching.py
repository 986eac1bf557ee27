"""The twin's HyperPod automatic patching, as ClusterPatchingStrategy's documentation
(botocore's sagemaker model) describes each strategy: every instance of the group cordoned
at NextPatchDate; WhenIdle patches each idle instance and leaves one still busy after
IdleWaitWindowInSeconds on the old software, uncordoned; WhenAllIdle patches only once all
are idle; DrainFirst evicts the pods, a batch at a time. DescribeCluster shows the
AutoPatchConfig until the patch is done, and SoftwareUpdateStatus once it started."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from hyperguard.twin.kube.store import NODES, PODS, ObjectStore

from hyperguard.models import NodeStatus
from hyperguard.twin.clock import ManualClock
from hyperguard.twin.cluster import Effect, SimulatedCluster

PATCH_S = 900


@pytest.fixture
def cluster() -> SimulatedCluster:
    clock = ManualClock()
    effects: list[Effect] = []
    return SimulatedCluster(clock, ObjectStore(clock=clock), effects=effects.append)


def advance(cluster: SimulatedCluster, seconds: float) -> None:
    assert isinstance(cluster.clock, ManualClock)
    cluster.clock.advance(seconds)
    cluster.advance()


def occupy(cluster: SimulatedCluster, instance_id: str) -> str:
    """A running pod bound to the instance's node (a job that keeps it busy)."""
    instance = cluster.instance(instance_id)
    assert instance is not None
    name = f"busy-{instance_id}"
    cluster.store.create(
        PODS,
        {
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"nodeName": instance.node_name, "containers": [{"name": "c", "image": "x"}]},
            "status": {"phase": "Running"},
        },
        "default",
    )
    return name


def group(cluster: SimulatedCluster) -> dict[str, Any]:
    (described,) = cluster.describe_cluster()["InstanceGroups"]
    return dict(described)


def state(cluster: SimulatedCluster, instance_id: str) -> tuple[str, bool, bool]:
    """(InstanceStatus, cordoned, patched) as DescribeClusterNode and the Node show them."""
    details = cluster.describe_node(instance_id)
    instance = cluster.instance(instance_id)
    assert details is not None and instance is not None
    node = cluster.store.get(NODES, instance.node_name)
    return (
        details["InstanceStatus"]["Status"],
        bool(node["spec"].get("unschedulable")),
        "LastSoftwareUpdateTime" in details,
    )


def test_when_idle_patches_idle_instances_and_leaves_a_busy_one_after_the_window(
    cluster: SimulatedCluster,
) -> None:
    idle, busy = cluster.add_instance_group("workers", "ml.p5.48xlarge", 2)
    occupy(cluster, busy)
    at = cluster.clock.now() + timedelta(minutes=10)
    cluster.schedule_patch("workers", at, idle_wait_s=1800)
    config = group(cluster)["AutoPatchConfig"]
    assert config["PatchingStrategy"] == "WhenIdle"
    assert config["CurrentPatchSchedule"]["NextPatchDate"] == at
    assert config["IdleWaitWindowInSeconds"] == 1800
    assert "SoftwareUpdateStatus" not in group(cluster)
    advance(cluster, 600)
    assert state(cluster, idle) == ("SystemUpdating", True, False)
    assert state(cluster, busy) == ("Running", True, False)
    assert group(cluster)["SoftwareUpdateStatus"] == "InProgress"
    advance(cluster, PATCH_S)
    assert state(cluster, idle) == ("Running", False, True)
    assert state(cluster, busy) == ("Running", True, False)  # still busy: waits, cordoned
    advance(cluster, 1800 - PATCH_S)
    assert state(cluster, busy) == ("Running", False, False)  # the window passed: old AMI
    assert group(cluster)["SoftwareUpdateStatus"] == "Succeeded"
    assert "AutoPatchConfig" not in group(cluster)


def test_when_all_idle_patches_only_once_every_instance_is_idle(
    cluster: SimulatedCluster,
) -> None:
    first, second = cluster.add_instance_group("workers", "ml.p5.48xlarge", 2)
    pod = occupy(cluster, second)
    cluster.schedule_patch(
        "workers", cluster.clock.now() + timedelta(seconds=60), strategy="WhenAllIdle"
    )
    advance(cluster, 60)
    assert state(cluster, first) == ("Running", True, False)  # idle, but not all are
    cluster.store.delete(PODS, pod, "default")
    advance(cluster, 60)  # automatic patching looks again
    assert [state(cluster, i)[0] for i in (first, second)] == ["SystemUpdating"] * 2
    advance(cluster, PATCH_S)
    assert [state(cluster, i) for i in (first, second)] == [("Running", False, True)] * 2


def test_drain_first_evicts_the_pods_and_patches_a_batch_at_a_time(
    cluster: SimulatedCluster,
) -> None:
    first, second = cluster.add_instance_group("workers", "ml.p5.48xlarge", 2)
    occupy(cluster, first)
    occupy(cluster, second)
    cluster.schedule_patch(
        "workers", cluster.clock.now() + timedelta(seconds=60), strategy="DrainFirst", batch=1
    )
    advance(cluster, 60)
    states = {i: state(cluster, i) for i in (first, second)}
    (now,) = [i for i, seen in states.items() if seen[0] == "SystemUpdating"]  # one a batch
    (then,) = {first, second} - {now}
    assert states == {now: ("SystemUpdating", True, False), then: ("Running", True, False)}
    node = cluster.instance(now)
    assert node is not None and node.status is NodeStatus.SYSTEM_UPDATING
    assert cluster.store.list(PODS, field_selector=f"spec.nodeName={node.node_name}") == []
    advance(cluster, PATCH_S)
    assert state(cluster, now) == ("Running", False, True)
    assert state(cluster, then) == ("SystemUpdating", True, False)  # evicted in its turn
    advance(cluster, PATCH_S)
    assert state(cluster, then) == ("Running", False, True)
    assert group(cluster)["SoftwareUpdateStatus"] == "Succeeded"


def test_a_patch_needs_a_known_strategy_group_and_a_future_date(
    cluster: SimulatedCluster,
) -> None:
    cluster.add_instance_group("workers", "ml.p5.48xlarge", 1)
    later = cluster.clock.now() + timedelta(hours=1)
    with pytest.raises(ValueError, match="PatchingStrategy must be one of"):
        cluster.schedule_patch("workers", later, strategy="Whenever")
    with pytest.raises(ValueError, match="no instance group spare"):
        cluster.schedule_patch("spare", later)
    with pytest.raises(ValueError, match="must be in the future"):
        cluster.schedule_patch("workers", cluster.clock.now())
