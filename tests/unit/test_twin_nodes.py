"""The twin's nodes look like real ones: HyperPod's providerID form and labels on HyperPod
nodes, Karpenter's and EC2's on burst nodes, with their NodePool's taints and EC2's
capacity; the service's providerID parser finds both. Its repairs can be held, as real ones take
minutes, and nothing happens before its time, even when a write calls the cluster back."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hyperguard.twin.kube.store import JOBS, NODES, ObjectStore

from hyperguard.cluster.conventions import instance_id_from_provider_id
from hyperguard.cluster.workloads import MAX_STEPS_ENV
from hyperguard.provider_ids import ProviderIdForm, parse_provider_id
from hyperguard.twin.clock import ManualClock
from hyperguard.twin.cluster import Effect, SimulatedCluster
from hyperguard.twin.ids import hyperpod_cluster_id

USER = "arn:aws:sts::123456789012:assumed-role/someone/session"


@pytest.fixture
def cluster() -> SimulatedCluster:
    clock = ManualClock()
    effects: list[Effect] = []
    return SimulatedCluster(clock, ObjectStore(clock=clock), effects=effects.append)


def node_of(cluster: SimulatedCluster, instance_id: str) -> dict[str, Any]:
    instance = cluster.instance(instance_id)
    assert instance is not None
    return cluster.store.get(NODES, instance.node_name)


def test_a_hyperpod_node_has_hyperpods_provider_id_and_labels(cluster: SimulatedCluster) -> None:
    (instance_id,) = cluster.add_instance_group("workers", "ml.p5.48xlarge", 1)
    node = node_of(cluster, instance_id)
    parsed = parse_provider_id(node["spec"]["providerID"])
    assert parsed is not None and parsed.form is ProviderIdForm.HYPERPOD
    assert parsed.cluster_id == cluster.cluster_arn.rsplit("/", 1)[-1]
    assert instance_id_from_provider_id(node["spec"]["providerID"]) == instance_id
    labels = node["metadata"]["labels"]
    assert labels["node.kubernetes.io/instance-type"] == "ml.p5.48xlarge"
    assert labels["sagemaker.amazonaws.com/compute-type"] == "hyperpod"
    assert labels["sagemaker.amazonaws.com/instance-group-name"] == "workers"
    assert labels["sagemaker.amazonaws.com/node-health-status"] == "Schedulable"
    assert labels["kubernetes.io/arch"] == "amd64"
    assert labels["kubernetes.io/hostname"] == node["metadata"]["name"]
    assert labels["topology.kubernetes.io/zone"] == "us-east-1a"
    assert "karpenter.sh/nodepool" not in labels and "taints" not in node["spec"]


def test_a_karpenter_node_has_ec2_names_karpenters_labels_and_its_pools_taints(
    cluster: SimulatedCluster,
) -> None:
    (instance_id,) = cluster.add_burst_nodes("gpu-burst", "p5.48xlarge", 1, spot=True)
    node = node_of(cluster, instance_id)
    assert node["spec"]["providerID"] == f"aws:///us-east-1a/{instance_id}"
    labels = node["metadata"]["labels"]
    assert labels["node.kubernetes.io/instance-type"] == "p5.48xlarge"
    assert labels["karpenter.sh/nodepool"] == "gpu-burst"
    assert labels["karpenter.sh/capacity-type"] == "spot"
    assert labels["karpenter.sh/registered"] == labels["karpenter.sh/initialized"] == "true"
    assert labels["karpenter.k8s.aws/instance-family"] == "p5"
    assert labels["karpenter.k8s.aws/instance-size"] == "48xlarge"
    assert labels["karpenter.k8s.aws/instance-gpu-count"] == "8"
    assert labels["karpenter.k8s.aws/instance-gpu-name"] == "h100"
    assert node["spec"]["taints"] == [
        {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}
    ]


def test_nodes_report_ec2s_capacity_and_allocatable_less_kube_reserved(
    cluster: SimulatedCluster,
) -> None:
    (instance_id,) = cluster.add_instance_group("workers", "ml.p5.48xlarge", 1)
    status = node_of(cluster, instance_id)["status"]
    assert status["capacity"] == {
        "cpu": "192",
        "memory": "2097152Mi",
        "nvidia.com/gpu": "8",
        "pods": "110",
    }
    assert status["allocatable"]["nvidia.com/gpu"] == "8"
    assert status["allocatable"]["cpu"] == "191450m"
    assert status["allocatable"]["memory"] == "2095587Mi"


def status_of(cluster: SimulatedCluster, instance_id: str | None) -> str | None:
    instance = cluster.instance(instance_id) if instance_id else None
    return instance.status.value if instance else None


def test_held_repairs_finish_only_once_released(cluster: SimulatedCluster) -> None:
    clock = cluster.clock
    assert isinstance(clock, ManualClock)
    rebooted, replaced = cluster.add_instance_group("workers", "ml.p5.48xlarge", 2)
    with cluster.repairs_held():
        assert cluster.batch_repair("reboot", [rebooted])["Successful"] == [rebooted]
        assert cluster.batch_repair("replace", [replaced])["Successful"] == [replaced]
        clock.advance(10 * cluster.timings.replace_s)
        cluster.advance()
        assert status_of(cluster, rebooted) == "Pending"
        assert status_of(cluster, replaced) == "ShuttingDown"
    cluster.advance()
    assert status_of(cluster, rebooted) == "Running"
    # The replacement boots from the moment its shutdown finished: the release.
    new = cluster.replacement_of(replaced)
    assert status_of(cluster, new) == "Pending"
    clock.advance(cluster.timings.replace_s)
    cluster.advance()
    assert status_of(cluster, new) == "Running"


def test_the_cluster_has_a_hyperpod_id_of_twelve_and_its_nodes_carry_it(
    cluster: SimulatedCluster,
) -> None:
    """botocore's ClusterArn pattern ends `cluster/[a-z0-9]{12}`: the id, not the name."""
    assert re.fullmatch(
        r"arn:aws:sagemaker:[a-z0-9-]+:[0-9]{12}:cluster/[a-z0-9]{12}", cluster.cluster_arn
    )
    cluster_id = cluster.cluster_arn.rsplit("/", 1)[-1]
    assert cluster_id == hyperpod_cluster_id(cluster.hyperpod_cluster)
    assert cluster_id != hyperpod_cluster_id("another-cluster")
    (instance_id,) = cluster.add_instance_group("workers", "ml.p5.48xlarge", 1)
    provider_id = node_of(cluster, instance_id)["spec"]["providerID"]
    assert f"/sagemaker/cluster/hyperpod-{cluster_id}-{instance_id}" in provider_id


