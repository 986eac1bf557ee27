"""The cluster's other repairers, read as a deployment reads them, and exactly one system
repairing a node (D148): the inventory records HyperPod's NodeRecovery, Karpenter's NodeRepair
gate (its Deployment in kube-system, as its Helm chart writes it), EKS node auto-repair (a
managed node group's nodeRepairConfig, through the EKS API) and the Node Termination Handler
(its DaemonSet); Diagnose then leaves a fault to the one that acts on it where the policy
defers, or holds Karpenter off with its do-not-repair annotation where HyperGuard owns it.

The twin runs Karpenter with NodeRepair off (its default), and its toleration before a
repair is 10 to 30 minutes of wall time: a test that defers to Karpenter's repair says so on
the Deployment, as a cluster running Karpenter with the gate on shows it, and then does what
Karpenter's repair does (deletes the node's NodeClaim) itself, saying so."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import boto3
import pytest
from tests.conftest import Stack
from tests.deadlines import loaded
from tests.integration.cluster_harness import EKS, REGION, cluster_apis
from tests.integration.recovery_harness import UP_TO_REPAIR
from tests.integration.test_recovery_deferral import never_ordered
from tests.integration.test_recovery_steps import World

from hyperguard.inventory import InventorySync
from hyperguard.models import HealthSignal, IncidentStatus, Repair, Severity
from hyperguard.models.signals import Action, SignalSource
from hyperguard.policies.repair import NodeRepairConfig
from hyperguard.store.policy import RepairersStore, RepairPolicyStore
from hyperguard_twin.plane.bootstrap import FIELD_MANAGER, karpenter_deployment
from hyperguard_twin.plane.kube import NODECLAIMS, NODES, PODS, resource, wait_for

DEPLOYMENTS = resource("apps/v1", "deployments")
DAEMONSETS = resource("apps/v1", "daemonsets")
NTH = "aws-node-termination-handler"


@pytest.fixture
def world(stack: Stack) -> Iterator[World]:
    with cluster_apis(node_recovery="Automatic") as apis:
        world = World(stack, apis)
        world.sync = InventorySync(
            world.nodes,
            apis.gateway,
            frozenset({"hyperguard-twin", EKS}),
            repairers=RepairersStore(stack.tables["TeamsTable"]),
        )
        gates = _deployed_gates(world)
        try:
            yield world
        finally:
            world.apis.kube.apply(karpenter_deployment(gates), FIELD_MANAGER)
            if world.apis.kube.get(DAEMONSETS, NTH, "kube-system"):
                world.apis.kube.delete(DAEMONSETS, NTH, "kube-system")


def _deployed_gates(world: World) -> str:
    deployment = world.apis.kube.get(DEPLOYMENTS, "karpenter", "kube-system")
    assert deployment is not None, "the twin publishes Karpenter's Deployment"
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    (env,) = container["env"]
    return str(env["value"])


def karpenter_node_repair_on(world: World) -> None:
    """What a cluster whose Karpenter runs with NodeRepair=true shows (Helm's value
    settings.featureGates.nodeRepair)."""
    world.apis.kube.apply(karpenter_deployment("NodeRepair=true"), FIELD_MANAGER)


def install_termination_handler(world: World) -> None:
    """The Node Termination Handler's DaemonSet as its Helm chart labels it (IMDS mode), with
    a node selector no twin node has: its pods are never needed here."""
    labels = {"app.kubernetes.io/name": NTH, "app.kubernetes.io/instance": NTH}
    world.apis.kube.create(
        DAEMONSETS,
        {
            "metadata": {"name": NTH, "labels": labels},
            "spec": {
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "nodeSelector": {"hyperguard.dev/never": "true"},
                        "containers": [{"name": NTH, "image": "public.ecr.aws/aws-ec2/nth"}],
                    },
                },
            },
        },
        "kube-system",
    )


def set_policy(world: World, **settings: Any) -> None:
    RepairPolicyStore(world.teams.table_name).put(NodeRepairConfig.model_validate(settings))


def open_signal(world: World, instance_id: str, signal: HealthSignal) -> dict[str, Any]:
    node = world.nodes.get(instance_id)
    assert node is not None
    incident, _ = world.incidents.open_or_append(node, signal, world.clock.now())
    return {"incident_id": incident.incident_id, "instance_id": instance_id}


def report(world: World, instance_id: str, kind: str, **fields: Any) -> dict[str, Any]:
    """A signal about the node opened as ingestion opens it."""
    now = world.clock.now()
    signal = HealthSignal(
        instance_id=instance_id,
        cluster=EKS,
        action=Action.OPEN_INCIDENT,
        observed_at=now,
        dedupe_key=f"{instance_id}-{kind}-{now.isoformat()}",
        kind=kind,
        **fields,
    )
    return open_signal(world, instance_id, signal)


def gpu_condition(world: World, instance_id: str) -> dict[str, Any]:
    """The forwarder's report of the EKS node monitoring agent's GPU condition."""
    return report(
        world,
        instance_id,
        "node_condition",
        source=SignalSource.KUBERNETES,
        severity=Severity.DEGRADED,
        repair=Repair.REBOOT,
        reason="AcceleratedHardwareReady=False (NvidiaXID79Error)",
        facts={"condition_type": "AcceleratedHardwareReady", "status": "False"},
    )


def spot_interruption(world: World, instance_id: str, seconds: float) -> dict[str, Any]:
    return report(
        world,
        instance_id,
        "spot_interruption",
        source=SignalSource.EC2,
        severity=Severity.FATAL,
        repair=Repair.DRAIN,
        reason="EC2 Spot Instance Interruption Warning",
        deadline=world.clock.now() + timedelta(seconds=seconds),
    )


def test_the_inventory_records_what_the_cluster_shows_of_its_other_repairers(
    world: World,
) -> None:
    world.sync.sync()
    assert world.sync.repairers is not None
    seen = world.sync.repairers.get()
    assert seen.observed_at is not None and seen.unread == {}
    assert seen.hyperpod_node_recovery == "Automatic"
    # The twin's Karpenter runs with NodeRepair off, and its Deployment says so.
    assert (seen.karpenter, seen.karpenter_node_repair) == ("kube-system/karpenter", False)
    assert (seen.node_termination_handler, seen.eks_node_groups) == (None, {})

    eks = boto3.client("eks", region_name=REGION)
    for name, enabled in (("system", True), ("batch", False)):
        eks.create_nodegroup(
            clusterName=EKS,
            nodegroupName=name,
            nodeRole="arn:aws:iam::123456789012:role/nodes",
            subnets=["subnet-0123456789abcdef0"],
            nodeRepairConfig={"enabled": enabled},
        )
    install_termination_handler(world)
    karpenter_node_repair_on(world)
    world.sync.sync()
    seen = world.sync.repairers.get()
    assert seen.eks_node_groups == {"system": True, "batch": False}
    assert seen.node_termination_handler == f"DaemonSet kube-system/{NTH}"
    assert seen.karpenter_node_repair is True
    for group in ("system", "batch"):
        eks.delete_nodegroup(clusterName=EKS, nodegroupName=group)


def test_a_karpenter_nodes_fault_is_left_to_karpenters_node_repair(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    karpenter_node_repair_on(world)
    world.sync.sync()
    set_policy(world, acceleratorFaultWaitMins=0)
    ordered = never_ordered(world, monkeypatch)
    faulty = world.apis.burst[0]
    node_name = world.gateway.node_status(faulty).node_name
    assert node_name is not None
    world.cluster.inject_fault(faulty)
    r = world.run(*UP_TO_REPAIR, r=gpu_condition(world, faulty))
    assert r["repaired_by"] == "karpenter"
    r = world.run("check_health", r=r)
    assert r["health"] == "pending"  # HyperGuard ordered nothing: it waits for Karpenter
    claims = world.apis.kube.list_objects(NODECLAIMS)
    (claim,) = [c for c in claims if (c.get("status") or {}).get("nodeName") == node_name]
    assert not claim["metadata"].get("deletionTimestamp")
    # Karpenter's repair, as it replaces a node: its NodeClaim deleted.
    world.apis.kube.delete(NODECLAIMS, claim["metadata"]["name"])
    wait_for(lambda: not world.apis.kube.get(NODES, node_name), loaded(120), "the node to go")
    r = world.until_healthy(r)
    r = world.run("return_to_service", "resume_jobs", "close", r=r)
    incident = world.incidents.get(r["incident_id"])
    assert incident is not None and incident.status is IncidentStatus.RESOLVED
    assert (incident.repaired_by, incident.resolution) == ("karpenter", "replaced")
    assert ordered == []


def test_owning_a_karpenter_node_holds_karpenters_repair_off_until_it_is_back(
    world: World,
) -> None:
    karpenter_node_repair_on(world)
    world.sync.sync()
    set_policy(world, acceleratorFaultWaitMins=0, karpenterNodeRepair="own")
    faulty = world.apis.burst[0]
    node_name = world.gateway.node_status(faulty).node_name
    assert node_name is not None

    def do_not_repair() -> str | None:
        node = world.apis.kube.get(NODES, node_name)
        assert node is not None
        return (node["metadata"].get("annotations") or {}).get("karpenter.sh/do-not-repair")

    world.cluster.inject_fault(faulty)  # a GPU fault a reboot cures
    r = world.run("diagnose", r=gpu_condition(world, faulty))
    assert (r["repaired_by"], do_not_repair()) == ("hyperguard", "true")
    r = world.run("cordon", "guard", "protect_jobs", "drain", "repair", r=r)
    assert r["action"] == "reboot"  # through EC2: Karpenter has no reboot
    r = world.until_healthy(r)
    r = world.run("return_to_service", r=r)
    assert do_not_repair() is None


def test_the_termination_handler_drains_an_interrupted_node_and_hyperguard_evicts_nothing(
    world: World,
) -> None:
    install_termination_handler(world)
    world.sync.sync()
    interrupted = world.apis.burst[-1]
    node_name = world.gateway.node_status(interrupted).node_name
    assert node_name is not None
    world.apis.kube.create(
        PODS,
        {
            "metadata": {"name": "serve-0"},
            "spec": {
                "nodeName": node_name,
                "containers": [{"name": "serve", "image": "serve:1"}],
                "tolerations": [{"operator": "Exists"}],
            },
        },
        "default",
    )
    r = world.run(
        "diagnose",
        "cordon",
        "guard",
        "protect_jobs",
        "drain",
        r=spot_interruption(world, interrupted, 120),
    )
    assert r["repaired_by"] == "nth"
    assert r["drain_pending"] and r["drain"] == {"evicted": 0, "forced": 0}
    pod = world.apis.kube.get(PODS, "serve-0", "default")
    assert pod is not None and not pod["metadata"].get("deletionTimestamp")
    world.apis.advance(120)  # the handler never drained it (none runs here): the deadline
    r = world.run("drain", r=r)
    assert not r["drain_pending"] and r["drain"]["forced"] == 1
