"""The twin binds pods any client creates as kube-scheduler would, and leaves the rest
Pending with the scheduler's condition until a node takes them."""

from __future__ import annotations

from typing import Any

import pytest

from hyperguard.twin.clock import ManualClock
from hyperguard.twin.cluster import Effect, SimulatedCluster
from hyperguard.twin.kube.store import NODES, PODS, ObjectStore

USER = "arn:aws:sts::123456789012:assumed-role/someone/session"


@pytest.fixture
def cluster() -> SimulatedCluster:
    clock = ManualClock()
    effects: list[Effect] = []
    cluster = SimulatedCluster(clock, ObjectStore(clock=clock), effects=effects.append)
    cluster.add_instance_group("workers", "ml.p5.48xlarge", 1)
    cluster.add_burst_nodes("gpu-burst", "p5.48xlarge", 1)
    return cluster


def create_pod(cluster: SimulatedCluster, name: str, **spec: Any) -> dict[str, Any]:
    gpus = {"nvidia.com/gpu": "8"}
    container = {"name": "main", "image": "x", "resources": {"requests": gpus, "limits": gpus}}
    body = {"metadata": {"name": name}, "spec": {"containers": [container], **spec}}
    cluster.store.create(PODS, body, "default", user=USER)
    return cluster.store.get(PODS, name, "default")


def scheduled(pod: dict[str, Any]) -> dict[str, Any]:
    (condition,) = pod["status"]["conditions"]
    assert condition["type"] == "PodScheduled"
    return dict(condition)


def test_a_pod_is_bound_to_the_node_its_selector_names(cluster: SimulatedCluster) -> None:
    pod = create_pod(
        cluster, "a", nodeSelector={"node.kubernetes.io/instance-type": "ml.p5.48xlarge"}
    )
    node = cluster.store.get(NODES, pod["spec"]["nodeName"])
    assert node["metadata"]["labels"]["sagemaker.amazonaws.com/compute-type"] == "hyperpod"
    assert pod["status"]["phase"] == "Running" and scheduled(pod)["status"] == "True"


def test_a_pod_no_node_takes_stays_pending_with_the_schedulers_reason(
    cluster: SimulatedCluster,
) -> None:
    """The ml. name matches the HyperPod node, whose GPUs a first pod holds; the burst node
    carries the EC2 name and its pool's GPU taint."""
    create_pod(
        cluster, "first", nodeSelector={"node.kubernetes.io/instance-type": "ml.p5.48xlarge"}
    )
    pod = create_pod(cluster, "second")
    assert "nodeName" not in pod["spec"] and pod["status"]["phase"] == "Pending"
    condition = scheduled(pod)
    assert (condition["status"], condition["reason"]) == ("False", "Unschedulable")
    assert condition["message"] == (
        "0/2 nodes are available: 1 Insufficient nvidia.com/gpu, "
        "1 node(s) had untolerated taint {nvidia.com/gpu: true}. preemption: 0/2 nodes are "
        "available: 1 No preemption victims found for incoming pod, "
        "1 Preemption is not helpful for scheduling."
    )

    cluster.store.delete(PODS, "first", "default", user=USER)
    cluster.advance()
    pod = cluster.store.get(PODS, "second", "default")
    assert pod["spec"]["nodeName"] and pod["status"]["phase"] == "Running"  # retried, bound


def test_a_toleration_of_the_pools_taint_lets_a_pod_onto_a_burst_node(
    cluster: SimulatedCluster,
) -> None:
    toleration = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    pod = create_pod(
        cluster,
        "burst",
        nodeSelector={"node.kubernetes.io/instance-type": "p5.48xlarge"},
        tolerations=[toleration],
    )
    node = cluster.store.get(NODES, pod["spec"]["nodeName"])
    assert node["metadata"]["labels"]["karpenter.sh/nodepool"] == "gpu-burst"
