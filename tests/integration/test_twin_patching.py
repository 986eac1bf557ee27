"""The twin's HyperPod automatic patching, as ClusterPatchingStrategy's documentation
(botocore's sagemaker model) describes each strategy: every instance of the group cordoned
at NextPatchDate; WhenIdle patches each idle instance and leaves one still busy after
IdleWaitWindowInSeconds on the old software, uncordoned; WhenAllIdle patches only once all
are idle; DrainFirst evicts the pods, a batch at a time. DescribeCluster shows the
AutoPatchConfig until the patch is done, and SoftwareUpdateStatus once it started. The nodes
and their pods are on the real API server, the pods run by KWOK."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from tests.deadlines import loaded
from tests.integration.cluster_harness import ClusterApis
from tests.integration.conftest import MakeCluster

from hyperguard.models import NodeStatus
from hyperguard_twin.plane.kube import NODES, PODS, wait_for

PATCH_S = 900
BUSY = {"hyperguard.io/test": "busy"}  # the harness cleans the teams' namespaces only


@pytest.fixture
def apis(make_cluster: MakeCluster) -> Iterator[ClusterApis]:
    apis = make_cluster(hyperpod_nodes=2)
    yield apis
    for pod in apis.kube.list_objects(PODS, "default", label_selector="hyperguard.io/test=busy"):
        apis.kube.delete(PODS, pod["metadata"]["name"], "default", grace_period_s=0)


def occupy(apis: ClusterApis, instance_id: str) -> str:
    """A pod bound to the instance's node and running there (a job that keeps it busy)."""
    instance = apis.cluster.instance(instance_id)
    assert instance is not None
    name = f"busy-{instance_id}"
    apis.kube.create(
        PODS,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "labels": BUSY},
            "spec": {"nodeName": instance.node_name, "containers": [{"name": "c", "image": "x"}]},
        },
        "default",
    )

    def running() -> bool:
        pod = apis.kube.get(PODS, name, "default")
        return pod is not None and (pod.get("status") or {}).get("phase") == "Running"

    wait_for(running, loaded(60), f"pod {name} to run")
    return name


def pods_on(apis: ClusterApis, node_name: str) -> list[dict[str, Any]]:
    return apis.kube.list_objects(PODS, field_selector=f"spec.nodeName={node_name}")


def group(apis: ClusterApis) -> dict[str, Any]:
    (described,) = apis.cluster.api.describe_cluster()["InstanceGroups"]
    return dict(described)


def state(apis: ClusterApis, instance_id: str) -> tuple[str, bool, bool]:
    """(InstanceStatus, cordoned, patched) as DescribeClusterNode and the Node show them."""
    details = apis.cluster.api.describe_node(instance_id)
    instance = apis.cluster.instance(instance_id)
    assert details is not None and instance is not None
    node = apis.kube.get(NODES, instance.node_name)
    assert node is not None
    return (
        details["InstanceStatus"]["Status"],
        bool(node["spec"].get("unschedulable")),
        "LastSoftwareUpdateTime" in details,
    )


def schedule(apis: ClusterApis, after_s: float, **settings: Any) -> None:
    at = apis.clock.now() + timedelta(seconds=after_s)
    apis.cluster.schedule_patch("workers", at, **settings)


def test_when_idle_patches_idle_instances_and_leaves_a_busy_one_after_the_window(
    apis: ClusterApis,
) -> None:
    idle, busy = apis.hyperpod
    occupy(apis, busy)
    at = apis.clock.now() + timedelta(minutes=10)
    apis.cluster.schedule_patch("workers", at, idle_wait_s=1800)
    config = group(apis)["AutoPatchConfig"]
    assert config["PatchingStrategy"] == "WhenIdle"
    assert config["CurrentPatchSchedule"]["NextPatchDate"] == at
    assert config["IdleWaitWindowInSeconds"] == 1800
    assert "SoftwareUpdateStatus" not in group(apis)
    apis.advance(600)
    assert state(apis, idle) == ("SystemUpdating", True, False)
    assert state(apis, busy) == ("Running", True, False)
    assert group(apis)["SoftwareUpdateStatus"] == "InProgress"
    apis.advance(PATCH_S)
    assert state(apis, idle) == ("Running", False, True)
    assert state(apis, busy) == ("Running", True, False)  # still busy: waits, cordoned
    apis.advance(1800 - PATCH_S)
    assert state(apis, busy) == ("Running", False, False)  # the window passed: old AMI
    assert group(apis)["SoftwareUpdateStatus"] == "Succeeded"
    assert "AutoPatchConfig" not in group(apis)


def test_when_all_idle_patches_only_once_every_instance_is_idle(apis: ClusterApis) -> None:
    first, second = apis.hyperpod
    pod = occupy(apis, second)
    schedule(apis, 60, strategy="WhenAllIdle")
    apis.advance(60)
    assert state(apis, first) == ("Running", True, False)  # idle, but not all are
    assert apis.kube.delete(PODS, pod, "default", grace_period_s=0)
    wait_for(lambda: apis.kube.get(PODS, pod, "default") is None, loaded(60), f"pod {pod} to go")
    apis.advance(60)  # automatic patching looks again
    assert [state(apis, i)[0] for i in (first, second)] == ["SystemUpdating"] * 2
    apis.advance(PATCH_S)
    assert [state(apis, i) for i in (first, second)] == [("Running", False, True)] * 2


def test_drain_first_evicts_the_pods_and_patches_a_batch_at_a_time(apis: ClusterApis) -> None:
    first, second = apis.hyperpod
    occupy(apis, first)
    occupy(apis, second)
    schedule(apis, 60, strategy="DrainFirst", batch=1)
    apis.advance(60)
    states = {i: state(apis, i) for i in (first, second)}
    (now,) = [i for i, seen in states.items() if seen[0] == "SystemUpdating"]  # one a batch
    (then,) = {first, second} - {now}
    assert states == {now: ("SystemUpdating", True, False), then: ("Running", True, False)}
    node, waiting = apis.cluster.instance(now), apis.cluster.instance(then)
    assert node is not None and node.status is NodeStatus.SYSTEM_UPDATING
    assert waiting is not None
    # The eviction deletes the pod gracefully: KWOK (its kubelet) finishes it.
    wait_for(lambda: pods_on(apis, node.node_name) == [], loaded(60), f"{node.node_name} drained")
    assert pods_on(apis, waiting.node_name)  # its turn is still to come
    apis.advance(PATCH_S)
    assert state(apis, now) == ("Running", False, True)
    assert state(apis, then) == ("SystemUpdating", True, False)  # evicted in its turn
    apis.advance(PATCH_S)
    assert state(apis, then) == ("Running", False, True)
    assert group(apis)["SoftwareUpdateStatus"] == "Succeeded"


def test_a_patch_needs_a_known_strategy_group_and_a_future_date(apis: ClusterApis) -> None:
    later = apis.clock.now() + timedelta(hours=1)
    with pytest.raises(ValueError, match="PatchingStrategy must be one of"):
        apis.cluster.schedule_patch("workers", later, strategy="Whenever")
    with pytest.raises(ValueError, match="no instance group spare"):
        apis.cluster.schedule_patch("spare", later)
    with pytest.raises(ValueError, match="must be in the future"):
        apis.cluster.schedule_patch("workers", apis.clock.now())
