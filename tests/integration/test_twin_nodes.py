"""The twin's nodes look like real ones on the real API server: HyperPod's providerID form
and labels on HyperPod nodes, Karpenter's and EC2's on burst nodes (which Karpenter itself
launched), with their NodePool's taints and EC2's capacity; the service's providerID parser
finds both. Its repairs can be held, as real ones take minutes."""

from __future__ import annotations

from functools import partial
from typing import Any

from tests.deadlines import loaded
from tests.integration.cluster_harness import ClusterApis
from tests.integration.conftest import MakeCluster

from hyperguard.cluster.conventions import instance_id_from_provider_id
from hyperguard.provider_ids import ProviderIdForm, parse_provider_id
from hyperguard_twin.plane.kube import LEASES, NODES, wait_for


def node_of(apis: ClusterApis, instance_id: str) -> dict[str, Any]:
    instance = apis.cluster.instance(instance_id)
    assert instance is not None
    node = apis.kube.get(NODES, instance.node_name)
    assert node is not None
    return node


def test_a_hyperpod_node_has_hyperpods_provider_id_and_labels(make_cluster: MakeCluster) -> None:
    apis = make_cluster(hyperpod_nodes=1)
    (instance_id,) = apis.hyperpod
    node = node_of(apis, instance_id)
    parsed = parse_provider_id(node["spec"]["providerID"])
    assert parsed is not None and parsed.form is ProviderIdForm.HYPERPOD
    cluster_id = apis.cluster.cluster_arn.rsplit("/", 1)[-1]
    assert parsed.cluster_id == cluster_id
    assert f"/sagemaker/cluster/hyperpod-{cluster_id}-{instance_id}" in node["spec"]["providerID"]
    assert instance_id_from_provider_id(node["spec"]["providerID"]) == instance_id
    labels = node["metadata"]["labels"]
    assert labels["node.kubernetes.io/instance-type"] == "ml.p5.48xlarge"
    assert labels["sagemaker.amazonaws.com/compute-type"] == "hyperpod"
    assert labels["sagemaker.amazonaws.com/instance-group-name"] == "workers"
    assert labels["sagemaker.amazonaws.com/node-health-status"] == "Schedulable"
    assert labels["kubernetes.io/arch"] == "amd64"
    assert labels["kubernetes.io/hostname"] == node["metadata"]["name"]
    assert labels["topology.kubernetes.io/zone"] == "us-east-1a"
    assert "karpenter.sh/nodepool" not in labels
    # no taint of its own: at most kube-controller-manager's node lifecycle taint, which a new
    # node carries until its kubelet (KWOK) reports Ready
    taints = {t["key"] for t in node["spec"].get("taints", [])}
    assert taints <= {"node.kubernetes.io/not-ready"}


def test_a_karpenter_node_has_ec2_names_karpenters_labels_and_its_pools_taints(
    make_cluster: MakeCluster,
) -> None:
    apis = make_cluster(hyperpod_nodes=1, burst_nodes=2)
    on_demand, spot = apis.burst
    for instance_id, capacity in ((on_demand, "on-demand"), (spot, "spot")):
        node = node_of(apis, instance_id)
        assert node["spec"]["providerID"] == f"aws:///us-east-1a/{instance_id}"
        assert instance_id_from_provider_id(node["spec"]["providerID"]) == instance_id
        labels = node["metadata"]["labels"]
        assert labels["node.kubernetes.io/instance-type"] == "p5.48xlarge"
        assert labels["karpenter.sh/nodepool"] == "gpu-burst"
        assert labels["karpenter.sh/capacity-type"] == capacity
        assert labels["karpenter.sh/registered"] == labels["karpenter.sh/initialized"] == "true"
        assert labels["karpenter.k8s.aws/instance-family"] == "p5"
        assert labels["karpenter.k8s.aws/instance-size"] == "48xlarge"
        assert labels["karpenter.k8s.aws/instance-gpu-count"] == "8"
        assert labels["karpenter.k8s.aws/instance-gpu-name"] == "h100"
        assert node["spec"]["taints"] == [
            {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}
        ]


def _status_once_running(apis: ClusterApis, instance_id: str) -> dict[str, Any] | None:
    status: dict[str, Any] = node_of(apis, instance_id)["status"]
    return status if status.get("phase") == "Running" else None


def test_a_kubelet_registers_its_node_ready_and_kwok_still_initialises_it(
    make_cluster: MakeCluster,
) -> None:
    """A Node created without Ready under a name deleted over a minute before is marked
    Unknown and tainted unreachable at the node lifecycle controller's next pass (it keeps a
    node's last heartbeat by name; EC2 reuses private IPs, so names): the kubelet posts Ready
    in the Node it registers. KWOK still initialises such a node (addresses, its kubelet
    endpoint, phase) and keeps its lease."""
    apis = make_cluster(hyperpod_nodes=1, burst_nodes=1)
    for instance_id in (*apis.hyperpod, *apis.burst):
        instance = apis.cluster.instance(instance_id)
        assert instance is not None
        registered = apis.cluster.kubelets.node_object(instance, apis.clock.now())
        ready = [c for c in registered["status"]["conditions"] if c["type"] == "Ready"]
        assert [(c["status"], c["reason"]) for c in ready] == [("True", "KubeletReady")]
        # KWOK's initialize stage sets the phase with the rest, in its own time.
        initialised = partial(_status_once_running, apis, instance_id)
        status = wait_for(initialised, loaded(30), f"KWOK to initialise {instance_id}'s node")
        assert "InternalIP" in {a["type"] for a in status["addresses"]}
        assert status["daemonEndpoints"]["kubeletEndpoint"]["Port"] > 0
        wait_for(
            partial(apis.kube.get, LEASES, instance.node_name, "kube-node-lease"),
            loaded(30),
            "lease",
        )


def test_nodes_report_ec2s_capacity_and_allocatable_less_kube_reserved(
    make_cluster: MakeCluster,
) -> None:
    apis = make_cluster(hyperpod_nodes=1)
    status = node_of(apis, apis.hyperpod[0])["status"]
    assert status["capacity"] == {
        "cpu": "192",
        "memory": "2Ti",  # 2097152Mi, as the API server writes a quantity
        "nvidia.com/gpu": "8",
        "vpc.amazonaws.com/efa": "32",  # as the EFA device plugin reports it
        "pods": "110",
    }
    assert status["allocatable"]["nvidia.com/gpu"] == "8"
    assert status["allocatable"]["cpu"] == "191450m"
    assert status["allocatable"]["memory"] == "2095587Mi"


def status_of(apis: ClusterApis, instance_id: str | None) -> str | None:
    instance = apis.cluster.instance(instance_id) if instance_id else None
    return instance.status.value if instance else None


def test_held_repairs_finish_only_once_released(make_cluster: MakeCluster) -> None:
    apis = make_cluster(hyperpod_nodes=2)
    cluster = apis.cluster
    rebooted, replaced = apis.hyperpod
    with cluster.repairs_held():
        assert cluster.api.batch_repair("reboot", [rebooted])["Successful"] == [rebooted]
        assert cluster.api.batch_repair("replace", [replaced])["Successful"] == [replaced]
        apis.advance(10 * cluster.timings.replace_s)
        assert status_of(apis, rebooted) == "Pending"
        assert status_of(apis, replaced) == "ShuttingDown"
    apis.settle()
    assert status_of(apis, rebooted) == "Running"
    # The replacement boots from the moment its shutdown finished: the release.
    new = cluster.replacement_of(replaced)
    assert status_of(apis, new) == "Pending"
    apis.advance(cluster.timings.replace_s)
    assert status_of(apis, new) == "Running"
