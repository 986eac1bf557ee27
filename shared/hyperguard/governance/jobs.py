"""The one owner of a job's life.

Every change of a job's status, placement (nodes, pool), replicas or checkpoint is a move
here, carried out as one conditional write against the status the move expects (and, for
the scheduler, its lease and the team's quota version). The API, the scheduler, node
recovery and the reconciler ask; a move that is no longer valid — the job was cancelled,
preempted, finished or moved meanwhile — is refused with the reason, never applied. Terminal
states (Succeeded, Failed, Cancelled) are final: no rule leaves them.

    move         from                      to         who may ask
    admit        Pending/Preempted/Susp.   Admitted   scheduler (fenced)
    start        Admitted                  Running    scheduler
    undispatch   Admitted                  Pending    scheduler (the cluster refused it)
    preempt      Admitted/Running          Preempted  scheduler (fenced)
    resize       Admitted/Running          (same)     scheduler (fenced; growth also on the
                                                      quota version), recovery (shrink only)
    cancel       any but terminal          Cancelled  api
    stopped      Cancelled                 Cancelled  scheduler (its pods are gone)
    succeed      Admitted/Running          Succeeded  reconciler (its current run completed)
    fail         Admitted/Running          Failed     reconciler (its current run failed)
    requeue      Admitted/Running          Pending    recovery (protected by it; `move` also
                                                      asks for burst capacity), reconciler
                                                      (the run it saw lost)
    protect      Admitted/Running          (same)     recovery (the job is on its node)
    restart      Admitted/Running          Running    recovery (protected by it, same run)
    release      Admitted/Running          (same)     recovery (protected by it)
    relocate     Admitted/Running          (same)     recovery (HyperPod moved an auto-resume
                                                      run to the node's replacement),
                                                      reconciler (its pods run elsewhere)

Recovery acts only on jobs it protected, and only from the run it saw fail: a job the
scheduler preempted, or a user cancelled, meanwhile is refused (both clear `protected_by`)
— recovery never revives a job the scheduler did not admit. Every move but cancel and
checkpoint also starts a new run where it changes where or how the job runs (`run`), which
is how the reconciler and recovery tell the current run from a stale one.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from functools import partial
from typing import Any

from hyperguard.aws import AWS_ERRORS
from hyperguard.cluster.pod_template import PodTemplateError, check_pod_template
from hyperguard.cluster.workloads import accelerator_resource
from hyperguard.governance.pace import next_pace, verdict, with_point
from hyperguard.models import Checkpoint, Job, JobStatus, utcnow
from hyperguard.models.cluster import RunKind
from hyperguard.models.jobs import (
    HOLDING_STATUSES,
    TERMINAL_STATUSES,
    WAITING_STATUSES,
    Heartbeat,
    OperatorRestarts,
    PacePoint,
    ProgressTrouble,
    RefusedCheckpoint,
    SlowFlag,
    restarts_recorded,
)
from hyperguard.models.records import JobEvent, JobHistoryEntry, JobRecord
from hyperguard.observability import logger
from hyperguard.store.checkpoints import CheckpointLocationError, CheckpointStore, Fence
from hyperguard.store.jobs import BatchedMove, BatchStoppedError, JobStore, TransitionOutcome


class Actor(StrEnum):
    API = "api"
    SCHEDULER = "scheduler"
    RECOVERY = "recovery"
    RECONCILER = "reconciler"


class Move(StrEnum):
    ADMIT = "admit"
    START = "start"
    UNDISPATCH = "undispatch"
    REFUSE = "refuse"
    PREEMPT = "preempt"
    RESIZE = "resize"
    CANCEL = "cancel"
    STOPPED = "stopped"
    SUCCEED = "succeed"
    FAIL = "fail"
    REQUEUE = "requeue"
    PROTECT = "protect"
    RESTART = "restart"
    RELEASE = "release"
    RELOCATE = "relocate"


@dataclass(frozen=True)
class Rule:
    expect: frozenset[JobStatus]
    to: JobStatus | None
    """None: the status stays."""
    by: frozenset[Actor]


_NOT_TERMINAL = frozenset(JobStatus) - TERMINAL_STATUSES
_UNPROTECTED = WAITING_STATUSES | TERMINAL_STATUSES
RULES: Mapping[Move, Rule] = {
    Move.ADMIT: Rule(WAITING_STATUSES, JobStatus.ADMITTED, frozenset({Actor.SCHEDULER})),
    Move.START: Rule(
        frozenset({JobStatus.ADMITTED}), JobStatus.RUNNING, frozenset({Actor.SCHEDULER})
    ),
    Move.UNDISPATCH: Rule(
        frozenset({JobStatus.ADMITTED}), JobStatus.PENDING, frozenset({Actor.SCHEDULER})
    ),
    Move.REFUSE: Rule(
        frozenset({JobStatus.ADMITTED}), JobStatus.FAILED, frozenset({Actor.SCHEDULER})
    ),
    Move.PREEMPT: Rule(HOLDING_STATUSES, JobStatus.PREEMPTED, frozenset({Actor.SCHEDULER})),
    Move.RESIZE: Rule(HOLDING_STATUSES, None, frozenset({Actor.SCHEDULER, Actor.RECOVERY})),
    Move.CANCEL: Rule(_NOT_TERMINAL, JobStatus.CANCELLED, frozenset({Actor.API})),
    Move.STOPPED: Rule(frozenset({JobStatus.CANCELLED}), None, frozenset({Actor.SCHEDULER})),
    Move.SUCCEED: Rule(HOLDING_STATUSES, JobStatus.SUCCEEDED, frozenset({Actor.RECONCILER})),
    Move.FAIL: Rule(HOLDING_STATUSES, JobStatus.FAILED, frozenset({Actor.RECONCILER})),
    Move.REQUEUE: Rule(
        HOLDING_STATUSES, JobStatus.PENDING, frozenset({Actor.RECOVERY, Actor.RECONCILER})
    ),
    Move.PROTECT: Rule(HOLDING_STATUSES, None, frozenset({Actor.RECOVERY})),
    Move.RESTART: Rule(HOLDING_STATUSES, JobStatus.RUNNING, frozenset({Actor.RECOVERY})),
    Move.RELEASE: Rule(HOLDING_STATUSES, None, frozenset({Actor.RECOVERY})),
    Move.RELOCATE: Rule(HOLDING_STATUSES, None, frozenset({Actor.RECOVERY, Actor.RECONCILER})),
}


RELOCATE_ATTEMPTS = 5
"""Reads of a job whose nodes another writer changed while it was relocated (D97)."""


class JobRejectedError(ValueError):
    """A submission the rules refuse; `field` names the offending request field."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


