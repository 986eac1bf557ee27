"""The scheduling pass's decisions, pure: from a `PassSnapshot` to typed intents.

Nothing here reads or writes anything: every input is in the snapshot (and the instance
catalogue, whose figures are facts), every output is an intent of
`hyperguard.governance.intents` that `hyperguard.governance.applier` carries out. The pure
cores it builds on decide the parts: `engine.schedule` (admission, preemption, growth),
`placement.place` (which pool), `patching` (fences, pauses), `pace` (through the lifecycle),
`bursting` (burst requests, scale-in). What one decision changes for the next — the free
accelerators per node, each team's burst spend, the jobs resized — is a value threaded
from one decision to the next (`hyperguard.governance.occupancy`).

Three phases, as the pass runs them:
1. `plan_reconcile`: what the cluster says of running jobs (succeeded, failed, lost, stalled,
   paused for a patch), their new checkpoints, cancelled jobs' pods and orphaned runs to
   stop, and the fences of groups a patch is due on;
2. `plan_admission`, from the snapshot with the jobs phase 1 moved read again: the engine's
   admissions placed on nodes, their victims, elastic growth;
3. `plan_capacity`: scale-in of burst nodes, moving development jobs back to HyperPod,
   bursts for the jobs capacity holds back, and the reasons of the jobs that wait.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from hyperguard.bursting.requests import (
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
from hyperguard.catalogue import InstanceCatalogue, ec2_name, ml_name
from hyperguard.governance.decisions import Decision, DecisionKind, Decisions
from hyperguard.governance.engine import schedule
from hyperguard.governance.intents import (
    Admission,
    AdmissionPlan,
    BurstStart,
    CapacityPlan,
    EnsureTeam,
    Growth,
    HandBack,
    IdleMark,
    Leftover,
    MoveBack,
    NoteOperatorRestarts,
    NoteProgressTrouble,
    NoteRefusedCheckpoint,
    Preemption,
    ReasonWrite,
    Reconcile,
    ReconcilePlan,
    RecordCheckpoint,
    Relocate,
    Shrink,
    StopCancelled,
    StopRuns,
    Verdict,
)
from hyperguard.governance.occupancy import (
    BurstMeter,
    BurstSpend,
    Occupancy,
    admissible_capacity,
    cordoned,
    per_replica,
)
from hyperguard.governance.patching import PatchFence, fences, pauses
from hyperguard.governance.placement import Placement, place
from hyperguard.governance.snapshot import (
    LIVE_PHASES,
    ORPHAN_STOPS_PER_PASS,
    InstanceGroups,
    PassSnapshot,
    backed_off,
    reads_progress,
)
from hyperguard.governance.stalls import Stall, stall_incident
from hyperguard.governance.state import NO_CLASS_PRIORITY, GovernanceState, Workload
from hyperguard.models import Job, JobStatus, Node, NodeStatus
from hyperguard.models.cluster import BurstClaim, RunPhase, RunStatus
from hyperguard.models.governance import ComputeQuota
from hyperguard.models.jobs import (
    HOLDING_STATUSES,
    WAITING_STATUSES,
    ProgressTrouble,
    held_nodes,
    restarts_recorded,
)
from hyperguard.models.records import JobRecord
from hyperguard.policies.burst import (
    BurstPolicy,
    PoolKind,
    WhenCanPreempt,
    allows_burst,
    allows_hyperpod,
    burst_kinds,
    is_burst,
)
from hyperguard.policies.repair import NodeRepairConfig

TROUBLE_FIRST_RETRY_S = 60
TROUBLE_MAX_RETRY_S = 1_800
"""A refused checkpoint location is read again after 1, 2, 4 … minutes, at most half an hour
apart (D139)."""

MOVE_BACK_WITHIN_S = 90.0
"""How fresh a checkpoint must be for a job to move back from burst capacity at it: what the
job redoes at most. Above the scheduler's 1-minute schedule, so that a checkpoint reported
through the API (which leaves no newer marker for the pass to find) still meets a pass."""

# -- phase 1: reconciliation ------------------------------------------------------------------


def plan_reconcile(snapshot: PassSnapshot) -> ReconcilePlan:
    """End, requeue or record the progress of running jobs from what the cluster says; stop
    what no job should run; fence the groups a patch is due on and pause their jobs."""
    checkpoints, troubles, verdicts = _running(snapshot)
    refusals = refused_checkpoints(snapshot)
    decided = {v.job_id for v in verdicts}
    restarts = [n for n in operator_restarts(snapshot) if n.record.job.job_id not in decided]
    found_steps = {c.record.job.job_id: c.checkpoint.step for c in checkpoints}
    fenced, fenced_nodes = _fences(snapshot)
    paused = []
    if fenced:
        group_of = {n.instance_id: n.pool for n in snapshot.nodes if n.platform == "hyperpod"}
        waiting = [r for r in snapshot.jobs if r.job.job_id not in decided]
        paused = pauses(fenced, waiting, group_of, snapshot.now, found_steps)
    by_id = snapshot.view.by_id
    return ReconcilePlan(
        cancelled=tuple(
            StopCancelled(r.job.job_id, tuple(r.job.nodes)) for r in snapshot.view.stopping
        ),
        checkpoints=tuple(checkpoints),
        troubles=tuple(troubles),
        restarts=tuple(restarts),
        refusals=tuple(refusals),
        verdicts=tuple(verdicts),
        orphans=tuple(_orphans(snapshot)),
        relocations=tuple(_relocations(snapshot, decided)),
        pauses=tuple(Reconcile(Verdict.PAUSED, by_id[p.job_id], p.reason) for p in paused),
        leftovers=tuple(_leftovers(snapshot)),
        fences=fenced,
        fenced_nodes=fenced_nodes,
        found=found_steps,
    )


@dataclass(frozen=True, slots=True)
class _Listed:
    """The cluster's nodes as the pass read them: the unhealthy ones, and each one's
    cluster."""

    sick: frozenset[str]
    clusters: Mapping[str, str]

    @classmethod
    def of(cls, nodes: Iterable[Node]) -> _Listed:
        listed = list(nodes)
        return cls(
            sick=frozenset(
                n.instance_id for n in listed if not (n.status is NodeStatus.RUNNING and n.healthy)
            ),
            clusters={n.instance_id: n.cluster for n in listed},
        )

    def cluster(self, job: Job) -> str:
        """The cluster of the job's first listed node ("" when none is listed)."""
        return next((self.clusters[n] for n in job.nodes if n in self.clusters), "")


