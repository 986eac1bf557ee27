"""A simulated SageMaker HyperPod cluster with an EKS burst pool: the cloud behind the twin.

The service never calls this module. It calls SageMaker (the emulator routes HyperPod's
node operations here, `twin/aws.py`), EC2 (reboots of burst instances) and the Kubernetes
API server, whose object store this simulator keeps up to date the way the kubelet, Kueue,
the job controller, HyperPod's health agent and Karpenter would. Changes the service makes
through the Kubernetes API (a Job created, a pod evicted, a NodeClaim deleted) reach the
simulator through the store's listeners.

Everything that takes time — reboots, replacements, deep health checks, training steps,
checkpoints — is worked out from the injected clock whenever the simulator is touched, never
by sleeping. Durations are virtual (`ScaledClock` in the twin, `ManualClock` in tests);
timestamps shown through an API are the real time at which they happen (`clock.wall`).
What the simulator cannot do under its lock — write a checkpoint to S3, put an event on
EventBridge, report a checkpoint to the service's API — it hands to `effects` afterwards.

What it models, and the behaviour it stands for:
- HyperPod nodes in instance groups; a replacement is a new instance in the same group with
  the same NodeLogicalId (or, a knob of the world, a new one); Karpenter nodes with their
  NodeClaims, replaced by deleting those;
- Karpenter v1 launching the NodeClaims the service creates: an EC2 launch, then the node
  registering; EC2 capacity per instance type and capacity type is a knob of the world (an
  insufficient-capacity error deletes the claim), and so is a node that never registers
  (Karpenter deletes its claim after the registration TTL);
- faults: "gpu" (cured by a reboot), "persistent" (only a replacement cures it), "kernel"
  (KernelReady=False; SageMaker still says Running; a reboot cures it); the health agent
  shows them in the SageMaker status, the node-health-status label and node conditions, and
  puts HyperPod's node health event (or, for a condition, the in-cluster forwarder's event)
  on EventBridge;
- BatchReboot/BatchReplaceClusterNodes with per-node errors (InstanceIdNotFound,
  InstanceIdInUse), StartClusterHealthCheck;
- a cluster in Continuous node provisioning mode: BatchAddClusterNodes grows an instance
  group by Pending nodes, each with its NodeLogicalId, that get an instance and then join
  Kubernetes (HyperPod capacity per instance group is a knob of the world: a launch that
  finds none left leaves the node in Failure), idempotent by ClientToken;
  BatchDeleteClusterNodes removes nodes by instance id or NodeLogicalId (NodeIdNotFound,
  NodeIdInUse while a reboot or replacement is in progress), their pods lost;
- a batch/v1 Job or HyperPodPyTorchJob the service creates suspended starts once Kueue
  admits it (twin/kueue.py: its LocalQueue, ClusterQueue, WorkloadPriorityClass and quota
  must be there), and its pods start on the nodes it pins; a job steps while every node
  under it is Running and healthy, and checkpoints every N steps (S3 shards, then the
  `_COMPLETE` marker, then a report to the service's API); a new run of a job resumes from
  the last checkpoint it wrote. A lost pod fails the Job
  (backoffLimit 0), unless the job opted into HyperPod auto-resume: HyperPod restarts it from
  its checkpoint once its nodes (a replaced node counts as its replacement) are back.
"""

from __future__ import annotations

import copy
import heapq
import json
import math
import random
import re
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, Literal, Self

from moto.ec2.models.instance_types import INSTANCE_TYPES
from pydantic import BaseModel, ConfigDict, Field, model_validator

from hyperguard.catalogue import ec2_name, spec_of
from hyperguard.cluster.conventions import (
    CAPACITY_TYPE_LABEL,
    DEEP_HEALTH_CHECK_LABEL,
    EC2_CAPACITY_TYPES,
    HEALTH_LABEL,
    INSTANCE_GROUP_LABEL,
    INSTANCE_ID_IN_USE,
    INSTANCE_ID_NOT_FOUND,
    INSTANCE_TYPE_LABEL,
    NODEPOOL_LABEL,
)
from hyperguard.cluster.karpenter import DISRUPTED_TAINT
from hyperguard.cluster.workloads import (
    AUTO_RESUME_ANNOTATION,
    CHECKPOINT_ENV,
    DO_NOT_DISRUPT_ANNOTATION,
    HPJOB_POD_LABEL,
    JOB_ID_ANNOTATION,
    MAX_STEPS_ENV,
    REPLICA_SPEC,
    RESUME_STEP_ENV,
    accelerator_resource,
)
from hyperguard.models import NodeStatus
from hyperguard.models.jobs import ElasticPolicy
from hyperguard.provider_ids import eks_provider_id, hyperpod_provider_id
from hyperguard.twin.clock import Clock
from hyperguard.twin.ids import hyperpod_cluster_arn
from hyperguard.twin.kube.scheduling import bound_by_node, choose_node
from hyperguard.twin.kube.store import (
    HYPERPOD_PYTORCH_JOBS,
    JOBS,
    NODECLAIMS,
    NODEPOOLS,
    NODES,
    PODS,
    ObjectStore,
)
from hyperguard.twin.kueue import Kueue, is_suspended

FaultKind = Literal["gpu", "persistent", "kernel"]
CapacityType = Literal["reserved", "on-demand", "spot"]
"""Karpenter's `karpenter.sh/capacity-type` values."""
RunObjectKind = Literal["Job", "HyperPodPyTorchJob"]
RUN_RESOURCES: dict[Any, Any] = {
    "Job": JOBS,
    "HyperPodPyTorchJob": HYPERPOD_PYTORCH_JOBS,
    JOBS: JOBS,
    HYPERPOD_PYTORCH_JOBS: HYPERPOD_PYTORCH_JOBS,
}
CONTROLLER_UID_LABEL = "batch.kubernetes.io/controller-uid"
AZ = "us-east-1a"
AZ_ID = "use1-az1"
"""The zone's id, which HyperPod's providerIDs name (live clusters show use1-az4 and the like)."""
# HyperPod's labels on its EKS nodes besides the health ones: the compute type (what
# HyperPod's own add-ons select), the instance group and the cluster (HyperPod EKS docs;
# kubectl on live clusters).
COMPUTE_TYPE_LABEL = "sagemaker.amazonaws.com/compute-type"
CLUSTER_NAME_LABEL = "sagemaker.amazonaws.com/cluster-name"
# EC2's architecture names → Kubernetes' (kubernetes.io/arch).
_ARCHITECTURES = {"x86_64": "amd64", "arm64": "arm64"}
KUBELET_MAX_PODS = 110
"""The kubelet's default maxPods (the EKS AMI computes one per instance type from its ENIs)."""
# BatchDeleteClusterNodes' error codes the simulator gives.
NODE_ID_NOT_FOUND = "NodeIdNotFound"
NODE_ID_IN_USE = "NodeIdInUse"
KARPENTER_FINALIZER = "karpenter.sh/termination"
# A NodeClaim's stages; its Ready condition is True once all of them are.
CLAIM_STAGES = ("Launched", "Registered", "Initialized")
# The conditions the EKS node monitoring agent keeps on a node, all True when healthy.
MONITORED_CONDITIONS = (
    "AcceleratedHardwareReady",
    "ContainerRuntimeReady",
    "KernelReady",
    "NetworkingReady",
    "StorageReady",
)
FAULT_CONDITIONS: dict[str, tuple[str, str]] = {
    "gpu": ("AcceleratedHardwareReady", "NvidiaXID48Error"),
    "persistent": ("AcceleratedHardwareReady", "NvidiaXID79Error"),
    "kernel": ("KernelReady", "KernelBug"),
}


class SimTimings(BaseModel):
    """How long things take in the simulation, in seconds of virtual time.

    Defaults follow the published HyperPod P90 recovery figures for p5.48xlarge where there
    is one (replacement 903-981 s). Assumed, for want of a published figure: a warm reboot
    of a p5.48xlarge (300 s: firmware POST with 8 GPUs and EFA, kubelet re-registration), the
    120 s an old instance shuts down before its replacement is provisioned, 600 s of deep
    health checks, 60 s for Karpenter to drain and terminate a burst node, and for a NodeClaim
    Karpenter launches a GPU node for: 60 s of EC2 launch (until Launched, with the instance's
    providerID), then 240 s until the node is Ready (boot, kubelet registration, GPU driver
    and device plugin). Karpenter's own: a claim whose node has not registered 15 min after
    the claim was created is deleted. A node BatchAddClusterNodes adds has its instance after
    60 s (as a NodeClaim's EC2 launch) and runs, joined to Kubernetes, after 820 s: a
    replacement's provisioning without the old instance's shutdown (940 - 120 s), for want of
    a published figure for an added node.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    reboot_s: float = Field(default=300.0, ge=0)
    replace_s: float = Field(default=940.0, ge=0, description="until the new node runs")
    replace_shutdown_s: float = Field(default=120.0, ge=0)
    deep_health_check_s: float = Field(default=600.0, ge=0)
    nodeclaim_termination_s: float = Field(default=60.0, ge=0)
    nodeclaim_launch_s: float = Field(default=60.0, ge=0, description="until Launched")
    nodeclaim_ready_s: float = Field(
        default=240.0, ge=0, description="from Launched until Registered, Initialized, Ready"
    )
    nodeclaim_registration_ttl_s: float = Field(
        default=900.0, ge=0, description="from creation: an unregistered claim is deleted"
    )
    hyperpod_launch_s: float = Field(
        default=60.0, ge=0, description="from BatchAddClusterNodes until it has an instance"
    )
    hyperpod_add_s: float = Field(
        default=820.0, ge=0, description="from BatchAddClusterNodes until the node runs"
    )
    job_restart_s: float = Field(default=60.0, ge=0, description="start/resume overhead")
    rescale_s: float = Field(
        default=60.0,
        ge=0,
        description="an elastic job restarting at a new size, its healthy pods' nodes kept",
    )
    patch_s: float = Field(
        default=900.0,
        ge=0,
        description="HyperPod's automatic patching of one instance (SystemUpdating: the root "
        "volume replaced with the new AMI, boot, lifecycle scripts), assumed",
    )
    step_duration_s: float = Field(default=30.0, gt=0, description="one training step")
    checkpoint_interval_steps: int = Field(default=10, ge=1)

    @model_validator(mode="after")
    def _stages_in_order(self) -> Self:
        if self.replace_shutdown_s > self.replace_s:
            raise ValueError("replace_shutdown_s must not exceed replace_s")
        if self.hyperpod_launch_s > self.hyperpod_add_s:
            raise ValueError("hyperpod_launch_s must not exceed hyperpod_add_s")
        return self


@dataclass
class Instance:
    instance_id: str
    platform: Literal["hyperpod", "eks"]
    cluster: str
    group: str
    """HyperPod instance group or Karpenter NodePool."""
    instance_type: str
    """HyperPod's `ml.` name, or the EC2 name for a burst node."""
    node_name: str
    launch_time: datetime
    capacity_type: str = "OnDemand"
    logical_id: str | None = None
    nodeclaim: str | None = None
    status: NodeStatus = NodeStatus.RUNNING
    deep_health_check: str | None = None
    """InProgress, Passed or Failed: HyperPod's deep-health-check-status label."""
    patched_at: datetime | None = None
    """When HyperPod's automatic patching last updated it (LastSoftwareUpdateTime)."""


@dataclass(frozen=True)
class Fault:
    kind: FaultKind
    heal_on_reboot: bool


class _Happening(StrEnum):
    REBOOT_DONE = "reboot_done"
    SHUTDOWN_DONE = "shutdown_done"
    BOOT_DONE = "boot_done"
    CHECK_DONE = "check_done"
    CLAIM_GONE = "claim_gone"
    CLAIM_LAUNCH = "claim_launch"
    """EC2 answers the launch of an API-created NodeClaim (keyed by the claim's uid)."""
    CLAIM_REGISTER = "claim_register"
    CLAIM_TTL = "claim_ttl"
    """Karpenter's registration TTL of an API-created NodeClaim ran out."""
    FAULTY_SCALE_DOWN = "faulty_scale_down"
    """An elastic run's faultyScaleDownTimeoutInSeconds ran out (keyed by the run's uid)."""
    NODE_LAUNCH = "node_launch"
    """HyperPod launches the instance of an added node (keyed by its NodeLogicalId)."""
    NODE_JOIN = "node_join"
    """An added node has booted and joins Kubernetes (keyed by its NodeLogicalId)."""
    PATCH_START = "patch_start"
    """An instance group's NextPatchDate came (keyed by the group)."""
    PATCH_CHECK = "patch_check"
    """Automatic patching looks again for idle instances of the group (keyed by the group)."""
    PATCH_DONE = "patch_done"
    """An instance's software update is done."""


_REPAIR_ENDS = frozenset({_Happening.REBOOT_DONE, _Happening.SHUTDOWN_DONE, _Happening.BOOT_DONE})


@dataclass(order=True, frozen=True)
class _Scheduled:
    at: datetime
    seq: int
    what: _Happening = field(compare=False)
    instance_id: str = field(compare=False)


@dataclass
class _Addition:
    """A node BatchAddClusterNodes added, until it runs: waiting for its instance, then
    booting on it (`instance_id`); or, its launch failed (`failure`), in Failure for good."""

    group: str
    instance_id: str | None = None
    failure: str | None = None


PATCHING_STRATEGIES = ("WhenIdle", "WhenAllIdle", "DrainFirst")
"""ClusterPatchingStrategy (botocore's sagemaker model)."""
PATCH_POLL_S = 60.0
"""How often automatic patching looks for instances that became idle (assumed)."""


@dataclass
class _Patch:
    """An instance group's AutoPatchConfig as UpdateCluster sets it, and the patching that
    runs at its NextPatchDate: `waiting` instances not patched yet, `updating` those being
    patched now."""

    at: datetime
    strategy: str
    idle_wait_s: float
    batch: int
    status: str | None = None
    waiting: set[str] = field(default_factory=set)
    updating: set[str] = field(default_factory=set)


@dataclass
class _Repair:
    action: Literal["reboot", "replace"]
    replacement_id: str | None = None


