"""The ClusterGateway port: what HyperGuard asks of a cluster, whatever runs it.

One implementation ships: `hyperpod_eks.HyperPodEksGateway`, which combines the SageMaker
API (`hyperpod`), the EKS cluster's Kubernetes API (`kubernetes`, lightkube) and EC2 (`ec2`,
for Karpenter's burst nodes). The local twin serves those same APIs rather than replacing
this port. Every mutating call is an *ensure*: calling it twice has the effect of calling it
once, and the return value says whether anything changed, so that at-least-once workflow
steps stay safe.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import BaseModel, Field

from hyperguard.models import Job, Node, RepairOutcome
from hyperguard.models.cluster import BurstClaim, InstanceGroupSize, RunStatus

if TYPE_CHECKING:
    from hyperguard.policies.repairers import Repairers


class ClusterError(Exception):
    """A cluster call failed in a way the caller may retry."""


class InvalidRunError(ClusterError):
    """The API server refused a run object as invalid (422): it will refuse it again."""


class NodeNotFoundError(ClusterError):
    """The instance is not (or no longer) part of the cluster."""

    def __init__(self, instance_id: str) -> None:
        super().__init__(f"node {instance_id} is not in the cluster")
        self.instance_id = instance_id


class DrainResult(BaseModel):
    evicted: list[str] = Field(default_factory=list, description="pods evicted gracefully")
    forced: list[str] = Field(default_factory=list, description="pods deleted after deadline")
    blocked: list[str] = Field(default_factory=list, description="pods a PDB still protects")

    @property
    def complete(self) -> bool:
        return not self.blocked


class ClusterGateway(Protocol):
    def list_nodes(self) -> list[Node]: ...

    def node_status(self, instance_id: str) -> Node:
        """Raises NodeNotFoundError for an instance that is not in the cluster."""
        ...

    def cordon(self, instance_id: str, *, incident_id: str, reason: str) -> bool: ...

    def uncordon(self, instance_id: str) -> bool: ...

    def drain(
        self, instance_id: str, *, deadline_s: float, force: bool = True, evict: bool = True
    ) -> DrainResult:
        """Evict the node's pods, retrying what a PodDisruptionBudget refuses for `deadline_s`
        (0: one round); what is left is then deleted (`force`) or reported blocked. Without
        `evict`, nothing is evicted: the pods left are deleted (`force`) or reported."""
        ...

    def reboot(self, instance_ids: list[str]) -> RepairOutcome: ...

    def replace(self, instance_ids: list[str]) -> RepairOutcome: ...

    def start_deep_health_check(self, instance_ids: list[str], checks: list[str]) -> bool: ...

    def ensure_queues(self, manifests: list[dict[str, Any]]) -> dict[str, str]:
        """Ensure the Kueue objects runs need (hyperguard.cluster.kueue) exist as HyperGuard
        keeps them; the outcome per `<Kind>/<name>` (created, updated, unchanged, foreign)."""
        ...

    def dispatch(self, job: Job, nodes: list[str]) -> bool:
        """Submit run `job.run` of the job on `nodes` (one instance id per replica)."""
        ...

    def stop_job(
        self,
        job_id: str,
        *,
        before_run: int | None = None,
        runs: Sequence[RunStatus] | None = None,
    ) -> bool:
        """Delete the job's runs (only those numbered below `before_run`, if given): `runs`,
        as the caller read them (a pass's snapshot: no list of its own, D177), else those the
        cluster lists now; a held object a team applied is evicted back to its queue instead
        (D170)."""
        ...

    def resize(self, job: Job, nodes: list[str]) -> bool:
        """Run the job on `nodes` instead (in place where the run allows: True)."""
        ...

    def held_workload(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The Kueue Workload `name` in `namespace` (hyperguard.cluster.held); None if gone."""
        ...

    def refuse_held(self, namespace: str, workload: str, reason: str) -> bool:
        """Reject HyperGuard's admission check on a held Workload (Kueue deactivates it and
        says why); False when it is gone."""
        ...

    def job_runs(self) -> list[RunStatus]: ...

    def placements(self, jobs: list[Job]) -> dict[str, list[str]]:
        """Where the pods of these jobs' current runs run (instance ids), for each job whose
        run's pods are all bound and running."""
        ...

    def winding_down(self, jobs: list[Job]) -> set[str]:
        """Those of these waiting jobs that still have a pod of a stopped run on a Ready
        node, running or in its termination grace period."""
        ...

    def nodes_and_claims(self) -> tuple[list[Node], list[BurstClaim] | ClusterError]:
        """`list_nodes()` and `burst_claims()` read together (each listing once); the error
        in place of the claims when only they could not be read."""
        ...

    def burst_claims(
        self, burst_id: str | None = None, *, include_hyperpod: bool = True
    ) -> list[BurstClaim]:
        """The NodeClaims HyperGuard created for burst capacity and (unless told not to) the
        HyperPod nodes bursts added (of one burst, if given)."""
        ...

    def request_burst_nodes(self, manifests: list[dict[str, Any]]) -> int:
        """Ensure these NodeClaims (hyperguard.cluster.karpenter.nodeclaim_manifest) exist;
        how many were created."""
        ...

    def release_burst_node(self, claim: BurstClaim) -> bool: ...

    def mark_burst_node_idle(self, claim: BurstClaim, since: datetime | None) -> bool: ...

    def nodepool_room(self, node_pool: str, instance_type: str) -> tuple[int | None, str | None]:
        """More nodes of the type the NodePool's limits allow (None: unlimited), and why."""
        ...

    def hyperpod_node_recovery(self) -> str:
        """DescribeCluster's NodeRecovery: Automatic (HyperPod repairs what its own health
        checks find) or None."""
        ...

    def repairers(self) -> Repairers:
        """The cluster's other repairers (hyperguard.recovery.repairers): HyperPod's node
        recovery, Karpenter's node repair, EKS node auto-repair, the Node Termination Handler.
        A source that cannot be read is named in `unread`, never raised."""
        ...

    def hyperpod_events(self, instance_id: str, since: datetime) -> list[dict[str, Any]]:
        """HyperPod's cluster events about the node since `since` (ListClusterEvents'
        ClusterEventSummary items, oldest first; none where the cluster keeps none)."""
        ...

    def hold_other_repair(self, instance_id: str, *, held: bool) -> bool:
        """Annotate (held) or un-annotate the node karpenter.sh/do-not-repair, so Karpenter's
        node repair leaves a node HyperGuard repairs alone; False when it already was."""
        ...

    def hyperpod_groups(self) -> tuple[bool, list[InstanceGroupSize]]:
        """Whether the HyperPod cluster adds nodes on request, and its instance groups."""
        ...

    def add_hyperpod_nodes(
        self, group: str, count: int, client_token: str
    ) -> tuple[list[str], list[str]]: ...

    def track_hyperpod_nodes(
        self, burst_id: str, attempt: int, group: str, logical_ids: list[str]
    ) -> list[BurstClaim]: ...

    def delete_hyperpod_nodes(self, logical_ids: list[str]) -> None: ...