def _running(
    snapshot: PassSnapshot,
) -> tuple[list[RecordCheckpoint], list[NoteProgressTrouble], list[Reconcile]]:
    """The running jobs' new checkpoints, their checkpoint locations' troubles, and the
    verdicts on their current runs."""
    runs = {(r.job_id, r.run): r for r in snapshot.runs}
    nodes = _Listed.of(snapshot.nodes)
    checkpoints: list[RecordCheckpoint] = []
    troubles: list[NoteProgressTrouble] = []
    verdicts: list[Reconcile] = []
    for record in snapshot.view.running:
        job = record.job
        if record.stop_pending:
            continue
        run = runs.get((job.job_id, job.run))
        read = reads_progress(record, run) and not backed_off(record, snapshot.now)
        found = snapshot.checkpoints.get(job.job_id) if read else None
        if found is not None:
            checkpoints.append(RecordCheckpoint(record, found, snapshot.repair.slow_job_ratio))
        error = snapshot.unreadable.get(job.job_id)
        if error is not None:
            troubles.append(NoteProgressTrouble(record, next_trouble(record, error, snapshot.now)))
        elif read and record.progress_trouble is not None:
            troubles.append(NoteProgressTrouble(record, None))
        # An unreadable checkpoint location is not a stall: the job's progress is unknown
        # (read and refused this pass, or waiting for its retry).
        unknown = error is not None or backed_off(record, snapshot.now)
        progressed = found is not None or unknown
        verdict = _verdict(record, run, nodes, snapshot.repair, snapshot.now, progressed)
        if verdict is not None:
            verdicts.append(verdict)
    return checkpoints, troubles, verdicts


def refused_checkpoints(snapshot: PassSnapshot) -> list[NoteRefusedCheckpoint]:
    """Running jobs whose newest checkpoint contract v2 refused, newer than the last refusal
    recorded (the reader keeps only those: D164), each noted once."""
    if not snapshot.refused:
        return []
    return [
        NoteRefusedCheckpoint(record.job.job_id, refused)
        for record in snapshot.jobs
        if (refused := snapshot.refused.get(record.job.job_id)) is not None
    ]


def operator_restarts(snapshot: PassSnapshot) -> list[NoteOperatorRestarts]:
    """Running jobs whose current run the cluster restarted more times than recorded: a
    HyperPodPyTorchJob's restartCount, a team's own Job's failed pods (D179), went up."""
    runs = {(r.job_id, r.run): r for r in snapshot.runs}
    found = []
    for record in snapshot.view.running:
        job = record.job
        run = runs.get((job.job_id, job.run))
        if run is None or not run.restarts:
            continue
        if run.restarts > restarts_recorded(record.operator_restarts, job.run, run.kind):
            found.append(NoteOperatorRestarts(record, job.run, run.restarts, run.kind))
    return found


def next_trouble(record: JobRecord, error: str, now: datetime) -> ProgressTrouble:
    """The job's progress trouble after S3 refused its location once more: read again after
    a wait that doubles with each refusal in a row, from one minute up to half an hour."""
    was = record.progress_trouble
    failures = was.failures + 1 if was is not None else 1
    wait_s = min(TROUBLE_FIRST_RETRY_S * 2 ** (failures - 1), TROUBLE_MAX_RETRY_S)
    return ProgressTrouble(
        since=was.since if was is not None else now,
        failures=failures,
        retry_at=now + timedelta(seconds=wait_s),
        error=error[:1024],
    )


def _leftovers(snapshot: PassSnapshot) -> list[Leftover]:
    """The jobs earlier passes left Admitted (a pass marks what it dispatched Running before
    it ends, unless it is killed first: passes hold the lease in turn, so no pass is still
    at work on them), each with whether its current run is on the cluster."""
    runs = {(r.job_id, r.run) for r in snapshot.runs}
    return [
        Leftover(record, (record.job.job_id, record.job.run) in runs)
        for record in snapshot.view.admitted
        if not record.stop_pending and not record.protected_by
    ]


def _relocations(snapshot: PassSnapshot, decided: Collection[str]) -> list[Relocate]:
    """Running auto-resume jobs whose current run's pods all run on other nodes than those
    recorded, as many of them (HyperPod's auto-resume placed them: D136); not those with a
    verdict this pass."""
    found: list[Relocate] = []
    for record in snapshot.jobs if snapshot.placed else ():
        job = record.job
        placed = snapshot.placed.get(job.job_id)
        if placed is None or job.job_id in decided or record.protected_by:
            continue
        if len(placed) == len(job.nodes) and set(placed) != set(job.nodes):
            found.append(Relocate(record, placed))
    return found


def _verdict(
    record: JobRecord,
    run: RunStatus | None,
    nodes: _Listed,
    policy: NodeRepairConfig,
    now: datetime,
    checkpointed: bool,
) -> Reconcile | None:
    """What becomes of a running job whose current run is `run` (None: gone); a stall with
    the incident its requeue records (D117), in its nodes' cluster."""
    if run is not None and run.phase is RunPhase.SUCCEEDED:
        why = f"completed: {run.kind.value} {run.name} {run.reason or 'finished'}"
        return Reconcile(Verdict.SUCCEEDED, record, why)
    if run is not None and run.phase in LIVE_PHASES:
        stall = (
            _stalled(record, run, policy, now, checkpointed)
            if run.phase is RunPhase.RUNNING
            else None
        )
        if stall is None:
            return None
        return Reconcile(
            Verdict.STALLED,
            record,
            f"requeued to resume from its checkpoint: {stall.reason}",
            incident=stall_incident(record, stall, now, nodes.cluster(record.job)),
        )
    return _ended(record, run, nodes, policy, now)


def _ended(
    record: JobRecord,
    run: RunStatus | None,
    nodes: _Listed,
    policy: NodeRepairConfig,
    now: datetime,
) -> Reconcile | None:
    """A running job whose current run failed, was lost or is gone (None)."""
    job = record.job
    # Failed, lost or gone. A node fault kills runs too: leave those to recovery while the
    # node is listed unhealthy. A node no longer listed at all was replaced or terminated and
    # its recovery, if any, has let the job go (it clears `protected_by`): the run is lost.
    if record.protected_by or any(node in nodes.sick for node in job.nodes):
        return None
    since = (run.since if run is not None else None) or record.started_at
    if since is not None and (now - since).total_seconds() < policy.failed_run_grace_s:
        return None
    if job.cluster_object is not None:
        return _held_ended(record, run)
    if run is None:
        lost = f"run {job.run} is no longer on the cluster"
    elif run.phase is not RunPhase.FAILED:
        lost = f"{run.kind.value} {run.name} lost ({run.reason}: {run.message})"
    else:
        said = f"{run.reason or 'Failed'}: {run.message}".rstrip(": ")
        gone = [n for n in job.nodes if n not in nodes.clusters]
        if not gone:
            return Reconcile(Verdict.FAILED, record, f"failed: {said}")
        # It failed with a node gone from under it (HyperPod's automatic recovery replaced
        # it before any incident held the job: D167): it lost its node, not its code.
        lost = (
            f"{run.kind.value} {run.name} failed after {', '.join(gone)} left the cluster ({said})"
        )
    return Reconcile(Verdict.LOST, record, f"requeued to resume from its checkpoint: {lost}")