@dataclass
class Run:
    """One run of a job: the pods of one batch Job or HyperPodPyTorchJob, and the training
    they do. The training's global batch is fixed: a step of a run with fewer replicas
    than the job's first run takes proportionally longer."""

    uid: str
    job_id: str
    kind: RunObjectKind
    namespace: str
    name: str
    nodes: list[str]
    """Node name per replica."""
    location: str | None
    auto_resume: bool
    anchor_step: int
    ready_at: datetime
    emitted_step: int
    anchor_at: datetime | None = None
    state: Literal["running", "waiting", "failed", "stopped", "succeeded"] = "running"
    restarts: int = 0
    containers: list[dict[str, Any]] = field(default_factory=list)
    """The pod template's containers (a pod without them is not a valid Pod)."""
    max_steps: int | None = None
    reference: int = 1
    """Replicas of the job's first run: the size a step's duration is quoted for."""
    elastic: dict[str, Any] | None = None
    """A HyperPodPyTorchJob's elasticPolicy: the operator scales it down on a fault."""
    unbound: dict[str, int] = field(default_factory=dict)
    """Pods kube-scheduler could not bind yet (Pending): name → replica index."""
    hung: bool = False
    """The training hangs (a collective that never returns): pods run, no step is made."""
    slowdown: float = 1.0
    """How many times longer a step takes than at full speed: its slowest node's."""

    def step_time(self, step: timedelta) -> timedelta:
        return step * self.reference * self.slowdown / max(len(self.nodes), 1)

    def node_step_seconds(self, step: timedelta, speeds: Mapping[str, float]) -> dict[str, float]:
        """Each node's compute seconds per step (`speeds` by node name, 1 at full speed): a
        node's own share of the step's work at its speed; the step itself lasts as long as the
        slowest one's, as synchronous data-parallel training waits for it."""
        full = (step * self.reference / max(len(self.nodes), 1)).total_seconds()
        return {node: round(full / speeds.get(node, 1.0), 3) for node in self.nodes}

    def step_at(self, when: datetime, step: timedelta) -> int:
        if self.anchor_at is None or when < self.anchor_at:
            return self.anchor_step
        reached = self.anchor_step + (when - self.anchor_at) // self.step_time(step)
        return min(reached, self.max_steps) if self.max_steps is not None else reached

    def freeze(self, when: datetime, step: timedelta) -> None:
        self.anchor_step = self.step_at(when, step)
        self.anchor_at = None

    def finishes_at(self, step: timedelta) -> datetime | None:
        if self.anchor_at is None or self.max_steps is None or self.state != "running":
            return None
        return self.anchor_at + self.step_time(step) * max(self.max_steps - self.anchor_step, 0)


@dataclass(frozen=True)
class Progress:
    """A point of a job's training timeline: from `at`, `replicas` replicas step (0: none),
    starting from `step`."""

    at: datetime
    replicas: int
    step: int


@dataclass(frozen=True)
class Effect:
    """Work for the outside world, done after the simulator's lock is released.

    - "put_event": (entry,) — a PutEvents entry; `EventBusName` is "default" or "service";
    - "write_checkpoint": (location, step) — shards, then the `_COMPLETE` marker, in S3;
    - "report_checkpoint": (job_id, team, step, uri, node_step_seconds by instance id) —
      POST /jobs/{jobId}/checkpoints.
    """

    kind: Literal["put_event", "write_checkpoint", "report_checkpoint"]
    args: tuple[Any, ...]


def checkpoint_uri(location: str, step: int) -> str:
    return f"{location.rstrip('/')}/step-{step:08d}/"


