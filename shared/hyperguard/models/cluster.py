"""What the cluster reports, as values: a run's phase, a burst's NodeClaim, an instance
group's size. The cluster adapters (`hyperguard.cluster`) read them from Kubernetes and the
SageMaker API; the scheduling pass's pure decisions (`governance.decide`) are made from them
without loading an adapter."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Literal

from pydantic import BaseModel


class RunKind(StrEnum):
    HYPERPOD = "HyperPodPyTorchJob"
    BATCH = "Job"


class RunPhase(StrEnum):
    PENDING = "pending"
    """Created, waiting for Kueue or for its pods to start."""
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    """The workload failed by itself: the job ends as Failed."""
    LOST = "lost"
    """The cluster took its pods (node fault, eviction): the job resumes from a checkpoint."""


class RunStatus(BaseModel):
    job_id: str
    run: int
    kind: RunKind
    namespace: str
    name: str
    phase: RunPhase
    replicas: int
    reason: str = ""
    message: str = ""
    since: datetime | None = None
    """When the run reached its phase (the deciding condition's lastTransitionTime)."""
    restarts: int = 0
    """How many times the HyperPod training operator restarted it (`status.restartCount`:
    HyperPod auto-resume after a node fault, log monitoring after a hang); for a team's own
    batch Job, how many of its pods failed (`status.failed`: the Job controller replaces them
    up to its `backoffLimit`, D179); 0 for a batch Job HyperGuard made (its limit is 0)."""
    workload: str = ""
    """The Kueue Workload of a team's own object HyperGuard admitted (D170: stopping it
    evicts it back to its queue); "" for a run HyperGuard created."""
    deleting: bool = False
    """Its deletion has begun (`metadata.deletionTimestamp`)."""


HYPERPOD_CAPACITY = "hyperpod"
"""The capacity type of a node a burst added to a HyperPod instance group."""
ADD_LIMIT = 50
"""BatchAddClusterNodes' IncrementTargetCountBy maximum."""


class BurstClaim(BaseModel):
    """One of HyperGuard's NodeClaims as Karpenter last reported it; or a node a burst added
    to a HyperPod instance group (`platform` hyperpod: `name` is its NodeLogicalId,
    `node_pool` its instance group)."""

    name: str
    platform: Literal["eks", "hyperpod"] = "eks"
    burst_id: str
    attempt: int
    node_pool: str
    instance_type: str
    capacity_type: str
    created: datetime | None = None
    deleting: bool = False
    launched: bool = False
    ready: bool = False
    failure: str | None = None
    """Why Karpenter could not launch it (Launched=False: reason and message)."""
    instance_id: str | None = None
    node_name: str | None = None
    idle_since: datetime | None = None


class InstanceGroupSize(BaseModel):
    """An instance group as DescribeCluster reports it."""

    name: str
    instance_type: str
    target_count: int
    current_count: int
    autoscaled: bool = False
    """HyperPod's managed autoscaler (Karpenter) may scale the group: nodes added to it by
    BatchAddClusterNodes would be scaled back."""
    next_patch_at: datetime | None = None
    """AutoPatchConfig.CurrentPatchSchedule.NextPatchDate: when HyperPod's automatic
    patching next updates the group's software (None: no patch scheduled)."""
    patching_strategy: str | None = None
    """AutoPatchConfig.PatchingStrategy: WhenIdle | WhenAllIdle | DrainFirst."""
    software_update_status: str | None = None
    """SoftwareUpdateStatus: Pending | InProgress | Succeeded | Failed | RollbackInProgress |
    RollbackComplete, while or after HyperPod updates the group's software."""


@dataclass(frozen=True, slots=True)
class HeldWorkload:
    """Where a Kueue Workload held on HyperGuard's admission check is (D170): what the
    forwarder's event names and a pass reads."""

    namespace: str
    name: str