def _held_ended(record: JobRecord, run: RunStatus | None) -> Reconcile:
    """A job a team applied whose object failed, or is gone: it ends Failed. HyperGuard
    admits the team's object and makes no other, so a run that ended (its own controller's
    retries spent) or was deleted cannot be resumed by requeueing it (D170)."""
    held = record.job.cluster_object
    assert held is not None
    what = f"{held.kind} {held.namespace}/{held.name}"
    if run is None:
        return Reconcile(Verdict.FAILED, record, f"failed: {what} is no longer on the cluster")
    said = f"{run.reason or run.phase.value}: {run.message}".rstrip(": ")
    return Reconcile(
        Verdict.FAILED, record, f"failed: {what} ended ({said}); apply it again to rerun it"
    )


def _stalled(
    record: JobRecord, run: RunStatus, policy: NodeRepairConfig, now: datetime, checkpointed: bool
) -> Stall | None:
    """The job's stall (None when it is not stalled): it writes checkpoints, found none new
    in this pass, and has completed none for `stalledJobMins` since its run started (or its
    run reached Running) or its last new checkpoint (D94). A run that sends heartbeats is
    held to `heartbeatStallMins` instead, counted from the later of its last step up and its
    last new checkpoint: a heartbeat that stops while checkpoints go on is no stall (D165)."""
    job = record.job
    beat = record.heartbeats()
    limit = policy.heartbeat_stall_mins if beat is not None else policy.stalled_job_mins
    if not limit or not job.checkpoint_location or checkpointed:
        return None
    # A run the training operator restarted (HyperPod auto-resume, log monitoring) is the same
    # run to the stall rule: its restarts are no progress (D155).
    reached = run.since if not run.restarts else None
    stepped = beat.advanced_at if beat is not None else None
    since = max(
        (t for t in (record.started_at, reached, record.progress_at, stepped) if t), default=None
    )
    if since is None:
        return None
    idle_min = (now - since).total_seconds() / 60
    if idle_min < limit:
        return None
    last = job.last_checkpoint
    return Stall(
        since,
        idle_min,
        limit,
        last.step if last else None,
        by="heartbeats" if beat is not None else "checkpoints",
    )


def _fences(snapshot: PassSnapshot) -> tuple[dict[str, PatchFence], frozenset[str]]:
    """The instance groups a patch is due on, and their nodes (none when the groups were
    unreadable)."""
    if snapshot.groups is None:
        return {}, frozenset()
    lead = timedelta(minutes=snapshot.repair.scheduled_change_lead_mins)
    fenced = fences(snapshot.groups.groups, snapshot.now, lead)
    return fenced, frozenset(
        n.instance_id for n in snapshot.nodes if n.platform == "hyperpod" and n.pool in fenced
    )


def _orphans(snapshot: PassSnapshot) -> list[StopRuns]:
    """The live runs no job should have: every run of a job that has ended or waits (a
    preemption whose stop failed, a run recovery dispatched after a cancel had its pods
    stopped), and runs older than a holding job's current one. Safe against the snapshot
    being older than the runs: a waiting job gets a new run only from this pass's
    admission, and a holding job's run numbers only grow. A job recovery protects is left
    to it (it stops the runs it replaces), as is a cancelled one whose stop is still owed.
    Runs of jobs HyperGuard has no record of are left alone; at most ORPHAN_STOPS_PER_PASS
    jobs a pass, the rest on the next."""
    records, ended = snapshot.view.by_id, snapshot.ended
    stops: dict[str, int | None] = {}
    for run in snapshot.runs:
        record = ended.get(run.job_id) or records.get(run.job_id)
        if run.phase not in LIVE_PHASES or record is None:
            continue
        if record.stop_pending or record.protected_by:
            continue
        job = record.job
        if job.status not in HOLDING_STATUSES:
            stops[job.job_id] = None  # all of its runs
        elif run.run < job.run:
            stops[job.job_id] = job.run
    return [StopRuns(job_id, before) for job_id, before in sorted(stops.items())][
        :ORPHAN_STOPS_PER_PASS
    ]


# -- phase 2: admission ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Ledger:
    """Where admission planning left the pass's accounts, for the capacity plan."""

    occupancy: Occupancy
    spend: BurstSpend
    records: Mapping[str, JobRecord]
    """The snapshot's jobs, those the plan resizes as resized."""
    held: frozenset[str]
    """Nodes some job holds at the start of the pass."""
    reasons: Mapping[str, str]
    """Why each job that waits waits: the engine's reasons, and placement's."""
    short: Mapping[str, int] = field(default_factory=dict)
    """Jobs admitted that no allowed pool had room for: the replicas they need."""
    short_of_capacity: Mapping[str, int] = field(default_factory=dict)
    """Jobs only installed capacity holds back (the engine's, in order): their floors."""

    def burst_demand(self) -> dict[str, int]:
        """The jobs more capacity would let run, and the replicas each needs."""
        wanted = dict(self.short)
        for job_id, floor in self.short_of_capacity.items():
            wanted.setdefault(job_id, floor)
        return wanted


@dataclass(frozen=True, slots=True)
class _Context:
    """What stays fixed while admissions are planned one after another."""

    snapshot: PassSnapshot
    catalogue: InstanceCatalogue
    meter: BurstMeter
    versions: Mapping[str, int]
    runs: Mapping[str, tuple[RunStatus, ...]]
    """Each job's run objects as the snapshot read them."""

    def per(self, job: Job) -> int:
        return per_replica(job, self.catalogue)


