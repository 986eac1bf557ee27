"""The scheduling pass around the pure engine: read the cluster's state, call `schedule`,
place what it admits on nodes, and apply every decision with a conditional write.

Single writer. A pass holds the cluster's lease (TeamsTable `LEASE/<cluster>`); every write
that takes or gives back quota is a transaction that also checks the lease is still this
pass's (and, for an admission, that the team's quota is still the version the pass read).
A concurrent cancel, a finished job, a quota update or a second pass that took an expired
lease therefore makes the write fail instead of oversubscribing anything. The deployment
adds a FIFO queue with one message group and reserved concurrency 1, so passes rarely even
contend for the lease.

Order of effects, and why:
* preempt: conditional write first, then `stop_job` — the database is what quota is counted
  from, so it must never show a job stopped that is still admitted;
* admit: conditional write (status Admitted, nodes, pool), then `dispatch`, then Running; a
  dispatch the cluster refuses puts the job back to Pending with the cluster's error;
* a job the engine admits but no allowed pool can place stays pending with the placement
  reason, and the preemptions made for it are not carried out.
"""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from hyperguard.aws import client
from hyperguard.catalogue import InstanceCatalogue, ml_name
from hyperguard.cluster.gateway import ClusterError, ClusterGateway
from hyperguard.governance.decisions import Decision, DecisionKind
from hyperguard.governance.engine import schedule
from hyperguard.governance.placement import (
    DEFAULT_HOURLY_PRICES,
    Pool,
    PoolKind,
    place,
)
from hyperguard.governance.state import EngineSettings, GovernanceState, Workload
from hyperguard.models import Job, JobStatus, Node, NodeStatus, utcnow
from hyperguard.observability import logger
from hyperguard.settings import Settings
from hyperguard.store.jobs import (
    ACTIVE_STATUSES,
    JobEvent,
    JobHistoryEntry,
    JobRecord,
    JobStore,
    TransitionOutcome,
)
from hyperguard.store.teams import Lease, TeamStore

HOLDING = frozenset({JobStatus.ADMITTED, JobStatus.RUNNING})
WAITING = frozenset({JobStatus.PENDING, JobStatus.PREEMPTED, JobStatus.SUSPENDED})


class SchedulerWakeup(Protocol):
    def wake(self, reason: str) -> None: ...


class NoWakeup:
    """No queue configured: the periodic tick runs the next pass."""

    def wake(self, reason: str) -> None:
        return None


class SqsWakeup:
    """One message on the scheduler's FIFO queue, in its single message group, so passes
    run one at a time in order. A fresh deduplication id per wake: two wakes for different
    changes must not be merged by FIFO deduplication."""

    GROUP = "scheduler"

    def __init__(self, queue_url: str, sqs: Any | None = None) -> None:
        self.queue_url = queue_url
        self._sqs = sqs

    def wake(self, reason: str) -> None:
        sqs = self._sqs or client("sqs")
        sqs.send_message(
            QueueUrl=self.queue_url,
            MessageBody=json.dumps({"reason": reason}),
            MessageGroupId=self.GROUP,
            MessageDeduplicationId=uuid.uuid4().hex,
        )


def wakeup_for(settings: Settings) -> SchedulerWakeup:
    if settings.scheduler_queue_url:
        return SqsWakeup(settings.scheduler_queue_url)
    return NoWakeup()


def usable(node: Node) -> bool:
    return node.status is NodeStatus.RUNNING and node.healthy and node.schedulable


def pool_of(node: Node) -> tuple[str, PoolKind]:
    """HyperPod instance group, or EKS NodePool split by capacity type (one Karpenter
    NodePool may hold both)."""
    if node.platform == "hyperpod":
        return node.pool, PoolKind.HYPERPOD
    if node.capacity_type.lower() == "spot":
        return f"{node.pool}-spot", PoolKind.EKS_SPOT
    return f"{node.pool}-on-demand", PoolKind.EKS_ON_DEMAND


@dataclass
class PassResult:
    acquired: bool = True
    admitted: list[str] = field(default_factory=list)
    preempted: list[str] = field(default_factory=list)
    resized: list[str] = field(default_factory=list)
    dispatched: list[str] = field(default_factory=list)
    stopped: list[str] = field(default_factory=list)
    unplaced: list[str] = field(default_factory=list)
    pending: int = 0
    conflicts: int = 0
    writes: int = 0
    duration_s: float = 0.0

    def counts(self) -> dict[str, int]:
        return {
            "admitted": len(self.admitted),
            "preempted": len(self.preempted),
            "resized": len(self.resized),
            "dispatched": len(self.dispatched),
            "stopped": len(self.stopped),
            "unplaced": len(self.unplaced),
            "pending": self.pending,
            "conflicts": self.conflicts,
        }