@dataclass(frozen=True)
class SubmissionRules:
    """What a submission is checked against (read by the caller from the team's quota,
    the scheduler config and the instance catalogue)."""

    team_has_quota: bool
    priority_classes: frozenset[str]
    accelerators_per_instance: int


def check_submission(job: Job, rules: SubmissionRules) -> None:
    """Raises JobRejectedError when `rules` refuse the job: what submit and a dry run check."""
    if not rules.team_has_quota:
        raise JobRejectedError(f"team {job.team} has no compute quota", "team")
    if job.priority_class is not None and job.priority_class not in rules.priority_classes:
        defined = ", ".join(sorted(rules.priority_classes)) or "none"
        raise JobRejectedError(
            f"unknown priority class {job.priority_class!r} (defined: {defined})",
            "priority_class",
        )
    if rules.accelerators_per_instance == 0:
        raise JobRejectedError(f"{job.instance_type} has no accelerators", "instance_type")
    if job.accelerators_per_replica > rules.accelerators_per_instance:
        raise JobRejectedError(
            f"{job.instance_type} has {rules.accelerators_per_instance} accelerators; a "
            f"replica cannot ask for {job.accelerators_per_replica}",
            "accelerators_per_replica",
        )
    policy = job.elastic_policy
    if policy is not None and job.replicas not in policy.sizes():
        raise JobRejectedError(
            f"replicas {job.replicas} is not a size the elasticPolicy allows", "replicas"
        )
    if job.pod_template is not None:
        try:
            check_pod_template(
                job.pod_template,
                accelerator_resource=accelerator_resource(job.instance_type),
                accelerators=job.accelerators_per_replica,
            )
        except PodTemplateError as error:
            field = f"pod_template.{error.field}" if error.field else "pod_template"
            raise JobRejectedError(f"{field}: {error.message}", field) from None


class MoveNotAllowedError(PermissionError):
    """An actor asked for a move that is not its to ask for (a programming error)."""


class FencedOutError(RuntimeError):
    """A fenced move's check failed: the scheduler's lease is another pass's now, or the
    team's quota changed since the pass read it."""


@dataclass(frozen=True)
class Outcome:
    applied: bool
    why: str = ""
    """Why a move was refused (empty when applied)."""

    def __bool__(self) -> bool:
        return self.applied


REFUSED_ALONE: tuple[type[Exception], ...] = (FencedOutError, *AWS_ERRORS)
"""What a move of a batch written alone (`JobLifecycle.admit_all`, `preempt_all`) may fail
with."""


@dataclass(frozen=True)
class AdmitRequest:
    """One admission of a pass (see `JobLifecycle.admit`)."""

    job_id: str
    nodes: list[str]
    pool: str
    replicas: int
    restart: bool
    reason: str
    fence: tuple[dict[str, Any], ...]
    pool_kind: str | None = None
    details: Mapping[str, Any] = field(default_factory=dict)
    """More for the history entry (the admission's prices)."""


@dataclass(frozen=True)
class PreemptRequest:
    """One preemption of a pass (see `JobLifecycle.preempt`)."""

    job_id: str
    reason: str
    fence: tuple[dict[str, Any], ...]
    details: Mapping[str, Any] = field(default_factory=dict)
    """What its history entry says besides (the job it gives way to, the nodes it held)."""


@dataclass(frozen=True)
class MoveBatch:
    """What `JobLifecycle.admit_all` or `preempt_all` did: each job's outcome (none for the
    jobs a failed fence check left unwritten), and the first error it met."""

    outcomes: Mapping[str, Outcome]
    error: Exception | None = None
    """A fence check that failed, or DynamoDB's refusal of a job's write (throttled)."""


APPLIED = Outcome(True)
_CANCEL_ATTEMPTS = 3