def plan_admission(
    snapshot: PassSnapshot, reconciled: ReconcilePlan, catalogue: InstanceCatalogue
) -> tuple[AdmissionPlan, Ledger]:
    """The engine's decisions on the snapshot (hot spares and fenced nodes held back),
    placed on nodes: admissions with their victims, and growths."""
    records, holding = snapshot.view.by_id, snapshot.view.holding
    held = frozenset(held_nodes(r.job for r in holding))
    nodes = {n.instance_id: n for n in snapshot.nodes}
    context = _Context(
        snapshot,
        catalogue,
        BurstMeter(snapshot.burst, nodes, catalogue),
        {q.compute_quota_target.team_name: q.version for q in snapshot.quotas},
        _runs_by_job(snapshot.runs),
    )
    # Nothing new lands on a fenced node; one a job holds still counts as capacity while
    # that job runs there.
    occupancy = Occupancy.of(
        cordoned(snapshot.nodes, reconciled.fenced_nodes),
        [
            ([snapshot.stand_ins.get(n, n) for n in r.job.nodes], context.per(r.job))
            for r in holding
        ],
    ).reserve_spares(snapshot.repair.hot_spares, snapshot.lemons)
    start = Ledger(
        occupancy=occupancy,
        spend=context.meter.spend(holding),
        records=records,
        held=held,
        reasons={},
    )
    # A restart waits for its stopped run's pods: the checkpoint they may save on SIGTERM
    # is the one it resumes from (D210).
    winding = {j: _winding_down(records[j]) for j in snapshot.winding_down if j in records}
    active_ids = tuple(j for j in snapshot.view.active_ids if j not in winding)
    held_back = occupancy.spares | (reconciled.fenced_nodes - held)
    admissions, growths, unplaceable, ledger = _decide(context, start, active_ids, held_back)
    if winding:
        ledger = replace(ledger, reasons={**ledger.reasons, **winding})
    plan = AdmissionPlan(
        ensure_teams=_teams_to_ensure(holding, snapshot.quotas, snapshot.teams_ensured),
        admissions=tuple(admissions),
        growths=tuple(growths),
        unplaced=tuple(unplaceable),
        spares=len(occupancy.spares),
        slow=sum(1 for r in holding if r.slow is not None and r.job.status is JobStatus.RUNNING),
    )
    return plan, ledger


def _winding_down(record: JobRecord) -> str:
    return (
        f"waits for the pods of its run {record.job.run} to stop: it resumes from the "
        "checkpoint they may still save"
    )


def _decide(
    context: _Context, start: Ledger, active: Sequence[str], held_back: Collection[str]
) -> tuple[list[Admission], list[Growth], dict[str, _Unplaced], Ledger]:
    """The engine's decisions on the active jobs, placed. An admission no pool can place
    gives its victims back; whatever the engine decided after it counted on their quota,
    so the engine decides again without that job (it waits with placement's reason)."""
    snapshot, records = context.snapshot, start.records
    unplaceable: dict[str, _Unplaced] = {}
    while True:
        waiting = [records[j] for j in active if j not in unplaceable]
        state = _state(snapshot, waiting, held_back, context.catalogue)
        decisions = schedule(state)
        floors = {
            job_id: state.workloads[job_id].floor
            for job_id in decisions.short_of_capacity
            if job_id in state.workloads
        }
        decided = replace(start, reasons=decisions.pending_reasons, short_of_capacity=floors)
        admissions, growths, unplaced, ledger = _place_all(context, decisions, decided)
        unplaceable |= unplaced
        if not any(u.had_victims for u in unplaced.values()):
            break
    ledger = replace(
        ledger,
        reasons={**ledger.reasons, **{j: u.reason for j, u in unplaceable.items()}},
        short={j: u.short for j, u in unplaceable.items() if u.short},
    )
    return admissions, growths, unplaceable, ledger


@dataclass(frozen=True, slots=True)
class _Unplaced:
    """An admission no allowed pool could place."""

    reason: str
    short: int
    """The replicas it needs when no allowed pool had room (0: a spend cap refused it)."""
    had_victims: bool
    """The engine made room for it by preempting or shrinking jobs, which stay as they are."""


def _place_all(
    context: _Context, decisions: Decisions, ledger: Ledger
) -> tuple[list[Admission], list[Growth], dict[str, _Unplaced], Ledger]:
    """The engine's admissions placed on nodes (victims with the admission they serve),
    those only HyperPod can hold first, then the rest in the engine's order, then its
    growths; the ledger as they leave it. Every admission of the pass fits its quota, so the
    order only decides which nodes each takes: a job that could go to burst capacity placed
    first would take the last HyperPod node from one that cannot (issue 19)."""
    victims: dict[str, list[Decision]] = defaultdict(list)
    for action in decisions.actions:
        if action.for_job is not None:
            victims[action.for_job].append(action)
    occupancy, spend, records = ledger.occupancy, ledger.spend, dict(ledger.records)
    admissions: list[Admission] = []
    growths: list[Growth] = []
    unplaced: dict[str, _Unplaced] = {}
    bursting = context.snapshot.bursting

    def order(action: Decision) -> int:
        if action.kind is not DecisionKind.ADMIT:
            return 2  # growths after every admission, as the engine made them
        return int(bursting and allows_burst(records[action.job_id].job.template))

    for action in sorted(decisions.actions, key=order):
        if action.kind is DecisionKind.ADMIT:
            placed, occupancy, spend = _admit(
                context, action, victims[action.job_id], occupancy, spend, records
            )
            if isinstance(placed, Admission):
                admissions.append(placed)
                records |= _resized(records, placed.victims)
                continue
            unplaced[action.job_id] = _Unplaced(
                f"admissible but not placeable: {placed.reason}",
                action.replicas if placed.short else 0,
                bool(victims[action.job_id]),
            )
        elif action.kind is DecisionKind.GROW:
            growth, occupancy = _grow(context, action, occupancy, records)
            if growth is not None:
                growths.append(growth)
                records[growth.job.job_id] = records[growth.job.job_id].model_copy(
                    update={"job": growth.job}
                )
    after = replace(ledger, occupancy=occupancy, spend=spend, records=records)
    return admissions, growths, unplaced, after


def _state(
    snapshot: PassSnapshot,
    active: Iterable[JobRecord],
    held_back: Iterable[str],
    catalogue: InstanceCatalogue,
) -> GovernanceState:
    """The engine's input: quotas, policy, the instances it may admit into (not those held
    back: hot spares, idle fenced nodes) and the active jobs."""
    capacity, hyperpod = admissible_capacity(snapshot.nodes, set(held_back))
    state = GovernanceState(
        list(snapshot.quotas),
        snapshot.config,
        capacity,
        catalogue,
        snapshot.now.timestamp(),
        hyperpod,
    )
    bursting = (
        snapshot.bursting
        and snapshot.burst.capacity.max_nodes > 0
        and snapshot.burst.capacity.when_can_preempt is WhenCanPreempt.TRY_NEXT_FLAVOR
    )
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
    return state


