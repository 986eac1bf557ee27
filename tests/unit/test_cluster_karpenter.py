"""The simulated cluster's Karpenter, for NodeClaims created through the Kubernetes API.

The service creates, reads and deletes NodeClaims as a user of the API server; here the
tests do the same through the twin's object store (writes with a `user`, which is what
reaches the simulator), and move a ManualClock through the launch, the registration, an
insufficient-capacity error and Karpenter's registration TTL.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from hyperguard.models import NodeStatus
from hyperguard.twin.clock import ManualClock
from hyperguard.twin.cluster import Effect, Instance, SimTimings, SimulatedCluster
from hyperguard.twin.kube.store import NODECLAIMS, NODEPOOLS, NODES, KubeError, ObjectStore

USER = "arn:aws:sts::123456789012:assumed-role/hyperguard-scheduler/fn"
POOL = "gpu-burst"
P5 = "p5.48xlarge"
BURST_LABEL = "hyperguard.io/burst"
TIMINGS = SimTimings()
LAUNCH_S = TIMINGS.nodeclaim_launch_s
READY_S = TIMINGS.nodeclaim_ready_s
TTL_S = TIMINGS.nodeclaim_registration_ttl_s


@dataclass
class World:
    clock: ManualClock
    store: ObjectStore
    cluster: SimulatedCluster

    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)
        self.cluster.advance()

    def create(
        self, name: str, capacity: list[str] | None = None, labels: dict[str, str] | None = None
    ) -> None:
        self.store.create(NODECLAIMS, manifest(name, capacity, **(labels or {})), user=USER)

    def claim(self, name: str) -> dict[str, Any] | None:
        return self.store.find(NODECLAIMS, name)

    def conditions(self, name: str) -> dict[str, dict[str, str]]:
        claim = self.claim(name)
        assert claim is not None, f"NodeClaim {name} is gone"
        return {c["type"]: c for c in claim.get("status", {}).get("conditions", [])}

    def burst(self) -> list[Instance]:
        return [i for i in self.cluster.instances() if i.platform == "eks"]

    def status(self, instance_id: str) -> NodeStatus | None:
        instance = self.cluster.instance(instance_id)
        return instance.status if instance is not None else None


def manifest(name: str, capacity: list[str] | None = None, **labels: str) -> dict[str, Any]:
    """A NodeClaim as HyperGuard creates it."""
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {
            "name": name,
            "labels": {"karpenter.sh/nodepool": POOL, BURST_LABEL: "b-1", **labels},
        },
        "spec": {
            "nodeClassRef": {
                "group": "karpenter.k8s.aws",
                "kind": "EC2NodeClass",
                "name": "default",
            },
            "requirements": [
                {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": [P5]},
                {
                    "key": "karpenter.sh/capacity-type",
                    "operator": "In",
                    "values": capacity or ["on-demand"],
                },
                {"key": "karpenter.sh/nodepool", "operator": "In", "values": [POOL]},
            ],
            "resources": {"requests": {"nvidia.com/gpu": "8"}},
        },
    }


def new_world[W: World](kind: type[W]) -> W:
    """A cluster with the NodePool `POOL` and no node."""
    clock = ManualClock()
    store = ObjectStore(clock=clock)
    effects: list[Effect] = []
    cluster = SimulatedCluster(clock, store, effects=effects.append, timings=TIMINGS)
    cluster.add_nodepool(POOL, P5)
    return kind(clock, store, cluster)


@pytest.fixture
def world() -> World:
    return new_world(World)


def test_add_nodepool_makes_a_pool_without_nodes(world: World) -> None:
    pool = world.store.get(NODEPOOLS, POOL)
    assert pool["spec"]["template"]["spec"]["requirements"][0]["values"] == [P5]
    assert world.store.list(NODES) == [] and world.store.list(NODECLAIMS) == []


def test_a_claim_is_a_ready_node_after_the_launch_and_the_boot(world: World) -> None:
    world.create("hg-burst-b-1-1-0")
    name = "hg-burst-b-1-1-0"
    claim = world.claim(name)
    assert claim is not None
    assert claim["metadata"]["finalizers"] == ["karpenter.sh/termination"]
    conditions = world.conditions(name)
    assert {k: c["status"] for k, c in conditions.items()} == {
        "Initialized": "Unknown",
        "Launched": "Unknown",
        "Ready": "Unknown",
        "Registered": "Unknown",
    }
    assert conditions["Launched"]["reason"] == "AwaitingReconciliation"

    world.advance(LAUNCH_S - 1)
    assert world.conditions(name)["Launched"]["status"] == "Unknown"
    assert world.burst() == []

    world.advance(1)
    conditions = world.conditions(name)
    assert conditions["Launched"]["status"] == "True"
    assert conditions["Ready"]["status"] == "Unknown"
    assert conditions["Ready"]["reason"] == "ReconcilingDependents"
    assert conditions["Ready"]["message"] == "Initialized=Unknown, Registered=Unknown"
    (instance,) = world.burst()
    assert instance.status is NodeStatus.PENDING
    status = world.store.get(NODECLAIMS, name)["status"]
    assert status["providerID"] == f"aws:///us-east-1a/{instance.instance_id}"
    assert "nodeName" not in status
    assert world.store.find(NODES, instance.node_name) is None

    world.advance(READY_S - 1)
    assert world.store.find(NODES, instance.node_name) is None
    assert world.conditions(name)["Registered"]["status"] == "Unknown"

    world.advance(1)
    conditions = world.conditions(name)
    assert {k: (c["status"], c["reason"]) for k, c in conditions.items()} == {
        "Initialized": ("True", "Initialized"),
        "Launched": ("True", "Launched"),
        "Ready": ("True", "Ready"),
        "Registered": ("True", "Registered"),
    }
    assert world.store.get(NODECLAIMS, name)["status"]["nodeName"] == instance.node_name
    node = world.store.get(NODES, instance.node_name)
    ready = {c["type"]: c["status"] for c in node["status"]["conditions"]}
    assert ready["Ready"] == "True"
    assert node["spec"]["providerID"] == f"aws:///us-east-1a/{instance.instance_id}"
    assert world.status(instance.instance_id) is NodeStatus.RUNNING


def test_the_node_carries_the_claims_labels_and_is_listed_by_its_pool(world: World) -> None:
    world.create(
        "hg-burst-b-7-1-0", labels={BURST_LABEL: "b-7", "hyperguard.io/burst-attempt": "1"}
    )
    world.advance(LAUNCH_S + READY_S)
    (instance,) = world.burst()
    labels = world.store.get(NODES, instance.node_name)["metadata"]["labels"]
    assert labels[BURST_LABEL] == "b-7"
    assert labels["hyperguard.io/burst-attempt"] == "1"
    assert labels["karpenter.sh/nodepool"] == POOL
    assert labels["karpenter.sh/capacity-type"] == "on-demand"
    assert labels["node.kubernetes.io/instance-type"] == P5
    listed = world.store.list(NODES, label_selector="karpenter.sh/nodepool")
    assert [n["metadata"]["name"] for n in listed] == [instance.node_name]


def test_insufficient_capacity_fails_the_launch_and_karpenter_deletes_the_claim(
    world: World,
) -> None:
    seen: list[dict[str, Any]] = []
    world.store.add_listener(
        lambda event, rt, obj, old, user: seen.append(obj) if rt == NODECLAIMS else None
    )
    world.cluster.set_ec2_capacity(P5, "on-demand", 0)
    world.create("hg-burst-b-1-1-0")
    world.advance(LAUNCH_S - 1)
    assert world.claim("hg-burst-b-1-1-0") is not None

    world.advance(1)
    assert world.claim("hg-burst-b-1-1-0") is None
    assert world.burst() == [] and world.store.list(NODES) == []
    launched = [
        c
        for obj in seen
        for c in obj.get("status", {}).get("conditions", [])
        if c["type"] == "Launched" and c["status"] == "False"
    ]
    assert launched, "Launched=False was never written"
    assert launched[-1]["reason"] == "InsufficientCapacity"
    assert launched[-1]["message"].startswith(
        "InsufficientInstanceCapacity: We currently do not have sufficient p5.48xlarge "
        "capacity in the Availability Zone you requested (us-east-1a)."
    )


def test_ec2_capacity_is_counted_per_instance_and_capacity_type(world: World) -> None:
    world.cluster.set_ec2_capacity(P5, "on-demand", 2)
    for n in range(3):
        world.create(f"hg-burst-b-1-1-{n}")
    world.create("hg-burst-b-1-2-0", capacity=["spot"])
    world.advance(LAUNCH_S)
    assert world.claim("hg-burst-b-1-1-2") is None
    world.advance(READY_S)
    ready = [
        name
        for name in ("hg-burst-b-1-1-0", "hg-burst-b-1-1-1", "hg-burst-b-1-2-0")
        if world.conditions(name)["Ready"]["status"] == "True"
    ]
    assert len(ready) == 3
    assert sorted(i.capacity_type for i in world.burst()) == ["OnDemand", "OnDemand", "Spot"]

    world.create("hg-burst-b-1-3-0")  # none left: EC2 gave out both
    world.advance(LAUNCH_S)
    assert world.claim("hg-burst-b-1-3-0") is None

    world.cluster.set_ec2_capacity(P5, "on-demand", None)
    world.create("hg-burst-b-1-4-0")
    world.advance(LAUNCH_S)
    assert world.conditions("hg-burst-b-1-4-0")["Launched"]["status"] == "True"


def test_a_node_that_never_registers_is_deleted_at_the_registration_ttl(world: World) -> None:
    world.cluster.fail_next_registrations()
    world.create("hg-burst-b-1-1-0")
    world.create("hg-burst-b-1-1-1")
    world.advance(LAUNCH_S + READY_S)
    assert world.conditions("hg-burst-b-1-1-1")["Ready"]["status"] == "True"
    conditions = world.conditions("hg-burst-b-1-1-0")
    assert conditions["Launched"]["status"] == "True"
    assert conditions["Registered"]["status"] == "Unknown"
    stuck = next(i for i in world.burst() if i.status is NodeStatus.PENDING)
    assert world.store.find(NODES, stuck.node_name) is None

    world.advance(TTL_S - LAUNCH_S - READY_S - 1)
    assert not world.store.get(NODECLAIMS, "hg-burst-b-1-1-0")["metadata"].get("deletionTimestamp")

    world.advance(1)
    assert world.store.get(NODECLAIMS, "hg-burst-b-1-1-0")["metadata"]["deletionTimestamp"]
    assert world.status(stuck.instance_id) is NodeStatus.SHUTTING_DOWN
    world.advance(TIMINGS.nodeclaim_termination_s)
    assert world.claim("hg-burst-b-1-1-0") is None
    assert world.cluster.instance(stuck.instance_id) is None
    assert world.claim("hg-burst-b-1-1-1") is not None  # the registered one stays


def test_deleting_a_claim_before_its_launch_cancels_the_launch(world: World) -> None:
    world.cluster.set_ec2_capacity(P5, "on-demand", 1)
    world.create("hg-burst-b-1-1-0")
    world.advance(LAUNCH_S / 2)
    world.store.delete(NODECLAIMS, "hg-burst-b-1-1-0", user=USER)
    assert world.claim("hg-burst-b-1-1-0") is None  # nothing to terminate: no finalizer wait

    world.advance(LAUNCH_S + READY_S + TTL_S)
    assert world.burst() == [] and world.store.list(NODES) == []

    world.create("hg-burst-b-1-1-0")  # the cancelled launch took no capacity
    world.advance(LAUNCH_S)
    assert world.conditions("hg-burst-b-1-1-0")["Launched"]["status"] == "True"
    assert len(world.burst()) == 1


def test_deleting_a_ready_claim_drains_and_terminates_its_node(world: World) -> None:
    world.create("hg-burst-b-1-1-0")
    world.advance(LAUNCH_S + READY_S)
    (instance,) = world.burst()
    world.store.delete(NODECLAIMS, "hg-burst-b-1-1-0", user=USER)
    assert world.status(instance.instance_id) is NodeStatus.SHUTTING_DOWN
    world.advance(TIMINGS.nodeclaim_termination_s)
    assert world.claim("hg-burst-b-1-1-0") is None
    assert world.store.find(NODES, instance.node_name) is None
    assert world.burst() == []


def test_creating_a_claim_that_exists_launches_nothing_more(world: World) -> None:
    world.create("hg-burst-b-1-1-0")
    with pytest.raises(KubeError) as conflict:
        world.create("hg-burst-b-1-1-0")
    assert conflict.value.code == 409
    world.advance(LAUNCH_S + READY_S + TTL_S)
    assert len(world.burst()) == 1
    assert len(world.store.list(NODES)) == 1


@pytest.mark.parametrize(
    ("allowed", "label", "ec2"),
    [
        (["on-demand", "spot", "reserved"], "reserved", "Reserved"),
        (["on-demand", "spot"], "spot", "Spot"),
        (["on-demand"], "on-demand", "OnDemand"),
    ],
)
def test_karpenter_prefers_reserved_then_spot(
    world: World, allowed: list[str], label: str, ec2: str
) -> None:
    world.create("hg-burst-b-1-1-0", capacity=allowed)
    world.advance(LAUNCH_S + READY_S)
    (instance,) = world.burst()
    assert instance.capacity_type == ec2
    node = world.store.get(NODES, instance.node_name)
    assert node["metadata"]["labels"]["karpenter.sh/capacity-type"] == label
    claim = world.store.get(NODECLAIMS, "hg-burst-b-1-1-0")
    assert claim["metadata"]["labels"]["karpenter.sh/capacity-type"] == label


def test_a_claim_in_a_pool_that_does_not_exist_never_launches(world: World) -> None:
    world.create("hg-burst-b-1-1-0", labels={"karpenter.sh/nodepool": "nowhere"})
    launched = world.conditions("hg-burst-b-1-1-0")["Launched"]
    assert (launched["status"], launched["reason"]) == ("False", "LaunchFailed")
    assert launched["message"] == 'NodePool "nowhere" not found'
    assert world.conditions("hg-burst-b-1-1-0")["Ready"]["reason"] == "UnhealthyDependents"
    world.advance(LAUNCH_S + READY_S)
    assert world.burst() == []
    world.advance(TTL_S)
    assert world.claim("hg-burst-b-1-1-0") is None


def test_a_fault_on_a_claims_node_shows_like_on_any_burst_node(world: World) -> None:
    world.create("hg-burst-b-1-1-0")
    world.advance(LAUNCH_S + READY_S)
    (instance,) = world.burst()
    world.cluster.inject_fault(instance.instance_id, "gpu")
    node = world.store.get(NODES, instance.node_name)
    hardware = next(
        c for c in node["status"]["conditions"] if c["type"] == "AcceleratedHardwareReady"
    )
    assert (hardware["status"], hardware["reason"]) == ("False", "NvidiaXID48Error")
    assert world.status(instance.instance_id) is NodeStatus.FAILURE


def test_the_twins_own_burst_nodes_keep_ready_claims(world: World) -> None:
    (instance_id,) = world.cluster.add_burst_nodes(POOL, P5, 1, spot=True)
    instance = world.cluster.instance(instance_id)
    assert instance is not None and instance.nodeclaim is not None
    claim = world.store.get(NODECLAIMS, instance.nodeclaim)
    assert claim["metadata"]["labels"]["karpenter.sh/capacity-type"] == "spot"
    assert {c["type"]: c["status"] for c in claim["status"]["conditions"]} == {
        "Initialized": "True",
        "Launched": "True",
        "Ready": "True",
        "Registered": "True",
    }
    world.advance(TTL_S)  # not the service's: Karpenter's TTL leaves it alone
    assert world.claim(instance.nodeclaim) is not None