def test_a_write_that_calls_back_while_settling_leaves_later_happenings_to_their_time(
    cluster: SimulatedCluster,
) -> None:
    """A run finishing while the cluster settles writes its status; a controller reacting
    at once (as the twin's Kueue does) calls the cluster back. That call must not settle
    again: it took the due reboot from under the settling loop, which then popped the next
    one early, or popped an empty agenda (IndexError, seen in CI's day-in-the-life)."""
    clock = cluster.clock
    assert isinstance(clock, ManualClock)
    worker, early, late = cluster.add_instance_group("workers", "ml.p5.48xlarge", 3)
    name = node_of(cluster, worker)["metadata"]["name"]
    pin = {"key": "metadata.name", "operator": "In", "values": [name]}
    timings = cluster.timings
    # The run (restart, then its steps) ends between the two reboots' starts.
    steps = int((0.75 * timings.reboot_s - timings.job_restart_s) / timings.step_duration_s)
    finished = timings.job_restart_s + steps * timings.step_duration_s
    assert timings.reboot_s / 2 < finished < timings.reboot_s
    env = [{"name": MAX_STEPS_ENV, "value": str(steps)}]
    container = {"name": "main", "image": "x", "env": env}
    template = {
        "spec": {
            "containers": [container],
            "restartPolicy": "Never",
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchFields": [pin]}]
                    }
                }
            },
        }
    }
    job = {"metadata": {"name": "train"}, "spec": {"template": template}}
    cluster.store.create(JOBS, job, "default", user=USER)

    def react(event: str, rt: Any, obj: dict[str, Any], old: Any, user: str | None) -> None:
        if rt == JOBS and (obj.get("status") or {}).get("succeeded"):
            note = {"metadata": {"annotations": {"example.com/seen": "done"}}}
            cluster.store.patch(NODES, name, note, user=USER)

    cluster.store.add_listener(react)
    assert cluster.batch_repair("reboot", [early])["Successful"] == [early]
    clock.advance(timings.reboot_s / 2)
    assert cluster.batch_repair("reboot", [late])["Successful"] == [late]
    assert cluster.runs()["train"].state == "running"
    # The run and the early reboot are done by now; the late reboot is not.
    clock.advance(timings.reboot_s * 0.75)
    cluster.advance()
    assert cluster.runs()["train"].state == "succeeded"
    assert node_of(cluster, worker)["metadata"]["annotations"]["example.com/seen"] == "done"
    assert status_of(cluster, early) == "Running"
    assert status_of(cluster, late) != "Running"
    clock.advance(timings.reboot_s / 4)
    cluster.advance()
    assert status_of(cluster, late) == "Running"