def _admit(
    context: _Context,
    action: Decision,
    victims: Sequence[Decision],
    occupancy: Occupancy,
    spend: BurstSpend,
    records: Mapping[str, JobRecord],
) -> tuple[Admission | Placement, Occupancy, BurstSpend]:
    """An admission placed on nodes, with the victims made for it; or, when no allowed pool
    can place it, the placement that says why (its victims are then left alone)."""
    record = records[action.job_id]
    job = record.job
    per = context.per(job)
    trial = occupancy
    for victim in victims:
        held = records[victim.job_id].job
        trial = trial.give(held.nodes[victim.replicas :], context.per(held))
    burst = context.snapshot.burst
    placement = place(
        template=job.template,
        instance_type=job.instance_type,
        accelerators=per * action.replicas,
        pools=trial.pools(per, burst.committed_pools),
        prices=burst.price_table(),
        prefer_burst=record.prefer_burst,
        budget=burst.budget(job.team, spend.usd, spend.gpus),
    )
    if placement.pool is None:
        return placement, occupancy, spend
    chosen, trial = trial.choose(placement.pool, per, action.replicas)
    restart = record.first_admitted_at is not None
    usd, gpus = context.meter.held(job, placement.kind, placement.pool, chosen)
    admission = Admission(
        job=job.model_copy(
            update={
                "nodes": chosen,
                "pool": placement.pool,
                "status": JobStatus.ADMITTED,
                "restart_count": job.restart_count + restart,
                "run": job.run + restart,
            }
        ),
        replicas=action.replicas,
        restart=restart,
        reason=f"{action.reason}; placed: {placement.reason}",
        pool_kind=placement.kind.value if placement.kind else None,
        hourly_price=round(placement.hourly_price, 4),
        hourly_cost=round(placement.hourly_cost, 2),
        quota_version=context.versions[job.team],
        victims=tuple(
            _give_way(
                victim,
                records,
                context.runs.get(victim.job_id, ()),
                _hand_back_note(context.snapshot, job, records),
            )
            for victim in victims
        ),
    )
    return admission, trial, spend.add(job.team, usd, gpus)


def _runs_by_job(runs: Iterable[RunStatus]) -> dict[str, tuple[RunStatus, ...]]:
    by_job: dict[str, list[RunStatus]] = defaultdict(list)
    for run in runs:
        by_job[run.job_id].append(run)
    return {job_id: tuple(job_runs) for job_id, job_runs in by_job.items()}


def _give_way(
    decision: Decision,
    records: Mapping[str, JobRecord],
    runs: tuple[RunStatus, ...],
    hand_back: str = "",
) -> Preemption | Shrink:
    job = records[decision.job_id].job
    if decision.kind is DecisionKind.PREEMPT:
        reason = decision.reason
        # Work that may burst itself gets a burst of its own when it waits; only work that
        # HyperPod alone runs waits for the job of its team that preempted it to move (D121).
        # Another team's job reclaimed for lent quota gets nothing back.
        preempting = records.get(decision.for_job or "")
        for_team = preempting.job.team if preempting is not None else None
        if hand_back and not allows_burst(job.template) and for_team == job.team:
            reason = f"{reason}; {hand_back}"
        return Preemption(decision.job_id, reason, tuple(job.nodes), decision.for_job, runs)
    resized = job.model_copy(update={"nodes": job.nodes[: decision.replicas], "run": job.run + 1})
    return Shrink(resized, decision.reason, decision.for_job)


def _hand_back_note(snapshot: PassSnapshot, job: Job, records: Mapping[str, JobRecord]) -> str:
    """What a job preempted for `job` is told of getting its nodes back (D121): when `job`
    may burst, writes checkpoints (it moves at one) and bursting is on, burst capacity is
    asked for `job` to move to; else ""."""
    capacity = snapshot.burst.capacity
    if not (
        snapshot.bursting
        and capacity.max_nodes > 0
        and capacity.when_can_preempt is WhenCanPreempt.PREEMPT
        and allows_burst(job.template)
        and job.checkpoint_location
    ):
        return ""
    return (
        f"burst capacity is asked for so that job {job.job_id} moves there at its next "
        "checkpoint and this job resumes on HyperPod"
    )


def _resized(
    records: Mapping[str, JobRecord], victims: Iterable[Preemption | Shrink]
) -> dict[str, JobRecord]:
    """The records of the jobs shrunk, as shrunk."""
    return {
        v.job.job_id: records[v.job.job_id].model_copy(update={"job": v.job})
        for v in victims
        if isinstance(v, Shrink)
    }


def _grow(
    context: _Context, action: Decision, occupancy: Occupancy, records: Mapping[str, JobRecord]
) -> tuple[Growth | None, Occupancy]:
    """A running elastic job grown into idle capacity of its pool, if the pool has room."""
    job = records[action.job_id].job
    per = context.per(job)
    extra = action.replicas - len(job.nodes)
    if extra <= 0 or job.pool is None or job.status is not JobStatus.RUNNING:
        return None, occupancy
    if occupancy.room(job.pool, per) < extra:
        return None, occupancy
    chosen, grown = occupancy.choose(job.pool, per, extra)
    job = job.model_copy(update={"nodes": [*job.nodes, *chosen], "run": job.run + 1})
    return Growth(job, action.reason, context.versions[job.team]), grown


def _teams_to_ensure(
    holding: Iterable[JobRecord], quotas: Iterable[ComputeQuota], ensured: Iterable[str]
) -> tuple[EnsureTeam, ...]:
    """The team objects of every team with jobs holding capacity or a quota, once per
    scheduler process: a deployment upgraded to namespaced grants (D98) has none in the
    namespaces of teams that keep running without a new dispatch, where Recovery's restarts
    would be refused; and a team's own queue must exist before a job it applies itself can
    wait there for HyperGuard (D170)."""
    first: dict[str, str | None] = {}
    for record in holding:
        first.setdefault(record.job.team, record.job.priority_class)
    for quota in quotas:
        first.setdefault(quota.compute_quota_target.team_name, None)
    return tuple(EnsureTeam(team, first[team]) for team in sorted(first.keys() - set(ensured)))


# -- phase 3: capacity and reasons ---------------------------------------------------------------


def wants_burst(snapshot: PassSnapshot, ledger: Ledger) -> bool:
    """Whether the capacity plan considers bursts, so that the pass reads the bursts in
    flight (only then)."""
    return (
        snapshot.bursting
        and snapshot.claims is not None
        and snapshot.burst.capacity.max_nodes > 0
        and bool(ledger.burst_demand())
    )


