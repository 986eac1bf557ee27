"""What HyperGuard needs installed in the cluster, as its API server shows it: Kueue serving
the API version HyperGuard writes (HyperPod task governance installs it), the HyperPod
training operator's HyperPodPyTorchJob, and the Karpenter NodePools bursts go to, with their
limits and node classes. `summarize` is pure: the reads are the gateway's."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

KUEUE_CRD = "clusterqueues.kueue.x-k8s.io"
KUEUE_VERSION = "v1beta2"
"""The Kueue API version HyperGuard's objects are written in (hyperguard.cluster.kueue)."""
OPERATOR_CRD = "hyperpodpytorchjobs.sagemaker.amazonaws.com"
OPERATOR_VERSION = "v1"
EC2_NODE_CLASS_GROUP = "karpenter.k8s.aws"


class NodePoolSummary(BaseModel):
    name: str
    limits: dict[str, str] = Field(description="spec.limits: what the pool may launch in all")
    node_class: str = Field(description="its nodeClassRef: group/kind/name")
    node_class_found: bool | None = Field(
        description="the EC2NodeClass exists (None: another kind, e.g. EKS Auto Mode's "
        "NodeClass, not checked)"
    )
    node_class_ready: bool | None = Field(
        description="the EC2NodeClass's Ready condition (None: not found or not reported)"
    )


class ClusterPrerequisites(BaseModel):
    kueue_versions: list[str] | None = Field(
        description="the versions of kueue.x-k8s.io served (None: Kueue is not installed)"
    )
    training_operator_versions: list[str] | None = Field(
        description="the versions of HyperPodPyTorchJob served (None: the HyperPod training "
        "operator is not installed)"
    )
    node_pools: list[NodePoolSummary]


def _ready(obj: dict[str, Any]) -> bool | None:
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return bool(condition.get("status") == "True")
    return None


def summarize(
    kueue: list[str] | None,
    operator: list[str] | None,
    pools: list[dict[str, Any]],
    classes: list[dict[str, Any]] | None,
) -> ClusterPrerequisites:
    """`classes`: the EC2NodeClasses (None: their CRD is not installed)."""
    by_name = {(c.get("metadata") or {}).get("name"): c for c in classes or []}
    summaries = []
    for pool in pools:
        spec = pool.get("spec") or {}
        ref = ((spec.get("template") or {}).get("spec") or {}).get("nodeClassRef") or {}
        group, kind, name = ref.get("group", ""), ref.get("kind", ""), ref.get("name", "")
        ec2 = group == EC2_NODE_CLASS_GROUP
        found = by_name.get(name) if ec2 else None
        summaries.append(
            NodePoolSummary(
                name=str((pool.get("metadata") or {}).get("name", "")),
                limits={str(k): str(v) for k, v in (spec.get("limits") or {}).items()},
                node_class=f"{group}/{kind}/{name}",
                node_class_found=(found is not None) if ec2 else None,
                node_class_ready=_ready(found) if found is not None else None,
            )
        )
    return ClusterPrerequisites(
        kueue_versions=kueue, training_operator_versions=operator, node_pools=summaries
    )
