"""A simulated SageMaker HyperPod + EKS cluster: the ClusterGateway adapter of the local twin.

Everything that takes time (reboots, replacements, training steps, checkpoints) is worked
out from the injected clock whenever the simulator is called, never by sleeping: calling
`advance()` or any port method first plays every scheduled change up to `clock.now()` in
time order. Tests drive a `ManualClock`; the twin a `ScaledClock`.

What the simulation models, and the HyperPod behaviour it stands for:
- a repair in progress keeps its node busy: a second repair of it fails with
  InstanceIdInUse, an unknown id with InstanceIdNotFound, like BatchReboot/Replace;
- a reboot kills the pods on the node, a replacement terminates the instance and a new
  instance id joins the same instance group (its Kubernetes node is new, not cordoned);
- a job runs only while every node it sits on is Running and healthy; on a faulty node it
  hangs (no steps, no checkpoints), like a collective stuck on a dead GPU;
- a job that loses its pods is Failed, unless it carries HyperPod's auto-resume
  annotation: then HyperPod itself restarts it from its last checkpoint once all of its
  nodes (a replaced node counts as its replacement) are Running, healthy and schedulable.
"""

from __future__ import annotations

import heapq
import logging
import random
import threading
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from hyperguard.cluster.clock import Clock
from hyperguard.cluster.conventions import (
    CAPACITY_TYPE_LABEL,
    HEALTH_LABEL,
    INCIDENT_TAINT,
    INSTANCE_GROUP_LABEL,
    INSTANCE_ID_IN_USE,
    INSTANCE_ID_NOT_FOUND,
    INSTANCE_TYPE_LABEL,
    NODEPOOL_LABEL,
    REASON_LABEL,
    label_safe,
)
from hyperguard.cluster.gateway import DrainResult, NodeNotFoundError
from hyperguard.models import (
    Checkpoint,
    Job,
    JobStatus,
    Node,
    NodeStatus,
    Repair,
    RepairOutcome,
)
from hyperguard.models.nodes import RepairFailure

logger = logging.getLogger(__name__)

CheckpointSink = Callable[[str, int, str], None]
"""Called as sink(job_id, step, uri) once for every checkpoint a job completes."""

FaultKind = Literal["gpu", "persistent"]