class SimulatedCluster:
    def __init__(
        self,
        clock: Clock,
        store: ObjectStore,
        *,
        effects: Callable[[Effect], None],
        hyperpod_cluster: str = "hyperguard-twin",
        eks_cluster: str = "hyperguard-eks",
        region: str = "us-east-1",
        account: str = "123456789012",
        timings: SimTimings | None = None,
        seed: int = 7,
    ) -> None:
        self.clock = clock
        self.store = store
        self.timings = timings or SimTimings()
        self.hyperpod_cluster = hyperpod_cluster
        self.eks_cluster = eks_cluster
        self.region = region
        self.account = account
        self._effects = effects
        self._rng = random.Random(seed)
        self._lock = store.lock  # one lock for the whole cluster: the store calls us back
        self._settled_at = clock.now()
        self._instances: dict[str, Instance] = {}
        self._faults: dict[str, Fault] = {}
        self._repairs: dict[str, _Repair] = {}
        self._replaced_by: dict[str, str] = {}
        self._never_healthy: set[str] = set()
        self._repairs_held: list[_Scheduled] | None = None
        """While a test holds repairs: the reboots and replacements that are due."""
        self._keep_logical_ids = True
        self.continuous_provisioning = True
        self._autoscaling: dict[str, str] | None = None
        self._refusals: list[str] = []
        self._runs: dict[str, Run] = {}
        self._unfinished: dict[str, Run] = {}
        """The runs neither succeeded nor stopped: those the clock can still move, which
        settling walks at every change (a day's finished runs stay in `_runs`)."""
        self._checkpoints: dict[str, int] = {}
        self._reference: dict[str, int] = {}
        self._timeline: dict[str, list[Progress]] = {}
        self._agenda: list[_Scheduled] = []
        self._settling: datetime | None = None
        """While `_settled` runs: the moment it is settling (a call back in acts then)."""
        self._pod_event_at: dict[str, datetime] = {}
        """Karpenter's NodeClaim lastPodEventTime, by node: a pod bound there, or gone."""
        self._initialized_at: dict[str, datetime] = {}
        """When each Karpenter node initialized (consolidateAfter counts from it first)."""
        self._next_disruption_poll: datetime | None = None
        self._seq = 0
        self._issued: set[str] = set()
        self._claims: dict[str, str] = {}
        """API-created NodeClaims not registered yet: name by uid."""
        self._ec2_capacity: dict[tuple[str, str], int] = {}
        self._groups: dict[str, str] = {}
        """HyperPod instance groups, with their instance type (kept when they are empty)."""
        self._patches: dict[str, _Patch] = {}
        """Instance groups' automatic patching, scheduled or done, by group."""
        self._speeds: dict[str, float] = {}
        """Nodes running below full speed (slow_node), by node name."""
        self._additions: dict[str, _Addition] = {}
        """Added nodes not running yet, by NodeLogicalId."""
        self._hyperpod_capacity: dict[str, int] = {}
        self._add_tokens: dict[str, dict[str, Any]] = {}
        """BatchAddClusterNodes' responses, by ClientToken."""
        self._unregistering = 0
        self._pending_pods: set[tuple[str, str]] = set()
        """Client-created pods kube-scheduler has not bound yet: (namespace, name)."""
        self._step = timedelta(seconds=self.timings.step_duration_s)
        store.add_listener(self._on_api_change)
        self.kueue = Kueue(store, lambda: self._stamp(self.clock.now()))

    @property
    def cluster_arn(self) -> str:
        return hyperpod_cluster_arn(self.hyperpod_cluster, self.region, self.account)

    # ------------------------------------------------------------------ the world

    def add_instance_group(self, group: str, instance_type: str, count: int) -> list[str]:
        """HyperPod nodes joined to the EKS cluster, healthy and schedulable."""
        with self._settled() as now:
            self._groups.setdefault(group, instance_type)
            return [self._launch_hyperpod(group, instance_type, now) for _ in range(count)]

    def schedule_patch(
        self,
        group: str,
        at: datetime,
        *,
        strategy: str = "WhenIdle",
        idle_wait_s: float = 3600.0,
        batch: int = 1,
    ) -> None:
        """The operator's UpdateCluster with the group's AutoPatchConfig: HyperPod's automatic
        patching updates the group's software at `at` (virtual time) with `strategy`."""
        if strategy not in PATCHING_STRATEGIES:
            raise ValueError(f"PatchingStrategy must be one of {', '.join(PATCHING_STRATEGIES)}")
        with self._settled() as now:
            if group not in self._groups:
                raise ValueError(f"no instance group {group}")
            if at <= now:
                raise ValueError("NextPatchDate must be in the future")
            self._patches[group] = _Patch(at, strategy, idle_wait_s, max(1, batch))
            self._schedule(now, (at - now).total_seconds(), "patch_start", group)

    def add_nodepool(self, name: str, instance_type: str) -> None:
        """A Karpenter NodePool of one EC2 instance type, without nodes (kept if it exists)."""
        with self._lock:
            if self.store.find(NODEPOOLS, name) is None:
                self.store.create(NODEPOOLS, _nodepool(name, instance_type))

    def set_nodepool_limits(self, name: str, limits: dict[str, str] | None) -> None:
        """What an admin's `kubectl edit nodepool` sets: the NodePool's `spec.limits` (cpu,
        memory, nvidia.com/gpu, nodes; None removes them). The simulated Karpenter launches the
        claims it is given whatever the limits say, as Karpenter checks them only eventually."""
        self._replace_in_nodepool(name, "limits", limits)

    def set_nodepool_disruption(self, name: str, disruption: dict[str, Any]) -> None:
        """What an admin's `kubectl edit nodepool` sets: the NodePool's `spec.disruption`
        (consolidationPolicy, consolidateAfter, budgets), which the simulated Karpenter's
        disruption controller follows (`_consolidate`)."""
        self._replace_in_nodepool(name, "disruption", disruption)

    def _replace_in_nodepool(self, name: str, field: str, value: dict[str, Any] | None) -> None:
        """The NodePool's `spec.<field>` replaced whole (a merge patch would keep old keys);
        None or empty removes it."""
        with self._lock:
            self.store.patch(NODEPOOLS, name, {"spec": {field: None}})
            if value:
                self.store.patch(NODEPOOLS, name, {"spec": {field: value}})

    def add_burst_nodes(
        self, nodepool: str, instance_type: str, count: int, *, spot: bool = False
    ) -> list[str]:
        """Karpenter nodes of `nodepool` (EC2 instance type), each with its NodeClaim."""
        self.add_nodepool(nodepool, instance_type)
        capacity_type: CapacityType = "spot" if spot else "on-demand"
        with self._settled() as now:
            return [
                self._launch_burst(nodepool, instance_type, capacity_type, now)
                for _ in range(count)
            ]

    def set_ec2_capacity(
        self, instance_type: str, capacity_type: CapacityType, available: int | None
    ) -> None:
        """How many more instances EC2 launches for NodeClaims of this EC2 instance type and
        Karpenter capacity type; None (everything's default) is no limit. A launch that finds
        none left fails with InsufficientInstanceCapacity, and Karpenter deletes the claim.
        Terminated instances do not give capacity back: set it again to free some. Nodes
        `add_burst_nodes` places are the world as it is, outside this count."""
        if capacity_type not in EC2_CAPACITY_TYPES:
            raise ValueError(f"unknown capacity type {capacity_type!r}")
        if available is not None and available < 0:
            raise ValueError("available must not be negative")
        with self._settled():
            if available is None:
                self._ec2_capacity.pop((instance_type, capacity_type), None)
            else:
                self._ec2_capacity[(instance_type, capacity_type)] = available

    def set_hyperpod_capacity(self, group: str, available: int | None) -> None:
        """How many more instances HyperPod launches for nodes BatchAddClusterNodes adds to
        instance group `group`; None (everything's default) is no limit. A launch that finds
        none left fails with InsufficientInstanceCapacity, and the node stays in Failure,
        without an instance, until it is deleted. Terminated instances do not give capacity
        back: set it again to free some. Nodes `add_instance_group` places are the world as
        it is, outside this count."""
        if available is not None and available < 0:
            raise ValueError("available must not be negative")
        with self._settled():
            if available is None:
                self._hyperpod_capacity.pop(group, None)
            else:
                self._hyperpod_capacity[group] = available

    def fail_next_registrations(self, count: int = 1) -> None:
        """The next `count` instances launched for NodeClaims never join the cluster (a bad
        AMI, bootstrap or security group): Launched stays the claim's last step, and Karpenter
        deletes the claim, terminating the instance, at the registration TTL."""
        with self._lock:
            self._unregistering += count

    def seed_checkpoint(self, location: str, step: int) -> None:
        """A job trained before the twin started: its latest checkpoint is in S3."""
        with self._settled():
            self._checkpoints[location] = step
            self._effects(Effect("write_checkpoint", (location, step)))

    def inject_fault(self, instance_id: str, kind: FaultKind = "gpu") -> None:
        """Break a node the way hardware does: the training processes on it crash (their
        pods fail), and its health agent reports the fault."""
        with self._settled() as now:
            instance = self._instance(instance_id)
            self._faults[instance_id] = Fault(kind, heal_on_reboot=kind != "persistent")
            if instance_id not in self._repairs and not self._joining(instance_id):
                self._show_health(instance, now)
            self._lose_pods(instance, now)
            self._report_fault(instance, kind)

    def clear_fault(self, instance_id: str) -> None:
        """The node's fault clears by itself (a transient condition, an error that does not
        recur): its health agent shows it healthy again, with no repair."""
        with self._settled() as now:
            instance = self._instance(instance_id)
            self._faults.pop(instance_id, None)
            if instance_id not in self._repairs and not self._joining(instance_id):
                self._show_health(instance, now)

    def fail_next_repairs(self, error_code: str, count: int = 1) -> None:
        """The next `count` node ids a repair would accept fail with `error_code`."""
        with self._lock:
            self._refusals.extend([error_code] * count)

    def replacement_never_healthy(self, instance_id: str) -> None:
        """The next replacement of `instance_id` comes up in Failure and stays there."""
        with self._lock:
            self._never_healthy.add(instance_id)

    @contextmanager
    def repairs_held(self) -> Iterator[None]:
        """Inside, no reboot or replacement finishes; on leaving, those that were due finish
        at once. At real speed a repair takes minutes and a storm's reports reach the service
        in seconds; the twin's speed-up can make a loaded machine's ingestion the slower one,
        and this puts the two back in their real order."""
        with self._lock:
            self._repairs_held = []
        try:
            yield
        finally:
            with self._lock:
                held, self._repairs_held = self._repairs_held or [], None
                now = max(self.clock.now(), self._settled_at)
                for due in held:
                    self._schedule(now, 0, due.what, due.instance_id)

    def configure_scaling(
        self, *, continuous: bool = True, autoscaling: bool | None = None
    ) -> None:
        """How the cluster was created or updated: in Continuous node provisioning mode (the
        default; otherwise BatchAddClusterNodes is refused) and with HyperPod's managed
        Karpenter autoscaling enabled (True), disabled (False) or never configured (None)."""
        with self._lock:
            self.continuous_provisioning = continuous
            self._autoscaling = (
                None
                if autoscaling is None
                else {
                    "Mode": "Enable" if autoscaling else "Disable",
                    "AutoScalerType": "Karpenter",
                    "Status": "InService",
                }
            )

    def keep_logical_ids_on_replace(self, keep: bool) -> None:
        """Whether a replacement keeps its node's NodeLogicalId (HyperPod's documented
        behaviour, the default) or comes back with a new one, as a node whose slot HyperPod
        re-creates would: same instance group, new instance id, new logical id."""
        with self._lock:
            self._keep_logical_ids = keep

    def fail_job(self, job_id: str, exit_code: int = 1) -> None:
        """The training of the job's running run crashes by itself (not its node)."""
        with self._settled() as now:
            run = self._running_run(job_id)
            pods = sorted(p["metadata"]["name"] for p in self._pods_of(run))
            pod = pods[0] if pods else run.name
            self._stop_run(run, now, faulty=None, pod=pod, exit_code=exit_code)

    def slow_node(self, instance_id: str, speed: float) -> None:
        """The instance's GPUs run at `speed` (0 < speed ≤ 1) of their full speed (thermal
        throttling, a degraded link): a run on it steps as slowly as its slowest node, and
        reports each node's compute time per step with its checkpoints."""
        if not 0 < speed <= 1:
            raise ValueError("speed must be above 0 and at most 1")
        with self._settled() as now:
            instance = self._instance(instance_id)
            self._speeds[instance.node_name] = speed
            for run in self._runs.values():
                if run.anchor_at is not None and instance.node_name in run.nodes:
                    self._freeze(run, now)
                    run.slowdown = self._slowdown(run)
                    run.anchor_at = now
                    self._record(run, now, len(run.nodes))

    def _slowdown(self, run: Run) -> float:
        return 1 / min((self._speeds.get(n, 1.0) for n in run.nodes), default=1.0)

    def hang_job(self, job_id: str) -> None:
        """The training of the job's running run hangs (NCCL waiting on a peer that never
        answers): its pods stay Running and Ready, the run reports Running, and it makes no
        step and writes no checkpoint from now on. Only a new run (a restart) trains."""
        with self._settled() as now:
            run = self._running_run(job_id)
            run.hung = True
            if run.anchor_at is not None:
                self._freeze(run, now)

    def _running_run(self, job_id: str) -> Run:
        run = next(
            (r for r in self._runs.values() if r.job_id == job_id and r.state == "running"), None
        )
        if run is None:
            raise LookupError(f"no running run of job {job_id}")
        return run

    def advance(self) -> None:
        """Play everything due up to the clock's time."""
        with self._settled():
            pass

    # ------------------------------------------------------------- inspection

    def instances(self) -> list[Instance]:
        with self._settled():
            return [Instance(**vars(i)) for i in sorted(self._instances.values(), key=_order)]

    def instance(self, instance_id: str) -> Instance | None:
        with self._settled():
            found = self._instances.get(instance_id)
            return Instance(**vars(found)) if found else None

    def replacement_of(self, instance_id: str) -> str | None:
        with self._settled():
            return self._replaced_by.get(instance_id)

    def owns(self, instance_id: str) -> bool:
        with self._lock:
            return instance_id in self._instances or instance_id in self._replaced_by

    def runs(self) -> dict[str, Run]:
        """The latest run of each job, by job id."""
        with self._settled():
            latest: dict[str, Run] = {}
            for run in self._runs.values():
                if run.state != "stopped" or run.job_id not in latest:
                    latest[run.job_id] = run
            return {job_id: Run(**vars(run)) for job_id, run in latest.items()}

    def job_instances(self, job_id: str) -> list[str]:
        """The instances under the pods of the job's latest run, by replica."""
        with self._settled():
            run = self.runs()[job_id]
            by_node = {i.node_name: i.instance_id for i in self._instances.values()}
            return [by_node[name] for name in run.nodes if name in by_node]

    def schedulable(self, instance_id: str) -> bool:
        """Whether the node's Kubernetes object takes new pods (cordoned: False)."""
        with self._settled():
            return self._schedulable(self._instance(instance_id).node_name)

    def step_of(self, job_id: str) -> int:
        """The step the job's latest run has reached."""
        with self._settled() as now:
            runs = [r for r in self._runs.values() if r.job_id == job_id]
            return max((r.step_at(now, self._step) for r in runs), default=0)

    def checkpoint_step(self, job_id: str) -> int | None:
        """The newest checkpoint the job's runs have written (None: none yet)."""
        with self._settled():
            locations = {r.location for r in self._runs.values() if r.job_id == job_id}
            steps = [self._checkpoints[loc] for loc in locations if loc in self._checkpoints]
            return max(steps, default=None)

    def timeline(self, job_id: str) -> list[Progress]:
        """When the job's training started and stopped stepping, at what size, from what
        step (the simulation's ground truth, for measuring lost GPU-time)."""
        with self._settled():
            return list(self._timeline.get(job_id, []))

    def snapshot(self) -> dict[str, Any]:
        """JSON-able state for `hyperguard twin nodes`."""
        with self._settled() as now:
            nodes = []
            for instance in sorted(self._instances.values(), key=_order):
                kube = self.store.find(NODES, instance.node_name)
                spec = (kube or {}).get("spec", {})
                nodes.append(
                    {
                        "instance_id": instance.instance_id,
                        "platform": instance.platform,
                        "pool": instance.group,
                        "instance_type": instance.instance_type,
                        "capacity_type": instance.capacity_type,
                        "status": instance.status.value,
                        "healthy": self._healthy(instance),
                        "schedulable": kube is not None and not spec.get("unschedulable"),
                        "node_name": instance.node_name,
                        "logical_id": instance.logical_id,
                        "fault": self._faults[i].kind
                        if (i := instance.instance_id) in self._faults
                        else None,
                    }
                )
            jobs = [
                {
                    "job_id": run.job_id,
                    "run": run.name,
                    "state": run.state,
                    "step": run.step_at(now, self._step),
                    "progressing": run.anchor_at is not None and now >= run.anchor_at,
                    "nodes": run.nodes,
                    "restarts": run.restarts,
                }
                for run in self._runs.values()
                if run.state != "stopped"
            ]
            return {"now": now.isoformat(), "nodes": nodes, "jobs": jobs}

    # ------------------------------------------------------------ SageMaker API

    def describe_cluster(self) -> dict[str, Any]:
        """A group's TargetCount counts its nodes not deleted, those still waiting for an
        instance or failed to get one included; its CurrentCount, those with an instance.
        NodeProvisioningMode and AutoScaling (ClusterAutoScalingConfigOutput) are there only
        when the cluster was configured with them, as the model's optional members."""
        with self._settled():
            described = {
                "ClusterArn": self.cluster_arn,
                "ClusterName": self.hyperpod_cluster,
                "ClusterStatus": "InService",
                "InstanceGroups": [
                    self._group_details(name, instance_type)
                    for name, instance_type in sorted(self._groups.items())
                ],
                "Orchestrator": {
                    "Eks": {
                        "ClusterArn": f"arn:aws:eks:{self.region}:{self.account}:cluster/"
                        f"{self.eks_cluster}"
                    }
                },
                "NodeRecovery": "None",
            }
            if self.continuous_provisioning:
                described["NodeProvisioningMode"] = "Continuous"
            if self._autoscaling is not None:
                described["AutoScaling"] = dict(self._autoscaling)
            return described

    def _group_details(self, name: str, instance_type: str) -> dict[str, Any]:
        current = sum(
            1 for i in self._instances.values() if i.platform == "hyperpod" and i.group == name
        )
        unlaunched = sum(
            1 for a in self._additions.values() if a.group == name and a.instance_id is None
        )
        return {
            "InstanceGroupName": name,
            "InstanceType": instance_type,
            "CurrentCount": current,
            "TargetCount": current + unlaunched,
            "ExecutionRole": f"arn:aws:iam::{self.account}:role/hyperpod-nodes",
            "LifeCycleConfig": {
                "SourceS3Uri": "s3://hyperpod-lifecycle/",
                "OnCreate": "on_create.sh",
            },
        } | self._patch_details(name)

    def _patch_details(self, group: str) -> dict[str, Any]:
        """ClusterAutoPatchConfigDetails while a patch is scheduled or runs (a one-off date:
        once done, no next one), and SoftwareUpdateStatus once it started."""
        patch = self._patches.get(group)
        if patch is None:
            return {}
        details: dict[str, Any] = {}
        if patch.status in (None, "InProgress"):
            details["AutoPatchConfig"] = {
                "PatchingStrategy": patch.strategy,
                "CurrentPatchSchedule": {"NextPatchDate": self.clock.wall(patch.at)},
                "IdleWaitWindowInSeconds": int(patch.idle_wait_s),
                "DeploymentConfig": {
                    "RollingUpdatePolicy": {
                        "MaximumBatchSize": {"Type": "INSTANCE_COUNT", "Value": patch.batch}
                    }
                },
            }
        if patch.status is not None:
            details["SoftwareUpdateStatus"] = patch.status
        return details

    def cluster_nodes(self, *, include_logical_ids: bool) -> list[dict[str, Any]]:
        """ClusterNodeSummaries, oldest first (ListClusterNodes' default order)."""
        with self._settled():
            summaries = []
            for instance in sorted(self._instances.values(), key=_order):
                if instance.platform != "hyperpod":
                    continue
                summary = self._node_summary(instance)
                if include_logical_ids:
                    summary["NodeLogicalId"] = instance.logical_id
                summaries.append(summary)
            return summaries

    def describe_node(self, node_id: str) -> dict[str, Any] | None:
        """ClusterNodeDetails by instance id or NodeLogicalId; None when there is none. An
        added node without an instance is found by its NodeLogicalId only."""
        with self._settled():
            instance = next(
                (
                    i
                    for i in self._instances.values()
                    if i.platform == "hyperpod" and node_id in (i.instance_id, i.logical_id)
                ),
                None,
            )
            if instance is None:
                addition = self._additions.get(node_id)
                return None if addition is None else self._unlaunched_details(node_id, addition)
            kube = self.store.find(NODES, instance.node_name) or {}
            details = self._node_summary(instance)
            details.update(
                NodeLogicalId=instance.logical_id,
                CapacityType=instance.capacity_type,
                PrivateDnsHostname=instance.node_name,
                KubernetesConfig={
                    "CurrentLabels": kube.get("metadata", {}).get("labels", {}),
                    "CurrentTaints": [
                        {"Key": t["key"], "Value": t.get("value", ""), "Effect": t["effect"]}
                        for t in kube.get("spec", {}).get("taints", [])
                    ],
                },
            )
            return details

    def _unlaunched_details(self, logical_id: str, addition: _Addition) -> dict[str, Any]:
        """An added node waiting for its instance (Pending), or failed to get one."""
        status = NodeStatus.FAILURE if addition.failure else NodeStatus.PENDING
        return {
            "InstanceGroupName": addition.group,
            "NodeLogicalId": logical_id,
            "InstanceType": self._groups[addition.group],
            "InstanceStatus": {"Status": status.value, "Message": addition.failure or ""},
        }

    def batch_repair(
        self, action: Literal["reboot", "replace"], node_ids: list[str]
    ) -> dict[str, Any]:
        """BatchRebootClusterNodes / BatchReplaceClusterNodes' response."""
        successful: list[str] = []
        failed: list[dict[str, str]] = []
        with self._settled() as now:
            for node_id in node_ids:
                instance = self._instances.get(node_id)
                if instance is None or instance.platform != "hyperpod":
                    failed.append(_failure(node_id, INSTANCE_ID_NOT_FOUND, "not in the cluster"))
                elif node_id in self._repairs:
                    what = f"a {self._repairs[node_id].action} of {node_id} is in progress"
                    failed.append(_failure(node_id, INSTANCE_ID_IN_USE, what))
                elif self._joining(node_id):
                    what = "still joining the cluster"
                    failed.append(_failure(node_id, INSTANCE_ID_IN_USE, what))
                elif self._refusals:
                    failed.append(_failure(node_id, self._refusals.pop(0), "injected failure"))
                else:
                    self._start_repair(instance, action, now)
                    successful.append(node_id)
        return {"Successful": successful, "Failed": failed}

    def add_cluster_nodes(
        self, nodes_to_add: list[dict[str, Any]], client_token: str | None = None
    ) -> dict[str, Any]:
        """BatchAddClusterNodes' response: each node added is Pending, with its new
        NodeLogicalId; an entry HyperPod cannot grant fails whole. Asked again with a
        ClientToken it has seen, HyperPod adds nothing and answers as it did."""
        with self._settled() as now:
            if client_token is not None and client_token in self._add_tokens:
                return copy.deepcopy(self._add_tokens[client_token])
            successful: list[dict[str, str]] = []
            failed: list[dict[str, Any]] = []
            for spec in nodes_to_add:
                group, count = spec["InstanceGroupName"], int(spec["IncrementTargetCountBy"])
                refusal = self._unaddable(spec)
                if refusal is not None:
                    code, message = refusal
                    failed.append(
                        {
                            "InstanceGroupName": group,
                            "ErrorCode": code,
                            "FailedCount": count,
                            "Message": message,
                        }
                    )
                    continue
                for _ in range(count):
                    successful.append(
                        {
                            "NodeLogicalId": self._request_node(group, now),
                            "InstanceGroupName": group,
                            "Status": NodeStatus.PENDING.value,
                        }
                    )
            response = {"Successful": successful, "Failed": failed}
            if client_token is not None:
                self._add_tokens[client_token] = copy.deepcopy(response)
            return response

    def delete_cluster_nodes(self, node_ids: list[str], logical_ids: list[str]) -> dict[str, Any]:
        """BatchDeleteClusterNodes' response. Its lists are for the kinds of ids asked
        about, each only when it holds some (the model's lists hold at least one)."""
        with self._settled() as now:
            deleted, refused = self._delete_each(node_ids, "NodeId", now)
            deleted_slots, refused_slots = self._delete_each(logical_ids, "NodeLogicalId", now)
        response = {
            "Successful": deleted,
            "Failed": refused,
            "SuccessfulNodeLogicalIds": deleted_slots,
            "FailedNodeLogicalIds": refused_slots,
        }
        return {key: ids for key, ids in response.items() if ids}

    def start_health_check(self, instance_ids: list[str]) -> None:
        """Deep health checks on these Running HyperPod nodes (StartClusterHealthCheck)."""
        with self._settled() as now:
            for instance_id in instance_ids:
                instance = self._instances.get(instance_id)
                if instance is None or instance.status is not NodeStatus.RUNNING:
                    continue
                instance.status = NodeStatus.DEEP_HEALTH_CHECK_IN_PROGRESS
                instance.deep_health_check = "InProgress"
                self._lose_pods(instance, now)
                self._publish(instance, now)
                self._schedule(now, self.timings.deep_health_check_s, "check_done", instance_id)

    # ------------------------------------------------------------ EC2 API

    def reboot_instances(self, instance_ids: list[str]) -> list[str]:
        """RebootInstances of burst instances; returns the ids this cluster does not own."""
        with self._settled() as now:
            unknown = [i for i in instance_ids if i not in self._instances]
            for instance_id in instance_ids:
                instance = self._instances.get(instance_id)
                if (
                    instance is not None
                    and instance_id not in self._repairs
                    and not self._joining(instance_id)
                ):
                    self._start_repair(instance, "reboot", now)
            return unknown

    # ------------------------------------------------------------ time keeping

    @contextmanager
    def _settled(self) -> Iterator[datetime]:
        """The world brought up to the clock's time, then held there while the caller acts.

        A write the world makes while settling can call back in (Kueue, listening to every
        change, writes as its own user, and that write reaches `_on_api_change`): such a call
        acts at the moment being settled and leaves the agenda to the outer call. Settling
        again from inside would take happenings from under the outer loop, which then pops
        one not yet due, or an empty agenda."""
        with self._lock:
            if self._settling is not None:
                yield self._settling
                return
            now = max(self.clock.now(), self._settled_at)
            try:
                while True:
                    due = self._agenda[0].at if self._agenda and self._agenda[0].at <= now else None
                    horizon = self._settling = due or now
                    self._checkpoint_runs(horizon)
                    self._complete_runs(horizon)
                    if due is None:
                        break
                    happening = heapq.heappop(self._agenda)
                    if self._repairs_held is not None and happening.what in _REPAIR_ENDS:
                        self._repairs_held.append(happening)
                        continue
                    self._happen(happening)
                    self._reconcile_runs(happening.at)
                self._consolidate(now)
                self._settled_at = self._settling = now
                yield now
                self._reconcile_runs(now)
            finally:
                self._settling = None

    def _schedule(self, now: datetime, after_s: float, what: str, instance_id: str) -> None:
        self._seq += 1
        at = now + timedelta(seconds=after_s)
        heapq.heappush(self._agenda, _Scheduled(at, self._seq, _Happening(what), instance_id))

    def _happen(self, due: _Scheduled) -> None:
        instance = self._instances.get(due.instance_id)
        match due.what:
            case _Happening.REBOOT_DONE if instance is not None:
                fault = self._faults.get(instance.instance_id)
                if fault is not None and fault.heal_on_reboot:
                    del self._faults[instance.instance_id]
                del self._repairs[instance.instance_id]
                self._show_health(instance, due.at)
            case _Happening.SHUTDOWN_DONE if instance is not None:
                self._swap_in_replacement(instance, due.at)
            case _Happening.BOOT_DONE if instance is not None:
                del self._repairs[instance.instance_id]
                self._show_health(instance, due.at)
            case _Happening.CHECK_DONE if instance is not None:
                passed = instance.instance_id not in self._faults
                instance.deep_health_check = "Passed" if passed else "Failed"
                self._show_health(instance, due.at)
            case _Happening.CLAIM_GONE if instance is not None:
                self._terminate_burst(instance, due.at)
            case _Happening.CLAIM_LAUNCH:
                self._launch_claim(due.instance_id, due.at)
            case _Happening.CLAIM_REGISTER:
                self._register_claim(due.instance_id, due.at)
            case _Happening.CLAIM_TTL:
                self._expire_claim(due.instance_id, due.at)
            case _Happening.FAULTY_SCALE_DOWN:
                run = self._runs.get(due.instance_id)
                if run is not None and run.state == "waiting" and run.elastic is not None:
                    self._scale_down_faulty(run, due.at)
            case _Happening.NODE_LAUNCH:
                self._launch_added(due.instance_id, due.at)
            case _Happening.NODE_JOIN:
                self._join_added(due.instance_id, due.at)
            case _Happening.PATCH_START | _Happening.PATCH_CHECK | _Happening.PATCH_DONE:
                self._patch_happens(due)

    # ------------------------------------------------------------ nodes

    def _new_instance_id(self) -> str:
        while True:
            instance_id = f"i-0{self._rng.getrandbits(64):016x}"
            if instance_id not in self._issued:
                self._issued.add(instance_id)
                return instance_id

    def _new_logical_id(self) -> str:
        return str(uuid.UUID(int=self._rng.getrandbits(128), version=4))

    def _launch_hyperpod(self, group: str, instance_type: str, now: datetime) -> str:
        """A running HyperPod node, as if launched before the twin began."""
        instance = self._new_hyperpod_instance(group, instance_type, now)
        self.store.create(NODES, self._node_object(instance, now))
        return instance.instance_id

    def _new_hyperpod_instance(
        self,
        group: str,
        instance_type: str,
        now: datetime,
        logical_id: str | None = None,
        status: NodeStatus = NodeStatus.RUNNING,
    ) -> Instance:
        """An instance HyperPod launched for `group`; its node is not created here."""
        instance_id = self._new_instance_id()
        instance = Instance(
            instance_id=instance_id,
            platform="hyperpod",
            cluster=self.hyperpod_cluster,
            group=group,
            instance_type=instance_type,
            node_name=f"hyperpod-{instance_id}",
            launch_time=now,
            logical_id=logical_id or self._new_logical_id(),
            status=status,
        )
        self._instances[instance_id] = instance
        return instance

    def _unaddable(self, spec: Mapping[str, Any]) -> tuple[str, str] | None:
        """Why HyperPod cannot add an entry's nodes (error code, message); None: it can."""
        group = spec["InstanceGroupName"]
        instance_type = self._groups.get(group)
        if instance_type is None:
            return (
                "InstanceGroupNotFound",
                f"Instance group {group} not found in cluster {self.hyperpod_cluster}.",
            )
        types = spec.get("InstanceTypes")
        if types and instance_type not in types:
            return (
                "IncompatibleInstanceTypes",
                f"Instance group {group} runs {instance_type}, not one of {types}.",
            )
        zones = spec.get("AvailabilityZones")
        if zones and AZ not in zones:
            return (
                "IncompatibleAvailabilityZones",
                f"Instance group {group} is in {AZ}, not one of {zones}.",
            )
        return None

    def _request_node(self, group: str, now: datetime) -> str:
        """A node added to `group`: Pending; its instance, then its joining, are due."""
        logical_id = self._new_logical_id()
        self._additions[logical_id] = _Addition(group)
        self._schedule(now, self.timings.hyperpod_launch_s, "node_launch", logical_id)
        self._schedule(now, self.timings.hyperpod_add_s, "node_join", logical_id)
        return logical_id

    def _launch_added(self, logical_id: str, at: datetime) -> None:
        """HyperPod launches the added node's instance (Pending while it boots), or finds
        no capacity for it: the node is in Failure."""
        addition = self._additions.get(logical_id)
        if addition is None:
            return  # deleted before the launch: nothing is launched
        instance_type = self._groups[addition.group]
        left = self._hyperpod_capacity.get(addition.group)
        if left == 0:
            addition.failure = (
                "InsufficientInstanceCapacity: We currently do not have sufficient "
                f"{instance_type} capacity to launch the node in instance group "
                f"{addition.group}."
            )
            return
        if left is not None:
            self._hyperpod_capacity[addition.group] = left - 1
        instance = self._new_hyperpod_instance(
            addition.group, instance_type, at, logical_id, NodeStatus.PENDING
        )
        addition.instance_id = instance.instance_id

    def _join_added(self, logical_id: str, at: datetime) -> None:
        """The added node has booted and joined Kubernetes: it runs, and its Node is the one
        a node `add_instance_group` places has (unless a fault was injected meanwhile)."""
        addition = self._additions.get(logical_id)
        if addition is None or addition.instance_id is None:
            return  # deleted, or its launch failed
        del self._additions[logical_id]
        instance = self._instances[addition.instance_id]
        self._show_health(instance, at)
        self.store.create(NODES, self._node_object(instance, at))

    def _joining(self, instance_id: str) -> bool:
        """Whether the instance is an added node's, booting and not yet in Kubernetes."""
        return any(a.instance_id == instance_id for a in self._additions.values())

    def _delete_each(
        self, keys: list[str], kind: Literal["NodeId", "NodeLogicalId"], now: datetime
    ) -> tuple[list[str], list[dict[str, str]]]:
        """The ids of one kind deleted, and the errors of those that could not be."""
        deleted: list[str] = []
        refused: list[dict[str, str]] = []
        for key in keys:
            refusal = self._delete_node(key, by_logical_id=kind == "NodeLogicalId", now=now)
            if refusal is None:
                deleted.append(key)
            else:
                code, message = refusal
                refused.append({"Code": code, "Message": message, kind: key})
        return deleted, refused

    def _delete_node(
        self, key: str, *, by_logical_id: bool, now: datetime
    ) -> tuple[str, str] | None:
        """HyperPod deletes the node `key` names (instance id or NodeLogicalId); why it
        cannot (error code, message), else None."""
        instance = next(
            (
                i
                for i in self._instances.values()
                if i.platform == "hyperpod"
                and key == (i.logical_id if by_logical_id else i.instance_id)
            ),
            None,
        )
        if instance is None and by_logical_id and key in self._additions:
            del self._additions[key]  # no instance to terminate: its launch is called off
            return None
        if instance is None:
            return NODE_ID_NOT_FOUND, f"Node {key} not found in cluster {self.hyperpod_cluster}."
        repair = self._repairs.get(instance.instance_id)
        if repair is not None:
            return NODE_ID_IN_USE, f"A {repair.action} of node {key} is in progress."
        self._remove_hyperpod(instance, now)
        return None

    def _remove_hyperpod(self, instance: Instance, now: datetime) -> None:
        """A deleted node's instance is terminated: the pods on it are lost as on a node
        loss, its Node object goes, and whatever was due to happen to it does not."""
        self._lose_pods(instance, now)
        del self._instances[instance.instance_id]
        self._faults.pop(instance.instance_id, None)
        self._never_healthy.discard(instance.instance_id)
        if instance.logical_id is not None:
            self._additions.pop(instance.logical_id, None)
        if self.store.find(NODES, instance.node_name) is not None:  # None: not joined yet
            self.store.delete(NODES, instance.node_name)
        self._delete_pods_on(instance.node_name)

    def _launch_burst(
        self, nodepool: str, instance_type: str, capacity_type: CapacityType, now: datetime
    ) -> str:
        """A running Karpenter node with its NodeClaim, as if launched before the twin began."""
        instance = self._new_burst_instance(nodepool, instance_type, capacity_type, now)
        instance.nodeclaim = f"{nodepool}-{self._rng.getrandbits(24):06x}"
        self.store.create(NODECLAIMS, _nodeclaim(instance.nodeclaim, instance, self._stamp(now)))
        self.store.create(NODES, self._node_object(instance, now))
        self._initialized_at[instance.node_name] = now
        return instance.instance_id

    def _new_burst_instance(
        self,
        nodepool: str,
        instance_type: str,
        capacity_type: CapacityType,
        now: datetime,
        status: NodeStatus = NodeStatus.RUNNING,
    ) -> Instance:
        """An EC2 instance Karpenter launched for `nodepool`; its node is not created here."""
        instance_id = self._new_instance_id()
        octets = "-".join(str(self._rng.randrange(1, 255)) for _ in range(2))
        instance = Instance(
            instance_id=instance_id,
            platform="eks",
            cluster=self.eks_cluster,
            group=nodepool,
            instance_type=instance_type,
            node_name=f"ip-10-42-{octets}.ec2.internal",
            launch_time=now,
            capacity_type=EC2_CAPACITY_TYPES[capacity_type],
            status=status,
        )
        self._instances[instance_id] = instance
        return instance

    def _stamp(self, when: datetime) -> str:
        """A virtual time as an API shows it: the real time at which it happens."""
        return self.clock.wall(when).strftime("%Y-%m-%dT%H:%M:%SZ")

    def _instance(self, instance_id: str) -> Instance:
        try:
            return self._instances[instance_id]
        except KeyError:
            raise LookupError(f"no such node {instance_id} in the simulated cluster") from None

    def _healthy(self, instance: Instance) -> bool:
        return instance.status is NodeStatus.RUNNING and instance.instance_id not in self._faults

    def _show_health(self, instance: Instance, now: datetime) -> None:
        """What the health agent reports once nothing is happening to the node."""
        fault = self._faults.get(instance.instance_id)
        sagemaker_sees = fault is not None and fault.kind != "kernel"
        instance.status = NodeStatus.FAILURE if sagemaker_sees else NodeStatus.RUNNING
        self._publish(instance, now)

    def _start_repair(
        self, instance: Instance, action: Literal["reboot", "replace"], now: datetime
    ) -> None:
        self._lose_pods(instance, now)
        if action == "reboot":
            self._repairs[instance.instance_id] = _Repair("reboot")
            instance.status = NodeStatus.PENDING
            self._schedule(now, self.timings.reboot_s, "reboot_done", instance.instance_id)
        else:
            self._repairs[instance.instance_id] = _Repair("replace", self._new_instance_id())
            instance.status = NodeStatus.SHUTTING_DOWN
            shutdown = self.timings.replace_shutdown_s
            self._schedule(now, shutdown, "shutdown_done", instance.instance_id)
        self._publish(instance, now)

    def _swap_in_replacement(self, old: Instance, at: datetime) -> None:
        repair = self._repairs.pop(old.instance_id)
        new_id = repair.replacement_id
        assert new_id is not None  # a replace always names its replacement
        del self._instances[old.instance_id]
        self._faults.pop(old.instance_id, None)
        self._replaced_by[old.instance_id] = new_id
        self.store.delete(NODES, old.node_name)
        self._delete_pods_on(old.node_name)
        new = Instance(
            instance_id=new_id,
            platform=old.platform,
            cluster=old.cluster,
            group=old.group,
            instance_type=old.instance_type,
            node_name=f"hyperpod-{new_id}",
            launch_time=at,
            capacity_type=old.capacity_type,
            logical_id=old.logical_id if self._keep_logical_ids else self._new_logical_id(),
            status=NodeStatus.PENDING,
        )
        self._instances[new_id] = new
        self._repairs[new_id] = _Repair("replace")
        if old.instance_id in self._never_healthy:
            self._never_healthy.discard(old.instance_id)
            self._faults[new_id] = Fault("persistent", heal_on_reboot=False)
        remaining = self.timings.replace_s - self.timings.replace_shutdown_s
        self._schedule(at, remaining, "boot_done", new_id)
        self.store.create(NODES, self._node_object(new, at))
        for run in self._runs.values():
            if run.auto_resume and old.node_name in run.nodes:
                run.nodes = [new.node_name if n == old.node_name else n for n in run.nodes]

    def _terminate_burst(self, instance: Instance, now: datetime) -> None:
        """Karpenter has drained the node and terminated its instance: a run still on it
        (placed there after the drain began) ends, as its pods go with the node."""
        self._lose_pods(instance, now)
        del self._instances[instance.instance_id]
        self._faults.pop(instance.instance_id, None)
        self._repairs.pop(instance.instance_id, None)
        if self.store.find(NODES, instance.node_name) is not None:  # None: never registered
            self.store.delete(NODES, instance.node_name)
        self._delete_pods_on(instance.node_name)
        if instance.nodeclaim:
            self._drop_finalizer(instance.nodeclaim)
        self._pod_event_at.pop(instance.node_name, None)
        self._initialized_at.pop(instance.node_name, None)

    def _publish(self, instance: Instance, now: datetime) -> None:
        """The node's Kubernetes view: labels and conditions as the agents keep them."""
        if self.store.find(NODES, instance.node_name) is None:
            return
        self.store.patch(
            NODES,
            instance.node_name,
            {"metadata": {"labels": self._health_labels(instance)}},
        )
        self.store.patch(
            NODES,
            instance.node_name,
            {"status": {"conditions": self._conditions(instance, now)}},
            subresource="status",
        )

    def _health_labels(self, instance: Instance) -> dict[str, str | None]:
        if instance.platform != "hyperpod":
            return {}
        repair = self._repairs.get(instance.instance_id)
        if repair is not None and instance.status is not NodeStatus.PENDING:
            health = "UnschedulablePendingReplacement"
        elif repair is not None and repair.action == "reboot":
            health = "UnschedulablePendingReboot"
        elif instance.status is NodeStatus.DEEP_HEALTH_CHECK_IN_PROGRESS or not self._healthy(
            instance
        ):
            health = "Unschedulable"
        else:
            health = "Schedulable"
        return {HEALTH_LABEL: health, DEEP_HEALTH_CHECK_LABEL: instance.deep_health_check}

    def _conditions(self, instance: Instance, now: datetime) -> list[dict[str, str]]:
        at = self._stamp(now)
        up = instance.status in (NodeStatus.RUNNING, NodeStatus.DEEP_HEALTH_CHECK_IN_PROGRESS)
        fault = self._faults.get(instance.instance_id)
        broken, why = FAULT_CONDITIONS[fault.kind] if fault else ("", "")
        conditions = [_condition("Ready", up, "KubeletReady" if up else "KubeletNotReady", at)]
        for kind in MONITORED_CONDITIONS:
            ok = kind != broken
            conditions.append(_condition(kind, ok, f"{kind}IsReady" if ok else why, at))
        return conditions

    def _node_object(
        self, instance: Instance, now: datetime, claim_labels: Mapping[str, str] | None = None
    ) -> dict[str, Any]:
        """The Node as its kubelet registers it, dressed as a real one: a HyperPod node with
        HyperPod's providerID form and labels; a Karpenter node with Karpenter's and the AWS
        cloud provider's labels (EC2 instance-type name), its NodeClaim's labels and its
        NodePool's template taints; both with the capacity EC2 gives the instance type."""
        info = INSTANCE_TYPES.get(ec2_name(instance.instance_type)) or {}
        labels: dict[str, str] = {
            INSTANCE_TYPE_LABEL: instance.instance_type,
            "kubernetes.io/hostname": instance.node_name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": _ARCHITECTURES.get(
                next(iter(info.get("ProcessorInfo", {}).get("SupportedArchitectures", [])), ""),
                "amd64",
            ),
            "topology.kubernetes.io/region": self.region,
            "topology.kubernetes.io/zone": AZ,
            "topology.k8s.aws/zone-id": AZ_ID,
        }
        spec: dict[str, Any] = {"providerID": self._provider_id(instance)}
        if instance.platform == "hyperpod":
            labels |= {
                COMPUTE_TYPE_LABEL: "hyperpod",
                INSTANCE_GROUP_LABEL: instance.group,
                CLUSTER_NAME_LABEL: self.hyperpod_cluster,
            }
        else:
            template = self._nodepool_template(instance.group)
            labels |= _karpenter_labels(instance, info)
            labels |= (template.get("metadata") or {}).get("labels") or {}
            labels |= claim_labels or {}
            if taints := (template.get("spec") or {}).get("taints"):
                spec["taints"] = copy.deepcopy(taints)
        labels.update({k: v for k, v in self._health_labels(instance).items() if v})
        capacity = _node_capacity(instance.instance_type, info)
        return {
            "metadata": {"name": instance.node_name, "labels": labels},
            "spec": spec,
            "status": {
                "capacity": capacity,
                "allocatable": _allocatable(capacity),
                "conditions": self._conditions(instance, now),
            },
        }

    def _provider_id(self, instance: Instance) -> str:
        """spec.providerID as the node's kubelet sets it: HyperPod's form names the cluster
        by the id its ARN ends in; Karpenter's nodes have the AWS cloud provider's form."""
        if instance.platform == "hyperpod":
            cluster_id = self.cluster_arn.rsplit("/", 1)[-1]
            return hyperpod_provider_id(AZ_ID, cluster_id, instance.instance_id)
        return eks_provider_id(AZ, instance.instance_id)

    def _nodepool_template(self, name: str) -> dict[str, Any]:
        """The NodePool's spec.template: the labels and taints Karpenter puts on its nodes."""
        pool = self.store.find(NODEPOOLS, name) or {}
        template: dict[str, Any] = (pool.get("spec") or {}).get("template") or {}
        return template

    def _report_fault(self, instance: Instance, kind: FaultKind) -> None:
        """The health agent's report: HyperPod's node health event for a HyperPod node's
        hardware; the in-cluster forwarder's event for a node condition."""
        if instance.platform == "hyperpod" and kind != "kernel":
            advice = "Reboot" if kind == "gpu" else "Replace"
            fault_type = "NvidiaXidError" if kind == "gpu" else "NvidiaErrorTerminate"
            detail = {
                "ClusterName": self.hyperpod_cluster,
                "ClusterArn": self.cluster_arn,
                "InstanceId": instance.instance_id,
                "Tags": {},
                "HealthSummary": {
                    "HealthStatus": "Unhealthy",
                    "HealthStatusReason": "HyperPod Health Monitoring Agent (HMA) has "
                    f"detected fault type {fault_type} on this node and is unhealthy.",
                    "RepairAction": advice,
                    "Recommendation": f"Please {advice} the Faulty Node.",
                },
            }
            self._put_event(
                "aws.sagemaker",
                "SageMaker HyperPod Cluster Node Health Event",
                detail,
                [self.cluster_arn],
                bus="default",
            )
            return
        condition, reason = FAULT_CONDITIONS[kind]
        detail = {
            "clusterName": self.eks_cluster,
            "nodeName": instance.node_name,
            "instanceId": instance.instance_id,
            "providerId": self._provider_id(instance),
            "conditionType": condition,
            "status": "False",
            "reason": reason,
            "message": f"{condition} is False: {reason}",
            "observedTime": self._stamp(self.clock.now()),
        }
        self._put_event(
            "hyperguard.node-forwarder",
            "Kubernetes Node Condition Changed",
            detail,
            [],
            bus="service",
        )

    def _put_event(
        self, source: str, detail_type: str, detail: dict[str, Any], resources: list[str], bus: str
    ) -> None:
        entry = {
            "Source": source,
            "DetailType": detail_type,
            "Detail": json.dumps(detail),
            "Resources": resources,
            "EventBusName": bus,
        }
        self._effects(Effect("put_event", (entry,)))

    # ------------------------------------------------------------ jobs

    def _on_api_change(
        self,
        event: str,
        rt: Any,
        obj: dict[str, Any],
        old: dict[str, Any] | None,
        user: str | None,
    ) -> None:
        """Kueue, the job controllers, the kubelet and Karpenter reacting to an API call."""
        if rt == PODS:
            self._note_pod_event(event, obj, old)
        if user is None:
            return  # our own write
        with self._settled() as now:
            if rt in RUN_RESOURCES:
                self._on_run_change(event, rt, obj, old, now)
            elif rt == PODS:
                self._on_pod_change(event, obj, now)
            elif rt == NODECLAIMS:
                self._on_claim_change(event, obj, old, now)

    def _on_run_change(
        self, event: str, rt: Any, obj: dict[str, Any], old: dict[str, Any] | None, now: datetime
    ) -> None:
        """The job controllers: start what is not (or no longer) suspended, resize, stop."""
        if event == "ADDED":
            if not is_suspended(rt, obj):
                self._start(rt, obj, now)
        elif event == "MODIFIED" and old is not None:
            if is_suspended(rt, old) and not is_suspended(rt, obj):
                self._start(rt, obj, now)  # Kueue admitted it
            elif rt == HYPERPOD_PYTORCH_JOBS and _replica_spec(obj) != _replica_spec(old):
                self._rescale(obj, now)
        elif event == "DELETED":
            run = self._runs.get(obj["metadata"]["uid"])
            if run is not None and run.state in ("running", "waiting"):
                self._freeze(run, now)
                run.state = "stopped"
                self._unfinished.pop(run.uid, None)

    def _on_pod_change(self, event: str, obj: dict[str, Any], now: datetime) -> None:
        """The kubelet losing a pod; kube-scheduler taking a pod a client created."""
        if event == "DELETED":
            self._pod_gone(obj, now)
        elif event == "ADDED" and not (obj.get("spec") or {}).get("nodeName"):
            self._pending_pods.add((obj["metadata"]["namespace"], obj["metadata"]["name"]))
            self._bind_client_pods(now)

    def _on_claim_change(
        self, event: str, obj: dict[str, Any], old: dict[str, Any] | None, now: datetime
    ) -> None:
        """Karpenter launching a new NodeClaim, or releasing one being deleted."""
        if event == "ADDED":
            self._accept_claim(obj, now)
        elif obj["metadata"].get("deletionTimestamp") and not (old or {}).get("metadata", {}).get(
            "deletionTimestamp"
        ):
            self._release_claim(obj, now)

    def _start(self, rt: Any, job: dict[str, Any], now: datetime) -> None:
        """The job controller (the HyperPod training operator for a HyperPodPyTorchJob)
        starts a run that is not, or no longer, suspended (Kueue admitted it: twin/kueue.py):
        its pods on the nodes it pins."""
        meta, spec = job["metadata"], job.get("spec", {})
        if rt == HYPERPOD_PYTORCH_JOBS:
            replica_spec = _replica_spec(job)
            template = replica_spec.get("template", {}).get("spec", {})
            replicas = int(replica_spec.get("replicas", 1))
            kind: RunObjectKind = "HyperPodPyTorchJob"
            elastic = spec.get("elasticPolicy")
        else:
            elastic = None
            template = spec.get("template", {}).get("spec", {})
            replicas = int(spec.get("parallelism", 1))
            kind = "Job"
        container = (template.get("containers") or [{}])[0]
        env = {e.get("name"): e.get("value") for e in container.get("env", [])}
        names = _pinned_nodes(template)
        location = env.get(CHECKPOINT_ENV) or None
        job_id = (meta.get("annotations") or {}).get(JOB_ID_ANNOTATION, meta["name"])
        # The training script resumes from the checkpoint it is told of, else from the
        # latest one it wrote itself.
        told = env.get(RESUME_STEP_ENV)
        start = int(told) if told else self._checkpoints.get(location, 0) if location else 0
        max_steps = env.get(MAX_STEPS_ENV)
        nodes = [names[i % len(names)] for i in range(replicas)] if names else []
        run = Run(
            uid=meta["uid"],
            job_id=job_id,
            kind=kind,
            namespace=meta["namespace"],
            name=meta["name"],
            nodes=nodes,
            location=location,
            auto_resume=(meta.get("annotations") or {}).get(AUTO_RESUME_ANNOTATION) == "true",
            anchor_step=start,
            emitted_step=start,
            ready_at=now + timedelta(seconds=self.timings.job_restart_s),
            containers=list(template.get("containers") or []),
            max_steps=int(max_steps) if max_steps else None,
            reference=self._reference.setdefault(job_id, max(len(nodes), 1)),
            elastic=elastic,
        )
        self._runs[run.uid] = self._unfinished[run.uid] = run
        self._start_pods(run, now)

    def _start_pods(self, run: Run, now: datetime) -> None:
        """The run's pods, bound as kube-scheduler binds them (twin/kube/scheduling.py):
        each to the node its replica was placed on if that node takes it, else to another
        node its affinity allows; a pod no node takes stays Pending with the scheduler's
        condition, and the run does not step until every pod is bound."""
        owner = {
            "apiVersion": "sagemaker.amazonaws.com/v1"
            if run.kind == "HyperPodPyTorchJob"
            else "batch/v1",
            "kind": run.kind,
            "name": run.name,
            "uid": run.uid,
            "controller": True,
        }
        template = self._pod_template(run)
        with self.store.lock:  # read as stored, not copied: every pod, for every run started
            nodes = self.store.peek_all(NODES)
            bound = bound_by_node(self.store.peek_all(PODS))
        run.unbound = {}
        for index, preferred in enumerate(run.nodes):
            if run.kind == "HyperPodPyTorchJob":
                name = f"{run.name}-{REPLICA_SPEC}-{index}"
                labels = {HPJOB_POD_LABEL: run.name, CONTROLLER_UID_LABEL: run.uid}
            else:
                name = f"{run.name}-{index}-{self._rng.getrandbits(20):05x}"
                labels = {
                    "batch.kubernetes.io/job-name": run.name,
                    CONTROLLER_UID_LABEL: run.uid,
                    "batch.kubernetes.io/job-completion-index": str(index),
                }
            meta = template.get("metadata") or {}
            pod = {
                "metadata": {
                    "name": name,
                    "labels": {**(meta.get("labels") or {}), **labels},
                    "annotations": dict(meta.get("annotations") or {}),
                    "ownerReferences": [owner],
                },
                "spec": {**copy.deepcopy(template.get("spec") or {}), "restartPolicy": "Never"},
            }
            node, why = choose_node(pod["spec"], nodes, bound, prefer=preferred)
            pod["status"] = _pod_status(node, why, self._stamp(now))
            if node is None:
                run.unbound[name] = index
            else:
                pod["spec"]["nodeName"] = run.nodes[index] = node
                bound.setdefault(node, []).append(pod)
            self.store.create(PODS, pod, run.namespace)
        if run.kind == "Job":
            # The job controller counts pending pods as active.
            self._patch_status(run, {"active": len(run.nodes), "startTime": self._stamp(now)})
        self._report_running(run, now)

    def _report_running(self, run: Run, now: datetime) -> None:
        """The HyperPod training operator's status once every pod of the run is bound."""
        if run.kind != "HyperPodPyTorchJob" or run.unbound:
            return
        started = self._stamp(now)
        self._patch_status(
            run,
            {
                "startTime": started,
                "restartCount": run.restarts,
                "conditions": [
                    _condition(kind, True, kind, started)
                    for kind in ("Created", "PodsRunning", "Running")
                ],
                "elasticScalingStatus": {
                    "targetReplicas": {REPLICA_SPEC: len(run.nodes)},
                    "lastScalingTime": started,
                },
            },
        )

    def _bind_pending(self, run: Run, now: datetime) -> None:
        """kube-scheduler's retry of the run's Pending pods after the cluster changed: a
        pod a node now takes is bound (and its replica runs there)."""
        nodes = self.store.list(NODES)
        bound = bound_by_node(self.store.list(PODS))
        for name, index in list(run.unbound.items()):
            pod = self.store.find(PODS, name, run.namespace)
            if pod is None:
                del run.unbound[name]
                continue
            node, why = choose_node(pod["spec"], nodes, bound, prefer=run.nodes[index])
            if node is not None:
                self.store.patch(PODS, name, {"spec": {"nodeName": node}}, run.namespace)
                run.nodes[index] = node
                bound.setdefault(node, []).append(pod)
                del run.unbound[name]
            self._show_scheduling(pod, node, why, now)
        self._report_running(run, now)

    def _bind_client_pods(self, now: datetime) -> None:
        """kube-scheduler for pods any client created without a node: bound where the rules
        allow, else left Pending with the scheduler's condition and tried again later."""
        if not self._pending_pods:
            return
        nodes = self.store.list(NODES)
        bound = bound_by_node(self.store.list(PODS))
        for namespace, name in sorted(self._pending_pods):
            pod = self.store.find(PODS, name, namespace)
            if pod is None or (pod.get("spec") or {}).get("nodeName"):
                self._pending_pods.discard((namespace, name))
                continue
            node, why = choose_node(pod.get("spec") or {}, nodes, bound, prefer=None)
            if node is not None:
                self.store.patch(PODS, name, {"spec": {"nodeName": node}}, namespace)
                bound.setdefault(node, []).append(pod)
                self._pending_pods.discard((namespace, name))
            self._show_scheduling(pod, node, why, now)

    def _show_scheduling(
        self, pod: dict[str, Any], node: str | None, why: str, now: datetime
    ) -> None:
        """Write the scheduler's verdict on a pod, unless it says what it already says."""
        status = _pod_status(node, why, self._stamp(now))
        shown = (pod.get("status") or {}).get("conditions") or [{}]
        if node is None and shown[0].get("message") == why:
            return
        meta = pod["metadata"]
        self.store.patch(
            PODS, meta["name"], {"status": status}, meta["namespace"], subresource="status"
        )

    def _pod_template(self, run: Run) -> dict[str, Any]:
        """The run object's pod template as it is now (a resize may have changed it)."""
        obj = self.store.find(RUN_RESOURCES[run.kind], run.name, run.namespace) or {}
        if run.kind == "HyperPodPyTorchJob":
            template = _replica_spec(obj).get("template") or {}
        else:
            template = (obj.get("spec") or {}).get("template") or {}
        if not template:
            return {"spec": {"containers": run.containers}}
        return dict(template)

    def _patch_status(self, run: Run, status: dict[str, Any]) -> None:
        rt = RUN_RESOURCES[run.kind]
        if self.store.find(rt, run.name, run.namespace) is not None:
            self.store.patch(rt, run.name, {"status": status}, run.namespace, subresource="status")

    def _pods_of(self, run: Run) -> list[dict[str, Any]]:
        return self.store.list(
            PODS, run.namespace, label_selector=f"{CONTROLLER_UID_LABEL}={run.uid}"
        )

    def _delete_pods_of(self, run: Run) -> None:
        for pod in self._pods_of(run):
            self.store.delete(PODS, pod["metadata"]["name"], run.namespace)

    def _pod_gone(self, pod: dict[str, Any], now: datetime) -> None:
        """A pod deleted or evicted through the API: disrupted."""
        uid = (pod["metadata"].get("labels") or {}).get(CONTROLLER_UID_LABEL)
        run = self._runs.get(uid or "")
        if run is not None and run.state == "running":
            node = pod.get("spec", {}).get("nodeName")
            instance = next((i for i in self._instances.values() if i.node_name == node), None)
            self._stop_run(run, now, faulty=instance, pod=pod["metadata"]["name"])

    def _lose_pods(self, instance: Instance, now: datetime) -> None:
        """The node goes down: every run with a pod on it loses that pod."""
        for run in list(self._runs.values()):
            if run.state == "running" and instance.node_name in run.nodes:
                pod = next(
                    (
                        p["metadata"]["name"]
                        for p in self._pods_of(run)
                        if p.get("spec", {}).get("nodeName") == instance.node_name
                    ),
                    run.name,
                )
                self._stop_run(run, now, faulty=instance, pod=pod)

    def _delete_pods_on(self, node_name: str) -> None:
        for pod in self.store.list(PODS, field_selector=f"spec.nodeName={node_name}"):
            meta = pod["metadata"]
            self.store.delete(PODS, meta["name"], meta["namespace"])

    def _stop_run(
        self, run: Run, now: datetime, *, faulty: Instance | None, pod: str, exit_code: int = 137
    ) -> None:
        """A pod of the run is gone or failed. A node-caused loss (`faulty`) of a job that
        opted into HyperPod auto-resume waits for its nodes, an elastic one for them or its
        faultyScaleDownTimeoutInSeconds; any other run fails: a batch
        Job through its podFailurePolicy (a disrupted pod → reason PodFailurePolicy) or its
        backoffLimit 0, a HyperPodPyTorchJob (jobMaxRetryCount 0) with the faulty instance
        named. The job controller removes the run's other pods."""
        self._freeze(run, now)
        waits = faulty is not None and (run.auto_resume or run.elastic is not None)
        run.state = "waiting" if waits else "failed"
        self._delete_pods_of(run)
        if waits and run.elastic is not None and not run.auto_resume:
            timeout = float(run.elastic.get("faultyScaleDownTimeoutInSeconds") or 0)
            self._schedule(now, timeout, "faulty_scale_down", run.uid)
        at = self._stamp(now)
        status: dict[str, Any]
        if run.kind == "HyperPodPyTorchJob":
            if run.state == "waiting":
                reason, message = (
                    "NodeFault",
                    f"Found unhealthy node {faulty.node_name if faulty else ''}",
                )
                status = {"conditions": [_condition("Running", False, reason, at, message)]}
            else:
                if faulty is not None:
                    reason = "NodeFault"
                    message = f"Found unhealthy node {faulty.node_name}"
                else:
                    reason = "PodFailed"
                    message = f"pod {run.namespace}/{pod} exited with code {exit_code}"
                status = {
                    "completionTime": at,
                    "conditions": [
                        _condition("Running", False, reason, at, message),
                        _condition("Failed", True, reason, at, message),
                    ],
                }
                if faulty is not None:
                    status["latestFaultyPodInstanceList"] = {
                        "restartType": "JLR",
                        "faultyInstanceIdList": [faulty.instance_id],
                        "faultyPodList": [pod],
                        "faultyRankList": [],
                    }
        else:
            status = {"active": 0}
            if run.state == "failed":
                if faulty is not None:
                    reason = "PodFailurePolicy"
                    message = (
                        f"Pod {run.namespace}/{pod} has condition DisruptionTarget matching "
                        "FailJob rule at index 0"
                    )
                else:
                    reason = "BackoffLimitExceeded"
                    message = "Job has reached the specified backoff limit"
                status.update(
                    failed=1,
                    conditions=[
                        _condition("FailureTarget", True, reason, at, message),
                        _condition("Failed", True, reason, at, message),
                    ],
                )
        self._patch_status(run, status)
        if run.state == "failed":
            self._report_run(run, "failed", reason, now)

    def _complete(self, run: Run, at: datetime) -> None:
        """The training reached its last step: a final checkpoint, then the run succeeds."""
        assert run.max_steps is not None
        self._checkpoint_runs(at)
        if run.location is not None and run.emitted_step < run.max_steps:
            self._write_checkpoint(run, run.max_steps)
        run.anchor_step, run.anchor_at = run.max_steps, None
        self._record(run, at, 0)
        run.state = "succeeded"
        self._unfinished.pop(run.uid, None)
        self._delete_pods_of(run)
        stamp = self._stamp(at)
        if run.kind == "HyperPodPyTorchJob":
            status: dict[str, Any] = {
                "completionTime": stamp,
                "conditions": [
                    _condition("Running", False, "Completed", stamp),
                    _condition("Completed", True, "Completed", stamp),
                ],
            }
        else:
            status = {
                "active": 0,
                "succeeded": len(run.nodes),
                "completionTime": stamp,
                "conditions": [
                    _condition("SuccessCriteriaMet", True, "CompletionsReached", stamp),
                    _condition("Complete", True, "CompletionsReached", stamp),
                ],
            }
        self._patch_status(run, status)
        self._report_run(run, "succeeded", "Completed", at)

    def _rescale(self, obj: dict[str, Any], now: datetime) -> None:
        """The operator's elastic scaling: the job checkpoints (graceful shutdown), its pods
        go, and it restarts at the new size on the nodes the patch pins."""
        run = self._runs.get(obj["metadata"]["uid"])
        if run is None or run.state not in ("running", "waiting"):
            return
        replica_spec = _replica_spec(obj)
        names = _pinned_nodes(replica_spec.get("template", {}).get("spec", {}))
        replicas = int(replica_spec.get("replicas", 1))
        wanted = [names[i % len(names)] for i in range(replicas)] if names else []
        run.elastic = obj.get("spec", {}).get("elasticPolicy")
        if run.state == "running" and wanted == run.nodes:
            return  # the operator already runs it so (its own faulty scale-down)
        # A graceful scaling event checkpoints first; a run with a rank on a broken node
        # cannot, and goes back to its last complete checkpoint.
        graceful = run.state == "running" and all(map(self._ready, run.nodes))
        step = run.step_at(now, self._step)
        self._freeze(run, now)
        if graceful and run.location is not None and step > run.emitted_step:
            self._write_checkpoint(run, step)
        self._delete_pods_of(run)
        run.nodes = wanted
        if not graceful:
            step = self._checkpoints.get(run.location or "", 0)
        run.anchor_step = run.emitted_step = step
        run.state = "running"
        self._unfinished[run.uid] = run
        run.ready_at = now + timedelta(seconds=self.timings.rescale_s)
        run.restarts += 1
        self._start_pods(run, now)

    def _scale_down_faulty(self, run: Run, now: datetime) -> None:
        """The operator gave up waiting for the faulty nodes: the job restarts from its last
        checkpoint at the largest size its elasticPolicy allows on the healthy ones, or
        fails when that is below its minimum."""
        assert run.elastic is not None
        healthy = [n for n in run.nodes if self._ready(n) and self._schedulable(n)]
        policy = ElasticPolicy.model_validate(run.elastic)
        size = policy.at_most(len(healthy))
        if not size:
            run.state = "failed"
            at = self._stamp(now)
            message = "no allowed size left on healthy nodes"
            self._patch_status(
                run,
                {"conditions": [_condition("Failed", True, "NodeFault", at, message)]},
            )
            self._report_run(run, "failed", "NodeFault", now)
            return
        run.nodes = healthy[:size]
        run.state = "running"
        self._unfinished[run.uid] = run
        run.anchor_step = run.emitted_step = self._checkpoints.get(run.location or "", 0)
        run.ready_at = now + timedelta(seconds=self.timings.rescale_s)
        run.restarts += 1
        self._start_pods(run, now)
        self._patch_status(
            run,
            {
                "elasticScalingStatus": {
                    "targetReplicas": {REPLICA_SPEC: size},
                    "isFaultyPodScaleDown": True,
                    "lastScalingTime": self._stamp(now),
                }
            },
        )

    def _report_run(self, run: Run, phase: str, reason: str, now: datetime) -> None:
        """The in-cluster forwarder's event for a run that finished."""
        detail = {
            "clusterName": self.eks_cluster,
            "namespace": run.namespace,
            "kind": run.kind,
            "name": run.name,
            "jobId": run.job_id,
            "phase": phase,
            "reason": reason,
            "observedTime": self._stamp(now),
        }
        self._put_event(
            "hyperguard.node-forwarder",
            "Kubernetes Job Status Changed",
            detail,
            [],
            bus="service",
        )

    def _ready(self, node_name: str) -> bool:
        instance = next((i for i in self._instances.values() if i.node_name == node_name), None)
        return instance is not None and self._healthy(instance)

    def _schedulable(self, node_name: str) -> bool:
        node = self.store.find(NODES, node_name)
        return node is not None and not node.get("spec", {}).get("unschedulable")

    def _freeze(self, run: Run, now: datetime) -> None:
        if run.anchor_at is not None:
            run.freeze(now, self._step)
            self._record(run, now, 0)

    def _record(self, run: Run, at: datetime, replicas: int) -> None:
        self._timeline.setdefault(run.job_id, []).append(
            Progress(at=at, replicas=replicas, step=run.step_at(at, self._step))
        )

    def _reconcile_runs(self, now: datetime) -> None:
        """HyperPod restarts auto-resume jobs whose nodes are back; every run steps only
        while all its nodes are up and healthy."""
        self._bind_client_pods(now)
        restart = timedelta(seconds=self.timings.job_restart_s)
        for run in list(self._unfinished.values()):
            if (
                run.state == "waiting"
                and run.nodes
                and all(self._ready(n) and self._schedulable(n) for n in run.nodes)
            ):
                run.state = "running"
                run.restarts += 1
                run.hung = False  # its processes start afresh
                run.anchor_step = run.emitted_step = self._checkpoints.get(run.location or "", 0)
                run.ready_at = now + restart
                self._start_pods(run, now)
            if run.state == "running" and run.unbound:
                self._bind_pending(run, now)
            stepping = (
                run.state == "running"
                and not run.hung
                and bool(run.nodes)
                and not run.unbound
                and all(map(self._ready, run.nodes))
            )
            if stepping and run.anchor_at is None:
                run.slowdown = self._slowdown(run)
                run.anchor_at = max(now, run.ready_at)
                self._record(run, run.anchor_at, len(run.nodes))
            elif not stepping and run.anchor_at is not None:
                self._freeze(run, now)

    def _checkpoint_runs(self, until: datetime) -> None:
        every = self.timings.checkpoint_interval_steps
        for run in list(self._unfinished.values()):
            if run.anchor_at is None or run.location is None:
                continue
            first = (run.emitted_step // every + 1) * every
            last = run.step_at(until, self._step)
            if run.max_steps is not None:
                last = min(last, run.max_steps)
            for step in range(first, last + 1, every):
                self._write_checkpoint(run, step)

    def _write_checkpoint(self, run: Run, step: int) -> None:
        assert run.location is not None
        run.emitted_step = step
        self._checkpoints[run.location] = step
        team = run.namespace.removeprefix("hyperpod-ns-")
        uri = checkpoint_uri(run.location, step)
        self._effects(Effect("write_checkpoint", (run.location, step)))
        by_node = {i.node_name: i.instance_id for i in self._instances.values()}
        timings = {
            by_node[node]: seconds
            for node, seconds in run.node_step_seconds(self._step, self._speeds).items()
            if node in by_node
        }
        self._effects(Effect("report_checkpoint", (run.job_id, team, step, uri, timings)))

    def _complete_runs(self, until: datetime) -> None:
        due = sorted(
            (at, run.uid)
            for run in self._unfinished.values()
            if (at := run.finishes_at(self._step)) is not None and at <= until
        )
        for at, uid in due:
            self._complete(self._runs[uid], at)

    # ------------------------------------------------------------ Karpenter

    def _accept_claim(self, claim: dict[str, Any], now: datetime) -> None:
        """Karpenter's first look at a NodeClaim created through the API: its finalizer, its
        conditions Unknown, and the EC2 launch under way (or, for a claim it cannot launch
        at all, Launched=False). Every claim gets the registration TTL."""
        meta = claim["metadata"]
        uid, name = meta["uid"], meta["name"]
        self._claims[uid] = name
        finalizers = [f for f in meta.get("finalizers") or [] if f != KARPENTER_FINALIZER]
        self.store.patch(
            NODECLAIMS, name, {"metadata": {"finalizers": [*finalizers, KARPENTER_FINALIZER]}}
        )
        problem = self._unlaunchable(claim)
        if problem is None:
            self._schedule(now, self.timings.nodeclaim_launch_s, "claim_launch", uid)
            self._set_claim_status(name, {}, now)
        else:
            self._set_claim_status(name, {"Launched": (False, "LaunchFailed", problem)}, now)
        self._schedule(now, self.timings.nodeclaim_registration_ttl_s, "claim_ttl", uid)

    def _unlaunchable(self, claim: dict[str, Any]) -> str | None:
        """Why Karpenter cannot launch this claim at all (None: it can)."""
        nodepool, instance_type, _ = _claim_request(claim)
        if not instance_type:
            return f"no {INSTANCE_TYPE_LABEL} requirement with operator In"
        if not nodepool:
            return f"no {NODEPOOL_LABEL} label or requirement"
        if self.store.find(NODEPOOLS, nodepool) is None:
            return f'NodePool "{nodepool}" not found'
        return None

    def _launch_claim(self, uid: str, at: datetime) -> None:
        """EC2 answers: an instance (Launched, with its providerID), or insufficient
        capacity (Karpenter deletes the claim)."""
        claim = self._live_claim(uid)
        if claim is None:
            return  # deleted before the launch: nothing is launched
        name = claim["metadata"]["name"]
        nodepool, instance_type, capacity_type = _claim_request(claim)
        left = self._ec2_capacity.get((instance_type, capacity_type))
        if left == 0:
            message = (
                "InsufficientInstanceCapacity: We currently do not have sufficient "
                f"{instance_type} capacity in the Availability Zone you requested ({AZ}). Our "
                "system will be working on provisioning additional capacity."
            )
            self._set_claim_status(name, {"Launched": (False, "InsufficientCapacity", message)}, at)
            self._delete_claim(name, at)
            return
        if left is not None:
            self._ec2_capacity[(instance_type, capacity_type)] = left - 1
        instance = self._new_burst_instance(
            nodepool, instance_type, capacity_type, at, status=NodeStatus.PENDING
        )
        instance.nodeclaim = name
        # What Karpenter learns from the launch it writes onto the claim (and so the node).
        resolved = {
            NODEPOOL_LABEL: nodepool,
            INSTANCE_TYPE_LABEL: instance_type,
            CAPACITY_TYPE_LABEL: capacity_type,
            "topology.kubernetes.io/zone": AZ,
        }
        self.store.patch(NODECLAIMS, name, {"metadata": {"labels": resolved}})
        provider = {"providerID": eks_provider_id(AZ, instance.instance_id)}
        self._set_claim_status(name, {"Launched": (True, "Launched", "")}, at, provider)
        if self._unregistering:
            self._unregistering -= 1  # the registration TTL will delete the claim
        else:
            self._schedule(at, self.timings.nodeclaim_ready_s, "claim_register", uid)

    def _register_claim(self, uid: str, at: datetime) -> None:
        """The node has joined the cluster with its GPUs: Registered, Initialized, Ready."""
        claim = self._live_claim(uid)
        if claim is None:
            return
        meta = claim["metadata"]
        instance = next(i for i in self._instances.values() if i.nodeclaim == meta["name"])
        del self._claims[uid]
        self._show_health(instance, at)
        node = self._node_object(instance, at, meta.get("labels") or {})
        if annotations := meta.get("annotations"):
            # Karpenter's registration syncs the claim's annotations onto the node (syncNode
            # in pkg/controllers/nodeclaim/lifecycle/registration.go).
            node["metadata"]["annotations"] = dict(annotations)
        self.store.create(NODES, node)
        self._initialized_at[instance.node_name] = at
        ready = {stage: (True, stage, "") for stage in CLAIM_STAGES}
        self._set_claim_status(meta["name"], ready, at, {"nodeName": instance.node_name})

    def _expire_claim(self, uid: str, at: datetime) -> None:
        """Karpenter's liveness check: a claim whose node has not registered by now goes."""
        claim = self._live_claim(uid)
        if claim is not None:
            self._delete_claim(claim["metadata"]["name"], at)

    def _delete_claim(self, name: str, at: datetime) -> None:
        """Karpenter deletes a claim itself: as a deletion through the API would, without
        the store calling us back."""
        self._release_claim(self.store.delete(NODECLAIMS, name), at)

    def _live_claim(self, uid: str) -> dict[str, Any] | None:
        """The API-created claim `uid` while it waits to launch or register, not deleted."""
        name = self._claims.get(uid)
        claim = self.store.find(NODECLAIMS, name) if name is not None else None
        if claim is None or claim["metadata"]["uid"] != uid:
            return None
        return None if claim["metadata"].get("deletionTimestamp") else claim

    def _set_claim_status(
        self,
        name: str,
        changes: Mapping[str, tuple[bool, str, str]],
        at: datetime,
        fields: Mapping[str, str] | None = None,
    ) -> None:
        current = self.store.get(NODECLAIMS, name).get("status") or {}
        conditions = _claim_conditions(current.get("conditions") or [], changes, self._stamp(at))
        status = {**(fields or {}), "conditions": conditions}
        self.store.patch(NODECLAIMS, name, {"status": status}, subresource="status")

    def _drop_finalizer(self, claim: str) -> None:
        found = self.store.find(NODECLAIMS, claim)
        if found is None:
            return
        others = [f for f in found["metadata"].get("finalizers") or [] if f != KARPENTER_FINALIZER]
        self.store.patch(NODECLAIMS, claim, {"metadata": {"finalizers": others or None}})

    def _release_claim(self, claim: dict[str, Any], now: datetime) -> None:
        """A deleted NodeClaim: Karpenter drains the node and terminates the instance; a
        claim with no instance yet has its launch cancelled and goes at once."""
        self._claims.pop(claim["metadata"]["uid"], None)
        instance = next(
            (i for i in self._instances.values() if i.nodeclaim == claim["metadata"]["name"]),
            None,
        )
        if instance is None:
            self._drop_finalizer(claim["metadata"]["name"])
            return
        instance.status = NodeStatus.SHUTTING_DOWN
        self._taint_disrupted(instance)
        self._lose_pods(instance, now)
        delay = self.timings.nodeclaim_termination_s
        self._schedule(now, delay, "claim_gone", instance.instance_id)

    def _note_pod_event(self, event: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        """Karpenter's pod-events controller: a pod bound to a node, gone from it or ended
        moves that node's NodeClaim lastPodEventTime, from which consolidateAfter counts."""
        node = (obj.get("spec") or {}).get("nodeName")
        before = ((old or {}).get("spec") or {}).get("nodeName")
        phase = (obj.get("status") or {}).get("phase")
        ended = phase in ("Succeeded", "Failed") and phase != ((old or {}).get("status") or {}).get(
            "phase"
        )
        if node and (event in ("ADDED", "DELETED") or node != before or ended):
            self._pod_event_at[node] = self._settling or max(self.clock.now(), self._settled_at)

    # ------------------------------------------------------------ automatic patching

    def _patch_happens(self, due: _Scheduled) -> None:
        """PATCH_START and PATCH_CHECK are keyed by the group, PATCH_DONE by the instance."""
        if due.what is _Happening.PATCH_START:
            self._start_patch(due.instance_id, due.at)
        elif due.what is _Happening.PATCH_CHECK:
            self._patch_round(due.instance_id, due.at)
        elif (instance := self._instances.get(due.instance_id)) is not None:
            self._patched(instance, due.at)

    def _start_patch(self, group: str, now: datetime) -> None:
        """NextPatchDate came: every strategy cordons the group's instances first."""
        patch = self._patches[group]
        patch.status = "InProgress"
        patch.waiting = {
            i.instance_id
            for i in self._instances.values()
            if i.platform == "hyperpod" and i.group == group
        }
        for instance_id in patch.waiting:
            self._cordon_for_patch(self._instances[instance_id], cordon=True)
        self._patch_round(group, now)

    def _patch_round(self, group: str, now: datetime) -> None:
        """Patch what the strategy lets patch now (ClusterPatchingStrategy's documentation):
        WhenIdle each idle instance; WhenAllIdle all of them once all are idle; DrainFirst a
        batch of MaximumBatchSize at a time, its pods evicted. Past IdleWaitWindowInSeconds
        the instances still busy are uncordoned and keep the old AMI."""
        patch = self._patches[group]
        patch.waiting &= self._instances.keys()
        idle = {i for i in patch.waiting if self._idle(self._instances[i])}
        if patch.strategy == "WhenIdle":
            chosen = idle
        elif patch.strategy == "WhenAllIdle":
            chosen = set(patch.waiting) if idle == patch.waiting else set()
        else:
            chosen = set(sorted(patch.waiting)[: max(0, patch.batch - len(patch.updating))])
        for instance_id in sorted(chosen):
            instance = self._instances[instance_id]
            if patch.strategy == "DrainFirst":
                self._lose_pods(instance, now)
                self._delete_pods_on(instance.node_name)
            patch.waiting.discard(instance_id)
            patch.updating.add(instance_id)
            instance.status = NodeStatus.SYSTEM_UPDATING
            self._publish(instance, now)
            self._schedule(now, self.timings.patch_s, "patch_done", instance_id)
        if patch.strategy != "DrainFirst" and now >= patch.at + timedelta(
            seconds=patch.idle_wait_s
        ):
            for instance_id in sorted(patch.waiting):
                self._cordon_for_patch(self._instances[instance_id], cordon=False)
            patch.waiting.clear()
        if patch.waiting and patch.strategy != "DrainFirst":
            self._schedule(now, PATCH_POLL_S, "patch_check", group)
        elif not patch.waiting and not patch.updating:
            patch.status = "Succeeded"

    def _patched(self, instance: Instance, now: datetime) -> None:
        patch = self._patches[instance.group]
        patch.updating.discard(instance.instance_id)
        instance.patched_at = now
        self._show_health(instance, now)
        self._cordon_for_patch(instance, cordon=False)
        self._patch_round(instance.group, now)

    def _idle(self, instance: Instance) -> bool:
        """No running job: no active pod bound to the node."""
        pods = self.store.list(PODS, field_selector=f"spec.nodeName={instance.node_name}")
        return instance.status is NodeStatus.RUNNING and not any(_active_pod(p) for p in pods)

    def _cordon_for_patch(self, instance: Instance, *, cordon: bool) -> None:
        if self.store.find(NODES, instance.node_name) is not None:
            self.store.patch(NODES, instance.node_name, {"spec": {"unschedulable": cordon}})

    def _consolidate(self, now: datetime) -> None:
        """Karpenter's disruption controller, consolidation only (every 10 s, its polling
        period): a Karpenter node whose NodePool enables it (`consolidateAfter` not Never) is
        deleted, as Karpenter deletes a candidate's NodeClaim, once no pod event touched it
        for consolidateAfter and it is empty, or, under WhenEmptyOrUnderutilized, its pods
        all fit on the other nodes (empty nodes first, as emptiness runs before single-node
        consolidation, which takes one node); never a node or pod annotated
        karpenter.sh/do-not-disrupt "true", nor beyond the NodePool's disruption budgets
        (pkg/controllers/disruption: emptiness.go, consolidation.go; state/statenode.go
        ValidateNodeDisruptable, ValidatePodsDisruptable; apis/v1/nodepool.go
        GetAllowedDisruptionsByReason)."""
        if self._next_disruption_poll is not None and now < self._next_disruption_poll:
            return
        self._next_disruption_poll = now + DISRUPTION_POLL
        claimed = [i for i in self._instances.values() if i.nodeclaim]
        if not claimed:
            return  # no Karpenter node: nothing to read on this settle
        pools = {
            p["metadata"]["name"]: p
            for p in self.store.list(NODEPOOLS)
            if _consolidate_after(p) is not None
        }
        burst = sorted((i for i in claimed if i.group in pools), key=lambda i: i.node_name)
        if not burst:
            return
        nodes = {n["metadata"]["name"]: n for n in self.store.list(NODES)}
        bound = bound_by_node(p for p in self.store.list(PODS) if _active_pod(p))
        reasons = {
            i.node_name: reason
            for i in burst
            if (reason := self._consolidation_reason(i, pools[i.group], nodes, bound, now))
        }
        self._disrupt(burst, reasons, pools, now)

    def _disrupt(
        self,
        burst: list[Instance],
        reasons: Mapping[str, str],
        pools: Mapping[str, dict[str, Any]],
        now: datetime,
    ) -> None:
        """One method a poll, emptiness first; single-node consolidation takes one node;
        each within its pool's budget for the reason."""
        sizes = Counter(i.group for i in burst)
        disrupting = Counter(i.group for i in burst if i.status is NodeStatus.SHUTTING_DOWN)
        empty = [i for i in burst if reasons.get(i.node_name) == "Empty"]
        underused = [i for i in burst if reasons.get(i.node_name) == "Underutilized"]
        for instance in empty or underused[:1]:
            reason = reasons[instance.node_name]
            allowed = _allowed_disruptions(pools[instance.group], reason, sizes[instance.group])
            if disrupting[instance.group] >= allowed or instance.nodeclaim is None:
                continue
            disrupting[instance.group] += 1
            self._delete_claim(instance.nodeclaim, now)

    def _consolidation_reason(
        self,
        instance: Instance,
        pool: dict[str, Any],
        nodes: Mapping[str, dict[str, Any]],
        bound: Mapping[str, list[Mapping[str, Any]]],
        now: datetime,
    ) -> Literal["Empty", "Underutilized"] | None:
        """Why Karpenter would consolidate this node now; None while it may not."""
        node = nodes.get(instance.node_name)
        if node is None or not self._disruptable(instance, node):
            return None
        since = self._pod_event_at.get(instance.node_name) or self._initialized_at.get(
            instance.node_name
        )
        after = _consolidate_after(pool)
        if since is None or after is None or now < since + after:
            return None
        pods = bound.get(instance.node_name, [])
        if any(map(_do_not_disrupt, pods)):
            return None
        if not pods:
            return "Empty"
        policy = (pool["spec"].get("disruption") or {}).get(
            "consolidationPolicy", "WhenEmptyOrUnderutilized"
        )
        if policy == "WhenEmptyOrUnderutilized" and _fit_elsewhere(pods, node, nodes, bound):
            return "Underutilized"
        return None

    def _disruptable(self, instance: Instance, node: Mapping[str, Any]) -> bool:
        """ValidateNodeDisruptable: a running node of a live claim, not already disrupted,
        not annotated do-not-disrupt."""
        claim = self.store.find(NODECLAIMS, instance.nodeclaim or "")
        taints = node["spec"].get("taints") or []
        return (
            claim is not None
            and not claim["metadata"].get("deletionTimestamp")
            and instance.status is NodeStatus.RUNNING
            and not _do_not_disrupt(node)
            and not any(t.get("key") == DISRUPTED_TAINT for t in taints)
        )

    def _taint_disrupted(self, instance: Instance) -> None:
        """Karpenter's termination controller taints the node before draining it, so that
        nothing new lands there (concepts/disruption in Karpenter's docs)."""
        node = self.store.find(NODES, instance.node_name)
        if node is None:
            return
        taints = [t for t in node["spec"].get("taints") or [] if t.get("key") != DISRUPTED_TAINT]
        taints.append({"key": DISRUPTED_TAINT, "effect": "NoSchedule"})
        self.store.patch(NODES, instance.node_name, {"spec": {"taints": taints}})

    def _node_summary(self, instance: Instance) -> dict[str, Any]:
        return {
            "InstanceGroupName": instance.group,
            "InstanceId": instance.instance_id,
            "InstanceType": instance.instance_type,
            "LaunchTime": self.clock.wall(instance.launch_time),
            "InstanceStatus": {
                "Status": instance.status.value,
                "Message": _status_message(instance, self._faults.get(instance.instance_id)),
            },
        } | (
            {"LastSoftwareUpdateTime": self.clock.wall(instance.patched_at)}
            if instance.patched_at
            else {}
        )


def _order(instance: Instance) -> tuple[datetime, str]:
    return (instance.launch_time, instance.instance_id)


def _failure(node_id: str, code: str, message: str) -> dict[str, str]:
    return {"NodeId": node_id, "ErrorCode": code, "Message": f"{node_id}: {message}"}


def _status_message(instance: Instance, fault: Fault | None) -> str:
    if instance.status is NodeStatus.FAILURE and fault is not None:
        return f"The node failed its health checks ({FAULT_CONDITIONS[fault.kind][1]})."
    return ""


def _condition(
    kind: str, ok: bool, reason: str, at: str, message: str | None = None
) -> dict[str, str]:
    return {
        "type": kind,
        "status": "True" if ok else "False",
        "reason": reason,
        "message": message if message is not None else "" if ok else f"{kind} is False: {reason}",
        "lastHeartbeatTime": at,
        "lastTransitionTime": at,
    }


def _pod_status(node: str | None, why: str, at: str) -> dict[str, Any]:
    """A pod's status once kube-scheduler has looked at it: Running on its node (the
    kubelet starts it at once), or Pending with PodScheduled=False as the scheduler writes
    it."""
    scheduled = {"type": "PodScheduled", "status": "True", "lastTransitionTime": at}
    if node is not None:
        return {"phase": "Running", "conditions": [scheduled]}
    unschedulable = {**scheduled, "status": "False", "reason": "Unschedulable", "message": why}
    return {"phase": "Pending", "conditions": [unschedulable]}


def _replica_spec(obj: dict[str, Any]) -> dict[str, Any]:
    specs = obj.get("spec", {}).get("replicaSpecs") or [{}]
    return dict(specs[0])


def _pinned_nodes(pod_spec: dict[str, Any]) -> list[str]:
    """The node names a pod template's required node affinity allows, in order."""
    terms = (
        pod_spec.get("affinity", {})
        .get("nodeAffinity", {})
        .get("requiredDuringSchedulingIgnoredDuringExecution", {})
        .get("nodeSelectorTerms", [])
    )
    for term in terms:
        for field_match in term.get("matchFields", []):
            if field_match.get("key") == "metadata.name" and field_match.get("operator") == "In":
                return list(field_match.get("values", []))
    return []


DISRUPTION_POLL = timedelta(seconds=10)
"""Karpenter's disruption controller's polling period (pkg/controllers/disruption)."""
_DURATION_PART = re.compile(r"([0-9]+)(h|m|s)")
_DURATION_UNITS = {"h": 3600, "m": 60, "s": 1}


def _consolidate_after(pool: Mapping[str, Any]) -> timedelta | None:
    """The NodePool's `spec.disruption.consolidateAfter` (CRD pattern
    `^(([0-9]+(s|m|h))+|Never)$`, default 0s); None when consolidation is off (Never)."""
    value = ((pool.get("spec") or {}).get("disruption") or {}).get("consolidateAfter", "0s")
    if value == "Never":
        return None
    return timedelta(
        seconds=sum(int(n) * _DURATION_UNITS[u] for n, u in _DURATION_PART.findall(value))
    )


def _allowed_disruptions(pool: Mapping[str, Any], reason: str, size: int) -> int:
    """How many of the pool's `size` nodes may be disrupting at once for `reason`: the least
    of the budgets that apply (no reasons, or this one), a percentage rounded up; 10 % when
    the NodePool sets none (the CRD's default). A budget with a schedule is taken as
    inactive (the twin does not evaluate its cron)."""
    budgets = ((pool.get("spec") or {}).get("disruption") or {}).get("budgets") or [
        {"nodes": "10%"}
    ]
    allowed = size
    for budget in budgets:
        if budget.get("schedule") or (budget.get("reasons") and reason not in budget["reasons"]):
            continue
        nodes = str(budget.get("nodes", "10%"))
        value = math.ceil(size * int(nodes[:-1]) / 100) if nodes.endswith("%") else int(nodes)
        allowed = min(allowed, value)
    return allowed


def _do_not_disrupt(obj: Mapping[str, Any]) -> bool:
    """karpenter.sh/do-not-disrupt: "true" on a node or a pod."""
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    return bool(annotations.get(DO_NOT_DISRUPT_ANNOTATION) == "true")


def _fit_elsewhere(
    pods: list[Mapping[str, Any]],
    node: Mapping[str, Any],
    nodes: Mapping[str, dict[str, Any]],
    bound: Mapping[str, list[Mapping[str, Any]]],
) -> bool:
    """Karpenter's scheduling simulation for a delete: every pod of `node` fits on the other
    nodes, by kube-scheduler's rules, together with what they already hold."""
    name = node["metadata"]["name"]
    others = [n for other, n in nodes.items() if other != name]
    trial: dict[str, list[Mapping[str, Any]]] = {n: list(on) for n, on in bound.items()}
    for pod in pods:
        spec = {k: v for k, v in (pod.get("spec") or {}).items() if k != "nodeName"}
        target, _ = choose_node(spec, others, trial, prefer=None)
        if target is None:
            return False
        trial.setdefault(target, []).append(pod)
    return True


def _active_pod(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


def _nodepool(name: str, instance_type: str) -> dict[str, Any]:
    """A GPU NodePool as EKS's guides write one: its nodes tainted `nvidia.com/gpu` so that
    only pods asking for the GPUs (and tolerating the taint) land there; consolidation off."""
    return {
        "metadata": {"name": name},
        "spec": {
            "template": {
                "spec": {
                    "taints": [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}],
                    "requirements": [
                        {
                            "key": INSTANCE_TYPE_LABEL,
                            "operator": "In",
                            "values": [instance_type],
                        },
                        {
                            "key": CAPACITY_TYPE_LABEL,
                            "operator": "In",
                            "values": ["on-demand", "spot"],
                        },
                    ],
                    "nodeClassRef": {
                        "group": "karpenter.k8s.aws",
                        "kind": "EC2NodeClass",
                        "name": "default",
                    },
                }
            },
            # Off, so that the twin's seed burst nodes (capacity launched before the twin
            # began) stay while idle; set_nodepool_disruption turns it on.
            "disruption": {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "Never"},
        },
    }


def _karpenter_labels(instance: Instance, info: Mapping[str, Any]) -> dict[str, str]:
    """The labels Karpenter v1 (and its AWS provider) put on a node it launched, those of
    its well-known labels that are cheap to derive (karpenter.sh/docs/reference/
    well-known-labels, karpenter.sh/docs/concepts/scheduling "Well-Known Labels")."""
    labels = {
        NODEPOOL_LABEL: instance.group,
        CAPACITY_TYPE_LABEL: _capacity_label(instance),
        "karpenter.sh/registered": "true",
        "karpenter.sh/initialized": "true",
        "karpenter.k8s.aws/ec2nodeclass": "default",
    }
    if parts := _EC2_NAME.fullmatch(instance.instance_type):
        labels |= {
            "karpenter.k8s.aws/instance-category": parts["category"],
            "karpenter.k8s.aws/instance-generation": parts["generation"],
            "karpenter.k8s.aws/instance-family": instance.instance_type.split(".")[0],
            "karpenter.k8s.aws/instance-size": parts["size"],
        }
    if info:
        spec = spec_of(info)
        labels |= {
            "karpenter.k8s.aws/instance-cpu": str(spec.vcpu),
            "karpenter.k8s.aws/instance-memory": str(spec.memory_mib),
            "karpenter.k8s.aws/instance-hypervisor": str(info.get("Hypervisor", "nitro")),
        }
    for gpu in info.get("GpuInfo", {}).get("Gpus", [])[:1]:
        labels |= {
            "karpenter.k8s.aws/instance-gpu-count": str(gpu.get("Count", 0)),
            "karpenter.k8s.aws/instance-gpu-manufacturer": str(gpu.get("Manufacturer", "")).lower(),
            "karpenter.k8s.aws/instance-gpu-name": str(gpu.get("Name", "")).lower(),
        }
    return labels


_EC2_NAME = re.compile(r"(?P<category>[a-z]+)(?P<generation>[0-9]+)[a-z0-9-]*\.(?P<size>[a-z0-9]+)")


def _node_capacity(instance_type: str, info: Mapping[str, Any]) -> dict[str, str]:
    """What the kubelet reports: EC2's vCPUs and memory, the accelerators as the device
    plugin advertises them (nvidia.com/gpu or aws.amazon.com/neuron), maxPods."""
    capacity = {"pods": str(KUBELET_MAX_PODS)}
    if not info:
        return capacity
    spec = spec_of(info)
    capacity |= {"cpu": str(spec.vcpu), "memory": f"{spec.memory_mib}Mi"}
    if spec.accelerators:
        capacity[accelerator_resource(instance_type)] = str(spec.accelerators)
    return capacity


def _allocatable(capacity: Mapping[str, str]) -> dict[str, str]:
    """Capacity less the EKS AMI's kube-reserved (CPU: 6% of the first core, 1% of the
    second, 0.5% of the next two, 0.25% of the rest; memory: 11 MiB per pod + 255 MiB) and
    the kubelet's 100 MiB hard-eviction threshold."""
    allocatable = dict(capacity)
    if "cpu" in capacity:
        cores = int(capacity["cpu"])
        shares = (60, 10, 5, 5)
        reserved = sum(shares[:cores]) + max(cores - 4, 0) * 2.5
        allocatable["cpu"] = f"{int(cores * 1000 - reserved)}m"
    if "memory" in capacity:
        memory = int(capacity["memory"].removesuffix("Mi"))
        allocatable["memory"] = f"{memory - 11 * KUBELET_MAX_PODS - 255 - 100}Mi"
    return allocatable


def _capacity_label(instance: Instance) -> str:
    """Karpenter's capacity-type label for an instance of `EC2_CAPACITY_TYPES`' values."""
    by_ec2 = {ec2: karpenter for karpenter, ec2 in EC2_CAPACITY_TYPES.items()}
    return by_ec2.get(instance.capacity_type, "on-demand")


def _claim_request(claim: dict[str, Any]) -> tuple[str, str, CapacityType]:
    """(NodePool, EC2 instance type, capacity type) a NodeClaim asks for ("" when it does
    not say). Of the capacity types allowed, Karpenter prefers reserved, then spot."""
    allowed: dict[str, list[str]] = {
        r.get("key", ""): list(r.get("values") or [])
        for r in (claim.get("spec") or {}).get("requirements") or []
        if r.get("operator") == "In"
    }
    labels = claim["metadata"].get("labels") or {}
    nodepool = labels.get(NODEPOOL_LABEL) or next(iter(allowed.get(NODEPOOL_LABEL, [])), "")
    instance_type = next(iter(allowed.get(INSTANCE_TYPE_LABEL, [])), "")
    capacity = allowed.get(CAPACITY_TYPE_LABEL, [])
    capacity_type: CapacityType = (
        "reserved" if "reserved" in capacity else "spot" if "spot" in capacity else "on-demand"
    )
    return nodepool, instance_type, capacity_type


def _claim_conditions(
    current: list[dict[str, str]], changes: Mapping[str, tuple[bool, str, str]], at: str
) -> list[dict[str, str]]:
    """A NodeClaim's conditions after `changes` (type → (status, reason, message)), as
    Karpenter keeps them: a stage not reached yet is Unknown; Ready is True once every stage
    is, False once one is False, Unknown otherwise; sorted by type, as Karpenter does."""
    by_type = {c["type"]: c for c in current}

    def put(kind: str, status: str, reason: str, message: str) -> None:
        before = by_type.get(kind)
        kept = before is not None and before["status"] == status
        by_type[kind] = {
            "type": kind,
            "status": status,
            "reason": reason,
            "message": message,
            "lastTransitionTime": before["lastTransitionTime"] if before and kept else at,
        }

    for stage in CLAIM_STAGES:
        if stage not in by_type:
            put(stage, "Unknown", "AwaitingReconciliation", "object is awaiting reconciliation")
    for kind, (ok, reason, message) in changes.items():
        put(kind, "True" if ok else "False", reason, message)
    pending = [by_type[s] for s in sorted(CLAIM_STAGES) if by_type[s]["status"] != "True"]
    if not pending:
        put("Ready", "True", "Ready", "")
    else:
        failed = any(c["status"] == "False" for c in pending)
        put(
            "Ready",
            "False" if failed else "Unknown",
            "UnhealthyDependents" if failed else "ReconcilingDependents",
            ", ".join(f"{c['type']}={c['status']}" for c in pending),
        )
    return [by_type[kind] for kind in sorted(by_type)]


def _nodeclaim(name: str, instance: Instance, at: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "labels": {
                NODEPOOL_LABEL: instance.group,
                CAPACITY_TYPE_LABEL: _capacity_label(instance),
                INSTANCE_TYPE_LABEL: instance.instance_type,
            },
            "finalizers": [KARPENTER_FINALIZER],
        },
        "spec": {
            "nodeClassRef": {
                "group": "karpenter.k8s.aws",
                "kind": "EC2NodeClass",
                "name": "default",
            }
        },
        "status": {
            "providerID": eks_provider_id(AZ, instance.instance_id),
            "nodeName": instance.node_name,
            "conditions": _claim_conditions(
                [], {stage: (True, stage, "") for stage in CLAIM_STAGES}, at
            ),
        },
    }
