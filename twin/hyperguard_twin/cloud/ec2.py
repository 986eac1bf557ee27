"""EC2 behind the emulator's EC2 API, for the instances Karpenter launches (no open-source
original): a launch finds capacity or fails with InsufficientInstanceCapacity (capacity per
instance type and capacity type is a knob of the world), the instance boots and its kubelet
registers its Node after `ec2_boot_s` (or, a knob, never: a bad AMI or bootstrap), a reboot
takes it down for `reboot_s`, a termination takes its node down.

moto keeps the instances (ids, tags, state); `hyperguard_twin.aws` calls this controller
from moto's RunInstances, TerminateInstances and RebootInstances. What Karpenter's real
controllers then do with the NodeClaims and Nodes is theirs.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from moto.ec2.models.instance_types import INSTANCE_TYPES

from hyperguard.catalogue import spec_of
from hyperguard.cluster.conventions import EC2_CAPACITY_TYPES
from hyperguard.models import NodeStatus
from hyperguard.policies.burst import DEFAULT_HOURLY_PRICES, PoolKind
from hyperguard_twin.cloud.core import CapacityType, Instance, World
from hyperguard_twin.cloud.hyperpod_nodes import NodeLoss
from hyperguard_twin.cloud.kubelets import (
    EVICTION_MEMORY_MI,
    Kubelets,
    kube_reserved,
    node_capacity,
)

EC2_BOOT, EC2_REBOOT_DONE = "ec2_boot", "ec2_reboot_done"
NODECLAIM_TAG = "karpenter.sh/nodeclaim"
NODEPOOL_TAG = "karpenter.sh/nodepool"


class InsufficientCapacityError(Exception):
    """EC2's InsufficientInstanceCapacity for a launch."""


class Ec2:
    def __init__(self, world: World, kubelets: Kubelets, lose: NodeLoss) -> None:
        self.world = world
        self.kubelets = kubelets
        self._lose = lose
        self._capacity: dict[tuple[str, str], int] = {}
        world.handle(EC2_BOOT, self._boot)
        world.handle(EC2_REBOOT_DONE, self._reboot_done)

    def set_capacity(
        self, instance_type: str, capacity_type: CapacityType, available: int | None
    ) -> None:
        """How many more instances EC2 launches of this type and Karpenter capacity type;
        None (everything's default) is no limit. Terminated instances do not give capacity
        back: set it again to free some."""
        if capacity_type not in EC2_CAPACITY_TYPES:
            raise ValueError(f"unknown capacity type {capacity_type!r}")
        if available is not None and available < 0:
            raise ValueError("available must not be negative")
        if available is None:
            self._capacity.pop((instance_type, capacity_type), None)
        else:
            self._capacity[(instance_type, capacity_type)] = available

    def check_capacity(self, instance_type: str, capacity_type: CapacityType, count: int) -> None:
        """Before a launch: InsufficientCapacityError when EC2 has too few instances left."""
        left = self._capacity.get((instance_type, capacity_type))
        if left is not None and left < count:
            raise InsufficientCapacityError(
                f"We currently do not have sufficient {instance_type} capacity in the "
                f"Availability Zone you requested ({capacity_type})."
            )
        if left is not None:
            self._capacity[(instance_type, capacity_type)] = left - count

    def launched(
        self,
        instance_id: str,
        *,
        instance_type: str,
        capacity_type: CapacityType,
        node_name: str,
        tags: dict[str, str],
        now: datetime,
    ) -> None:
        """An instance EC2 launched (the emulator has it): it boots, then its kubelet
        registers, unless it is one that never registers."""
        self.world.reserve_instance_id(instance_id)
        instance = Instance(
            instance_id=instance_id,
            platform="eks",
            cluster=self.world.eks_cluster,
            group=tags.get(NODEPOOL_TAG, ""),
            instance_type=instance_type,
            node_name=node_name,
            launch_time=now,
            capacity_type=EC2_CAPACITY_TYPES[capacity_type],
            nodeclaim=tags.get(NODECLAIM_TAG),
            status=NodeStatus.PENDING,
        )
        self.world.instances[instance_id] = instance
        self.world.schedule(now, self.world.timings.ec2_boot_s, EC2_BOOT, instance_id)

    def _boot(self, instance_id: str, at: datetime) -> None:
        instance = self.world.instances.get(instance_id)
        if instance is None or instance.status is not NodeStatus.PENDING:
            return
        instance.status = NodeStatus.RUNNING
        self.kubelets.register(instance, at)

    def owns(self, instance_id: str) -> bool:
        instance = self.world.instances.get(instance_id)
        return instance is not None and instance.platform == "eks"

    def terminated(self, instance_id: str, now: datetime) -> None:
        """TerminateInstances: the node's kubelet is gone with its instance. Karpenter's
        termination controller deletes the Node (it drained it first)."""
        instance = self.world.instances.pop(instance_id, None)
        if instance is None:
            return
        self.world.faults.pop(instance_id, None)
        instance.status = NodeStatus.SHUTTING_DOWN
        self.kubelets.publish(instance, now)
        self._lose(instance, now)

    def reboot(self, instance_id: str, now: datetime) -> None:
        """RebootInstances of a running instance: down for `reboot_s`, a fault that heals on
        a reboot cured."""
        instance = self.world.instances.get(instance_id)
        if (
            instance is None
            or instance.repair is not None
            or instance.status is not NodeStatus.RUNNING
        ):
            return
        instance.repair = "reboot"
        instance.status = NodeStatus.PENDING
        self.kubelets.publish(instance, now)
        self._lose(instance, now)
        self.world.schedule(now, self.world.timings.reboot_s, EC2_REBOOT_DONE, instance_id)

    def _reboot_done(self, instance_id: str, at: datetime) -> None:
        instance = self.world.rebooted(instance_id)
        if instance is None:
            return
        instance.status = NodeStatus.RUNNING
        self.kubelets.publish(instance, at)