def plan_capacity(
    snapshot: PassSnapshot,
    reconciled: ReconcilePlan,
    ledger: Ledger,
    *,
    catalogue: InstanceCatalogue,
    cluster: str,
    in_flight: Mapping[str, str] | None = None,
) -> CapacityPlan:
    """Scale-in, moving back, bursts (when BurstCapacity is deployed and its claims could
    be read), and the reasons of the jobs that wait. `in_flight`: the jobs running bursts
    serve, and their burst ids (read when `wants_burst`)."""
    marks: tuple[IdleMark, ...] = ()
    releases: tuple[BurstClaim, ...] = ()
    moves: tuple[MoveBack, ...] = ()
    hand_backs: tuple[HandBack, ...] = ()
    bursts: list[tuple[BurstRequest, str]] = []
    notes: dict[str, str] = {}
    demand: dict[str, int] = {}
    if snapshot.bursting and snapshot.claims is not None:
        capacity = snapshot.burst.capacity
        demand = ledger.burst_demand() if capacity.max_nodes > 0 else {}
        handing = _HandingBack.plan(snapshot, reconciled, ledger, demand, catalogue)
        hand_backs = tuple(handing.moves)
        busy = set(ledger.held) | ledger.occupancy.busy() | handing.kept
        release, idle = scale_in(snapshot.claims, busy, snapshot.now, capacity.scale_in_after_s)
        marks, releases = tuple(IdleMark(c, since) for c, since in idle), tuple(release)
        if capacity.move_back and not ledger.short_of_capacity and not ledger.short:
            moves = _move_backs(snapshot, reconciled, ledger, catalogue)
        if capacity.max_nodes > 0:
            waiting = {j: r for j, r in demand.items() if j not in handing.notes}
            bursts, notes = _bursts(
                snapshot, ledger, waiting, in_flight or {}, catalogue, cluster, handing.movers
            )
            notes |= handing.notes
    reasons = _final_reasons(snapshot, reconciled, ledger, demand, notes)
    writes = _reason_writes(ledger.records, reasons)
    starts = []
    for request, note in bursts:
        members = {j.job_id for j in request.jobs}
        others = {j: n for j, n in notes.items() if j not in members or n != note}
        unstarted = _final_reasons(snapshot, reconciled, ledger, demand, others)
        starts.append(
            BurstStart(
                request,
                tuple(w for w in _reason_writes(ledger.records, unstarted) if w.job_id in members),
            )
        )
    return CapacityPlan(
        marks=marks,
        releases=releases,
        move_backs=moves,
        hand_backs=hand_backs,
        bursts=tuple(starts),
        reasons=tuple(writes),
        pending=len(reasons),
        pending_by_team=dict(Counter(map(snapshot.view.teams.__getitem__, reasons))),
    )


def _move_backs(
    snapshot: PassSnapshot,
    reconciled: ReconcilePlan,
    ledger: Ledger,
    catalogue: InstanceCatalogue,
) -> tuple[MoveBack, ...]:
    """Development jobs running on burst capacity that just completed a checkpoint (the
    pass found its marker, or the job reported it within MOVE_BACK_WITHIN_S) go back to the
    queue (a preemption) when HyperPod has room for them, which nobody waiting needs (the
    caller checks): the next pass places them on HyperPod, where their template prefers to
    run, and their burst nodes idle and are released."""
    records = ledger.records
    fresh = _fresh_checkpoints(snapshot, reconciled, records)
    occupancy = ledger.occupancy
    moves: list[MoveBack] = []
    for job_id, step in fresh.items():
        record = records.get(job_id)
        if record is None or not _may_move_back(record):
            continue
        job = record.job
        per = per_replica(job, catalogue)
        room = [
            pool
            for pool in occupancy.pools(per)
            if pool.kind is PoolKind.HYPERPOD
            and ml_name(pool.instance_type) == ml_name(job.instance_type)
            and pool.free_accelerators >= per * len(job.nodes)
        ]
        if not room:
            continue
        _, occupancy = occupancy.choose(room[0].name, per, len(job.nodes))
        reason = f"moving back to HyperPod ({room[0].name} has room) from checkpoint step {step}"
        moves.append(MoveBack(job_id, reason, tuple(job.nodes)))
    return tuple(moves)


def _fresh_checkpoints(
    snapshot: PassSnapshot, reconciled: ReconcilePlan, records: Mapping[str, JobRecord]
) -> dict[str, int]:
    """The jobs whose last checkpoint is fresh enough to move at (the pass found its marker,
    or it completed at most MOVE_BACK_WITHIN_S ago), and its step."""
    fresh = dict(reconciled.found)
    for held in records.values():
        last = held.job.last_checkpoint
        age = (snapshot.now - last.completed_at).total_seconds() if last is not None else None
        if last is not None and age is not None and age <= MOVE_BACK_WITHIN_S:
            fresh.setdefault(held.job.job_id, last.step)
    return fresh


def _may_move_back(record: JobRecord) -> bool:
    return (
        record.job.status is JobStatus.RUNNING
        and is_burst(record.pool_kind)
        and not record.protected_by
        and not record.stop_pending
        and record.job.template == "development"
    )