class SchedulerBusyError(RuntimeError):
    """Another pass holds the cluster's lease."""


class LeaseLostError(RuntimeError):
    """Another pass took the lease (ours expired): stop writing."""


class _Occupancy:
    """Free accelerators per usable node as the pass changes them."""

    def __init__(self, nodes: Iterable[Node], holding: Iterable[tuple[list[str], int]]) -> None:
        """`holding`: the nodes of each job that holds capacity, and its accelerators per
        replica."""
        self.nodes = {n.instance_id: n for n in nodes if usable(n)}
        self.free = {i: n.accelerators for i, n in self.nodes.items()}
        for held_nodes, per in holding:
            self.take(held_nodes, per)

    def copy(self) -> _Occupancy:
        clone = _Occupancy((), ())
        clone.nodes, clone.free = self.nodes, dict(self.free)
        return clone

    def take(self, nodes: Iterable[str], per: int) -> None:
        for node in nodes:
            if node in self.free:
                self.free[node] -= per

    def give(self, nodes: Iterable[str], per: int) -> None:
        for node in nodes:
            if node in self.free:
                self.free[node] += per

    def pools(self, per: int) -> list[Pool]:
        free: Counter[tuple[str, PoolKind, str, int]] = Counter()
        for instance_id, node in self.nodes.items():
            name, kind = pool_of(node)
            key = (name, kind, node.instance_type, node.accelerators)
            free[key] += self.free[instance_id] // per * per
        return [
            Pool(name, kind, itype, amount, per_instance)
            for (name, kind, itype, per_instance), amount in free.items()
        ]

    def choose(self, pool: str, per: int, replicas: int) -> list[str]:
        """Best fit: the fullest nodes that still take a replica, then by id."""
        chosen: list[str] = []
        for _ in range(replicas):
            fitting = [
                i
                for i, node in self.nodes.items()
                if pool_of(node)[0] == pool and self.free[i] >= per
            ]
            best = min(fitting, key=lambda i: (self.free[i], i))
            self.free[best] -= per
            chosen.append(best)
        return chosen


class SchedulerService:
    def __init__(
        self,
        *,
        jobs: JobStore,
        teams: TeamStore,
        gateway: ClusterGateway,
        catalogue: InstanceCatalogue,
        cluster: str,
        lease_ttl_s: float = 120.0,
        settings: EngineSettings | None = None,
        clock: Callable[[], datetime] = utcnow,
        prices: Mapping[tuple[PoolKind, str], float] = DEFAULT_HOURLY_PRICES,
    ) -> None:
        self.jobs = jobs
        self.teams = teams
        self.gateway = gateway
        self.catalogue = catalogue
        self.cluster = cluster
        self.lease_ttl_s = lease_ttl_s
        self.settings = settings or EngineSettings()
        self.clock = clock
        self.prices = prices

    def run_pass(self) -> PassResult:
        """One pass, or nothing (`acquired` False) while another pass holds the lease."""
        started = time.perf_counter()
        lease = self.teams.acquire_lease(self.cluster, uuid.uuid4().hex, self.lease_ttl_s)
        if lease is None:
            return PassResult(acquired=False)
        run = _PassRun(self, lease)
        try:
            run.run()
        except LeaseLostError:
            run.result.conflicts += 1
            logger.warning("scheduler lease lost mid-pass", extra={"cluster": self.cluster})
        finally:
            self.teams.release_lease(lease)
            run.result.duration_s = time.perf_counter() - started
        return run.result

    def finish(self, job_id: str, status: JobStatus, reason: str) -> bool:
        """A job completed (Succeeded) or failed for good: its quota is free again."""
        if status not in (JobStatus.SUCCEEDED, JobStatus.FAILED):
            raise ValueError(f"{status} is not a final status of a running job")
        outcome = self.jobs.transition(
            job_id,
            expect=HOLDING,
            status=status,
            entry=JobHistoryEntry(
                at=self.clock(), event=JobEvent.FINISHED, status=status, reason=reason
            ),
            sets={"nodes": [], "ended_at": self.clock().isoformat()},
            remove=("admitted_replicas",),
        )
        return outcome is TransitionOutcome.APPLIED