class SimTimings(BaseModel):
    """How long things take in the simulation, in seconds of virtual time.

    Defaults follow the published HyperPod P90 recovery figures for p5.48xlarge where
    there is one. HyperPod publishes no reboot figure: 300 s is our assumption for a
    p5.48xlarge warm reboot (firmware POST with 8 GPUs and EFA, then kubelet
    re-registration). The 120 s of shutdown inside a replacement is also assumed.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    reboot_s: float = Field(default=300.0, ge=0, description="reboot until Running again")
    replace_s: float = Field(
        default=940.0, gt=0, description="replace until the new node runs (P90 903-981 s)"
    )
    replace_shutdown_s: float = Field(
        default=120.0, ge=0, description="old instance ShuttingDown before the new one appears"
    )
    deep_health_check_s: float = Field(
        default=0.0, ge=0, description="DeepHealthCheckInProgress after a replacement boots"
    )
    job_restart_s: float = Field(
        default=60.0, ge=0, description="start/resume overhead before a job takes steps"
    )
    step_duration_s: float = Field(default=30.0, gt=0, description="one training step")
    checkpoint_interval_steps: int = Field(default=10, ge=1, description="checkpoint every N")

    @model_validator(mode="after")
    def _shutdown_within_replace(self) -> Self:
        if self.replace_shutdown_s > self.replace_s:
            raise ValueError("replace_shutdown_s must not exceed replace_s")
        return self


class JobProgress(BaseModel):
    """A job as the simulator runs it, with the training step Job has no field for."""

    job: Job
    step: int
    progressing: bool = Field(description="taking steps right now")
    waiting_for: list[str] = Field(
        default_factory=list, description="nodes of a running job that are not Running+healthy"
    )


class _EventKind(StrEnum):
    REBOOT_DONE = "reboot_done"
    SHUTDOWN_DONE = "shutdown_done"
    BOOT_DONE = "boot_done"
    HEALTH_CHECK_DONE = "health_check_done"


@dataclass(frozen=True)
class _Fault:
    kind: FaultKind
    heal_on_reboot: bool


@dataclass(frozen=True)
class _RepairInProgress:
    action: Repair
    instance_id: str
    started_at: datetime
    ready_at: datetime
    replacement_id: str | None = None


@dataclass(order=True, frozen=True)
class _Event:
    at: datetime
    seq: int
    kind: _EventKind = field(compare=False)
    instance_id: str = field(compare=False)


@dataclass
class _JobRun:
    """A job's run: steps count from `anchor_step` at `anchor_at` (None: not stepping)."""

    job: Job
    anchor_step: int
    ready_at: datetime
    emitted_step: int
    anchor_at: datetime | None = None

    def step_at(self, when: datetime, step: timedelta) -> int:
        if self.anchor_at is None or when < self.anchor_at:
            return self.anchor_step
        return self.anchor_step + (when - self.anchor_at) // step

    def freeze(self, when: datetime, step: timedelta) -> None:
        """Stop counting steps; the step reached by `when` is kept."""
        self.anchor_step = self.step_at(when, step)
        self.anchor_at = None

    def checkpoints_until(
        self, when: datetime, step: timedelta, every: int
    ) -> list[tuple[datetime, int]]:
        if self.anchor_at is None or self.job.checkpoint_location is None:
            return []
        first = (self.emitted_step // every + 1) * every
        last = self.step_at(when, step)
        return [
            (self.anchor_at + (s - self.anchor_step) * step, s)
            for s in range(first, last + 1, every)
        ]


def checkpoint_uri(location: str, step: int) -> str:
    return f"{location.rstrip('/')}/step-{step:08d}/"


def _set_health_label(node: Node, value: str) -> None:
    """HyperPod's health agent reports node health in a label; EKS nodes have none."""
    if node.platform == "hyperpod":
        node.labels[HEALTH_LABEL] = value


class SimulatedCluster:
    """A HyperPod cluster and an EKS burst pool that live in memory, driven by a clock."""

    def __init__(
        self,
        clock: Clock,
        timings: SimTimings | None = None,
        checkpoint_sink: CheckpointSink | None = None,
        *,
        seed: int = 7,
    ) -> None:
        self._clock = clock
        self.timings = timings or SimTimings()
        self._sink = checkpoint_sink
        self._rng = random.Random(seed)
        self._lock = threading.RLock()
        self._sink_lock = threading.RLock()
        self._outbox: deque[tuple[str, int, str]] = deque()
        self._settled_at = clock.now()
        self._nodes: dict[str, Node] = {}
        self._faults: dict[str, _Fault] = {}
        self._repairs: dict[str, _RepairInProgress] = {}
        self._replaced_by: dict[str, str] = {}
        self._issued_ids: set[str] = set()
        self._never_healthy: set[str] = set()
        self._injected_failures: deque[str] = deque()
        self._runs: dict[str, _JobRun] = {}
        self._events: list[_Event] = []
        self._event_seq = 0
        self._step = timedelta(seconds=self.timings.step_duration_s)

    # ------------------------------------------------------------------ seeding

    def seed_default(
        self,
        cluster_name: str = "hyperguard-twin",
        hyperpod_nodes: int = 16,
        instance_type: str = "ml.p5.48xlarge",
        eks_cluster: str = "hyperguard-burst",
        burst_nodes: int = 4,
        jobs: bool = True,
    ) -> Self:
        """Populate an empty simulator with the twin's default clusters and jobs.

        HyperPod: `hyperpod_nodes` nodes in instance group "workers". EKS: `burst_nodes`
        p5.48xlarge in Karpenter NodePool "gpu-burst", half on-demand, half spot. Jobs: three
        checkpointing training jobs (teams nlp and vision) on 4, 2 and 3 HyperPod nodes;
        the 2-node one opts into HyperPod auto-resume. A job that does not fit is skipped.
        """
        with self._settled() as now:
            if self._nodes or self._runs:
                raise ValueError("seed_default needs an empty simulator")
            hyperpod_ids = [
                self._add_hyperpod_node(cluster_name, "workers", instance_type, now).instance_id
                for _ in range(hyperpod_nodes)
            ]
            for index in range(burst_nodes):
                self._add_eks_node(eks_cluster, "gpu-burst", spot=index % 2 == 1, now=now)
            first = 0
            for job_id, team, count, auto_resume, start_step in _SEED_JOBS if jobs else ():
                if first + count > len(hyperpod_ids):
                    continue
                location = f"s3://hyperguard-twin-checkpoints/{job_id}/"
                job = Job(
                    job_id=job_id,
                    team=team,
                    priority_class="training",
                    instance_type=instance_type,
                    replicas=count,
                    image="hyperguard/trainer:twin",
                    command=["torchrun", "--nnodes", str(count), "train.py"],
                    checkpoint_location=location,
                    status=JobStatus.RUNNING,
                    nodes=hyperpod_ids[first : first + count],
                    pool="workers",
                    auto_resume=auto_resume,
                    last_checkpoint=Checkpoint(
                        step=start_step,
                        uri=checkpoint_uri(location, start_step),
                        completed_at=now,
                    ),
                    submitted_at=now,
                )
                self._runs[job_id] = _JobRun(
                    job=job, anchor_step=start_step, ready_at=now, emitted_step=start_step
                )
                first += count
        return self

    def _new_instance_id(self) -> str:
        while True:
            instance_id = f"i-0{self._rng.getrandbits(64):016x}"
            if instance_id not in self._issued_ids:
                self._issued_ids.add(instance_id)
                return instance_id

    def _node_name(self, platform: str, instance_id: str) -> str:
        if platform == "hyperpod":
            return f"hyperpod-{instance_id}"
        octets = "-".join(str(self._rng.randrange(1, 255)) for _ in range(2))
        return f"ip-10-42-{octets}.ec2.internal"

    def _add_hyperpod_node(
        self, cluster: str, group: str, instance_type: str, now: datetime
    ) -> Node:
        instance_id = self._new_instance_id()
        node = Node(
            instance_id=instance_id,
            logical_id=str(uuid.UUID(int=self._rng.getrandbits(128), version=4)),
            cluster=cluster,
            pool=group,
            platform="hyperpod",
            instance_type=instance_type,
            accelerators=8,
            node_name=self._node_name("hyperpod", instance_id),
            labels={
                INSTANCE_GROUP_LABEL: group,
                INSTANCE_TYPE_LABEL: instance_type,
                HEALTH_LABEL: "Schedulable",
            },
            launch_time=now,
        )
        self._nodes[instance_id] = node
        return node

    def _add_eks_node(self, cluster: str, nodepool: str, *, spot: bool, now: datetime) -> None:
        instance_id = self._new_instance_id()
        self._nodes[instance_id] = Node(
            instance_id=instance_id,
            cluster=cluster,
            pool=nodepool,
            platform="eks",
            instance_type="p5.48xlarge",
            capacity_type="Spot" if spot else "OnDemand",
            accelerators=8,
            node_name=self._node_name("eks", instance_id),
            labels={
                NODEPOOL_LABEL: nodepool,
                CAPACITY_TYPE_LABEL: "spot" if spot else "on-demand",
                INSTANCE_TYPE_LABEL: "p5.48xlarge",
            },
            launch_time=now,
        )

    # ------------------------------------------------------------ time keeping

    @contextmanager
    def _settled(self) -> Iterator[datetime]:
        """Hold the lock with the world played forward to now; reconcile jobs after the
        body; hand completed checkpoints to the sink once the lock is released."""
        try:
            with self._lock:
                now = max(self._clock.now(), self._settled_at)
                self._settle(now)
                yield now
                self._reconcile_jobs(now)
        finally:
            self._flush_checkpoints()

    def _settle(self, now: datetime) -> None:
        while self._events and self._events[0].at <= now:
            event = heapq.heappop(self._events)
            self._record_checkpoints(event.at)
            self._apply(event)
            self._reconcile_jobs(event.at)
        self._record_checkpoints(now)
        self._settled_at = now

    def _schedule(self, at: datetime, kind: _EventKind, instance_id: str) -> None:
        self._event_seq += 1
        heapq.heappush(self._events, _Event(at, self._event_seq, kind, instance_id))

    def _record_checkpoints(self, until: datetime) -> None:
        every = self.timings.checkpoint_interval_steps
        due = sorted(
            (at, run.job.job_id, step)
            for run in self._runs.values()
            for at, step in run.checkpoints_until(until, self._step, every)
        )
        for at, job_id, step in due:
            run = self._runs[job_id]
            location = run.job.checkpoint_location
            assert location is not None  # checkpoints_until yields nothing without one
            uri = checkpoint_uri(location, step)
            run.job.last_checkpoint = Checkpoint(step=step, uri=uri, completed_at=at)
            run.emitted_step = step
            if self._sink is not None:
                self._outbox.append((job_id, step, uri))

    def _flush_checkpoints(self) -> None:
        # One thread at a time drains the outbox, so the sink sees checkpoints in order;
        # the state lock is not held, so a sink may call back into the simulator.
        if self._sink is None:
            return
        with self._sink_lock:
            while True:
                with self._lock:
                    if not self._outbox:
                        return
                    job_id, step, uri = self._outbox.popleft()
                try:
                    self._sink(job_id, step, uri)
                except Exception:
                    logger.exception("checkpoint sink failed for %s step %d", job_id, step)

    def advance(self) -> None:
        """Play every scheduled change and checkpoint up to the clock's current time."""
        with self._settled():
            pass

    # ------------------------------------------------------------ node changes

    def _apply(self, event: _Event) -> None:
        instance_id = event.instance_id
        match event.kind:
            case _EventKind.REBOOT_DONE:
                fault = self._faults.get(instance_id)
                if fault is not None and fault.heal_on_reboot:
                    del self._faults[instance_id]
                self._finish_repair(instance_id)
            case _EventKind.SHUTDOWN_DONE:
                self._swap_in_replacement(instance_id, event.at)
            case _EventKind.BOOT_DONE if self.timings.deep_health_check_s > 0:
                self._nodes[instance_id].status = NodeStatus.DEEP_HEALTH_CHECK_IN_PROGRESS
            case _EventKind.BOOT_DONE | _EventKind.HEALTH_CHECK_DONE:
                repair = self._repairs[instance_id]
                if repair.instance_id in self._never_healthy:
                    self._never_healthy.discard(repair.instance_id)
                    self._faults[instance_id] = _Fault("persistent", heal_on_reboot=False)
                self._finish_repair(instance_id)

    def _swap_in_replacement(self, old_id: str, at: datetime) -> None:
        repair = self._repairs.pop(old_id)
        new_id = repair.replacement_id
        assert new_id is not None  # every replace repair names its replacement
        old = self._nodes.pop(old_id)
        self._faults.pop(old_id, None)
        self._replaced_by[old_id] = new_id
        labels = {
            key: value
            for key, value in old.labels.items()
            if key not in (REASON_LABEL, HEALTH_LABEL)
        }
        self._nodes[new_id] = Node(
            instance_id=new_id,
            logical_id=old.logical_id,
            cluster=old.cluster,
            pool=old.pool,
            platform=old.platform,
            instance_type=old.instance_type,
            capacity_type=old.capacity_type,
            accelerators=old.accelerators,
            status=NodeStatus.PENDING,
            node_name=self._node_name(old.platform, new_id),
            labels=labels,
            launch_time=at,
            healthy=False,
        )
        _set_health_label(self._nodes[new_id], "Unschedulable")
        self._repairs[new_id] = repair
        for run in self._runs.values():
            if run.job.auto_resume and old_id in run.job.nodes:
                run.job.nodes = [new_id if n == old_id else n for n in run.job.nodes]

    def _finish_repair(self, instance_id: str) -> None:
        del self._repairs[instance_id]
        self._show_health(self._nodes[instance_id])

    def _show_health(self, node: Node) -> None:
        faulty = node.instance_id in self._faults
        node.status = NodeStatus.FAILURE if faulty else NodeStatus.RUNNING
        node.healthy = not faulty
        _set_health_label(node, "Unschedulable" if faulty else "Schedulable")

    def _node(self, instance_id: str) -> Node:
        try:
            return self._nodes[instance_id]
        except KeyError:
            raise NodeNotFoundError(instance_id) from None

    # ------------------------------------------------------------- job changes

    def _ready(self, instance_id: str) -> bool:
        node = self._nodes.get(instance_id)
        return node is not None and node.status == NodeStatus.RUNNING and node.healthy

    def _reconcile_jobs(self, now: datetime) -> None:
        """Let HyperPod restart auto-resume jobs whose nodes are back, and start or stop
        every job's step counter according to the health of its nodes."""
        restart = timedelta(seconds=self.timings.job_restart_s)
        for run in self._runs.values():
            job = run.job
            if (
                job.auto_resume
                and job.status == JobStatus.PENDING
                and all(self._ready(n) and self._nodes[n].schedulable for n in job.nodes)
            ):
                self._restart(run, now + restart)
                job.restart_count += 1
            stepping = job.status == JobStatus.RUNNING and all(map(self._ready, job.nodes))
            if stepping and run.anchor_at is None:
                run.anchor_at = max(now, run.ready_at)
            elif not stepping and run.anchor_at is not None:
                run.freeze(now, self._step)

    def _restart(self, run: _JobRun, ready_at: datetime) -> None:
        """Start the job again from its last checkpoint (or from step 0 without one)."""
        checkpoint = run.job.last_checkpoint
        run.anchor_step = run.emitted_step = checkpoint.step if checkpoint else 0
        run.anchor_at = None
        run.ready_at = ready_at
        run.job.status = JobStatus.RUNNING

    def _runs_on(self, instance_id: str) -> list[_JobRun]:
        return [
            run
            for run in self._runs.values()
            if instance_id in run.job.nodes
            and run.job.status in (JobStatus.RUNNING, JobStatus.PENDING)
        ]

    def _lose_pods(self, instance_id: str, now: datetime, *, status: JobStatus) -> list[str]:
        """Stop every job with a pod on the node; auto-resume jobs wait for HyperPod."""
        pods = []
        for run in self._runs_on(instance_id):
            if run.job.status == JobStatus.RUNNING:
                pods.append(f"{run.job.job_id}-worker-{run.job.nodes.index(instance_id)}")
            run.freeze(now, self._step)
            run.job.status = JobStatus.PENDING if run.job.auto_resume else status
        return pods

    # ------------------------------------------------------------ the port

    def list_nodes(self) -> list[Node]:
        with self._settled():
            return [node.model_copy(deep=True) for node in self._nodes.values()]

    def node_status(self, instance_id: str) -> Node:
        with self._settled():
            return self._node(instance_id).model_copy(deep=True)

    def cordon(self, instance_id: str, *, incident_id: str, reason: str) -> bool:
        """Mark the node unschedulable for an incident; False if it already is for it."""
        taint = {"key": INCIDENT_TAINT, "value": incident_id, "effect": "NoSchedule"}
        with self._settled():
            node = self._node(instance_id)
            if not node.schedulable and taint in node.taints:
                return False
            node.schedulable = False
            node.taints = [t for t in node.taints if t.get("key") != INCIDENT_TAINT] + [taint]
            node.labels[REASON_LABEL] = label_safe(reason)
            node.open_incident_id = incident_id
            return True

    def uncordon(self, instance_id: str) -> bool:
        with self._settled():
            node = self._node(instance_id)
            ours = [t for t in node.taints if t.get("key") == INCIDENT_TAINT]
            if node.schedulable and not ours and REASON_LABEL not in node.labels:
                return False
            node.schedulable = True
            node.taints = [t for t in node.taints if t.get("key") != INCIDENT_TAINT]
            node.labels.pop(REASON_LABEL, None)
            node.open_incident_id = None
            return True

    def drain(self, instance_id: str, *, deadline_s: float) -> DrainResult:
        """Evict every training pod on the node; their jobs are Suspended (auto-resume
        jobs wait for HyperPod instead). Simulated pods have no PDBs and always leave
        before `deadline_s`, so nothing is forced or blocked."""
        with self._settled() as now:
            self._node(instance_id)
            return DrainResult(
                evicted=self._lose_pods(instance_id, now, status=JobStatus.SUSPENDED)
            )

    def reboot(self, instance_ids: list[str]) -> RepairOutcome:
        return self._repair(instance_ids, Repair.REBOOT)

    def replace(self, instance_ids: list[str]) -> RepairOutcome:
        return self._repair(instance_ids, Repair.REPLACE)

    def _repair(self, instance_ids: list[str], action: Repair) -> RepairOutcome:
        outcome = RepairOutcome()
        with self._settled() as now:
            for instance_id in instance_ids:
                failure = self._repair_refusal(instance_id)
                if failure is not None:
                    outcome.failed.append(failure)
                    continue
                self._start_repair(instance_id, action, now)
                outcome.successful.append(instance_id)
        return outcome

    def _repair_refusal(self, instance_id: str) -> RepairFailure | None:
        if instance_id not in self._nodes:
            message = f"{instance_id} is not a node of the cluster"
            return RepairFailure(
                node_id=instance_id, error_code=INSTANCE_ID_NOT_FOUND, message=message
            )
        if instance_id in self._repairs:
            message = f"a {self._repairs[instance_id].action} of {instance_id} is in progress"
            return RepairFailure(
                node_id=instance_id, error_code=INSTANCE_ID_IN_USE, message=message
            )
        if self._injected_failures:
            code = self._injected_failures.popleft()
            return RepairFailure(node_id=instance_id, error_code=code, message="injected failure")
        return None

    def _start_repair(self, instance_id: str, action: Repair, now: datetime) -> None:
        node = self._nodes[instance_id]
        timings = self.timings
        self._lose_pods(instance_id, now, status=JobStatus.FAILED)
        node.healthy = False
        if action == Repair.REBOOT:
            ready_at = now + timedelta(seconds=timings.reboot_s)
            self._repairs[instance_id] = _RepairInProgress(action, instance_id, now, ready_at)
            node.status = NodeStatus.PENDING
            _set_health_label(node, "UnschedulablePendingReboot")
            self._schedule(ready_at, _EventKind.REBOOT_DONE, instance_id)
            return
        boot_at = now + timedelta(seconds=timings.replace_s)
        ready_at = boot_at + timedelta(seconds=timings.deep_health_check_s)
        new_id = self._new_instance_id()
        self._repairs[instance_id] = _RepairInProgress(action, instance_id, now, ready_at, new_id)
        node.status = NodeStatus.SHUTTING_DOWN
        _set_health_label(node, "UnschedulablePendingReplacement")
        self._schedule(
            now + timedelta(seconds=timings.replace_shutdown_s),
            _EventKind.SHUTDOWN_DONE,
            instance_id,
        )
        self._schedule(boot_at, _EventKind.BOOT_DONE, new_id)
        if timings.deep_health_check_s > 0:
            self._schedule(ready_at, _EventKind.HEALTH_CHECK_DONE, new_id)

    def dispatch(self, job: Job, nodes: list[str]) -> bool:
        """Run `job` on `nodes`, from `job.last_checkpoint` when it has one (a restart).

        False when the job already runs on exactly those nodes. Steps start after
        `job_restart_s` and only while every node is Running and healthy.
        """
        if not nodes:
            raise ValueError("a job needs at least one node")
        with self._settled() as now:
            for instance_id in nodes:
                self._node(instance_id)
            known = self._runs.get(job.job_id)
            if known and known.job.status == JobStatus.RUNNING and known.job.nodes == nodes:
                return False
            placed = job.model_copy(deep=True, update={"nodes": list(nodes)})
            if known is not None or job.last_checkpoint is not None:
                # The caller's count wins when it already counts this restart (as the
                # Kubernetes adapter needs it to, to name the run); else count it here.
                before = known.job.restart_count if known else 0
                placed.restart_count = max(job.restart_count, before + 1)
            run = _JobRun(job=placed, anchor_step=0, ready_at=now, emitted_step=0)
            self._restart(run, now + timedelta(seconds=self.timings.job_restart_s))
            self._runs[job.job_id] = run
            return True

    def stop_job(self, job_id: str) -> bool:
        with self._settled() as now:
            run = self._runs.get(job_id)
            if run is None or run.job.status not in (JobStatus.RUNNING, JobStatus.PENDING):
                return False
            run.freeze(now, self._step)
            run.job.status = JobStatus.SUSPENDED
            return True

    # ------------------------------------------------------- fault injection

    def inject_fault(
        self, instance_id: str, kind: FaultKind = "gpu", heal_on_reboot: bool | None = None
    ) -> None:
        """Make the node unhealthy (Failure). A "gpu" fault heals on reboot unless told
        otherwise; a "persistent" one survives reboots. A replacement always starts clean."""
        with self._settled():
            node = self._node(instance_id)
            heals = kind == "gpu" if heal_on_reboot is None else heal_on_reboot
            self._faults[instance_id] = _Fault(kind, heals)
            if instance_id not in self._repairs:
                self._show_health(node)

    def fail_next_repairs(self, error_code: str, count: int = 1) -> None:
        """The next `count` node ids that reboot/replace would accept fail with `error_code`."""
        with self._lock:
            self._injected_failures.extend([error_code] * count)

    def replacement_never_healthy(self, instance_id: str) -> None:
        """The next replacement of `instance_id` comes up in Failure and stays there."""
        with self._lock:
            self._never_healthy.add(instance_id)

    # ------------------------------------------------------------ inspection

    def node_for_instance(self, instance_id: str) -> Node | None:
        """The node as it is now, or None when the instance is not in the cluster."""
        with self._settled():
            node = self._nodes.get(instance_id)
            return node.model_copy(deep=True) if node else None

    def replacement_of(self, instance_id: str) -> str | None:
        """The instance id that replaced `instance_id`, once the old one is gone."""
        with self._settled():
            return self._replaced_by.get(instance_id)

    def jobs(self) -> list[Job]:
        with self._settled():
            return [run.job.model_copy(deep=True) for run in self._runs.values()]

    def progress(self) -> dict[str, JobProgress]:
        with self._settled() as now:
            return {job_id: self._progress(run, now) for job_id, run in self._runs.items()}

    def _progress(self, run: _JobRun, now: datetime) -> JobProgress:
        running = run.job.status == JobStatus.RUNNING
        return JobProgress(
            job=run.job.model_copy(deep=True),
            step=run.step_at(now, self._step),
            progressing=run.anchor_at is not None and now >= run.anchor_at,
            waiting_for=[n for n in run.job.nodes if not self._ready(n)] if running else [],
        )

    def snapshot(self) -> dict[str, Any]:
        """JSON-able state for `hyperguard twin nodes`: nodes, jobs with steps, repairs."""
        with self._settled() as now:
            return {
                "now": now.isoformat(),
                "nodes": [node.model_dump(mode="json") for node in self._nodes.values()],
                "jobs": [
                    self._progress(run, now).model_dump(mode="json") for run in self._runs.values()
                ],
                "pending_repairs": [
                    {
                        "action": str(repair.action),
                        "instance_id": repair.instance_id,
                        "replacement_id": repair.replacement_id,
                        "started_at": repair.started_at.isoformat(),
                        "ready_at": repair.ready_at.isoformat(),
                    }
                    for repair in self._repairs.values()
                ],
            }


_SEED_JOBS: tuple[tuple[str, str, int, bool, int], ...] = (
    # job_id, team, nodes, HyperPod auto-resume, step of its latest checkpoint
    ("llama3-70b-pretrain", "nlp", 4, False, 1200),
    ("mistral-7b-sft", "nlp", 2, True, 300),
    ("vit-h14-pretrain", "vision", 3, False, 640),
)
