"""The scheduling pass around the pure engine: reconcile jobs with the cluster, read the
cluster's state, call `schedule`, place what it admits on nodes, and apply every decision
through the job lifecycle (hyperguard.governance.jobs), each a conditional write.

Single writer. A pass holds the cluster's lease (TeamsTable `LEASE/<cluster>`); every write
that takes or gives back quota is a transaction that also checks the lease is still this
pass's (and, for an admission or an elastic growth, that the team's quota is still the
version the pass read).
A concurrent cancel, a finished job, a quota update or a second pass that took an expired
lease therefore makes the write fail instead of oversubscribing anything. The deployment
adds a FIFO queue with one message group and reserved concurrency 1, so passes rarely even
contend for the lease.

Reconciliation, before admission: a job whose current run completed ends Succeeded, one
whose run failed by itself ends Failed, one whose run the cluster lost (or no longer has) is
requeued to resume from its checkpoint — each only once node recovery has had
`failedRunGraceS` to claim it (a run that dies with its node is recovery's, which knows the
job's strategy), and never while a node under it is unhealthy or recovery protects it.
Running jobs' progress is read from their checkpoint markers. Then live runs that no job
should have any more — of a job that ended or waits, or older than the job's current run
(a stop that failed, a run recovery dispatched after a cancel) — are stopped, a bounded
number a pass.

Hot spares: `hotSpares` idle healthy nodes per pool (NodeRepairConfig) are left out of the
capacity the pass admits into, so that node recovery finds one when a node fails.

Burst policy (hyperguard.governance.burst_policy), read once a pass: placement ranks pools by
its prices, uses its committed pools first, and keeps each team's (and all teams') burst
spend rate within its caps — counted from the jobs holding EKS capacity at the start of the
pass plus those the pass places there (releases count from the next pass). Every admission
records the pool kind, the price per instance-hour and the job's hourly cost it assumed.

Burst capacity (hyperguard.scaling.burst), when BurstCapacity is deployed: jobs that only
installed capacity holds back (the engine's `short_of_capacity`) and jobs admitted that no
allowed pool has room for, whose template may run on EKS, less the nodes HyperGuard's
NodeClaims are already launching, start one BurstCapacity execution per template and
instance type, named by a deterministic burst id (a second pass starting it again is a
no-op). The same pass releases HyperGuard's burst nodes idle past the policy's cooldown.

Order of effects, and why:
* preempt: conditional write first, then `stop_job` — the database is what quota is counted
  from, so it must never show a job stopped that is still admitted; a stop that fails is
  retried by the next pass's orphan sweep;
* cancel: `stop_job` first, then `stopped` (clearing `stop_pending`), only if the stop
  succeeded — otherwise the next pass tries again;
* resize (elastic): conditional write, then the cluster (a HyperPodPyTorchJob is patched in
  place, a batch Job re-run from its checkpoint);
* admit: conditional write (status Admitted, nodes, pool), then `dispatch`, then Running; a
  dispatch the cluster refuses puts the job back to Pending with the cluster's error. Before
  a pass's first dispatch for a team it ensures the team's Kueue objects (namespace,
  ClusterQueue, LocalQueue; with the first team also the ResourceFlavor and the priority
  classes' WorkloadPriorityClasses: hyperguard.cluster.kueue), whose failure is a refused
  dispatch too;
* a job the engine admits but no allowed pool can place stays pending with the placement
  reason, and the preemptions made for it are not carried out.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from hyperguard.catalogue import InstanceCatalogue, ec2_name, ml_name
from hyperguard.cluster.gateway import ClusterError, ClusterGateway
from hyperguard.cluster.karpenter import BurstClaim
from hyperguard.cluster.kueue import priority_class_object, shared_objects, team_objects
from hyperguard.cluster.workloads import RunPhase, RunStatus
from hyperguard.governance.burst_policy import (
    BurstPolicy,
    added_by_burst,
    is_burst,
)
from hyperguard.governance.bursting import (
    MAX_BURST_JOBS,
    BurstJob,
    BurstRequest,
    burst_id,
    last_rollback,
    next_window,
    nodes_for,
    rolled_back,
    scale_in,
)
from hyperguard.governance.decisions import Decision, DecisionKind
from hyperguard.governance.engine import schedule
from hyperguard.governance.jobs import Actor, FencedOutError, JobLifecycle, Outcome
from hyperguard.governance.patching import PatchFence, fences, pauses
from hyperguard.governance.placement import (
    Pool,
    PoolKind,
    allows_burst,
    allows_hyperpod,
    place,
    pool_of,
)
from hyperguard.governance.state import (
    NO_CLASS_PRIORITY,
    GovernanceState,
    Workload,
)
from hyperguard.messaging import Workflows
from hyperguard.models import Job, JobStatus, Node, NodeStatus, utcnow
from hyperguard.models.governance import PriorityClass
from hyperguard.models.jobs import (
    ACTIVE_STATUSES,
    HOLDING_STATUSES,
    WAITING_STATUSES,
    held_nodes,
)
from hyperguard.observability import logger
from hyperguard.recovery.policy import NodeRepairConfig
from hyperguard.recovery.reliability import lemon_slots, read_history, slot_of
from hyperguard.store.checkpoints import CheckpointLocationError, CheckpointStore
from hyperguard.store.incidents import IncidentStore
from hyperguard.store.jobs import JobRecord, JobStore
from hyperguard.store.nodes import NodeStore
from hyperguard.store.policy import BurstPolicyStore, RepairPolicyStore
from hyperguard.store.teams import Lease, TeamStore


def usable(node: Node) -> bool:
    return node.status is NodeStatus.RUNNING and node.healthy and node.schedulable


def flagged_slow(holding: list[JobRecord]) -> int:
    return sum(1 for r in holding if r.slow is not None and r.job.status is JobStatus.RUNNING)


def holding_of(holding: list[JobRecord], team: str) -> Job:
    return next(r.job for r in holding if r.job.team == team)


def cordoned(nodes: list[Node], ids: Collection[str]) -> list[Node]:
    """`nodes`, those of `ids` unschedulable."""
    return [
        n.model_copy(update={"schedulable": False}) if n.instance_id in ids else n for n in nodes
    ]


def admissible_capacity(
    nodes: Iterable[Node], spares: Collection[str]
) -> tuple[Counter[str], Counter[str]]:
    """Usable instances per `ml.` instance type that a pass may admit into (hot spares held
    back): all of them, and those on HyperPod, the only ones a HyperPod-only job can use."""
    usable_nodes = [n for n in nodes if usable(n) and n.instance_id not in spares]
    return (
        Counter(ml_name(n.instance_type) for n in usable_nodes),
        Counter(ml_name(n.instance_type) for n in usable_nodes if n.platform == "hyperpod"),
    )


@dataclass
class PassResult:
    acquired: bool = True
    admitted: list[str] = field(default_factory=list)
    preempted: list[str] = field(default_factory=list)
    resized: list[str] = field(default_factory=list)
    dispatched: list[str] = field(default_factory=list)
    stopped: list[str] = field(default_factory=list)
    unplaced: list[str] = field(default_factory=list)
    succeeded: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    stalled: list[str] = field(default_factory=list)
    paused: list[str] = field(default_factory=list)
    """Jobs paused before their instance group's scheduled patch (D101)."""
    slow: int = 0
    """Running jobs flagged slow (D100), as the pass read them."""
    bursts: list[str] = field(default_factory=list)
    released: list[str] = field(default_factory=list)
    moved_back: list[str] = field(default_factory=list)
    spares: int = 0
    pending: int = 0
    pending_by_team: dict[str, int] = field(default_factory=dict)
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
            "succeeded": len(self.succeeded),
            "failed": len(self.failed),
            "lost": len(self.lost),
            "stalled": len(self.stalled),
            "paused": len(self.paused),
            "slow": self.slow,
            "bursts": len(self.bursts),
            "released": len(self.released),
            "moved_back": len(self.moved_back),
            "spares": self.spares,
            "pending": self.pending,
            "conflicts": self.conflicts,
        }


