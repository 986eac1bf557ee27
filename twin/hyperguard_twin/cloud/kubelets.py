"""The nodes' kubelets and health agents, as they show a node to Kubernetes.

A kubelet registers its Node when its instance has booted (HyperPod's or EC2's), dressed as a
real one: a HyperPod node with HyperPod's providerID form and labels, an EC2 node Karpenter
launched with the kubelet's own labels and Karpenter's unregistered taint (Karpenter's
registration controller then copies its NodeClaim's labels and taints onto it, as on EKS).
KWOK (upstream) then keeps the node's heartbeat, Ready condition and lease, and runs its
pods; the twin marks a node whose instance is down (`twin.hyperguard.io/kubelet: down`) and
KWOK's stage reports it NotReady.

The health agents keep what they see on the node: HyperPod's node-health-status and
deep-health-check labels, and the EKS node monitoring agent's conditions
(AcceleratedHardwareReady, KernelReady, ...). A fault is reported as on AWS: HyperPod's
node health event on the default bus for a HyperPod node's hardware; a node condition for
the rest, which the in-cluster forwarder forwards.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from moto.ec2.models.instance_types import INSTANCE_TYPES

from hyperguard.catalogue import ec2_name, spec_of
from hyperguard.cluster.conventions import (
    DEEP_HEALTH_CHECK_LABEL,
    HEALTH_LABEL,
    INSTANCE_GROUP_LABEL,
    INSTANCE_TYPE_LABEL,
)
from hyperguard.cluster.workloads import EFA_RESOURCE, accelerator_resource
from hyperguard.models import NodeStatus
from hyperguard.provider_ids import eks_provider_id, hyperpod_provider_id
from hyperguard_twin.cloud.core import AZ, AZ_ID, Effect, FaultKind, Instance, World
from hyperguard_twin.ids import hyperpod_cluster_arn
from hyperguard_twin.plane.bootstrap import KWOK_ANNOTATION
from hyperguard_twin.plane.kube import NODES, STRATEGIC

# HyperPod's labels on its EKS nodes besides the health ones: the compute type (what
# HyperPod's own add-ons select), the instance group and the cluster (HyperPod EKS docs;
# kubectl on live clusters).
COMPUTE_TYPE_LABEL = "sagemaker.amazonaws.com/compute-type"
CLUSTER_NAME_LABEL = "sagemaker.amazonaws.com/cluster-name"
KUBELET_ANNOTATION = "twin.hyperguard.io/kubelet"
"""`down` while the node's instance is not running: KWOK's node-down stage reports NotReady."""
UNREGISTERED_TAINT = {"key": "karpenter.sh/unregistered", "effect": "NoExecute"}
"""What an EC2 node Karpenter launched registers with (Karpenter v1's bootstrap); Karpenter's
registration controller removes it."""
_ARCHITECTURES = {"x86_64": "amd64", "arm64": "arm64"}
KUBELET_MAX_PODS = 110
"""The kubelet's default maxPods (the EKS AMI computes one per instance type from its ENIs)."""
MONITORED_CONDITIONS = (
    "AcceleratedHardwareReady",
    "ContainerRuntimeReady",
    "KernelReady",
    "NetworkingReady",
    "StorageReady",
)
"""The conditions the EKS node monitoring agent keeps on a node, all True when healthy."""
FAULT_CONDITIONS: dict[str, tuple[str, str]] = {
    "gpu": ("AcceleratedHardwareReady", "NvidiaXID48Error"),
    "persistent": ("AcceleratedHardwareReady", "NvidiaXID79Error"),
    "kernel": ("KernelReady", "KernelBug"),
}


def _condition(kind: str, ok: bool, reason: str, at: str, message: str = "") -> dict[str, str]:
    return {
        "type": kind,
        "status": "True" if ok else "False",
        "reason": reason,
        "message": message,
        "lastHeartbeatTime": at,
        "lastTransitionTime": at,
    }


def node_capacity(instance_type: str) -> dict[str, str]:
    """What the kubelet reports: EC2's vCPUs and memory, the accelerators as the device
    plugin advertises them (nvidia.com/gpu or aws.amazon.com/neuron), the EFA interfaces as
    the EFA device plugin does (vpc.amazonaws.com/efa), maxPods."""
    info = INSTANCE_TYPES.get(ec2_name(instance_type)) or {}
    capacity = {"pods": str(KUBELET_MAX_PODS)}
    if not info:
        return capacity
    spec = spec_of(info)
    capacity |= {"cpu": str(spec.vcpu), "memory": f"{spec.memory_mib}Mi"}
    if spec.accelerators:
        capacity[accelerator_resource(instance_type)] = str(spec.accelerators)
    if spec.efa_interfaces:
        capacity[EFA_RESOURCE] = str(spec.efa_interfaces)
    return capacity


def kube_reserved(capacity: Mapping[str, str]) -> dict[str, str]:
    """The EKS AMI's kube-reserved (CPU: 6% of the first core, 1% of the second, 0.5% of the
    next two, 0.25% of the rest; memory: 11 MiB per pod + 255 MiB)."""
    reserved = {}
    if "cpu" in capacity:
        cores = int(capacity["cpu"])
        shares = (60, 10, 5, 5)
        reserved["cpu"] = f"{int(sum(shares[:cores]) + max(cores - 4, 0) * 2.5)}m"
    if "memory" in capacity:
        reserved["memory"] = f"{11 * KUBELET_MAX_PODS + 255}Mi"
    return reserved


EVICTION_MEMORY_MI = 100
"""The kubelet's hard-eviction threshold (memory.available<100Mi)."""


def allocatable(capacity: Mapping[str, str]) -> dict[str, str]:
    """Capacity less kube-reserved and the hard-eviction threshold."""
    out = dict(capacity)
    reserved = kube_reserved(capacity)
    if "cpu" in reserved:
        out["cpu"] = f"{int(capacity['cpu']) * 1000 - int(reserved['cpu'].removesuffix('m'))}m"
    if "memory" in reserved:
        memory = int(capacity["memory"].removesuffix("Mi"))
        used = int(reserved["memory"].removesuffix("Mi")) + EVICTION_MEMORY_MI
        out["memory"] = f"{memory - used}Mi"
    return out


class Kubelets:
    def __init__(self, world: World) -> None:
        self.world = world

    # ------------------------------------------------------------------ the Node

    def provider_id(self, instance: Instance) -> str:
        """spec.providerID as the node's kubelet sets it: HyperPod's form names the cluster
        by the id its ARN ends in; EC2 nodes have the AWS cloud provider's form."""
        if instance.platform == "hyperpod":
            arn = hyperpod_cluster_arn(
                self.world.hyperpod_cluster, self.world.region, self.world.account
            )
            return hyperpod_provider_id(AZ_ID, arn.rsplit("/", 1)[-1], instance.instance_id)
        return eks_provider_id(AZ, instance.instance_id)

    def node_object(self, instance: Instance, now: datetime) -> dict[str, Any]:
        """The Node as its kubelet registers it."""
        info = INSTANCE_TYPES.get(ec2_name(instance.instance_type)) or {}
        architectures = (info.get("ProcessorInfo") or {}).get("SupportedArchitectures") or [""]
        labels: dict[str, str] = {
            INSTANCE_TYPE_LABEL: instance.instance_type,
            "kubernetes.io/hostname": instance.node_name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": _ARCHITECTURES.get(architectures[0], "amd64"),
            "topology.kubernetes.io/region": self.world.region,
            "topology.kubernetes.io/zone": AZ,
            "topology.k8s.aws/zone-id": AZ_ID,
        }
        spec: dict[str, Any] = {"providerID": self.provider_id(instance)}
        if instance.platform == "hyperpod":
            labels |= {
                COMPUTE_TYPE_LABEL: "hyperpod",
                INSTANCE_GROUP_LABEL: instance.group,
                CLUSTER_NAME_LABEL: self.world.hyperpod_cluster,
            }
            labels.update({k: v for k, v in self.health_labels(instance).items() if v})
        else:
            spec["taints"] = [UNREGISTERED_TAINT]
        capacity = node_capacity(instance.instance_type)
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": instance.node_name,
                "labels": labels,
                "annotations": {
                    KWOK_ANNOTATION: "fake",
                    **{k: v for k, v in self._kubelet_annotation(instance).items() if v},
                },
            },
            "spec": spec,
            "status": {
                "capacity": capacity,
                "allocatable": allocatable(capacity),
                "conditions": self._registration_conditions(instance, now),
                "nodeInfo": {
                    "bootID": f"{instance.instance_id}-0",
                    "architecture": labels["kubernetes.io/arch"],
                },
            },
        }

    def register(self, instance: Instance, now: datetime) -> None:
        """The kubelet's first start on the instance: the Node is created (kept if there)."""
        from hyperguard_twin.plane.kube import KubeApiError

        try:
            self.world.kube.create(NODES, self.node_object(instance, now))
        except KubeApiError as error:
            if error.code != 409:
                raise
            self.publish(instance, now)
        instance.registered = True

    def deregister(self, instance: Instance) -> None:
        """The instance is gone (terminated, replaced): its Node goes with it."""
        if instance.registered:
            self.world.kube.delete(NODES, instance.node_name)
        instance.registered = False

    # ------------------------------------------------------------------ health

    def health_labels(self, instance: Instance) -> dict[str, str | None]:
        """HyperPod's health labels on its nodes: a node being replaced (or a replacement
        still booting), being rebooted, unhealthy or under a deep health check, else
        Schedulable."""
        if instance.platform != "hyperpod":
            return {}
        if instance.repair is not None and instance.status is not NodeStatus.PENDING:
            health = "UnschedulablePendingReplacement"
        elif instance.repair == "reboot":
            health = "UnschedulablePendingReboot"
        elif instance.status is NodeStatus.DEEP_HEALTH_CHECK_IN_PROGRESS or not self.world.healthy(
            instance
        ):
            health = "Unschedulable"
        else:
            health = "Schedulable"
        return {HEALTH_LABEL: health, DEEP_HEALTH_CHECK_LABEL: instance.deep_health_check}

    def _kubelet_annotation(self, instance: Instance) -> dict[str, str | None]:
        up = instance.status in (NodeStatus.RUNNING, NodeStatus.DEEP_HEALTH_CHECK_IN_PROGRESS)
        return {KUBELET_ANNOTATION: None if up else "down"}

    def _monitor_conditions(self, instance: Instance, now: datetime) -> list[dict[str, str]]:
        at = self.world.stamp(now)
        fault = self.world.faults.get(instance.instance_id)
        broken, why = FAULT_CONDITIONS[fault.kind] if fault else ("", "")
        conditions = []
        for kind in MONITORED_CONDITIONS:
            ok = kind != broken
            conditions.append(_condition(kind, ok, f"{kind}IsReady" if ok else why, at))
        return conditions

    def _registration_conditions(self, instance: Instance, now: datetime) -> list[dict[str, str]]:
        """The conditions a Node is created with. A kubelet posts its Ready condition in the
        Node it registers (its node status setters run before the create), and that matters:
        kube-controller-manager's node lifecycle controller keeps a node's last heartbeat by
        name, past the Node's deletion. A Node created without Ready under the name of one
        deleted over a minute before (EC2 private IPs, and so node names, are reused) is
        marked Unknown at the controller's next pass, and tainted unreachable (NoExecute),
        before KWOK has initialised it. A node whose instance is down registers without it:
        KWOK's node-down stage reports it once it is up."""
        conditions = self._monitor_conditions(instance, now)
        if not self._kubelet_annotation(instance)[KUBELET_ANNOTATION]:
            at = self.world.stamp(now)
            ready = _condition("Ready", True, "KubeletReady", at, "kubelet is posting ready status")
            conditions.insert(0, ready)
        return conditions

    def publish(self, instance: Instance, now: datetime) -> None:
        """The node's Kubernetes view as the agents keep it: labels, whether its kubelet
        runs, and the monitoring agent's conditions."""
        if not instance.registered:
            return
        kube = self.world.kube
        metadata: dict[str, Any] = {"annotations": self._kubelet_annotation(instance)}
        if labels := self.health_labels(instance):
            metadata["labels"] = labels
        kube.patch(NODES, instance.node_name, {"metadata": metadata})
        kube.patch(
            NODES,
            instance.node_name,
            {"status": {"conditions": self._monitor_conditions(instance, now)}},
            subresource="status",
            content_type=STRATEGIC,
        )
        if (
            instance.status is NodeStatus.RUNNING
            and not self._kubelet_annotation(instance)[KUBELET_ANNOTATION]
        ):
            self._new_boot(instance)

    def _new_boot(self, instance: Instance) -> None:
        """After a reboot the kubelet reports a new boot id (what Karpenter's reboot
        controller, and any reader of nodeInfo, takes as proof of a reboot)."""
        boots = instance.boots
        node = self.world.kube.get(NODES, instance.node_name) or {}
        current = ((node.get("status") or {}).get("nodeInfo") or {}).get("bootID", "")
        wanted = f"{instance.instance_id}-{boots}"
        if current != wanted:
            self.world.kube.patch(
                NODES,
                instance.node_name,
                {"status": {"nodeInfo": {"bootID": wanted}}},
                subresource="status",
                content_type=STRATEGIC,
            )

    def report_fault(self, instance: Instance, kind: FaultKind, *, automatic: bool) -> None:
        """The health agent's report: HyperPod's node health event for a HyperPod node's
        hardware; the in-cluster forwarder forwards the node condition for the rest. Its
        RepairAction is the repair HyperPod's automatic node recovery starts (`automatic`),
        else "None" with the advice in its Recommendation, as in AWS's published sample."""
        if instance.platform != "hyperpod" or kind == "kernel":
            return  # the condition is on the node: the forwarder sees it change
        advice = "Reboot" if kind == "gpu" else "Replace"
        fault_type = "NvidiaXidError" if kind == "gpu" else "NvidiaErrorTerminate"
        arn = hyperpod_cluster_arn(
            self.world.hyperpod_cluster, self.world.region, self.world.account
        )
        detail = {
            "ClusterName": self.world.hyperpod_cluster,
            "ClusterArn": arn,
            "InstanceId": instance.instance_id,
            "Tags": {},
            "HealthSummary": {
                "HealthStatus": "Unhealthy",
                "HealthStatusReason": "HyperPod Health Monitoring Agent (HMA) has "
                f"detected fault type {fault_type} on this node and is unhealthy.",
                "RepairAction": advice if automatic else "None",
                "Recommendation": f"Please {advice} the Faulty Node.",
            },
        }
        self.world.effects(
            Effect(
                "put_event",
                (
                    {
                        "Source": "aws.sagemaker",
                        "DetailType": "SageMaker HyperPod Cluster Node Health Event",
                        "Detail": json.dumps(detail),
                        "Resources": [arn],
                        "EventBusName": "default",
                    },
                ),
            )
        )