class _PassRun:
    """The state of one pass: its lease, the snapshot it read, nodes as it fills them."""

    def __init__(self, service: SchedulerService, lease: Lease) -> None:
        self.service = service
        self.jobs = service.jobs
        self.teams = service.teams
        self.gateway = service.gateway
        self.lease = lease
        self.result = PassResult()
        self.records: dict[str, JobRecord] = {}
        self.versions: dict[str, int] = {}
        self.occupancy = _Occupancy((), ())

    def entry(
        self, event: JobEvent, status: JobStatus | None, reason: str, **details: Any
    ) -> JobHistoryEntry:
        return JobHistoryEntry(
            at=self.service.clock(), event=event, status=status, reason=reason, details=details
        )

    def per_replica(self, job: Job) -> int:
        """Accelerators one replica of the job holds on its node."""
        return (
            job.accelerators_per_replica
            or self.service.catalogue.spec(job.instance_type).accelerators
        )

    def run(self) -> None:
        now = self.service.clock()
        snapshot = self.jobs.active()
        self.records = {r.job.job_id: r for r in snapshot}
        for record in snapshot:
            if record.stop_pending:
                self.stop_cancelled(record)
        active = [r for r in snapshot if r.job.status in ACTIVE_STATUSES]
        quotas = self.teams.quotas()
        self.versions = {q.compute_quota_target.team_name: q.version for q in quotas}
        config, _ = self.teams.scheduler_config()
        nodes = self.gateway.list_nodes()
        capacity = Counter(ml_name(n.instance_type) for n in nodes if usable(n))
        catalogue = self.service.catalogue
        state = GovernanceState(
            quotas, config, capacity, catalogue, self.service.settings, now.timestamp()
        )
        for record in active:
            workload = Workload.from_job(record.job, catalogue, started_at=record.started_at)
            if record.job.status in HOLDING and record.admitted_replicas:
                workload.admitted = record.admitted_replicas
            state.add(workload)
        decisions = schedule(state)
        self.occupancy = _Occupancy(
            nodes,
            ((r.job.nodes, self.per_replica(r.job)) for r in active if r.job.status in HOLDING),
        )
        victims: dict[str, list[Decision]] = defaultdict(list)
        for action in decisions.actions:
            if action.for_job is not None:
                victims[action.for_job].append(action)
        reasons = decisions.pending_reasons
        for action in decisions.actions:
            if action.kind is DecisionKind.ADMIT:
                why = self.admit(action, victims[action.job_id])
                if why is not None:
                    reasons[action.job_id] = why
            elif action.kind is DecisionKind.GROW:
                self.grow(action)
        self.result.pending = len(reasons)
        for job_id, reason in reasons.items():
            record = self.records[job_id]
            if record.reason != reason and record.job.status in WAITING:
                self.jobs.set_reason(job_id, reason, expect=WAITING)
                self.result.writes += 1

    def write(self, job_id: str, *, fenced: bool, **kwargs: Any) -> bool:
        checks = [self.teams.lease_check(self.lease)] if fenced else []
        checks.extend(kwargs.pop("checks", []))
        outcome = self.jobs.transition(job_id, checks=checks, **kwargs)
        self.result.writes += 1
        if outcome is TransitionOutcome.CHECK_FAILED:
            raise LeaseLostError(job_id)
        if outcome is TransitionOutcome.STALE:
            self.result.conflicts += 1
            return False
        return True

    def admit(self, action: Decision, victims: list[Decision]) -> str | None:
        """Carry out an admission and the preemptions made for it; the pending reason when
        no allowed pool can place it (its victims are then left alone)."""
        record = self.records[action.job_id]
        job = record.job
        per = self.per_replica(job)
        trial = self.occupancy.copy()
        for victim in victims:
            held = self.records[victim.job_id].job
            trial.give(held.nodes[victim.replicas :], self.per_replica(held))
        placement = place(
            template=job.template,
            instance_type=job.instance_type,
            accelerators=per * action.replicas,
            pools=trial.pools(per),
            prices=self.service.prices,
        )
        if placement.pool is None:
            self.result.unplaced.append(job.job_id)
            return f"admissible but not placeable: {placement.reason}"
        chosen = trial.choose(placement.pool, per, action.replicas)
        for victim in victims:
            self.give_way(victim)
        restart = record.first_admitted_at is not None
        at = self.service.clock().isoformat()
        sets: dict[str, Any] = {
            "nodes": chosen,
            "pool": placement.pool,
            "admitted_replicas": action.replicas,
            "started_at": at,
        }
        if not restart:
            sets["first_admitted_at"] = at
        admitted = self.write(
            job.job_id,
            fenced=True,
            checks=[self.teams.quota_version_check(job.team, self.versions[job.team])],
            expect=WAITING,
            status=JobStatus.ADMITTED,
            entry=self.entry(
                JobEvent.RESTARTED if restart else JobEvent.ADMITTED,
                JobStatus.ADMITTED,
                f"{action.reason}; placed: {placement.reason}",
                nodes=chosen,
                pool=placement.pool,
                replicas=action.replicas,
                hourly_cost=round(placement.hourly_cost, 2),
            ),
            sets=sets,
            add={"restart_count": 1} if restart else None,
        )
        if not admitted:
            return None
        self.occupancy.free = trial.free
        for victim in victims:
            if victim.kind is DecisionKind.SHRINK:
                self.redispatch(victim.job_id, victim.replicas)
        self.result.admitted.append(job.job_id)
        placed = job.model_copy(
            update={
                "nodes": chosen,
                "pool": placement.pool,
                "status": JobStatus.ADMITTED,
                "replicas": action.replicas,
                "restart_count": job.restart_count + restart,
            }
        )
        self.dispatch(placed)
        return None

    def give_way(self, decision: Decision) -> None:
        record = self.records[decision.job_id]
        if decision.kind is DecisionKind.PREEMPT:
            if self.write(
                decision.job_id,
                fenced=True,
                expect=HOLDING,
                status=JobStatus.PREEMPTED,
                entry=self.entry(
                    JobEvent.PREEMPTED,
                    JobStatus.PREEMPTED,
                    decision.reason,
                    for_job=decision.for_job,
                    nodes=record.job.nodes,
                ),
                sets={"nodes": []},
                remove=("admitted_replicas",),
            ):
                self.result.preempted.append(decision.job_id)
                self.stop(decision.job_id)
            return
        kept = record.job.nodes[: decision.replicas]
        if self.write(
            decision.job_id,
            fenced=True,
            expect=HOLDING,
            status=None,
            entry=self.entry(
                JobEvent.SHRUNK,
                record.job.status,
                decision.reason,
                for_job=decision.for_job,
                replicas=decision.replicas,
            ),
            sets={"nodes": kept, "admitted_replicas": decision.replicas},
        ):
            self.records[decision.job_id] = record.model_copy(
                update={"job": record.job.model_copy(update={"nodes": kept})}
            )
            self.result.resized.append(decision.job_id)

    def redispatch(self, job_id: str, replicas: int) -> None:
        """Elastic training resizes by restarting from its checkpoint on the new set of
        nodes."""
        job = self.records[job_id].job
        self.stop(job_id)
        try:
            self.gateway.dispatch(job.model_copy(update={"replicas": replicas}), list(job.nodes))
        except ClusterError as exc:
            logger.error("resize dispatch failed", extra={"job_id": job_id, "error": str(exc)})

    def grow(self, action: Decision) -> None:
        record = self.records[action.job_id]
        job = record.job
        per = self.per_replica(job)
        extra = action.replicas - len(job.nodes)
        if extra <= 0 or job.pool is None:
            return
        trial = self.occupancy.copy()
        room = sum(
            free // per
            for instance_id, free in trial.free.items()
            if pool_of(trial.nodes[instance_id])[0] == job.pool
        )
        if room < extra:
            return
        nodes = [*job.nodes, *trial.choose(job.pool, per, extra)]
        if self.write(
            job.job_id,
            fenced=True,
            expect=HOLDING,
            status=None,
            entry=self.entry(JobEvent.GROWN, job.status, action.reason, replicas=action.replicas),
            sets={"nodes": nodes, "admitted_replicas": action.replicas},
        ):
            self.occupancy.free = trial.free
            self.result.resized.append(job.job_id)
            self.records[job.job_id] = record.model_copy(
                update={"job": job.model_copy(update={"nodes": nodes})}
            )
            self.redispatch(job.job_id, action.replicas)

    def dispatch(self, job: Job) -> None:
        try:
            self.gateway.dispatch(job, list(job.nodes))
        except ClusterError as exc:
            self.write(
                job.job_id,
                fenced=False,
                expect={JobStatus.ADMITTED},
                status=JobStatus.PENDING,
                entry=self.entry(JobEvent.REQUEUED, JobStatus.PENDING, f"dispatch failed: {exc}"),
                sets={"nodes": []},
                remove=("admitted_replicas",),
            )
            return
        if self.write(
            job.job_id,
            fenced=False,
            expect={JobStatus.ADMITTED},
            status=JobStatus.RUNNING,
            entry=self.entry(
                JobEvent.DISPATCHED,
                JobStatus.RUNNING,
                f"running on {len(set(job.nodes))} node(s) of pool {job.pool}",
                nodes=job.nodes,
            ),
        ):
            self.result.dispatched.append(job.job_id)

    def stop(self, job_id: str) -> None:
        try:
            self.gateway.stop_job(job_id)
        except ClusterError as exc:
            logger.error("stop_job failed", extra={"job_id": job_id, "error": str(exc)})
            return
        self.result.stopped.append(job_id)

    def stop_cancelled(self, record: JobRecord) -> None:
        self.stop(record.job.job_id)
        self.write(
            record.job.job_id,
            fenced=False,
            expect={JobStatus.CANCELLED},
            status=None,
            entry=self.entry(
                JobEvent.STOPPED,
                JobStatus.CANCELLED,
                "pods stopped after cancellation",
                nodes=record.job.nodes,
            ),
            sets={"nodes": []},
            remove=("stop_pending", "admitted_replicas"),
        )