class JobLifecycle:
    def __init__(self, store: JobStore, *, clock: Callable[[], datetime] = utcnow) -> None:
        self.store = store
        self.clock = clock

    # -- the moves ------------------------------------------------------------------------
    def submit(
        self,
        job: Job,
        *,
        principal: str,
        rules: SubmissionRules,
        idempotency_key: str | None = None,
        request_hash: str = "",
    ) -> tuple[JobRecord, bool]:
        """A new Pending job, if the rules allow it (JobRejectedError otherwise). With an
        idempotency key, a repeat of the same request returns the first job (and False)."""
        check_submission(job, rules)
        reason = "pending: waiting for the next scheduling pass"
        record = JobRecord(
            job=job.model_copy(update={"status": JobStatus.PENDING, "nodes": [], "run": 0}),
            reason=reason,
            history=[self._entry(JobEvent.SUBMITTED, JobStatus.PENDING, reason, {"by": principal})],
            principal=principal,
        )
        return self.store.submit(record, idempotency_key=idempotency_key, request_hash=request_hash)

    def admit(
        self,
        job_id: str,
        *,
        nodes: list[str],
        pool: str,
        replicas: int,
        restart: bool,
        reason: str,
        fence: list[dict[str, Any]],
        pool_kind: str | None = None,
        **details: Any,
    ) -> Outcome:
        """Admitted onto `nodes`; a restart (the job ran before) starts a new run.
        `pool_kind`: hyperpod, eks-on-demand or eks-spot (what the views price it as)."""
        return self._admit(
            AdmitRequest(
                job_id, nodes, pool, replicas, restart, reason, tuple(fence), pool_kind, details
            )
        )

    def admit_all(self, requests: Sequence[AdmitRequest]) -> MoveBatch:
        """`admit` for every admission of a pass, in transactions of up to 100 actions (one
        call for many admissions, each fence check sent once a transaction). A job the batch
        could not move (it moved on, or its history is full) is moved alone, which says why;
        so is each job of a transaction DynamoDB refused otherwise (throttled), so that one
        job's refusal leaves the others standing. A failed fence check ends the batch. What
        was written stands either way, and the batch carries the first error, for the
        caller to raise once it has dispatched those."""
        return self._batch(
            "admission",
            [(r.job_id, self._admission_move(r), partial(self._admit, r)) for r in requests],
        )

    def preempt_all(self, requests: Sequence[PreemptRequest]) -> MoveBatch:
        """`preempt` for every job a pass preempts, in transactions of up to 100 actions, as
        `admit_all` writes admissions (D177)."""
        return self._batch(
            "preemption",
            [(r.job_id, self._preemption_move(r), partial(self._preempt, r)) for r in requests],
        )

    def _batch(
        self, what: str, moves: Sequence[tuple[str, BatchedMove, Callable[[], Outcome]]]
    ) -> MoveBatch:
        """The moves in shared transactions; each one the batch could not move, moved alone
        (its callable, which says why), unless a fence check failed."""
        error: Exception | None = None
        try:
            moved = self.store.transition_all([move for _, move, _ in moves])
        except BatchStoppedError as stopped:
            moved = stopped.written
            if stopped.checks_failed:
                error = FencedOutError(f"{what}: the pass's lease or quota changed")
        outcomes: dict[str, Outcome] = {
            job_id: APPLIED for job_id, _, _ in moves if job_id in moved
        }
        for job_id, _, alone in moves if error is None else ():
            if job_id in outcomes:
                continue
            try:
                outcomes[job_id] = alone()
            except REFUSED_ALONE as refused:
                error = error or refused
                if isinstance(refused, FencedOutError):
                    break
        return MoveBatch(outcomes, error)

    def _admit(self, request: AdmitRequest) -> Outcome:
        sets, add, event, entry = self._admission(request)
        return self._move(
            Move.ADMIT,
            request.job_id,
            Actor.SCHEDULER,
            event,
            request.reason,
            sets=sets,
            add=add,
            fence=list(request.fence),
            remove=("prefer_burst",),
            details=entry,
        )

    def _admission_move(self, request: AdmitRequest) -> BatchedMove:
        """`_admit`'s write, for a batch (`JobStore.transition_all`)."""
        rule = RULES[Move.ADMIT]
        sets, add, event, entry = self._admission(request)
        return BatchedMove(
            request.job_id,
            rule.expect,
            rule.to,
            self._entry(event, rule.to, request.reason, entry),
            sets=sets,
            remove=_removals(rule, ("prefer_burst",)),
            add=add,
            checks=request.fence,
        )

    def _admission(
        self, request: AdmitRequest
    ) -> tuple[dict[str, Any], dict[str, int] | None, JobEvent, dict[str, Any]]:
        """An admission's attributes, counters, history event and history details."""
        at = self.clock().isoformat()
        sets: dict[str, Any] = {
            "nodes": request.nodes,
            "pool": request.pool,
            "admitted_replicas": request.replicas,
            "started_at": at,
            "scaled_at": at,
        }
        entry = {"nodes": request.nodes, "pool": request.pool, "replicas": request.replicas}
        if request.pool_kind is not None:
            sets["pool_kind"] = request.pool_kind
            entry["pool_kind"] = request.pool_kind
        if not request.restart:
            sets["first_admitted_at"] = at
        add = {"restart_count": 1, "run": 1} if request.restart else None
        event = JobEvent.RESTARTED if request.restart else JobEvent.ADMITTED
        return sets, add, event, {**entry, **request.details}

    def start(self, job_id: str, *, nodes: list[str], pool: str | None) -> Outcome:
        return self._move(
            Move.START,
            job_id,
            Actor.SCHEDULER,
            JobEvent.DISPATCHED,
            _running_on(nodes, pool),
            details={"nodes": nodes},
        )

    def start_all(self, dispatched: Sequence[Job]) -> dict[str, Outcome]:
        """`start` for every job a pass dispatched, in transactions of up to 100 (one call,
        not one a job); a job the batch could not move (it moved on, or its history is full)
        is moved alone, which says why."""
        rule = RULES[Move.START]
        moves = [
            BatchedMove(
                job.job_id,
                rule.expect,
                rule.to,
                self._entry(
                    JobEvent.DISPATCHED,
                    rule.to,
                    _running_on(job.nodes, job.pool),
                    {"nodes": list(job.nodes)},
                ),
            )
            for job in dispatched
        ]
        moved = self.store.transition_all(moves)
        return {
            job.job_id: APPLIED
            if job.job_id in moved
            else self.start(job.job_id, nodes=list(job.nodes), pool=job.pool)
            for job in dispatched
        }

    def undispatch(self, job_id: str, error: str) -> Outcome:
        return self._move(
            Move.UNDISPATCH,
            job_id,
            Actor.SCHEDULER,
            JobEvent.REQUEUED,
            f"dispatch failed: {error}",
            sets={"nodes": []},
            remove=("admitted_replicas",),
        )

    def refuse(self, job_id: str, error: str) -> Outcome:
        """The cluster refused the job's run as invalid (422): no later dispatch of the same
        template would be accepted, so the job fails instead of going round the queue."""
        return self._move(
            Move.REFUSE,
            job_id,
            Actor.SCHEDULER,
            JobEvent.FINISHED,
            f"the cluster refused its run as invalid: {error}",
            sets={"nodes": [], "ended_at": self.clock().isoformat(), "run_time_s": 0.0},
            remove=("admitted_replicas",),
        )

    def _preempt(self, request: PreemptRequest) -> Outcome:
        return self.preempt(
            request.job_id, reason=request.reason, fence=list(request.fence), **request.details
        )

    def _preemption_move(self, request: PreemptRequest) -> BatchedMove:
        """`preempt`'s write, for a batch (`JobStore.transition_all`)."""
        rule = RULES[Move.PREEMPT]
        details = dict(request.details)
        return BatchedMove(
            request.job_id,
            rule.expect,
            rule.to,
            self._entry(JobEvent.PREEMPTED, rule.to, request.reason, details),
            sets=_back_in_queue(False, details),
            remove=_removals(rule, ("admitted_replicas",)),
            checks=request.fence,
        )

    def preempt(
        self,
        job_id: str,
        *,
        reason: str,
        fence: list[dict[str, Any]],
        prefer_burst: bool = False,
        **details: Any,
    ) -> Outcome:
        """Back to the queue for another job; `prefer_burst`: placed next on EKS burst
        capacity first (a hand-back, D121)."""
        return self._move(
            Move.PREEMPT,
            job_id,
            Actor.SCHEDULER,
            JobEvent.PREEMPTED,
            reason,
            sets=_back_in_queue(prefer_burst, details),
            remove=("admitted_replicas",),
            fence=fence,
            details=details,
        )

    def resize(
        self,
        job_id: str,
        *,
        nodes: list[str],
        by: Actor,
        reason: str,
        grown: bool,
        fence: list[dict[str, Any]] | None = None,
        protected_by: str | None = None,
        run: int | None = None,
        **details: Any,
    ) -> Outcome:
        """Shrink or grow a running job to `nodes` (one per replica); every resize is a new
        run (a checkpoint-and-restart at the new size, in place where the run allows it).
        Recovery resizes only a job it protects, from the run it saw (`protected_by`,
        `run`), and only down: growth takes quota, which only the scheduler's pass, fenced
        on the team's quota version, may grant."""
        if by is Actor.RECOVERY and grown:
            return Outcome(False, f"resize refused: recovery may only shrink job {job_id}")
        shrink_only = len(nodes) if by is Actor.RECOVERY else None
        condition, values, names = _guarded(protected_by, run, holds_at_least=shrink_only)
        return self._move(
            Move.RESIZE,
            job_id,
            by,
            JobEvent.GROWN if grown else JobEvent.SHRUNK,
            reason,
            sets={
                "nodes": nodes,
                "admitted_replicas": len(nodes),
                "scaled_at": self.clock().isoformat(),
            },
            add={"run": 1},
            fence=fence,
            condition=condition,
            values=values,
            names=names,
            details={"replicas": len(nodes), **details},
        )

    def cancel(self, job_id: str, *, principal: str) -> tuple[Outcome, JobRecord | None]:
        """Cancel from whatever non-terminal status the job is in (re-read if it moves
        meanwhile). A job with pods is left for the scheduler to stop (`stop_pending`)."""
        for _ in range(_CANCEL_ATTEMPTS):
            record = self.store.record(job_id)
            if record is None:
                return Outcome(False, f"no job {job_id}"), None
            status = record.job.status
            if status in TERMINAL_STATUSES:
                return Outcome(False, f"job {job_id} is already {status.value}"), record
            sets: dict[str, Any] = {"ended_at": self.clock().isoformat()}
            if record.job.nodes:
                sets["stop_pending"] = True
            outcome = self.store.transition(
                job_id,
                expect={status},
                status=JobStatus.CANCELLED,
                entry=self._entry(
                    JobEvent.CANCELLED,
                    JobStatus.CANCELLED,
                    f"cancelled by {principal}",
                    {"was": status.value},
                ),
                sets=sets,
                remove=("protected_by",),
            )
            if outcome is TransitionOutcome.APPLIED:
                return APPLIED, self.store.record(job_id)
        return Outcome(False, f"job {job_id} keeps changing; retry"), None

    def stopped(self, job_id: str, nodes: list[str]) -> Outcome:
        return self._move(
            Move.STOPPED,
            job_id,
            Actor.SCHEDULER,
            JobEvent.STOPPED,
            "pods stopped after cancellation",
            sets={"nodes": []},
            remove=("stop_pending", "admitted_replicas"),
            details={"nodes": nodes},
        )

    def finish(
        self,
        record: JobRecord,
        status: JobStatus,
        *,
        reason: str,
        **details: Any,
    ) -> Outcome:
        """The job's current run completed (Succeeded) or failed for good (Failed): its
        quota is free. Refused if the job has been restarted since (an older run ended)."""
        move, sets, details = self._ending(record, status, details)
        return self._move(
            move,
            record.job.job_id,
            Actor.RECONCILER,
            JobEvent.FINISHED,
            reason,
            sets=sets,
            remove=("admitted_replicas",),
            condition="#run_ = :run_",
            values={":run_": record.job.run},
            names={"#run_": "run"},
            details=details,
        )

    def finish_all(self, ends: Sequence[tuple[JobRecord, JobStatus, str]]) -> dict[str, Outcome]:
        """`finish` for every `(record, status, reason)` a pass concludes, in transactions of
        up to 100 (one call, not one a job, as `start_all`); a job the batch could not move
        (restarted since, moved on, or its history is full) is finished alone, which says
        why."""
        moves = []
        for record, status, reason in ends:
            move, sets, details = self._ending(record, status, {})
            rule = RULES[move]
            if Actor.RECONCILER not in rule.by:
                raise MoveNotAllowedError(f"{Actor.RECONCILER.value} may not {move.value} a job")
            moves.append(
                BatchedMove(
                    record.job.job_id,
                    rule.expect,
                    rule.to,
                    self._entry(JobEvent.FINISHED, rule.to, reason, details),
                    sets=sets,
                    remove=("admitted_replicas", "protected_by"),
                    condition="#run_ = :run_",
                    condition_values={":run_": record.job.run},
                    condition_names={"#run_": "run"},
                )
            )
        moved = self.store.transition_all(moves) if moves else set()
        return {
            record.job.job_id: APPLIED
            if record.job.job_id in moved
            else self.finish(record, status, reason=reason)
            for record, status, reason in ends
        }

    def _ending(
        self, record: JobRecord, status: JobStatus, details: dict[str, Any]
    ) -> tuple[Move, dict[str, Any], dict[str, Any]]:
        """How a run that ended moves its job: the move, what it sets, its history details."""
        if status not in (JobStatus.SUCCEEDED, JobStatus.FAILED):
            raise ValueError(f"{status} is not how a run ends")
        now = self.clock()
        first = record.first_admitted_at or record.started_at or now
        run_time = round(max((now - first).total_seconds(), 0.0), 3)
        move = Move.SUCCEED if status is JobStatus.SUCCEEDED else Move.FAIL
        sets = {"nodes": [], "ended_at": now.isoformat(), "run_time_s": run_time}
        history = {"run_time_s": run_time, "restarts": record.job.restart_count, **details}
        return move, sets, history

    def requeue(
        self,
        job_id: str,
        *,
        by: Actor,
        reason: str,
        protected_by: str | None = None,
        run: int | None = None,
        prefer_burst: bool = False,
        stalled: bool = False,
        paused: bool = False,
        **details: Any,
    ) -> Outcome:
        """Back to the queue, to resume from its latest checkpoint wherever the scheduler
        places it (on EKS burst capacity first with `prefer_burst`: recovery's `move`).
        Recovery requeues only jobs it protects; the reconciler only the run it saw lost,
        `stalled` (running, but no new checkpoint for too long: D94), or `paused` (before its
        instance group's scheduled patch: D101)."""
        condition, values, names = _guarded(protected_by, run)
        return self._move(
            Move.REQUEUE,
            job_id,
            by,
            (JobEvent.STALLED if stalled else JobEvent.PAUSED if paused else JobEvent.LOST)
            if by is Actor.RECONCILER
            else JobEvent.REQUEUED,
            reason,
            sets=_back_in_queue(prefer_burst, details),
            remove=("admitted_replicas",),
            condition=condition,
            values=values,
            names=names,
            details=details,
        )

    def protect(self, job_id: str, *, incident_id: str, node: str, **details: Any) -> Outcome:
        """Recovery of `incident_id` decides the job's next run: only while the job runs
        on the incident's node, and no other incident protects it already."""
        return self._move(
            Move.PROTECT,
            job_id,
            Actor.RECOVERY,
            JobEvent.PROTECTED,
            f"node {node} failed: recovery {details.get('strategy', '')} by incident {incident_id}",
            sets={"protected_by": incident_id},
            condition="contains(nodes, :node) AND (attribute_not_exists(protected_by) OR "
            "protected_by = :incident)",
            values={":node": node, ":incident": incident_id},
            details={"incident_id": incident_id, **details},
        )

    def restart(
        self,
        job_id: str,
        *,
        incident_id: str,
        run: int,
        nodes: list[str],
        reason: str,
        **details: Any,
    ) -> Outcome:
        """A new run of a job recovery protects, from the run recovery saw fail, on `nodes`
        (a spare or the repaired node in place of the failed one). The job stays protected
        until recovery has dispatched the run and releases it."""
        condition, values, names = _guarded(incident_id, run)
        return self._move(
            Move.RESTART,
            job_id,
            Actor.RECOVERY,
            JobEvent.RESTARTED,
            reason,
            sets={"nodes": nodes, "started_at": self.clock().isoformat()},
            add={"restart_count": 1, "run": 1},
            condition=condition,
            values=values,
            names=names,
            details={"nodes": nodes, "incident_id": incident_id, **details},
        )

    def release(self, job_id: str, *, incident_id: str, reason: str) -> Outcome:
        """Recovery is done with the job (restarted, resized, or resumed by HyperPod)."""
        return self._move(
            Move.RELEASE,
            job_id,
            Actor.RECOVERY,
            JobEvent.RELEASED,
            reason,
            remove=("protected_by",),
            condition="protected_by = :incident",
            values={":incident": incident_id},
            details={"incident_id": incident_id},
        )

    def relocate(self, job: Job, *, old: str, new: str, incident_id: str) -> Outcome:
        """HyperPod replaced `old` and restarted the job's auto-resume run on `new` (a
        replacement keeps the node's logical id): the same run, recorded where it now is.
        Whichever incident protects the job, if any: the replaced node's incident may not
        be the one that has it when several of its nodes fail at once. Two of its nodes'
        incidents may relocate it at the same moment: each write holds only while the job's
        nodes are the ones it read, and one that finds them changed reads them again (D97)."""
        outcome = Outcome(False, "not tried")
        for _ in range(RELOCATE_ATTEMPTS):
            outcome = self._move(
                Move.RELOCATE,
                job.job_id,
                Actor.RECOVERY,
                JobEvent.RELOCATED,
                f"HyperPod auto-resume moved it from {old} to its replacement {new} "
                f"(incident {incident_id})",
                sets={"nodes": [new if n == old else n for n in job.nodes]},
                condition="#run_ = :run_ AND nodes = :read",
                values={":run_": job.run, ":read": list(job.nodes)},
                names={"#run_": "run"},
                details={"old": old, "new": new, "incident_id": incident_id},
            )
            if outcome.applied:
                return outcome
            record = self.store.record(job.job_id)
            if record is None or record.job.run != job.run or old not in record.job.nodes:
                return outcome
            job = record.job
        return outcome

    def found_running_on(self, record: JobRecord, nodes: list[str]) -> Outcome:
        """The reconciler found the pods of the job's current run on `nodes`, not where it is
        recorded: HyperPod's auto-resume restarted them where kube-scheduler bound them (after
        a replacement, any free node of the job's instance group), or, for a team's own
        object, kube-scheduler placed it or its controller replaced a pod (D170, D179).
        Recorded where they are, while the job's run and nodes are still the ones the pass
        read."""
        job = record.job
        held = job.cluster_object
        placer = (
            f"kube-scheduler placed the team's own {held.kind}"
            if held is not None
            else "HyperPod auto-resume placed it"
        )
        return self._move(
            Move.RELOCATE,
            job.job_id,
            Actor.RECONCILER,
            JobEvent.RELOCATED,
            f"its run {job.run} runs on {', '.join(nodes)}, not on "
            f"{', '.join(job.nodes) or 'no node'} as recorded ({placer})",
            sets={"nodes": list(nodes)},
            condition="#run_ = :run_ AND nodes = :read AND attribute_not_exists(protected_by)",
            values={":run_": job.run, ":read": list(job.nodes)},
            names={"#run_": "run"},
            details={
                "old": sorted(set(job.nodes) - set(nodes)),
                "new": sorted(set(nodes) - set(job.nodes)),
            },
        )

    def record_checkpoint(
        self,
        job_id: str,
        checkpoint: Checkpoint,
        *,
        history: bool,
        record: JobRecord | None = None,
        slow_ratio: float = 0.0,
    ) -> bool:
        """The newest complete checkpoint; False when it is not newer than the last one.
        Any actor may report one: it changes no status. With the `record` the caller read,
        the job's pace gains the checkpoint and the slow flag follows it (D100): set, kept
        or cleared, its changes in the history; unless the run sends heartbeats, which
        then keep its pace (D165)."""
        entry = (
            self._entry(
                JobEvent.CHECKPOINT,
                None,
                f"checkpoint at step {checkpoint.step}",
                {"step": checkpoint.step, "uri": checkpoint.uri},
            )
            if history
            else None
        )
        if record is None or record.heartbeats() is not None:
            return self.store.record_checkpoint(job_id, checkpoint, entry, seen_at=self.clock())
        pace = next_pace(record.pace, record.job.run, checkpoint)
        was = record.slow if record.pace and record.pace[-1].run == record.job.run else None
        slow = verdict(pace, slow_ratio, checkpoint.node_step_seconds, was)
        if not self.store.record_checkpoint(
            job_id, checkpoint, entry, seen_at=self.clock(), pace=pace, slow=slow
        ):
            return False
        self._note_pace(job_id, checkpoint.step, was, slow)
        return True

    def record_heartbeat(
        self,
        record: JobRecord,
        *,
        run: int,
        step: int,
        at: datetime,
        node_step_seconds: dict[str, float] | None,
        slow_ratio: float,
    ) -> Outcome:
        """The training's heartbeat (D165): its step at `at`, which gives the job's pace from
        the run's first heartbeat on (in place of its checkpoints'), and the slow flag with
        it. Refused for a job that is not running, another run than the current one (a stale
        writer), or one not after the last heartbeat."""
        job = record.job
        if job.status is not JobStatus.RUNNING:
            return Outcome(False, f"job {job.job_id} is {job.status.value}, not Running")
        if run != job.run:
            return Outcome(False, f"run {run} is not the job's current run {job.run}")
        was = record.heartbeats()
        if was is not None and (at <= was.at or step < was.step):
            return Outcome(
                False, f"not after the last heartbeat (step {was.step} at {was.at.isoformat()})"
            )
        advanced = at if was is None or step > was.step else was.advanced_at
        beat = Heartbeat(
            run=run, step=step, at=at, advanced_at=advanced, node_step_seconds=node_step_seconds
        )
        # The run's first heartbeat starts its pace afresh: intervals between checkpoints
        # include their writes, and the two must not be mixed.
        pace = with_point(
            record.pace if was is not None else [], PacePoint(run=run, step=step, at=at)
        )
        slow_was = record.slow if record.pace and record.pace[-1].run == run else None
        # (the first has no interval to judge: a flag raised by checkpoints stands until then)
        slow = verdict(pace, slow_ratio, node_step_seconds, slow_was) if was else slow_was
        if not self.store.record_heartbeat(job.job_id, beat, pace, slow):
            return Outcome(False, f"job {job.job_id} changed meanwhile: report again")
        self._note_pace(job.job_id, step, slow_was, slow)
        return APPLIED

    def record_timings(
        self, record: JobRecord, checkpoint: Checkpoint, *, slow_ratio: float
    ) -> bool:
        """The per-node timings of the job's last checkpoint, reported after the scheduler
        found its marker in S3 first: kept, and the slow flag judged again with them. False
        when the last checkpoint is not that step (any more)."""
        if not checkpoint.node_step_seconds:
            return False
        was = record.slow
        slow = verdict(record.pace, slow_ratio, checkpoint.node_step_seconds, was) if was else None
        return self.store.record_timings(
            record.job.job_id, checkpoint.step, checkpoint.node_step_seconds, slow
        )

    def note_progress_trouble(self, record: JobRecord, trouble: ProgressTrouble | None) -> bool:
        """S3 refused the running job's checkpoint location again (`trouble`, its next read
        backed off), or read it again after refusals (None): written while the job's trouble
        is still the one the pass read. Its history says when the refusals start and when they
        end, not each retry (D139)."""
        was = record.progress_trouble
        entry = None
        if trouble is not None and was is None:
            entry = self._entry(
                JobEvent.CHECKPOINTS_UNREADABLE,
                None,
                f"its checkpoint location is unreadable, progress unknown: {trouble.error}",
                {"retry_at": trouble.retry_at.isoformat()},
            )
        elif trouble is None and was is not None:
            entry = self._entry(
                JobEvent.CHECKPOINTS_READABLE,
                None,
                f"its checkpoint location is readable again after {was.failures} refused "
                f"read(s) since {was.since:%Y-%m-%d %H:%M:%S} UTC",
                {"failures": was.failures},
            )
        return self.store.set_progress_trouble(record.job.job_id, trouble, was=was, entry=entry)

    def note_operator_restarts(
        self, record: JobRecord, run: int, count: int, kind: RunKind
    ) -> bool:
        """The cluster restarted the job's run `run` by itself: the HyperPod training
        operator (its restartCount is now `count`, D155), or the Job controller, which
        replaced a failed pod of a team's own Job (`count` failed in all, D179). Recorded
        with a history entry, while the record still holds what the pass read."""
        was = record.operator_restarts
        new = count - restarts_recorded(was, run, kind)
        why = (
            f"{new} more pod(s) of the team's Job failed in run {run} ({count} in all): a node "
            "fault or a crash of the training; the Job controller replaces a failed pod up to "
            "the Job's backoffLimit"
            if kind is RunKind.BATCH
            else f"the HyperPod training operator restarted run {run} ({new} more time(s), "
            f"{count} in all): after a resize HyperGuard made in place, a node fault "
            "(auto-resume) or a hang (log monitoring)"
        )
        entry = self._entry(
            JobEvent.OPERATOR_RESTARTED,
            None,
            why,
            {"run": run, "restart_count": count, "new": new},
        )
        return self.store.set_operator_restarts(
            record.job.job_id, OperatorRestarts(run=run, count=count), was=was, entry=entry
        )

    def newest_checkpoint(
        self,
        checkpoints: CheckpointStore,
        job: Job,
        fence: Fence,
        refused: RefusedCheckpoint | None = None,
    ) -> Checkpoint | None:
        """The checkpoint to resume `job` from: the newer of its recorded one and the newest
        complete one under its checkpoint location that contract v2 and `fence` allow, the
        latter recorded (with a history entry). A refusal newer than `refused` (the one last
        noted) is noted (D164). A location S3 will not list is the job's trouble, never the
        caller's: logged, and the recorded checkpoint stands (D138)."""
        reported = job.last_checkpoint
        if not job.checkpoint_location:
            return reported
        try:
            lookup = checkpoints.lookup(
                job.checkpoint_location,
                after=reported.step if reported else None,
                fence=fence,
            )
        except CheckpointLocationError as error:
            logger.warning(
                "checkpoint location unreadable",
                extra={"job_id": job.job_id, "error": str(error)},
            )
            return reported
        news = lookup.news(refused)
        if news is not None:
            self.note_checkpoint_refused(job.job_id, news)
        if lookup.checkpoint is None:
            return reported
        self.record_checkpoint(job.job_id, lookup.checkpoint, history=True)
        return lookup.checkpoint

    def note_checkpoint_refused(self, job_id: str, refused: RefusedCheckpoint) -> bool:
        """A checkpoint newer than any refused before that contract v2 says not to resume
        from (D164): recorded once, with a history entry that says why."""
        entry = self._entry(
            JobEvent.CHECKPOINT_REFUSED,
            None,
            f"checkpoint at step {refused.step} not resumed from: {refused.reason}",
            {"step": refused.step},
        )
        return self.store.set_checkpoint_refused(job_id, refused, entry=entry)

    def _note_pace(
        self, job_id: str, step: int, was: SlowFlag | None, slow: SlowFlag | None
    ) -> None:
        """History entries when a job turns slow and when it is back at its pace."""
        if slow is not None and was is None:
            self.store.append_history(job_id, self._entry(JobEvent.SLOW, None, slow.reason, {}))
        elif slow is None and was is not None:
            back = f"back to its pace at step {step} (was {was.reason})"
            self.store.append_history(job_id, self._entry(JobEvent.BACK_TO_PACE, None, back, {}))

    def set_reason(self, job_id: str, reason: str, *, replacing: str | None = None) -> bool:
        """Why a waiting job still waits (no history entry: it changes every pass). A pass
        passes the reason it read as `replacing`, so that a reason written since (a burst's
        rollback note) is never overwritten by one computed without it."""
        return self.store.set_reason(job_id, reason, expect=WAITING_STATUSES, replacing=replacing)

    def set_reasons(self, writes: Sequence[tuple[str, str, str]]) -> set[str]:
        """`set_reason` for each `(job_id, reason, replacing)` of a pass, batched in
        transactions (one call for up to 100 jobs); returns the jobs written, the others'
        reasons having changed since they were read."""
        return self.store.set_reasons(writes, expect=WAITING_STATUSES)

    # -- the one write ----------------------------------------------------------------------
    def _entry(
        self, event: JobEvent, status: JobStatus | None, reason: str, details: dict[str, Any]
    ) -> JobHistoryEntry:
        return JobHistoryEntry(
            at=self.clock(), event=event, status=status, reason=reason, details=details
        )

    def _move(
        self,
        move: Move,
        job_id: str,
        by: Actor,
        event: JobEvent,
        reason: str,
        *,
        sets: dict[str, Any] | None = None,
        remove: Collection[str] = (),
        add: dict[str, int] | None = None,
        fence: list[dict[str, Any]] | None = None,
        condition: str | None = None,
        values: dict[str, Any] | None = None,
        names: dict[str, str] | None = None,
        details: dict[str, Any] | None = None,
    ) -> Outcome:
        rule = RULES[move]
        if by not in rule.by:
            raise MoveNotAllowedError(f"{by.value} may not {move.value} a job")
        remove = _removals(rule, remove)
        outcome = self.store.transition(
            job_id,
            expect=rule.expect,
            status=rule.to,
            entry=self._entry(event, rule.to, reason, details or {}),
            sets=sets,
            remove=remove,
            add=add,
            checks=fence or None,
            condition=condition,
            condition_values=values,
            condition_names=names,
        )
        if outcome is TransitionOutcome.CHECK_FAILED:
            raise FencedOutError(f"{move.value} of {job_id}: the pass's lease or quota changed")
        if outcome is TransitionOutcome.APPLIED:
            return APPLIED
        return Outcome(False, self._why_refused(move, job_id, rule))

    def _why_refused(self, move: Move, job_id: str, rule: Rule) -> str:
        record = self.store.record(job_id)
        if record is None:
            return f"{move.value} refused: no job {job_id}"
        status = record.job.status
        if status not in rule.expect:
            expected = "/".join(sorted(s.value for s in rule.expect))
            return f"{move.value} refused: job {job_id} is {status.value}, not {expected}"
        return (
            f"{move.value} refused: job {job_id} moved on meanwhile (nodes "
            f"{', '.join(record.job.nodes) or 'none'}, run {record.job.run}, protected by "
            f"{record.protected_by or 'nobody'})"
        )