OFFERED_TYPES = (
    "p5.48xlarge",
    "p4d.24xlarge",
    "g5.48xlarge",
    "g5.12xlarge",
    "g6.48xlarge",
    "trn1.32xlarge",
)
"""The GPU and Trainium instance types the twin's EC2 offers Karpenter."""
_EC2_NAME = re.compile(r"(?P<category>[a-z]+)(?P<generation>[0-9]+)[a-z0-9-]*\.(?P<size>[a-z0-9]+)")


def karpenter_instance_types(
    zone: str, names: tuple[str, ...] = OFFERED_TYPES
) -> list[dict[str, Any]]:
    """The twin's Karpenter cloud provider's instance types file: what EC2's
    DescribeInstanceTypes says of each type (the emulator's catalogue: resources as the
    kubelet and the device plugins advertise them, the AWS provider's labels), the kubelet's
    reserved share, and its on-demand and spot offerings in `zone` at the default prices of
    HyperGuard's burst policy (karpenter-provider-aws labels: pkg/apis/v1/labels.go)."""
    out = []
    for name in names:
        info = INSTANCE_TYPES.get(name)
        if not info:
            continue
        spec = spec_of(info)
        capacity = node_capacity(name)
        labels = {
            "karpenter.k8s.aws/instance-cpu": str(spec.vcpu),
            "karpenter.k8s.aws/instance-memory": str(spec.memory_mib),
            "karpenter.k8s.aws/instance-hypervisor": str(info.get("Hypervisor", "nitro")),
            "karpenter.k8s.aws/instance-family": name.split(".")[0],
        }
        if parts := _EC2_NAME.fullmatch(name):
            labels |= {
                "karpenter.k8s.aws/instance-category": parts["category"],
                "karpenter.k8s.aws/instance-generation": parts["generation"],
                "karpenter.k8s.aws/instance-size": parts["size"],
            }
        for gpu in (info.get("GpuInfo") or {}).get("Gpus", [])[:1]:
            labels |= {
                "karpenter.k8s.aws/instance-gpu-count": str(gpu.get("Count", 0)),
                "karpenter.k8s.aws/instance-gpu-manufacturer": str(
                    gpu.get("Manufacturer", "")
                ).lower(),
                "karpenter.k8s.aws/instance-gpu-name": str(gpu.get("Name", "")).lower(),
            }
        architectures = (info.get("ProcessorInfo") or {}).get("SupportedArchitectures") or [
            "x86_64"
        ]
        out.append(
            {
                "name": name,
                "architecture": "arm64" if architectures[0] == "arm64" else "amd64",
                "capacity": capacity,
                "kubeReserved": kube_reserved(capacity),
                "evictionThreshold": {"memory": f"{EVICTION_MEMORY_MI}Mi"},
                "labels": labels,
                "offerings": [
                    {
                        "zone": zone,
                        "capacityType": capacity_type,
                        "price": DEFAULT_HOURLY_PRICES.get((kind, name), 1000.0),
                        "available": True,
                    }
                    for capacity_type, kind in (
                        ("on-demand", PoolKind.EKS_ON_DEMAND),
                        ("spot", PoolKind.EKS_SPOT),
                    )
                ],
            }
        )
    return out
