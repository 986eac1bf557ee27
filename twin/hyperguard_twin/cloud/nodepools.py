"""The cluster's Karpenter NodePools as a platform team sets them up (and edits them with
`kubectl edit nodepool`), and the burst nodes Karpenter launched before the twin began: the
NodePool and NodeClaim objects on the real API server, which the upstream Karpenter
reconciles and launches through the twin's EC2 (`ec2`)."""

from __future__ import annotations

from typing import Any

from hyperguard.cluster.conventions import CAPACITY_TYPE_LABEL, INSTANCE_TYPE_LABEL, NODEPOOL_LABEL
from hyperguard.cluster.workloads import accelerator_resource
from hyperguard_twin.cloud.account import NODE_CLASS
from hyperguard_twin.cloud.core import World
from hyperguard_twin.plane.bootstrap import FIELD_MANAGER
from hyperguard_twin.plane.kube import NODECLAIMS, NODEPOOLS, wait_for

NODEPOOL_ACCELERATOR_LIMIT = "512"
"""What the twin's NodePools may launch in all, in accelerators (64 eight-GPU nodes): a bound
as a platform team sets one (`hyperguard preflight` warns of a NodePool without limits)."""
NODE_CLASS_REF = {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": NODE_CLASS}
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}


def nodepool_manifest(name: str, instance_type: str) -> dict[str, Any]:
    """A GPU NodePool as EKS's guides write one: its nodes tainted `nvidia.com/gpu` so that
    only pods asking for the GPUs (and tolerating the taint) land there; bounded by limits;
    consolidation off until an admin sets it (`set_disruption`), so the nodes launched
    before the twin began stay while idle."""
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {
            "template": {
                "metadata": {"labels": {"hyperguard.io/pool": name}},
                "spec": {
                    "taints": [dict(GPU_TAINT)],
                    "requirements": [
                        {"key": INSTANCE_TYPE_LABEL, "operator": "In", "values": [instance_type]},
                        {
                            "key": CAPACITY_TYPE_LABEL,
                            "operator": "In",
                            "values": ["on-demand", "spot"],
                        },
                    ],
                    "nodeClassRef": dict(NODE_CLASS_REF),
                    "expireAfter": "Never",
                },
            },
            "limits": {accelerator_resource(instance_type): NODEPOOL_ACCELERATOR_LIMIT},
            "disruption": {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "Never"},
        },
    }


def nodeclaim_manifest(
    name: str, nodepool: str, instance_type: str, capacity: str
) -> dict[str, Any]:
    """A NodeClaim of `nodepool` for one node of `instance_type`, as Karpenter made it."""
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {"name": name, "labels": {NODEPOOL_LABEL: nodepool}},
        "spec": {
            "nodeClassRef": dict(NODE_CLASS_REF),
            "requirements": [
                {"key": INSTANCE_TYPE_LABEL, "operator": "In", "values": [instance_type]},
                {"key": CAPACITY_TYPE_LABEL, "operator": "In", "values": [capacity]},
                {"key": NODEPOOL_LABEL, "operator": "In", "values": [nodepool]},
            ],
            "resources": {"requests": {accelerator_resource(instance_type): "1"}},
            "taints": [dict(GPU_TAINT)],
        },
    }


class NodePools:
    def __init__(self, world: World) -> None:
        self.world = world

    def add(self, name: str, instance_type: str) -> None:
        """A Karpenter NodePool of one EC2 instance type (kept if it exists)."""
        kube = self.world.kube
        if kube.get(NODEPOOLS, name) is None:
            kube.apply(nodepool_manifest(name, instance_type), FIELD_MANAGER)

    def set_limits(self, name: str, limits: dict[str, str] | None) -> None:
        """What an admin's `kubectl edit nodepool` sets: the NodePool's `spec.limits`."""
        self._replace(name, "limits", limits)

    def set_disruption(self, name: str, disruption: dict[str, Any]) -> None:
        """What an admin's `kubectl edit nodepool` sets: the NodePool's `spec.disruption`,
        which Karpenter's disruption controller follows."""
        self._replace(name, "disruption", disruption)

    def _replace(self, name: str, field: str, value: dict[str, Any] | None) -> None:
        kube = self.world.kube
        kube.patch(NODEPOOLS, name, {"spec": {field: None}})
        if value:
            kube.patch(NODEPOOLS, name, {"spec": {field: value}})

    def add_burst_nodes(
        self, nodepool: str, instance_type: str, count: int, *, spot: bool, timeout_s: float
    ) -> list[str]:
        """Karpenter nodes of `nodepool` launched before the twin began: NodeClaims that
        Karpenter launches (through EC2) as it launched them then. Returns their instances
        once EC2 has them."""
        self.add(nodepool, instance_type)
        if count == 0:
            return []
        capacity = "spot" if spot else "on-demand"
        names = []
        for _ in range(count):
            name = f"{nodepool}-{self.world.rng.getrandbits(24):06x}"
            names.append(name)
            self.world.kube.create(
                NODECLAIMS, nodeclaim_manifest(name, nodepool, instance_type, capacity)
            )

        def launched() -> list[str] | None:
            with self.world.lock:
                by_claim = {
                    i.nodeclaim: i.instance_id for i in self.world.instances.values() if i.nodeclaim
                }
            ids = [by_claim.get(name) for name in names]
            return [i for i in ids if i] if all(ids) else None

        ids: list[str] = wait_for(launched, timeout_s, f"Karpenter did not launch {names}")
        return ids