def _back_in_queue(prefer_burst: bool, details: dict[str, Any]) -> dict[str, Any]:
    """The SETs of a move back to the queue (a preemption, a requeue): its nodes released
    and, with `prefer_burst`, placed next on EKS burst capacity first, which its history
    entry's `details` then say too."""
    sets: dict[str, Any] = {"nodes": []}
    if prefer_burst:
        sets["prefer_burst"] = True
        details["prefer_burst"] = True
    return sets


def _running_on(nodes: Sequence[str], pool: str | None) -> str:
    return f"running on {len(set(nodes))} node(s) of pool {pool}"


def _guarded(
    protected_by: str | None, run: int | None, *, holds_at_least: int | None = None
) -> tuple[str | None, dict[str, Any] | None, dict[str, str] | None]:
    """The extra condition of a move that holds only while `protected_by` protects the job,
    it is still at run `run`, and/or it holds at least `holds_at_least` nodes."""
    clauses: list[str] = []
    values: dict[str, Any] = {}
    names: dict[str, str] = {}
    if holds_at_least is not None:
        clauses.append("size(nodes) >= :size")
        values[":size"] = holds_at_least
    if protected_by is not None:
        clauses.append("protected_by = :incident")
        values[":incident"] = protected_by
    if run is not None:
        clauses.append("#run_ = :run_")
        values[":run_"] = run
        names["#run_"] = "run"
    if not clauses:
        return None, None, None
    return " AND ".join(clauses), values, names or None


def _removals(rule: Rule, remove: Collection[str]) -> Collection[str]:
    """What a move removes: a job that waits or has ended holds no nodes for recovery to act
    on, so it is no longer protected by one."""
    return {*remove, "protected_by"} if rule.to in _UNPROTECTED else remove
