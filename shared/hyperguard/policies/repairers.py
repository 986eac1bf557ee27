"""The cluster's other repairers, as the inventory sees them, and who repairs where (D148).

Beside HyperGuard a cluster may have:
- HyperPod's automatic node recovery: DescribeCluster's `NodeRecovery: Automatic` (AWS's
  default) reboots or replaces what HyperPod's own health checks find;
- Karpenter's node repair: the `NodeRepair` feature gate (alpha, off unless set: its
  Deployment's `FEATURE_GATES`), which repairs a node whose condition matches the cloud
  provider's repair policies (karpenter-provider-aws v1.15 `RepairPolicies`: Ready, and the
  EKS node monitoring agent's conditions) unless the node or its NodeClaim carries
  `karpenter.sh/do-not-repair: "true"`;
- EKS node auto-repair: a managed node group's `nodeRepairConfig.enabled`, and every node of
  EKS Auto Mode (DescribeCluster's `computeConfig.enabled`), on the same conditions;
- AWS Node Termination Handler (a DaemonSet or, in queue-processor mode, a Deployment), which
  cordons and drains a node on a Spot interruption or a rebalance recommendation.

The inventory records them at each sync (`Repairers`, beside the policies in TeamsTable); the
repair policy says, per source, `defer` or `own`; `owners` is the table `hyperguard policy
show repair` and GET /repairers show. Who acts on one fault is
`hyperguard.recovery.repairers.repairer`.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, Literal

from pydantic import Field

from hyperguard.models.camel import CamelModel
from hyperguard.policies.repair import NodeRepairConfig

DO_NOT_REPAIR = "karpenter.sh/do-not-repair"
KARPENTER_GATE = "NodeRepair"
NTH_NAME = "aws-node-termination-handler"
KARPENTER_NAME = "karpenter"
REPAIRER_NAMESPACE = "kube-system"
"""Where Karpenter's and the Node Termination Handler's install guides put them; HyperGuard's
RBAC lets it read Deployments and DaemonSets there and nowhere else."""


class Repairers(CamelModel):
    """What the inventory saw of the cluster's other repairers at its last sync."""

    observed_at: datetime | None = None
    hyperpod_node_recovery: Literal["Automatic", "None"] | None = Field(
        default=None, description="DescribeCluster's NodeRecovery"
    )
    karpenter: str | None = Field(
        default=None, description="Karpenter's Deployment (namespace/name), where found"
    )
    karpenter_node_repair: bool = Field(
        default=False, description="its NodeRepair feature gate (off unless set)"
    )
    eks_auto_mode: bool = Field(default=False, description="DescribeCluster's computeConfig")
    eks_node_groups: dict[str, bool] = Field(
        default_factory=dict,
        max_length=1000,
        description="each managed node group: whether its nodeRepairConfig is enabled",
    )
    node_termination_handler: str | None = Field(
        default=None, description="the Node Termination Handler's workload (kind namespace/name)"
    )
    unread: dict[str, str] = Field(
        default_factory=dict, description="sources that could not be read, and why"
    )

    def active(self) -> dict[str, bool]:
        """Per source: whether that system repairs (or drains) nodes beside HyperGuard."""
        return {
            "hyperpod": self.hyperpod_node_recovery == "Automatic",
            "karpenter": self.karpenter_node_repair,
            "eks": self.eks_auto_mode or any(self.eks_node_groups.values()),
            "nth": self.node_termination_handler is not None,
        }


def feature_gate(gates: str, name: str) -> bool | None:
    """The gate's value in a `--feature-gates` / FEATURE_GATES list ("A=true,B=false");
    None when it is not set."""
    for entry in gates.split(","):
        key, _, value = entry.strip().partition("=")
        if key == name:
            return value.strip().lower() == "true"
    return None


def karpenter_gates(container: Mapping[str, Any]) -> str:
    """The feature gates a Karpenter container runs with: its `--feature-gates` argument
    where given (it wins), else its FEATURE_GATES environment variable (the Helm chart's)."""
    for arg in container.get("args") or []:
        if isinstance(arg, str) and arg.startswith("--feature-gates="):
            return arg.removeprefix("--feature-gates=")
    for env in container.get("env") or []:
        if env.get("name") == "FEATURE_GATES":
            return str(env.get("value") or "")
    return ""