@dataclass(frozen=True, slots=True)
class _HandingBack:
    """Giving HyperPod back to the work an urgent job preempted (D121). A job only HyperPod
    runs that waits for HyperPod capacity, while jobs of its team of a higher priority that
    may burst hold HyperPod nodes of its type (they preempted it, under `whenCanPreempt`
    Preempt): burst capacity is asked for them (`movers`, for `_bursts`); once it is Ready
    and free, they move there at their next checkpoint (`moves`: a preemption that places
    them next on burst capacity first), and the waiting job takes the HyperPod nodes they
    leave. `notes`: the reasons of the jobs whose movers have capacity Ready (no other burst
    is asked for them); `kept`: the burst nodes held for movers until their checkpoint, so
    that scale-in does not release them."""

    movers: Mapping[str, tuple[JobRecord, ...]] = field(default_factory=dict)
    moves: tuple[HandBack, ...] = ()
    notes: Mapping[str, str] = field(default_factory=dict)
    kept: frozenset[str] = frozenset()

    @classmethod
    def plan(
        cls,
        snapshot: PassSnapshot,
        reconciled: ReconcilePlan,
        ledger: Ledger,
        demand: Mapping[str, int],
        catalogue: InstanceCatalogue,
    ) -> _HandingBack:
        capacity = snapshot.burst.capacity
        if capacity.max_nodes <= 0 or capacity.when_can_preempt is not WhenCanPreempt.PREEMPT:
            return cls()
        movers = _movers(snapshot, ledger, demand, catalogue)
        fresh = _fresh_checkpoints(snapshot, reconciled, ledger.records)
        occupancy = ledger.occupancy
        moves: list[HandBack] = []
        notes: dict[str, str] = {}
        kept: set[str] = set()
        for job_id, moving in movers.items():
            placed: list[tuple[JobRecord, str, list[str]]] = []
            for mover in moving:
                per = per_replica(mover.job, catalogue)
                pool = next(
                    (
                        p
                        for p in occupancy.pools(per)
                        if p.kind in burst_kinds(mover.job.template)
                        and ec2_name(p.instance_type) == ec2_name(mover.job.instance_type)
                        and p.free_accelerators >= per * len(mover.job.nodes)
                    ),
                    None,
                )
                if pool is None:
                    break
                chosen, occupancy = occupancy.choose(pool.name, per, len(mover.job.nodes))
                placed.append((mover, pool.name, chosen))
            if len(placed) < len(moving):
                continue  # capacity for all of them is not Ready yet: the burst is asked for
            waits = []
            for mover, pool_name, chosen in placed:
                kept |= set(chosen)
                step = fresh.get(mover.job.job_id)
                if step is None:
                    waits.append(mover.job.job_id)
                    continue
                moves.append(
                    HandBack(
                        mover.job.job_id,
                        f"moving to burst capacity ({pool_name} has room) from checkpoint "
                        f"step {step}, giving HyperPod back to job {job_id} of team "
                        f"{mover.job.team} it preempted",
                        tuple(mover.job.nodes),
                    )
                )
            names = ", ".join(m.job.job_id for m in moving)
            notes[job_id] = (
                f"job(s) {names} move to burst capacity at their next checkpoint, giving "
                "HyperPod back"
                if waits
                else f"job(s) {names} moving to burst capacity, giving HyperPod back"
            )
        return cls(movers, tuple(moves), notes, frozenset(kept))


def _movers(
    snapshot: PassSnapshot, ledger: Ledger, demand: Mapping[str, int], catalogue: InstanceCatalogue
) -> dict[str, tuple[JobRecord, ...]]:
    """For each job in `demand` that only HyperPod runs, the running jobs that would give
    it their HyperPod nodes by moving to burst capacity: of its team and instance type, of
    a higher priority, their template allowing burst capacity, on HyperPod; each mover
    serves one waiting job, taken lowest priority and last started first, until they hold
    as many nodes as it needs."""
    records = ledger.records
    weights = {pc.name: pc.weight for pc in snapshot.config.priority_classes}

    def priority(job: Job) -> int:
        return weights.get(job.priority_class or "", NO_CLASS_PRIORITY)

    candidates = sorted(
        (r for r in records.values() if _may_move_out(r)),
        key=lambda r: (priority(r.job), -(r.started_at or snapshot.now).timestamp()),
    )
    taken: set[str] = set()
    movers: dict[str, tuple[JobRecord, ...]] = {}
    for job_id, replicas in demand.items():
        job = records[job_id].job
        if allows_burst(job.template):
            continue
        needed = nodes_for(
            replicas, per_replica(job, catalogue), catalogue.spec(job.instance_type).accelerators
        )
        eligible = (
            c
            for c in candidates
            if c.job.job_id not in taken
            and c.job.team == job.team
            and ml_name(c.job.instance_type) == ml_name(job.instance_type)
            and priority(c.job) > priority(job)
        )
        moving: list[JobRecord] = []
        for candidate in eligible:
            if sum(len(m.job.nodes) for m in moving) >= needed:
                break
            moving.append(candidate)
        if moving and sum(len(m.job.nodes) for m in moving) >= needed:
            taken |= {m.job.job_id for m in moving}
            movers[job_id] = tuple(moving)
    return movers


def _may_move_out(record: JobRecord) -> bool:
    """A running job on HyperPod whose template may burst, recovery and cancellation leave
    to the scheduler, and that writes checkpoints: it moves at its next one, so a job with no
    checkpoint location would never move, and the burst bought for it would idle."""
    return (
        record.job.status is JobStatus.RUNNING
        and record.pool_kind == PoolKind.HYPERPOD.value
        and allows_burst(record.job.template)
        and bool(record.job.checkpoint_location)
        and bool(record.job.nodes)
        and not record.protected_by
        and not record.stop_pending
    )


def _bursts(
    snapshot: PassSnapshot,
    ledger: Ledger,
    demand: Mapping[str, int],
    in_flight: Mapping[str, str],
    catalogue: InstanceCatalogue,
    cluster: str,
    movers: Mapping[str, tuple[JobRecord, ...]] | None = None,
) -> tuple[list[tuple[BurstRequest, str]], dict[str, str]]:
    """The bursts to start, each with the note its jobs get, and the note of every job the
    pass does not burst for now (one burst serves it, one is launching, its class waits
    first, or this window's burst already rolled back). `movers`: for a job only HyperPod
    runs, the jobs of its team that may burst and hold the HyperPod nodes it waits for
    (D121): its burst is their template's, as many nodes as they hold, for them to move to."""
    assert snapshot.claims is not None
    records, now = ledger.records, snapshot.now
    # A claim counts as launching until its node is among the nodes the pass read: the pass
    # reads the nodes, then the claims, then the bursts in flight, so a claim that turned
    # Ready in between, its burst ended by the last read, is capacity no burst must repeat.
    seen = {n.instance_id for n in snapshot.nodes}
    launching = Counter(
        c.instance_type
        for c in snapshot.claims
        if not (c.deleting or c.failure) and not (c.ready and c.instance_id in seen)
    )
    growable = _growable_types(snapshot.burst, snapshot.groups, snapshot.nodes, launching)
    notes: dict[str, str] = {}
    groups: dict[tuple[str, str, bool], list[BurstJob]] = defaultdict(list)
    moved_by: dict[tuple[str, str], list[str]] = defaultdict(list)
    movers = movers or {}
    for job_id, replicas in demand.items():
        job = records[job_id].job
        instance_type = ec2_name(job.instance_type)
        moving = movers.get(job_id, ())
        shape = _burst_shape(job, replicas, moving, growable, catalogue)
        if shape is None:
            continue
        if job_id in in_flight:
            notes[job_id] = f"burst capacity being raised ({in_flight[job_id]})"
            continue
        due = _burst_due(snapshot.burst, records[job_id], now)
        if due is not None:
            notes[job_id] = due
            continue
        template, needed = shape
        if launching[instance_type] >= needed:
            launching[instance_type] -= needed
            notes[job_id] = "burst capacity launching"
            continue
        hand_back = template != job.template
        if hand_back:
            moved_by[(template, instance_type)].extend(m.job.job_id for m in moving)
        groups[(template, instance_type, hand_back)].append(
            BurstJob(job_id=job_id, team=job.team, nodes=needed)
        )
    return _burst_starts(snapshot, ledger, groups, moved_by, catalogue, cluster, notes)