MAX_BURSTS_IN_FLIGHT = 50
"""Running bursts a pass reads (their inputs name the jobs they serve)."""

MOVE_BACK_WITHIN_S = 90.0
"""How fresh a checkpoint must be for a job to move back from burst capacity at it: what the
job redoes at most. Above the scheduler's 1-minute schedule, so that a checkpoint reported
through the API (which leaves no newer marker for the pass to find) still meets a pass."""

ORPHAN_STOPS_PER_PASS = 20
"""Jobs whose orphaned runs one pass stops, so that a backlog cannot stretch a pass."""


class SchedulerBusyError(RuntimeError):
    """Another pass holds the cluster's lease."""


class _Occupancy:
    """Free accelerators per usable node as the pass changes them; hot spares held back."""

    def __init__(self, nodes: Iterable[Node], holding: Iterable[tuple[list[str], int]]) -> None:
        """`holding`: the nodes of each job that holds capacity, and its accelerators per
        replica."""
        self.nodes = {n.instance_id: n for n in nodes if usable(n)}
        self.free = {i: n.accelerators for i, n in self.nodes.items()}
        self.spares: set[str] = set()
        for placed, per in holding:
            self.take(placed, per)

    def copy(self) -> _Occupancy:
        clone = _Occupancy((), ())
        clone.nodes, clone.free, clone.spares = self.nodes, dict(self.free), self.spares
        return clone

    def reserve_spares(self, wanted: Mapping[str, int], lemons: Collection[str] = ()) -> set[str]:
        """Hold back up to `wanted[pool]` idle nodes per pool (lowest ids first, so that the
        same nodes stay spares from pass to pass). Never a lemon: recovery does not move a
        job onto one (D87), so holding it back would leave the pool a spare short (D91)."""
        for pool, count in wanted.items():
            idle = sorted(
                i
                for i, node in self.nodes.items()
                if pool_of(node)[0] == pool
                and self.free[i] == node.accelerators
                and i not in lemons
            )
            for instance_id in idle[:count]:
                self.spares.add(instance_id)
                self.free[instance_id] = 0
        return self.spares

    def take(self, nodes: Iterable[str], per: int) -> None:
        for node in nodes:
            if node in self.free:
                self.free[node] -= per

    def give(self, nodes: Iterable[str], per: int) -> None:
        for node in nodes:
            if node in self.free and node not in self.spares:
                self.free[node] += per

    def pools(self, per: int, committed: Collection[str] = ()) -> list[Pool]:
        """The pools and their free accelerators in whole replicas of `per`; `committed`:
        the pools whose capacity is already paid for."""
        free: Counter[tuple[str, PoolKind, str, int]] = Counter()
        for instance_id, node in self.nodes.items():
            name, kind = pool_of(node)
            key = (name, kind, node.instance_type, node.accelerators)
            free[key] += self.free[instance_id] // per * per
        return [
            Pool(name, kind, itype, amount, per_instance, committed=name in committed)
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

    def room(self, pool: str, per: int) -> int:
        return sum(
            free // per
            for instance_id, free in self.free.items()
            if pool_of(self.nodes[instance_id])[0] == pool
        )


class SchedulerService:
    def __init__(
        self,
        *,
        jobs: JobStore,
        teams: TeamStore,
        gateway: ClusterGateway,
        catalogue: InstanceCatalogue,
        cluster: str,
        policies: RepairPolicyStore | None = None,
        burst_policies: BurstPolicyStore | None = None,
        checkpoints: CheckpointStore | None = None,
        bursts: Workflows | None = None,
        nodes: NodeStore | None = None,
        incidents: IncidentStore | None = None,
        lease_ttl_s: float = 120.0,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.jobs = jobs
        self.lifecycle = JobLifecycle(jobs, clock=clock)
        self.teams = teams
        self.gateway = gateway
        self.catalogue = catalogue
        self.cluster = cluster
        self.policies = policies or RepairPolicyStore(teams.table_name, teams.table)
        self.burst_policies = burst_policies or BurstPolicyStore(teams.table_name, teams.table)
        self.checkpoints = checkpoints or CheckpointStore()
        self.bursts = bursts
        """BurstCapacity; None: never burst (nor scale burst nodes in)."""
        self.nodes = nodes
        """The node inventory: what a node HyperPod replaced under a job was (None: no
        replaced node is held as its replacement)."""
        self.incidents = incidents
        """The incident history that names lemon nodes, never hot spares (None, or no
        `nodes`: any idle node may be one)."""
        self.lease_ttl_s = lease_ttl_s
        self.clock = clock
        self.teams_ensured: set[str] = set()
        """Teams whose namespaced objects (RoleBindings, LocalQueue) this process ensured for
        the jobs they run: once per cold start, so that an upgraded deployment grants
        Recovery in the namespaces of teams that dispatch nothing new (D98)."""

    def run_pass(self, job_ids: Collection[str] = ()) -> PassResult:
        """One pass, or nothing (`acquired` False) while another pass holds the lease.
        `job_ids`: jobs the wake-ups named, read by key besides the `Live` index (which a
        job just submitted may not be in yet)."""
        started = time.perf_counter()
        lease = self.teams.acquire_lease(self.cluster, uuid.uuid4().hex, self.lease_ttl_s)
        if lease is None:
            return PassResult(acquired=False)
        run = _PassRun(self, lease, job_ids)
        try:
            run.run()
        except FencedOutError:
            run.result.conflicts += 1
            logger.warning("scheduler lease lost mid-pass", extra={"cluster": self.cluster})
        finally:
            self.teams.release_lease(lease)
            run.result.duration_s = time.perf_counter() - started
        return run.result


class _PassRun:
    """The state of one pass: its lease, the snapshot it read, nodes as it fills them."""

    def __init__(self, service: SchedulerService, lease: Lease, named: Collection[str]) -> None:
        self.service = service
        self.named = named
        self.jobs = service.jobs
        self.lifecycle = service.lifecycle
        self.teams = service.teams
        self.gateway = service.gateway
        self.lease = lease
        self.result = PassResult()
        self.records: dict[str, JobRecord] = {}
        self.versions: dict[str, int] = {}
        self.occupancy = _Occupancy((), ())
        self.burst = BurstPolicy()
        self.prices: Mapping[tuple[PoolKind, str], float] = self.burst.price_table()
        self.burst_spend: dict[str, float] = {}
        """USD per hour each team's jobs cost on burst capacity, as the pass places them."""
        self.burst_gpus: dict[str, float] = {}
        """GPUs each team's jobs hold on burst capacity, as the pass places them."""
        self.nodes_by_id: dict[str, Node] = {}
        """The cluster's nodes as the pass read them."""
        self.short: dict[str, int] = {}
        """Jobs admitted that no allowed pool had room for: replicas they need."""
        self.held: set[str] = set()
        """Nodes some job holds at the start of the pass."""
        self.nodes: list[Node] = []
        """The cluster's nodes as the pass read them."""
        self.checkpointed: dict[str, int] = {}
        """Jobs whose new checkpoint this pass found: the step."""
        self.priority_classes: list[PriorityClass] = []
        """The scheduler config's priority classes, as the pass read them."""
        self.queues_ready: set[str] = set()
        """Teams whose Kueue objects this pass ensured (the first also the shared ones)."""
        self.retired_classes: set[str] = set()
        """Classes jobs name that the config no longer has, ensured by this pass."""

    def per_replica(self, job: Job) -> int:
        """Accelerators one replica of the job holds on its node."""
        return (
            job.accelerators_per_replica
            or self.service.catalogue.spec(job.instance_type).accelerators
        )

    def holdings(self, holding: list[JobRecord], nodes: list[Node]) -> list[tuple[list[str], int]]:
        """The nodes each job that holds capacity holds, and its accelerators per replica."""
        stand_ins = self.stand_ins(holding, nodes)
        return [
            ([stand_ins.get(n, n) for n in r.job.nodes], self.per_replica(r.job)) for r in holding
        ]

    def stand_ins(self, holding: list[JobRecord], nodes: list[Node]) -> dict[str, str]:
        """Nodes jobs hold that HyperPod has replaced, each with its replacement (the node
        that kept its NodeLogicalId). The job holds the replacement until its recovery moves
        it there: a job waiting for that repair restarts on it, and no pass may grow or
        admit another job into it first (D84). One read of the inventory, and only when a
        held node is gone from the cluster."""
        listed = {n.instance_id for n in nodes}
        gone = sorted({i for r in holding for i in r.job.nodes} - listed)
        if not gone or self.service.nodes is None:
            return {}
        by_logical_id = {n.logical_id: n.instance_id for n in nodes if n.logical_id}
        return {
            old.instance_id: by_logical_id[old.logical_id]
            for old in self.service.nodes.many(gone)
            if old.logical_id in by_logical_id
        }

    @property
    def fence(self) -> list[dict[str, Any]]:
        return [self.teams.lease_check(self.lease)]

    def count(self, outcome: Outcome) -> bool:
        self.result.writes += 1
        if not outcome:
            self.result.conflicts += 1
            logger.info("job move refused", extra={"why": outcome.why})
        return outcome.applied

    def lemons(self, policy: NodeRepairConfig, nodes: list[Node], now: datetime) -> set[str]:
        """The cluster's nodes in lemon slots, read only when hot spares are kept and lemons
        are on: one query of the window's incidents (and a batch read of the slots of
        instances no longer listed)."""
        incidents, inventory = self.service.incidents, self.service.nodes
        if not policy.hot_spares or incidents is None or inventory is None:
            return set()
        history = read_history(incidents, inventory, policy, now, nodes)
        bad = lemon_slots(policy, history.incidents, history.logical_ids, now)
        return {n.instance_id for n in nodes if slot_of(n.instance_id, history.logical_ids) in bad}

    def run(self) -> None:
        now = self.service.clock()
        policy = self.service.policies.get()
        self.burst = self.service.burst_policies.get()
        self.prices = self.burst.price_table()
        snapshot = self.jobs.active(also=self.named)
        for record in snapshot:
            if record.stop_pending:
                self.stop_cancelled(record)
        nodes = self.gateway.list_nodes()
        self.nodes = nodes
        runs = self.gateway.job_runs()
        moved = self.reconcile(snapshot, runs, nodes, policy, now)
        self.stop_orphans(snapshot, runs)
        fenced, fenced_nodes = self.patch_fences(policy, nodes, now)
        moved += self.pause_for_patches(fenced, snapshot, nodes, moved, now)
        if moved:
            # Read back only what this pass just moved: another writer's change since the
            # snapshot is refused by the conditional writes (as it is a moment after any
            # read), and a job submitted since has a wake-up of its own.
            fresh = {r.job.job_id: r for r in self.jobs.records_of(moved)}
            snapshot = [fresh.get(r.job.job_id, r) for r in snapshot]
        self.records = {r.job.job_id: r for r in snapshot}
        active = [r for r in snapshot if r.job.status in ACTIVE_STATUSES]
        holding = [r for r in active if r.job.status in HOLDING_STATUSES]
        self.result.slow = flagged_slow(holding)
        self.held = held_nodes(r.job for r in holding)
        self.ensure_running_teams(holding)
        # Nothing new lands on a fenced node; one a job holds still counts as capacity
        # while that job runs there.
        self.occupancy = _Occupancy(cordoned(nodes, fenced_nodes), self.holdings(holding, nodes))
        spares = self.occupancy.reserve_spares(policy.hot_spares, self.lemons(policy, nodes, now))
        self.result.spares = len(spares)
        self.nodes_by_id = {n.instance_id: n for n in nodes}
        self.burst_spend, self.burst_gpus = self.spend_on_burst(holding)
        quotas = self.teams.quotas()
        self.versions = {q.compute_quota_target.team_name: q.version for q in quotas}
        config, _ = self.teams.scheduler_config()
        self.priority_classes = config.priority_classes
        capacity, hyperpod = admissible_capacity(nodes, spares | (fenced_nodes - self.held))
        catalogue = self.service.catalogue
        state = GovernanceState(quotas, config, capacity, catalogue, now.timestamp(), hyperpod)
        bursting = self.service.bursts is not None and self.burst.capacity.max_nodes > 0
        for record in active:
            workload = Workload.from_job(
                record.job,
                catalogue,
                started_at=record.started_at,
                scaled_at=record.scaled_at,
                may_burst=bursting and allows_burst(record.job.template),
                pool_kind=record.pool_kind,
            )
            if record.job.status in HOLDING_STATUSES and record.admitted_replicas:
                workload.admitted = record.admitted_replicas
            state.add(workload)
        decisions = schedule(state)
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
        if self.service.bursts is not None:
            self.raise_capacity(decisions.short_of_capacity, reasons, state, now)
        self.note_fences(fenced, reasons)
        self.result.pending = len(reasons)
        self.result.pending_by_team = dict(Counter(self.records[j].job.team for j in reasons))
        for job_id, reason in reasons.items():
            record = self.records[job_id]
            if record.reason != reason and record.job.status in WAITING_STATUSES:
                if self.lifecycle.set_reason(job_id, reason, replacing=record.reason):
                    self.result.writes += 1
                else:  # changed since the snapshot: the next pass writes it anew
                    self.result.conflicts += 1

    # -- reconciliation ---------------------------------------------------------------------
    def reconcile(
        self,
        snapshot: list[JobRecord],
        cluster_runs: list[RunStatus],
        nodes: list[Node],
        policy: NodeRepairConfig,
        now: datetime,
    ) -> list[str]:
        """End, requeue or update running jobs from what the cluster says; the jobs whose
        status changed."""
        runs = {(r.job_id, r.run): r for r in cluster_runs}
        healthy = {n.instance_id for n in nodes if n.status is NodeStatus.RUNNING and n.healthy}
        moved: list[str] = []
        for record in snapshot:
            job = record.job
            if job.status is not JobStatus.RUNNING or record.stop_pending:
                continue
            run = runs.get((job.job_id, job.run))
            if run is not None and run.phase is RunPhase.SUCCEEDED:
                self.progress(record, policy)
                done = self.lifecycle.finish(
                    record,
                    JobStatus.SUCCEEDED,
                    reason=f"completed: {run.kind.value} {run.name} {run.reason or 'finished'}",
                )
                if self.count(done):
                    self.result.succeeded.append(job.job_id)
                    moved.append(job.job_id)
                continue
            if run is not None and run.phase in (RunPhase.PENDING, RunPhase.RUNNING):
                self.follow(record, run, policy, now, moved)
                continue
            # Failed, lost or gone. A node fault kills runs too: leave those to recovery.
            if record.protected_by or any(node not in healthy for node in job.nodes):
                continue
            since = (run.since if run is not None else None) or record.started_at
            if since is not None and (now - since).total_seconds() < policy.failed_run_grace_s:
                continue
            if run is not None and run.phase is RunPhase.FAILED:
                outcome = self.lifecycle.finish(
                    record,
                    JobStatus.FAILED,
                    reason=f"failed: {run.reason or 'Failed'}: {run.message}".rstrip(": "),
                )
                bucket = self.result.failed
            else:
                why = (
                    f"{run.kind.value} {run.name} lost ({run.reason}: {run.message})"
                    if run is not None
                    else f"run {job.run} is no longer on the cluster"
                )
                outcome = self.lifecycle.requeue(
                    job.job_id,
                    by=Actor.RECONCILER,
                    run=job.run,
                    reason=f"requeued to resume from its checkpoint: {why}",
                )
                bucket = self.result.lost
            if self.count(outcome):
                bucket.append(job.job_id)
                moved.append(job.job_id)
                self.stop(job.job_id)
        return moved

    def follow(
        self,
        record: JobRecord,
        run: RunStatus,
        policy: NodeRepairConfig,
        now: datetime,
        moved: list[str],
    ) -> None:
        """A live run: record its progress; a running one that is stalled is requeued to
        resume from its latest checkpoint and its run stopped (added to `moved`)."""
        self.progress(record, policy)
        why = self.stalled(record, run, policy, now) if run.phase is RunPhase.RUNNING else ""
        job = record.job
        reason = f"requeued to resume from its checkpoint: {why}"
        if why and self.count(
            self.lifecycle.requeue(
                job.job_id, by=Actor.RECONCILER, run=job.run, reason=reason, stalled=True
            )
        ):
            self.result.stalled.append(job.job_id)
            moved.append(job.job_id)
            self.stop(job.job_id)

    def stalled(
        self, record: JobRecord, run: RunStatus, policy: NodeRepairConfig, now: datetime
    ) -> str:
        """Why a running job counts as stalled ("" when it does not): it writes checkpoints,
        found none new in this pass, and has completed none for `stalledJobMins` since its
        run started (or its run reached Running) or its last new checkpoint (D94)."""
        job = record.job
        if not policy.stalled_job_mins or not job.checkpoint_location:
            return ""
        if job.job_id in self.checkpointed:
            return ""
        since = max(
            (t for t in (record.started_at, run.since, record.progress_at) if t), default=None
        )
        if since is None:
            return ""
        idle_min = (now - since).total_seconds() / 60
        if idle_min < policy.stalled_job_mins:
            return ""
        last = job.last_checkpoint
        where = f"step {last.step}" if last else "none yet"
        return (
            f"stalled: no new checkpoint for {idle_min:.0f} min (limit "
            f"{policy.stalled_job_mins:g}; latest {where})"
        )

    # -- HyperPod's scheduled patching (D101) -----------------------------------------------
    def patch_fences(
        self, policy: NodeRepairConfig, nodes: list[Node], now: datetime
    ) -> tuple[dict[str, PatchFence], set[str]]:
        """The instance groups a patch is due on (one DescribeCluster), and their nodes; none
        when the cluster cannot say (the pass goes on: a patch it misses costs what it did
        before)."""
        try:
            _, groups = self.gateway.hyperpod_groups()
        except ClusterError as error:
            logger.warning("instance groups unreadable", extra={"error": str(error)})
            return {}, set()
        fenced = fences(groups, now, timedelta(minutes=policy.scheduled_change_lead_mins))
        return fenced, {
            n.instance_id for n in nodes if n.platform == "hyperpod" and n.pool in fenced
        }

    def pause_for_patches(
        self,
        fenced: Mapping[str, PatchFence],
        snapshot: list[JobRecord],
        nodes: list[Node],
        moved: Collection[str],
        now: datetime,
    ) -> list[str]:
        """Pause the jobs on fenced groups at a checkpoint boundary: back to the queue, their
        runs stopped. The jobs paused."""
        if not fenced:
            return []
        group_of = {n.instance_id: n.pool for n in nodes if n.platform == "hyperpod"}
        records = [r for r in snapshot if r.job.job_id not in moved]
        paused: list[str] = []
        for pause in pauses(fenced, records, group_of, now, self.checkpointed):
            outcome = self.lifecycle.requeue(
                pause.job_id, by=Actor.RECONCILER, run=pause.run, reason=pause.reason, paused=True
            )
            if self.count(outcome):
                self.result.paused.append(pause.job_id)
                paused.append(pause.job_id)
                self.stop(pause.job_id)
        return paused

    def note_fences(self, fenced: Mapping[str, PatchFence], reasons: dict[str, str]) -> None:
        """A waiting job of a fenced group's instance type is told why those nodes take it
        not."""
        types = {n.pool: ml_name(n.instance_type) for n in self.nodes if n.pool in fenced}
        for job_id, reason in reasons.items():
            job = self.records[job_id].job
            notes = [
                f"{fence.note()}: its nodes take no new jobs until the update is done"
                for group, fence in sorted(fenced.items())
                if types.get(group) == ml_name(job.instance_type)
            ]
            if notes:
                reasons[job_id] = "; ".join([reason, *notes])

    def stop_orphans(self, snapshot: list[JobRecord], runs: list[RunStatus]) -> None:
        """Stop the live runs no job should have: every run of a job that has ended or
        waits (a preemption whose stop failed, a run recovery dispatched after a cancel had
        its pods stopped), and runs older than a holding job's current one. Safe against
        the snapshot being older than `runs`: a waiting job gets a new run only from this
        pass's admission, and a holding job's run numbers only grow. A job recovery
        protects is left to it (it stops the runs it replaces), as is a cancelled one whose
        stop `stop_cancelled` still owes. Jobs the snapshot lacks (ended ones) are read by
        key; at most ORPHAN_STOPS_PER_PASS jobs a pass, the rest on the next."""
        live = [r for r in runs if r.phase in (RunPhase.PENDING, RunPhase.RUNNING)]
        records = {r.job.job_id: r for r in snapshot}
        unread = sorted({r.job_id for r in live} - records.keys())[:ORPHAN_STOPS_PER_PASS]
        records |= {r.job.job_id: r for r in self.jobs.records_of(unread)}
        stops: dict[str, int | None] = {}
        for run in live:
            record = records.get(run.job_id)
            if record is None or record.stop_pending or record.protected_by:
                continue
            job = record.job
            if job.status not in HOLDING_STATUSES:
                stops[job.job_id] = None  # all of its runs
            elif run.run < job.run:
                stops[job.job_id] = job.run
        for job_id, before_run in sorted(stops.items())[:ORPHAN_STOPS_PER_PASS]:
            self.stop(job_id, before_run=before_run)

    def progress(self, record: JobRecord, policy: NodeRepairConfig) -> None:
        """A newer complete checkpoint marker than the job's last known one (remembered for
        moving a job back from burst capacity at that checkpoint), in the job's pace."""
        job = record.job
        if not job.checkpoint_location:
            return
        last = job.last_checkpoint.step if job.last_checkpoint else None
        try:
            found = self.service.checkpoints.latest_complete(job.checkpoint_location, after=last)
        except CheckpointLocationError:
            return
        if found is not None:
            self.lifecycle.record_checkpoint(
                job.job_id, found, history=True, record=record, slow_ratio=policy.slow_job_ratio
            )
            self.result.writes += 1
            self.checkpointed[job.job_id] = found.step

    # -- admission --------------------------------------------------------------------------
    def spend_on_burst(
        self, holding: Iterable[JobRecord]
    ) -> tuple[dict[str, float], dict[str, float]]:
        """USD per hour, and GPUs, per team of the jobs holding burst capacity."""
        spend: dict[str, float] = defaultdict(float)
        held: dict[str, float] = defaultdict(float)
        for record in holding:
            job = record.job
            node = self.nodes_by_id.get(job.nodes[0]) if job.nodes else None
            kind = record.pool_kind or (pool_of(node)[1] if node is not None else None)
            usd, gpus = self.burst_held(job, kind, job.pool, job.nodes)
            if gpus:
                spend[job.team] += usd
                held[job.team] += gpus
        return dict(spend), dict(held)

    def burst_held(
        self, job: Job, kind: str | PoolKind | None, pool: str | None, nodes: list[str]
    ) -> tuple[float, float]:
        """USD per hour at the policy's prices, and GPUs, of the burst capacity `job` holds on
        `nodes` of `pool` (placed as `kind`, or before kinds were recorded, as its first
        node's): all of an EKS pool, the share on HyperPod nodes a burst added."""
        node = self.nodes_by_id.get(nodes[0]) if nodes else None
        per_instance = (
            node.accelerators
            if node is not None
            else self.service.catalogue.spec(job.instance_type).accelerators
        )
        return self.burst.held_on_burst(
            kind,
            pool,
            job.instance_type,
            nodes,
            self.per_replica(job) * len(nodes),
            per_instance,
            lambda instance_id: added_by_burst(self.nodes_by_id.get(instance_id)),
        )

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
            pools=trial.pools(per, self.burst.committed_pools),
            prices=self.prices,
            prefer_burst=record.prefer_burst,
            budget=self.burst.budget(job.team, self.burst_spend, self.burst_gpus),
        )
        if placement.pool is None:
            self.result.unplaced.append(job.job_id)
            if placement.short:
                self.short[job.job_id] = action.replicas
            return f"admissible but not placeable: {placement.reason}"
        chosen = trial.choose(placement.pool, per, action.replicas)
        for victim in victims:
            self.give_way(victim)
        restart = record.first_admitted_at is not None
        admitted = self.count(
            self.lifecycle.admit(
                job.job_id,
                nodes=chosen,
                pool=placement.pool,
                replicas=action.replicas,
                restart=restart,
                reason=f"{action.reason}; placed: {placement.reason}",
                fence=[
                    *self.fence,
                    self.teams.quota_version_check(job.team, self.versions[job.team]),
                ],
                pool_kind=placement.kind.value if placement.kind else None,
                hourly_price=round(placement.hourly_price, 4),
                hourly_cost=round(placement.hourly_cost, 2),
            )
        )
        if not admitted:
            return None
        self.occupancy.free = trial.free
        usd, gpus = self.burst_held(job, placement.kind, placement.pool, chosen)
        if gpus:
            self.burst_spend[job.team] = self.burst_spend.get(job.team, 0.0) + usd
            self.burst_gpus[job.team] = self.burst_gpus.get(job.team, 0) + gpus
        for victim in victims:
            if victim.kind is DecisionKind.SHRINK:
                self.resize_on_cluster(victim.job_id)
        self.result.admitted.append(job.job_id)
        placed = job.model_copy(
            update={
                "nodes": chosen,
                "pool": placement.pool,
                "status": JobStatus.ADMITTED,
                "restart_count": job.restart_count + restart,
                "run": job.run + restart,
            }
        )
        self.dispatch(placed)
        return None

    # -- burst capacity ---------------------------------------------------------------------
    def raise_capacity(
        self,
        short_of_capacity: list[str],
        reasons: dict[str, str],
        state: GovernanceState,
        now: datetime,
    ) -> None:
        """Start a BurstCapacity execution for the jobs only capacity holds back (those its
        template lets onto EKS, or onto a HyperPod group the burst policy lets grow), less
        the nodes already launching; give back burst nodes idle past the cooldown. A cluster
        or Step Functions error skips this for the pass."""
        capacity = self.burst.capacity
        try:
            claims = self.gateway.burst_claims()
        except ClusterError as error:
            logger.warning("burst claims unreadable", extra={"error": str(error)})
            return
        self.release_idle(claims, now)
        if capacity.move_back and not short_of_capacity and not self.short:
            self.move_back(now)
        wanted = dict(self.short)
        for job_id in short_of_capacity:
            workload = state.workloads.get(job_id)
            if workload is not None:
                wanted.setdefault(job_id, workload.floor)
        if not wanted or capacity.max_nodes == 0:
            return
        in_flight = self.bursts_in_flight()
        launching = Counter(
            c.instance_type for c in claims if not (c.deleting or c.ready or c.failure)
        )
        growable = self.growable_types(launching)

        def note(job_id: str, text: str) -> None:
            reasons[job_id] = f"{reasons.get(job_id, 'pending')}; {text}"

        groups: dict[tuple[str, str], list[BurstJob]] = defaultdict(list)
        for job_id, replicas in wanted.items():
            job = self.records[job_id].job
            instance_type = ec2_name(job.instance_type)
            if not allows_burst(job.template) and not (
                allows_hyperpod(job.template) and instance_type in growable
            ):
                continue
            if job_id in in_flight:
                note(job_id, f"burst capacity being raised ({in_flight[job_id]})")
                continue
            due = self.burst_due(self.records[job_id], now)
            if due is not None:
                note(job_id, due)
                continue
            needed = nodes_for(
                replicas,
                self.per_replica(job),
                self.service.catalogue.spec(job.instance_type).accelerators,
            )
            if launching[instance_type] >= needed:
                launching[instance_type] -= needed
                note(job_id, "burst capacity launching")
                continue
            groups[(job.template, instance_type)].append(
                BurstJob(job_id=job_id, team=job.team, nodes=needed)
            )
        for (template, instance_type), group in groups.items():
            jobs = group[:MAX_BURST_JOBS]
            name = burst_id(
                self.service.cluster,
                template,
                instance_type,
                (j.job_id for j in jobs),
                now,
                capacity.retry_after_s,
            )
            # This window's burst for these jobs rolled back: no second one yet.
            if any(rolled_back(self.records[j.job_id].reason, name) for j in jobs):
                retry = next_window(now, capacity.retry_after_s)
                for member in jobs:
                    note(member.job_id, f"next burst from {retry:%H:%M:%S}Z")
                continue
            request = BurstRequest(
                burst_id=name,
                template=template,
                instance_type=instance_type,
                accelerators_per_node=self.service.catalogue.spec(instance_type).accelerators,
                jobs=jobs,
                spend_usd_per_hour={t: round(v, 4) for t, v in self.burst_spend.items()},
                burst_gpus=dict(self.burst_gpus),
            )
            try:
                self.service.bursts.ensure_started(  # type: ignore[union-attr]
                    name, {"request": request.model_dump(mode="json", by_alias=True)}
                )
            except Exception as error:  # the next pass starts it again
                logger.warning("burst not started", extra={"burst_id": name, "error": str(error)})
                continue
            self.result.bursts.append(name)
            for member in jobs:
                note(member.job_id, f"burst capacity asked for ({name})")
        for job_id in wanted:  # the last rollback's reasons stay while the job waits
            last = last_rollback(self.records[job_id].reason)
            if last is not None and job_id in reasons and last not in reasons[job_id]:
                reasons[job_id] = f"{reasons[job_id]}; last {last}"[:1000]

    def bursts_in_flight(self) -> dict[str, str]:
        """The jobs a running BurstCapacity execution serves, and its burst id: a job is in
        one burst at a time (its nodes may still be asked for, so no NodeClaim shows them)."""
        if self.service.bursts is None:
            return {}
        try:
            inputs = self.service.bursts.running_inputs(MAX_BURSTS_IN_FLIGHT)
        except (ClientError, BotoCoreError) as error:  # the next pass looks again
            logger.warning("running bursts unreadable", extra={"error": str(error)})
            return {}
        serving: dict[str, str] = {}
        for name, payload in inputs.items():
            request = payload.get("request") if isinstance(payload, dict) else None
            for job in (request or {}).get("jobs") or []:
                if isinstance(job, dict) and isinstance(job.get("jobId"), str):
                    serving[job["jobId"]] = name
        return serving

    def burst_due(self, record: JobRecord, now: datetime) -> str | None:
        """None when the job has waited its priority class's `burstAfterS`; else when its
        burst is due, for its reason."""
        wait_s = self.burst.capacity.burst_after_s.get(record.job.priority_class or "", 0)
        since = record.waiting_since()
        if wait_s <= 0 or since is None:
            return None
        waited = (now - since).total_seconds()
        if waited >= wait_s:
            return None
        return f"burst capacity after {wait_s} s of waiting ({waited:.0f} s so far)"

    def growable_types(self, launching: Counter[str]) -> set[str]:
        """The EC2 instance types of the HyperPod groups the burst policy lets grow, with
        the nodes those groups are still bringing up counted in `launching` (added to their
        TargetCount, not running yet). Empty when none may grow or the cluster cannot say."""
        names = {g.instance_group_name for g in self.burst.capacity.hyperpod_groups}
        if not names:
            return set()
        try:
            continuous, groups = self.gateway.hyperpod_groups()
        except ClusterError as error:
            logger.warning("instance groups unreadable", extra={"error": str(error)})
            return set()
        running = Counter(
            n.pool
            for n in self.nodes
            if n.platform == "hyperpod" and n.status is NodeStatus.RUNNING
        )
        types: set[str] = set()
        for group in groups:
            if group.name in names and continuous and not group.autoscaled:
                instance_type = ec2_name(group.instance_type)
                types.add(instance_type)
                launching[instance_type] += max(group.target_count - running[group.name], 0)
        return types

    def move_back(self, now: datetime) -> None:
        """Development jobs running on burst capacity that just completed a checkpoint (the
        pass found its marker, or the job reported it within MOVE_BACK_WITHIN_S) go back
        to the queue (a preemption) when HyperPod has room for them, which nobody waiting
        needs (the caller checks): the next pass places them on HyperPod, where their
        template prefers to run, and their burst nodes idle and are released."""
        fresh = dict(self.checkpointed)
        for held in self.records.values():
            last = held.job.last_checkpoint
            if last is not None and (now - last.completed_at).total_seconds() <= MOVE_BACK_WITHIN_S:
                fresh.setdefault(held.job.job_id, last.step)
        for job_id, step in fresh.items():
            record = self.records.get(job_id)
            if record is None:
                continue
            job = record.job
            if (
                job.status is not JobStatus.RUNNING
                or not is_burst(record.pool_kind)
                or record.protected_by
                or record.stop_pending
                or job.template != "development"
            ):
                continue
            per = self.per_replica(job)
            room = [
                pool
                for pool in self.occupancy.pools(per)
                if pool.kind is PoolKind.HYPERPOD
                and ml_name(pool.instance_type) == ml_name(job.instance_type)
                and pool.free_accelerators >= per * len(job.nodes)
            ]
            if not room:
                continue
            reason = (
                f"moving back to HyperPod ({room[0].name} has room) from checkpoint step {step}"
            )
            if self.count(
                self.lifecycle.preempt(job_id, reason=reason, fence=self.fence, nodes=job.nodes)
            ):
                self.occupancy.choose(room[0].name, per, len(job.nodes))
                self.result.moved_back.append(job_id)
                self.stop(job_id)

    def release_idle(self, claims: list[BurstClaim], now: datetime) -> None:
        """Scale-in: release HyperGuard's burst nodes idle for the cooldown (Karpenter drains
        and terminates them), marking when each was first seen idle on its NodeClaim."""
        busy = self.held | {
            i
            for i, node in self.occupancy.nodes.items()
            if self.occupancy.free[i] < node.accelerators
        }
        release, marks = scale_in(claims, busy, now, self.burst.capacity.scale_in_after_s)
        for claim, since in marks:
            try:
                self.gateway.mark_burst_node_idle(claim, since)
            except ClusterError as error:
                logger.warning("idle mark failed", extra={"claim": claim.name, "error": str(error)})
        if release:  # a recovery may have restarted a job on one since the snapshot (hot spare)
            try:
                now_held = held_nodes(r.job for r in self.jobs.active())
            except (ClientError, BotoCoreError) as error:  # the next pass looks again
                logger.warning("jobs unreadable", extra={"error": str(error)})
                return
            release = [c for c in release if c.instance_id not in now_held]
        added: dict[str, frozenset[str]] = {}
        for claim in release:
            if claim.platform == "hyperpod":
                if claim.burst_id not in added:
                    added[claim.burst_id] = self.nodes_added_by(claim.burst_id)
                if claim.name not in added[claim.burst_id]:
                    logger.warning(
                        "idle HyperPod node kept: its burst did not add it",
                        extra={"claim": claim.name, "burst_id": claim.burst_id},
                    )
                    continue
            try:
                if self.gateway.release_burst_node(claim):
                    self.result.released.append(claim.name)
            except ClusterError as error:
                logger.warning("release failed", extra={"claim": claim.name, "error": str(error)})

    def nodes_added_by(self, burst_id: str) -> frozenset[str]:
        """The NodeLogicalIds the burst's execution added to HyperPod, from its output (the
        node's label alone could be anyone's who may patch nodes, a kubelet's on its own
        node among them); none when it did not succeed or cannot be read."""
        try:
            output = self.service.bursts.succeeded_output(burst_id)  # type: ignore[union-attr]
        except (ClientError, BotoCoreError) as error:  # the next pass looks again
            logger.warning("burst unreadable", extra={"burst_id": burst_id, "error": str(error)})
            return frozenset()
        added = (output or {}).get("added")
        return (
            frozenset(a for a in added if isinstance(a, str))
            if isinstance(added, list)
            else frozenset()
        )

    def give_way(self, decision: Decision) -> None:
        record = self.records[decision.job_id]
        if decision.kind is DecisionKind.PREEMPT:
            if self.count(
                self.lifecycle.preempt(
                    decision.job_id,
                    reason=decision.reason,
                    fence=self.fence,
                    for_job=decision.for_job,
                    nodes=record.job.nodes,
                )
            ):
                self.result.preempted.append(decision.job_id)
                self.stop(decision.job_id)
            return
        self.resize(
            record,
            record.job.nodes[: decision.replicas],
            decision.reason,
            grown=False,
            for_job=decision.for_job,
        )

    def resize(
        self, record: JobRecord, nodes: list[str], reason: str, *, grown: bool, **details: Any
    ) -> bool:
        """Resize the job to `nodes` (a new run), and the pass's copy with it. Growth takes
        quota, so it is fenced like an admission: also on the team's quota version."""
        job = record.job
        fence = self.fence
        if grown:
            fence = [*fence, self.teams.quota_version_check(job.team, self.versions[job.team])]
        resized = self.count(
            self.lifecycle.resize(
                job.job_id,
                nodes=nodes,
                by=Actor.SCHEDULER,
                reason=reason,
                grown=grown,
                fence=fence,
                **details,
            )
        )
        if resized:
            self.records[job.job_id] = record.model_copy(
                update={"job": job.model_copy(update={"nodes": nodes, "run": job.run + 1})}
            )
            self.result.resized.append(job.job_id)
        return resized

    def resize_on_cluster(self, job_id: str) -> None:
        """Elastic training changes size by checkpointing and restarting at the new size."""
        job = self.records[job_id].job
        try:
            self.gateway.resize(job, list(job.nodes))
        except ClusterError as exc:
            logger.error(
                "resize failed on the cluster", extra={"job_id": job_id, "error": str(exc)}
            )

    def grow(self, action: Decision) -> None:
        record = self.records[action.job_id]
        job = record.job
        per = self.per_replica(job)
        extra = action.replicas - len(job.nodes)
        if extra <= 0 or job.pool is None or job.status is not JobStatus.RUNNING:
            return
        trial = self.occupancy.copy()
        if trial.room(job.pool, per) < extra:
            return
        nodes = [*job.nodes, *trial.choose(job.pool, per, extra)]
        if self.resize(record, nodes, action.reason, grown=True):
            self.occupancy.free = trial.free
            self.resize_on_cluster(job.job_id)

    def ensure_queues(self, job: Job) -> None:
        """The Kueue objects a run of `job` needs before it is dispatched, once a pass per
        team (and the cluster-wide ones once), so that a missing or changed one is put right
        by the next dispatch (D71). A class the job names that the config no longer has gets
        a WorkloadPriorityClass ranked below every class, as the engine ranks the job: without
        one Kueue would keep the run suspended for good. Raises ClusterError."""
        manifests = [] if job.team in self.queues_ready else team_objects(job.team)
        if not self.queues_ready:
            manifests = [*shared_objects(self.priority_classes), *manifests]
        known = {pc.name for pc in self.priority_classes} | self.retired_classes
        retired = job.priority_class if job.priority_class not in (None, *known) else None
        if retired is not None:
            why = f"HyperGuard priority class {retired}, no longer configured: below every class"
            manifests.append(priority_class_object(retired, NO_CLASS_PRIORITY, why))
        if not manifests:
            return
        outcomes = self.gateway.ensure_queues(manifests)
        self.queues_ready.add(job.team)
        self.service.teams_ensured.add(job.team)
        if retired is not None:
            self.retired_classes.add(retired)
        changed = {key: outcome for key, outcome in outcomes.items() if outcome != "unchanged"}
        if changed:
            logger.info("kueue objects ensured", extra={"team": job.team, "changed": changed})

    def ensure_running_teams(self, holding: list[JobRecord]) -> None:
        """The team objects of every team with jobs holding capacity, once per process: a
        deployment upgraded to namespaced grants (D98) has none in the namespaces of teams
        that keep running without a new dispatch, where Recovery's restarts would be
        refused. A cluster error leaves it to the next pass."""
        for team in sorted({r.job.team for r in holding} - self.service.teams_ensured):
            try:
                self.ensure_queues(holding_of(holding, team))
            except ClusterError as error:
                logger.warning(
                    "team objects not ensured", extra={"team": team, "error": str(error)}
                )
                return

    def dispatch(self, job: Job) -> None:
        try:
            self.ensure_queues(job)
            self.gateway.dispatch(job, list(job.nodes))
        except ClusterError as exc:
            self.count(self.lifecycle.undispatch(job.job_id, str(exc)))
            return
        if self.count(self.lifecycle.start(job.job_id, nodes=job.nodes, pool=job.pool)):
            self.result.dispatched.append(job.job_id)

    def stop(self, job_id: str, *, before_run: int | None = None) -> bool:
        """Delete the job's runs (those below `before_run`, if given); False when the
        cluster refused, which `stop_orphans` or `stop_cancelled` retry on the next pass."""
        try:
            self.gateway.stop_job(job_id, before_run=before_run)
        except ClusterError as exc:
            logger.error("stop_job failed", extra={"job_id": job_id, "error": str(exc)})
            return False
        self.result.stopped.append(job_id)
        return True

    def stop_cancelled(self, record: JobRecord) -> None:
        """`stopped` (which clears `stop_pending`) only once the cluster stopped the pods:
        until then the job stays on the `Live` index and every pass tries again."""
        if self.stop(record.job.job_id):
            self.count(self.lifecycle.stopped(record.job.job_id, record.job.nodes))