class Owner(CamelModel):
    """One row of "who repairs what": a repairer, where it acts, and who repairs there."""

    source: str = Field(description="hyperpod, karpenter, eks or nth")
    scope: str = Field(description="the nodes it acts on")
    active: bool = Field(description="whether it is on, as the inventory last saw it")
    setting: str = Field(description="the repair policy's setting for it: defer or own")
    repairs: str = Field(description="who acts on the faults it would act on")
    both_act: bool = Field(
        default=False,
        description="HyperGuard owns these faults but the other system acts on them too, "
        "and cannot be held off node by node (HyperPod's recovery, Auto Mode, the handler)",
    )
    note: str


class RepairOwners(CamelModel):
    """GET /repairers: who repairs what, and what the inventory saw."""

    owners: list[Owner]
    seen: Repairers


def owners(seen: Repairers, policy: NodeRepairConfig) -> list[Owner]:
    """Who repairs where, as the last sync saw the cluster and the policy says."""
    rows = [_hyperpod_row(seen, policy), _karpenter_row(seen, policy)]
    if seen.eks_auto_mode or "eks" in seen.unread:
        rows.append(_auto_mode_row(seen, policy))
    for group, enabled in sorted(seen.eks_node_groups.items()):
        rows.append(
            Owner(
                source="eks",
                scope=f"node group {group}",
                active=enabled,
                setting="-",
                repairs="eks" if enabled else "nobody",
                note="HyperGuard repairs only HyperPod and Karpenter nodes: this group's nodes "
                + (
                    "are EKS's to repair"
                    if enabled
                    else "are repaired by neither (auto-repair off)"
                ),
            )
        )
    rows.append(_nth_row(seen, policy))
    return rows


def _row(source: str, scope: str, active: bool, setting: str, repairs: str, note: str) -> Owner:
    """A row; where HyperGuard repairs though the other is on, both act, except Karpenter's
    repair, which HyperGuard holds off with do-not-repair."""
    both = active and repairs == "hyperguard" and source != "karpenter"
    return Owner(
        source=source,
        scope=scope,
        active=active,
        setting=setting,
        repairs=repairs,
        both_act=both,
        note=note,
    )


def _unread(seen: Repairers, source: str) -> str:
    why = seen.unread.get(source)
    return f"could not be read ({why}); HyperGuard repairs" if why else ""


def _hyperpod_row(seen: Repairers, policy: NodeRepairConfig) -> Owner:
    active = seen.hyperpod_node_recovery == "Automatic"
    setting = policy.hyperpod_node_recovery
    repairs = "hyperpod" if active and setting == "defer" else "hyperguard"
    note = _unread(seen, "hyperpod") or (
        "faults HyperPod's health checks find; HyperGuard repairs every other fault"
        if repairs == "hyperpod"
        else "HyperPod repairs too: set NodeRecovery None on the cluster"
        if active
        else "NodeRecovery None"
    )
    return _row("hyperpod", "HyperPod nodes", active, setting, repairs, note)


def _karpenter_row(seen: Repairers, policy: NodeRepairConfig) -> Owner:
    active = seen.karpenter_node_repair
    setting = policy.karpenter_node_repair
    repairs = "karpenter" if active and setting == "defer" else "hyperguard"
    where = seen.karpenter or "not found in kube-system"
    note = _unread(seen, "karpenter") or (
        f"{where}: NodeRepair on; node conditions are Karpenter's to repair"
        if repairs == "karpenter"
        else f"{where}: NodeRepair on; HyperGuard marks a node it repairs {DO_NOT_REPAIR}"
        if active
        else f"{where}: NodeRepair off"
    )
    return _row("karpenter", "Karpenter NodePool nodes", active, setting, repairs, note)


def _auto_mode_row(seen: Repairers, policy: NodeRepairConfig) -> Owner:
    setting = policy.eks_node_auto_repair
    repairs = "eks" if seen.eks_auto_mode and setting == "defer" else "hyperguard"
    note = _unread(seen, "eks") or (
        "EKS Auto Mode repairs node conditions of its nodes"
        if repairs == "eks"
        else "EKS Auto Mode repairs its nodes too (it cannot be turned off): both act"
    )
    return _row("eks", "EKS Auto Mode nodes", seen.eks_auto_mode, setting, repairs, note)


def _nth_row(seen: Repairers, policy: NodeRepairConfig) -> Owner:
    active = seen.node_termination_handler is not None
    setting = policy.node_termination_handler
    repairs = "nth" if active and setting == "defer" else "hyperguard"
    note = _unread(seen, "nth") or (
        f"{seen.node_termination_handler} drains Spot interruptions and rebalance "
        "recommendations; HyperGuard protects and requeues the jobs"
        if repairs == "nth"
        else f"{seen.node_termination_handler} drains too: turn its draining off"
        if active
        else "not found in kube-system"
    )
    return _row("nth", "EKS nodes (interruptions)", active, setting, repairs, note)