def _burst_starts(
    snapshot: PassSnapshot,
    ledger: Ledger,
    groups: Mapping[tuple[str, str, bool], list[BurstJob]],
    moved_by: Mapping[tuple[str, str], list[str]],
    catalogue: InstanceCatalogue,
    cluster: str,
    notes: dict[str, str],
) -> tuple[list[tuple[BurstRequest, str]], dict[str, str]]:
    """One burst per group (template, instance type, whether it is a hand-back's), with the
    note its jobs get; `notes` gains them, and the next window's for a group whose burst of
    this window already rolled back."""
    records, now = ledger.records, snapshot.now
    capacity = snapshot.burst.capacity
    starts: list[tuple[BurstRequest, str]] = []
    for (template, instance_type, hand_back), group in groups.items():
        jobs = group[:MAX_BURST_JOBS]
        name = burst_id(
            cluster, template, instance_type, (j.job_id for j in jobs), now, capacity.retry_after_s
        )
        # This window's burst for these jobs rolled back: no second one yet.
        if any(rolled_back(records[j.job_id].reason, name) for j in jobs):
            retry = next_window(now, capacity.retry_after_s)
            notes |= {j.job_id: f"next burst from {retry:%H:%M:%S}Z" for j in jobs}
            continue
        request = BurstRequest(
            burst_id=name,
            template=template,
            instance_type=instance_type,
            accelerators_per_node=catalogue.spec(instance_type).accelerators,
            jobs=jobs,
            spend_usd_per_hour={t: round(v, 4) for t, v in ledger.spend.usd.items()},
            burst_gpus=dict(ledger.spend.gpus),
        )
        note = f"burst capacity asked for ({name})"
        if hand_back:
            moving_jobs = ", ".join(moved_by[(template, instance_type)])
            note = f"{note} for job(s) {moving_jobs} to move to, giving HyperPod back"
        starts.append((request, note))
        notes |= dict.fromkeys((j.job_id for j in jobs), note)
    return starts, notes


def _burst_shape(
    job: Job,
    replicas: int,
    moving: Sequence[JobRecord],
    growable: Collection[str],
    catalogue: InstanceCatalogue,
) -> tuple[str, int] | None:
    """The template of the burst that serves a waiting job, and the nodes it asks for the
    job: its own for the replicas it needs, where its template may burst or its HyperPod
    group may grow; its movers' for the nodes they hold (D121); None: no burst serves it."""
    if allows_burst(job.template) or (
        allows_hyperpod(job.template) and ec2_name(job.instance_type) in growable
    ):
        per_node = catalogue.spec(job.instance_type).accelerators
        return job.template, nodes_for(replicas, per_replica(job, catalogue), per_node)
    if moving:
        return moving[0].job.template, sum(len(m.job.nodes) for m in moving)
    return None


def _burst_due(policy: BurstPolicy, record: JobRecord, now: datetime) -> str | None:
    """None when the job has waited its priority class's `burstAfterS`; else when its
    burst is due, for its reason."""
    wait_s = policy.capacity.burst_after_s.get(record.job.priority_class or "", 0)
    since = record.waiting_since()
    if wait_s <= 0 or since is None:
        return None
    waited = (now - since).total_seconds()
    if waited >= wait_s:
        return None
    return f"burst capacity after {wait_s} s of waiting ({waited:.0f} s so far)"


def _growable_types(
    policy: BurstPolicy,
    groups: InstanceGroups | None,
    nodes: Iterable[Node],
    launching: Counter[str],
) -> set[str]:
    """The EC2 instance types of the HyperPod groups the burst policy lets grow, with the
    nodes those groups are still bringing up counted in `launching` (added to their
    TargetCount, not running yet). Empty when none may grow or the cluster cannot say."""
    names = {g.instance_group_name for g in policy.capacity.hyperpod_groups}
    if not names or groups is None:
        return set()
    running = Counter(
        n.pool for n in nodes if n.platform == "hyperpod" and n.status is NodeStatus.RUNNING
    )
    types: set[str] = set()
    for group in groups.groups:
        if group.name in names and groups.continuous and not group.autoscaled:
            instance_type = ec2_name(group.instance_type)
            types.add(instance_type)
            launching[instance_type] += max(group.target_count - running[group.name], 0)
    return types


def _final_reasons(
    snapshot: PassSnapshot,
    reconciled: ReconcilePlan,
    ledger: Ledger,
    demand: Mapping[str, int],
    notes: Mapping[str, str],
) -> dict[str, str]:
    """Why each waiting job waits: its reason, the burst note it got, the last rollback's
    note carried forward while it waits for capacity (D61), and the patch fences that keep
    nodes of its instance type from it."""
    reasons = dict(ledger.reasons)
    for job_id, note in notes.items():
        reasons[job_id] = f"{reasons.get(job_id, 'pending')}; {note}"
    for job_id in demand:  # the last rollback's reasons stay while the job waits
        last = last_rollback(ledger.records[job_id].reason)
        if last is not None and job_id in reasons and last not in reasons[job_id]:
            reasons[job_id] = f"{reasons[job_id]}; last {last}"[:1000]
    return _note_fences(snapshot, reconciled.fences, ledger.records, reasons)


def _note_fences(
    snapshot: PassSnapshot,
    fenced: Mapping[str, PatchFence],
    records: Mapping[str, JobRecord],
    reasons: dict[str, str],
) -> dict[str, str]:
    """A waiting job of a fenced group's instance type is told why those nodes take it
    not."""
    if not fenced:
        return reasons
    types = {n.pool: ml_name(n.instance_type) for n in snapshot.nodes if n.pool in fenced}
    for job_id, reason in reasons.items():
        job = records[job_id].job
        notes = [
            f"{fence.note()}: its nodes take no new jobs until the update is done"
            for group, fence in sorted(fenced.items())
            if types.get(group) == ml_name(job.instance_type)
        ]
        if notes:
            reasons[job_id] = "; ".join([reason, *notes])
    return reasons


def _reason_writes(
    records: Mapping[str, JobRecord], reasons: Mapping[str, str]
) -> list[ReasonWrite]:
    """The reasons whose stored form changes, each over the one the snapshot read."""
    return [
        ReasonWrite(job_id, reason, record.reason)
        for job_id, reason in reasons.items()
        if (record := records[job_id]).reason != reason and record.job.status in WAITING_STATUSES
    ]
