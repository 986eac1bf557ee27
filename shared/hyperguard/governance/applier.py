"""The scheduling pass's effects: the intents `governance.decide` returns, carried out, in
the order the service's docstring gives ("Order of effects, and why"), through the job
lifecycle (every job write a conditional write of `hyperguard.governance.jobs`), the cluster
gateway and the workflows. The applier decides nothing: it counts what was applied and what
was refused (`PassResult`), and makes the two guarded re-checks the plan leaves to it (the
jobs before an idle burst node is released, a burst's output before a HyperPod node it added
is).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from hyperguard.aws import AWS_ERRORS
from hyperguard.cluster.gateway import ClusterError, ClusterGateway, InvalidRunError
from hyperguard.cluster.kueue import priority_class_object, shared_objects, team_objects
from hyperguard.concurrency import IO_CONCURRENCY, bounded_map
from hyperguard.governance.intents import (
    Admission,
    AdmissionPlan,
    CapacityPlan,
    EnsureTeam,
    Growth,
    Leftover,
    Preemption,
    ReasonWrite,
    Reconcile,
    ReconcilePlan,
    Shrink,
    Verdict,
)
from hyperguard.governance.jobs import Actor, AdmitRequest, JobLifecycle, Outcome, PreemptRequest
from hyperguard.governance.stalls import refused
from hyperguard.governance.state import NO_CLASS_PRIORITY
from hyperguard.messaging import EventPublisher, PublishError, Workflows, announcement, resolved
from hyperguard.models import Incident, Job, JobStatus, utcnow
from hyperguard.models.cluster import BurstClaim, RunStatus
from hyperguard.models.governance import PriorityClass
from hyperguard.models.jobs import held_nodes
from hyperguard.observability import logger
from hyperguard.store.checkpoints import CheckpointStore, Fence
from hyperguard.store.incidents import IncidentStore
from hyperguard.store.jobs import JobStore
from hyperguard.store.nodes import NodeStore, mark_given_back
from hyperguard.store.teams import Lease, TeamStore

UNANNOUNCED: tuple[type[Exception], ...] = (PublishError, *AWS_ERRORS)
"""What a publish may fail with: the bus's refusal of an entry, or the call's own failure."""
ENDS = {Verdict.SUCCEEDED: JobStatus.SUCCEEDED, Verdict.FAILED: JobStatus.FAILED}
"""The verdicts that end a job, and the status each ends it in."""


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
    relocated: list[str] = field(default_factory=list)
    """Auto-resume jobs recorded where HyperPod restarted their pods (D136)."""
    unreadable: list[str] = field(default_factory=list)
    """Running jobs whose checkpoint location S3 would not list this pass (D138)."""
    operator_restarts: list[str] = field(default_factory=list)
    """Running jobs the HyperPod training operator restarted since the last pass (D155)."""
    adopted: list[str] = field(default_factory=list)
    """Jobs a team applied to its namespace, recorded this pass (D170)."""
    refused_held: list[str] = field(default_factory=list)
    """Held Workloads (namespace/name) whose check this pass rejected (D170)."""
    slow: int = 0
    """Running jobs flagged slow (D100), as the pass read them."""
    bursts: list[str] = field(default_factory=list)
    released: list[str] = field(default_factory=list)
    moved_back: list[str] = field(default_factory=list)
    handed_back: list[str] = field(default_factory=list)
    """Jobs moved to burst capacity to give HyperPod back to work they preempted (D121)."""
    spares: int = 0
    pending: int = 0
    pending_by_team: dict[str, int] = field(default_factory=dict)
    conflicts: int = 0
    writes: int = 0
    duration_s: float = 0.0

    def absorb(self, part: PassResult) -> None:
        """Add what a part of the pass did (`PassApplier.together`): its lists and counts."""
        for name, value in vars(part).items():
            if isinstance(value, list):
                getattr(self, name).extend(value)
        self.writes += part.writes
        self.conflicts += part.conflicts

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
            "relocated": len(self.relocated),
            "unreadable": len(self.unreadable),
            "operator_restarts": len(self.operator_restarts),
            "adopted": len(self.adopted),
            "refused_held": len(self.refused_held),
            "slow": self.slow,
            "bursts": len(self.bursts),
            "released": len(self.released),
            "moved_back": len(self.moved_back),
            "handed_back": len(self.handed_back),
            "spares": self.spares,
            "pending": self.pending,
            "conflicts": self.conflicts,
        }


QUEUES_RECHECK = timedelta(seconds=60)
"""How long a scheduler process trusts the Kueue objects it ensured before it checks them
again at a dispatch (D71): a pass every few seconds would otherwise read five objects per
team it dispatches for, every pass."""
CLUSTER_OBJECTS = "*"
"""The prefix of `queues_ensured`'s key for the cluster-wide objects, which names the
priority classes they were made from, so that a changed config is ensured at its first
dispatch (no team name holds `*`)."""


def cluster_objects_key(classes: Iterable[PriorityClass]) -> str:
    return CLUSTER_OBJECTS + ",".join(f"{pc.name}={pc.weight}" for pc in classes)


def _only_preempted(
    moves: Iterable[list[Preemption | Shrink]],
) -> tuple[list[Preemption], list[list[Preemption | Shrink]]]:
    """Each job's moves split: the jobs only preempted, and the others' moves."""
    preempted: list[Preemption] = []
    mixed: list[list[Preemption | Shrink]] = []
    for job_moves in moves:
        match job_moves:
            case [Preemption() as only]:
                preempted.append(only)
            case _:
                mixed.append(job_moves)
    return preempted, mixed


@dataclass
class PassApplier:
    """One pass's effects, under its lease."""

    lifecycle: JobLifecycle
    jobs: JobStore
    teams: TeamStore
    gateway: ClusterGateway
    lease: Lease
    result: PassResult
    bursts: Workflows | None = None
    incidents: IncidentStore | None = None
    """Where a stall's incident is recorded (D117); None: nowhere."""
    publisher: EventPublisher | None = None
    """Where it is announced; None: not announced."""
    nodes: NodeStore | None = None
    """The inventory, where a node given back is marked released (D208); None: not marked."""
    checkpoints: CheckpointStore | None = None
    """Where a resumed job's newest checkpoint is looked up at its dispatch (D209); None: it
    resumes from the one its record holds."""
    priority_classes: list[PriorityClass] = field(default_factory=list)
    queues_ensured: dict[str, datetime] = field(default_factory=dict)
    """The scheduler process's: when it last ensured each team's Kueue objects, and under
    `cluster_objects_key` the cluster-wide ones; the applier adds. A team in it has had its
    objects ensured since the cold start (D98)."""
    now: datetime = field(default_factory=utcnow)
    retired_classes: set[str] = field(default_factory=set)
    """Classes jobs name that the config no longer has, ensured by this pass."""
    io_concurrency: int = IO_CONCURRENCY
    """How many independent moves of the pass are in flight at most (D162)."""
    ensuring: threading.Lock = field(default_factory=threading.Lock)
    """Held while Kueue objects are ensured (shared by the parts of `together`)."""

    # -- phase 1 --------------------------------------------------------------------------
    def reconcile(self, plan: ReconcilePlan) -> list[str]:
        """Cancelled jobs' pods stopped, new checkpoints recorded, verdicts written (and
        their runs stopped), orphaned runs stopped, auto-resume jobs recorded where their
        pods run, jobs paused for a patch: the jobs whose status or nodes changed."""
        for cancelled in plan.cancelled:
            # `stopped` (which clears `stop_pending`) only once the cluster stopped the pods:
            # until then the job stays on the `Live` index and every pass tries again.
            if self.stop(cancelled.job_id):
                self.count(self.lifecycle.stopped(cancelled.job_id, list(cancelled.nodes)))
        self.note_progress(plan)
        ends = [v for v in plan.verdicts if v.verdict in ENDS]
        ended = self.lifecycle.finish_all(
            [(v.record, ENDS[v.verdict], v.reason) for v in ends]
        )  # together, in transactions of up to 100 (D116)
        moved = [v.job_id for v in plan.verdicts if self.conclude(v, ended.get(v.job_id))]
        for orphan in plan.orphans:
            self.stop(orphan.job_id, before_run=orphan.before_run)
        for where in plan.relocations:
            if self.count(self.lifecycle.found_running_on(where.record, list(where.nodes))):
                self.result.relocated.append(where.record.job.job_id)
        paused = [v.job_id for v in plan.pauses if self.conclude(v)]
        left = [left.record.job.job_id for left in plan.leftovers if self.pick_up(left)]
        return moved + self.result.relocated + paused + left

    def note_progress(self, plan: ReconcilePlan) -> None:
        """New checkpoints recorded; progress troubles, refused checkpoints and operator
        restarts noted."""
        for found in plan.checkpoints:
            self.lifecycle.record_checkpoint(
                found.record.job.job_id,
                found.checkpoint,
                history=True,
                record=found.record,
                slow_ratio=found.slow_ratio,
            )
            self.result.writes += 1
        for noted in plan.troubles:
            if self.lifecycle.note_progress_trouble(noted.record, noted.trouble):
                self.result.writes += 1
        for refusal in plan.refusals:
            if self.lifecycle.note_checkpoint_refused(refusal.job_id, refusal.refused):
                self.result.writes += 1
        for restarted in plan.restarts:
            if self.lifecycle.note_operator_restarts(
                restarted.record, restarted.run, restarted.count, restarted.kind
            ):
                self.result.writes += 1
                self.result.operator_restarts.append(restarted.record.job.job_id)

    def pick_up(self, left: Leftover) -> bool:
        """A job an earlier pass left Admitted: Running where its run is, else Pending."""
        job = left.record.job
        if not left.dispatched:
            why = "the pass that admitted it ended before it created the run"
            return self.count(self.lifecycle.undispatch(job.job_id, why))
        if not self.count(self.lifecycle.start(job.job_id, nodes=list(job.nodes), pool=job.pool)):
            return False
        self.result.dispatched.append(job.job_id)
        return True

    def conclude(self, verdict: Reconcile, written: Outcome | None = None) -> bool:
        """The verdict written, unless `written` says how its write went already (its runs
        stopped unless it succeeded); False if refused."""
        job = verdict.record.job
        if written is not None:
            outcome = written
        elif verdict.verdict in ENDS:
            outcome = self.lifecycle.finish(
                verdict.record, ENDS[verdict.verdict], reason=verdict.reason
            )
        else:
            outcome = self.requeue(verdict)
        if not self.count(outcome):
            return False
        self.tally(verdict.verdict).append(job.job_id)
        if verdict.stops_runs:
            self.stop(job.job_id)
        return True

    def requeue(self, verdict: Reconcile) -> Outcome:
        """The job back to the queue. A stall's incident (D117) is written first, as
        requeued, so that a pass that dies between the two writes records it once and
        requeues on its next run. If the requeue is refused, the incident this pass opened
        says so; one an earlier pass opened is left as it is (its requeue may be the one that
        applied). Announced when this pass opened it or requeued its job."""
        incident = verdict.incident
        if incident is None or self.incidents is None:
            return self.requeue_job(verdict)
        opened = self.incidents.record_job_incident(incident)
        self.result.writes += 1
        outcome = self.requeue_job(verdict, incident_id=incident.incident_id)
        if not outcome.applied and opened:
            incident = refused(incident, outcome.why)
            self.incidents.update(
                incident.incident_id, resolution=incident.resolution, jobs=incident.jobs
            )
            self.result.writes += 1
        if outcome.applied or opened:
            self.announce(incident)
        return outcome

    def requeue_job(self, verdict: Reconcile, **details: Any) -> Outcome:
        job = verdict.record.job
        return self.lifecycle.requeue(
            job.job_id,
            by=Actor.RECONCILER,
            run=job.run,
            reason=verdict.reason,
            stalled=verdict.verdict is Verdict.STALLED,
            paused=verdict.verdict is Verdict.PAUSED,
            **details,
        )

    def announce(self, incident: Incident) -> None:
        """IncidentOpened and IncidentResolved of a stall's incident, best effort: the
        incident is kept whether or not the bus takes them."""
        if self.publisher is None:
            return
        try:
            self.publisher.publish("IncidentOpened", announcement(incident))
            self.publisher.publish("IncidentResolved", resolved(incident))
        except UNANNOUNCED as error:
            logger.warning(
                "stall incident not announced",
                extra={"incident_id": incident.incident_id, "error": str(error)},
            )

    def tally(self, verdict: Verdict) -> list[str]:
        """The result's list of the jobs given this verdict."""
        return {
            Verdict.SUCCEEDED: self.result.succeeded,
            Verdict.FAILED: self.result.failed,
            Verdict.LOST: self.result.lost,
            Verdict.STALLED: self.result.stalled,
            Verdict.PAUSED: self.result.paused,
        }[verdict]

    # -- phase 2 --------------------------------------------------------------------------
    def admit(self, plan: AdmissionPlan) -> None:
        """Team objects first; then the victims give way: the jobs only preempted written in
        transactions of up to 100 actions and their runs stopped together (D177), each other
        job's moves in the plan's order, different jobs' together; then every elastic job
        shrunk is resized on the cluster once, to the size last written, before any admission
        is dispatched; then the admissions written (transactions of up to 100 actions, D172),
        then the admitted jobs dispatched together; then the dispatched jobs marked Running
        (transactions of up to 100); then elastic growth, together.

        "Together": at most `io_concurrency` at a time (D162). Each write is conditional and
        fenced by the lease on its own job, so one refused or throttled leaves the others
        standing and is planned again by the next pass; the pass raises the first such error
        once what was written is dispatched and marked Running. A job shrunk for an
        admission that is then refused, or that a lost lease stops, is resized all the same
        (its smaller size is written): left as it was, its run would be swept as older than
        the job's and the job requeued."""
        self.result.spares, self.result.slow = plan.spares, plan.slow
        self.result.unplaced.extend(plan.unplaced)
        self.ensure_running_teams(plan.ensure_teams)
        moves: dict[str, list[Preemption | Shrink]] = {}
        for admission in plan.admissions:
            for victim in admission.victims:
                moves.setdefault(victim.job_id, []).append(victim)
        preempted, mixed = _only_preempted(moves.values())
        shrunk: dict[str, Job] = {}
        try:
            self.preempt_all(preempted)
            for victims, gave_way in zip(
                mixed, self.together(PassApplier.give_way_all, mixed), strict=True
            ):
                for victim, moved in zip(victims, gave_way, strict=True):
                    if moved and isinstance(victim, Shrink):
                        shrunk[victim.job.job_id] = victim.job
        finally:  # also when a lost lease ends the pass: the cluster follows the record
            self.together(PassApplier.resize_on_cluster, shrunk.values())
        batch = self.lifecycle.admit_all([self.admit_request(a) for a in plan.admissions])
        admitted: list[Job] = []
        for admission in plan.admissions:
            outcome = batch.outcomes.get(admission.job.job_id)
            if outcome is not None and self.count(outcome):
                admitted.append(admission.job)
                self.result.admitted.append(admission.job.job_id)
        dispatched: list[Job] = []
        try:
            for job, sent in zip(
                admitted, self.together(PassApplier.dispatch, admitted), strict=True
            ):
                if sent:
                    dispatched.append(job)
        finally:  # what was dispatched runs, whatever else the pass met
            if dispatched:
                for job_id, outcome in self.lifecycle.start_all(dispatched).items():
                    if self.count(outcome):
                        self.result.dispatched.append(job_id)
        if batch.error is not None:
            raise batch.error
        self.together(PassApplier.grow, plan.growths)

    def together[T, R](self, act: Callable[[PassApplier, T], R], items: Iterable[T]) -> list[R]:
        """`act` on each item, `io_concurrency` at a time, each with an applier of its own
        whose result is added to this one's in the items' order (also when one raised)."""
        work = list(items)
        parts = [replace(self, result=PassResult()) for _ in work]
        try:
            return bounded_map(
                lambda pair: act(*pair),
                list(zip(parts, work, strict=True)),
                limit=self.io_concurrency,
            )
        finally:
            for part in parts:
                self.result.absorb(part.result)

    def admit_request(self, admission: Admission) -> AdmitRequest:
        """The admission's write, fenced by the pass's lease and the team's quota version."""
        job = admission.job
        return AdmitRequest(
            job.job_id,
            nodes=list(job.nodes),
            pool=str(job.pool),
            replicas=admission.replicas,
            restart=admission.restart,
            reason=admission.reason,
            fence=(
                *self.fence,
                self.teams.quota_version_check(job.team, admission.quota_version),
            ),
            pool_kind=admission.pool_kind,
            details={"hourly_price": admission.hourly_price, "hourly_cost": admission.hourly_cost},
        )

    def preempt_all(self, victims: list[Preemption]) -> None:
        """Jobs that give way by preemption only: written Preempted together (fenced, in
        transactions of up to 100 actions), then the runs of those written stopped together;
        the first error (a lost lease, a refused write) raised after."""
        if not victims:
            return
        batch = self.lifecycle.preempt_all(
            [
                PreemptRequest(
                    v.job_id,
                    v.reason,
                    tuple(self.fence),
                    {"for_job": v.for_job, "nodes": list(v.nodes)},
                )
                for v in victims
            ]
        )
        moved = [
            v
            for v in victims
            if (outcome := batch.outcomes.get(v.job_id)) is not None and self.count(outcome)
        ]
        self.result.preempted.extend(v.job_id for v in moved)
        self.together(PassApplier.stop_preempted, moved)
        if batch.error is not None:
            raise batch.error

    def stop_preempted(self, victim: Preemption) -> bool:
        return self.stop(victim.job_id, runs=victim.runs)

    def give_way_all(self, victims: list[Preemption | Shrink]) -> list[bool]:
        """One job's moves, in the plan's order: a job several admissions shrink is written
        smaller each time."""
        return [self.give_way(victim) for victim in victims]

    def give_way(self, victim: Preemption | Shrink) -> bool:
        """A victim preempted (written, then its runs stopped) or shrunk (written; resized
        on the cluster once the admission it serves is): False if the write was refused."""
        if isinstance(victim, Shrink):
            return self.resize(
                victim.job, victim.reason, grown=False, fence=self.fence, for_job=victim.for_job
            )
        preempted = self.count(
            self.lifecycle.preempt(
                victim.job_id,
                reason=victim.reason,
                fence=self.fence,
                for_job=victim.for_job,
                nodes=list(victim.nodes),
            )
        )
        if preempted:
            self.result.preempted.append(victim.job_id)
            self.stop_preempted(victim)
        return preempted

    def grow(self, growth: Growth) -> None:
        fence = [
            *self.fence,
            self.teams.quota_version_check(growth.job.team, growth.quota_version),
        ]
        if self.resize(growth.job, growth.reason, grown=True, fence=fence):
            self.resize_on_cluster(growth.job)

    def resize(
        self, job: Job, reason: str, *, grown: bool, fence: list[dict[str, Any]], **details: Any
    ) -> bool:
        """The job resized to `job.nodes` (a new run). Growth takes quota, so it is fenced
        like an admission: also on the team's quota version."""
        resized = self.count(
            self.lifecycle.resize(
                job.job_id,
                nodes=list(job.nodes),
                by=Actor.SCHEDULER,
                reason=reason,
                grown=grown,
                fence=fence,
                **details,
            )
        )
        if resized:
            self.result.resized.append(job.job_id)
        return resized

    def resize_on_cluster(self, job: Job) -> None:
        """Elastic training changes size by checkpointing and restarting at the new size."""
        try:
            self.gateway.resize(job, list(job.nodes))
        except ClusterError as exc:
            logger.error(
                "resize failed on the cluster", extra={"job_id": job.job_id, "error": str(exc)}
            )

    def dispatch(self, job: Job) -> bool:
        """The job's run created on the cluster (True); one the cluster refuses puts the job
        back to Pending with the cluster's error, and has the team's objects ensured again
        before its next dispatch (a missing namespace or RoleBinding is a refusal). A run the
        API server refuses as invalid fails the job: it would be refused every time. A job
        that ran before resumes from its newest checkpoint, looked up in S3 now (D209)."""
        try:
            self.ensure_queues(job.team, job.priority_class)
            self.gateway.dispatch(self.resumed(job), list(job.nodes))
        except InvalidRunError as exc:
            self.count(self.lifecycle.refuse(job.job_id, str(exc)))
            return False
        except ClusterError as exc:
            self.queues_ensured.pop(job.team, None)
            self.count(self.lifecycle.undispatch(job.job_id, str(exc)))
            return False
        return True

    def resumed(self, job: Job) -> Job:
        """`job` with the checkpoint its new run resumes from (D209). The pass read the
        checkpoints of running jobs only, and a job's last run may have completed a newer one
        after the pass that stopped it read them (its pods train until they stop, and its
        report may come late), so a job that ran before is looked up again. The lookup's
        fence has no start time: the new run has no pod yet, so no run of the job can be a
        stale writer to it."""
        if self.checkpoints is None or job.run == 0:
            return job
        fence = Fence(job.job_id, job.run, began=None)
        newest = self.lifecycle.newest_checkpoint(self.checkpoints, job, fence)
        if newest == job.last_checkpoint:
            return job
        return job.model_copy(update={"last_checkpoint": newest})

    def ensure_running_teams(self, teams: Iterable[EnsureTeam]) -> None:
        """A cluster error leaves the rest to the next pass."""
        for team in teams:
            try:
                self.ensure_queues(team.team, team.priority_class)
            except ClusterError as error:
                logger.warning(
                    "team objects not ensured", extra={"team": team.team, "error": str(error)}
                )
                return

    def _recently_ensured(self, key: str) -> bool:
        at = self.queues_ensured.get(key)
        return at is not None and self.now - at < QUEUES_RECHECK

    def ensure_queues(self, team: str, priority_class: str | None) -> None:
        """The Kueue objects a run of `team` (of `priority_class`) needs before it is
        dispatched: a team's (and the
        cluster-wide ones) unless this process ensured them less than QUEUES_RECHECK ago, so
        that a missing or changed one is put right by a dispatch within that time (D71). A
        class the job names that the config no longer has gets a WorkloadPriorityClass
        ranked below every class, as the engine ranks the job: without one Kueue would keep
        the run suspended for good. One dispatch at a time ensures (dispatches run together):
        the others then find them fresh. Raises ClusterError."""
        with self.ensuring:
            self._ensure_queues(team, priority_class)

    def _ensure_queues(self, team: str, priority_class: str | None) -> None:
        team_fresh = self._recently_ensured(team)
        shared_key = cluster_objects_key(self.priority_classes)
        shared_fresh = self._recently_ensured(shared_key)
        manifests = [] if team_fresh else team_objects(team)
        if not shared_fresh:
            manifests = [*shared_objects(self.priority_classes), *manifests]
        known = {pc.name for pc in self.priority_classes} | self.retired_classes
        retired = priority_class if priority_class not in (None, *known) else None
        if retired is not None:
            why = f"HyperGuard priority class {retired}, no longer configured: below every class"
            manifests.append(priority_class_object(retired, NO_CLASS_PRIORITY, why))
        if not manifests:
            return
        outcomes = self.gateway.ensure_queues(manifests)
        self.queues_ensured[team] = self.now
        if not shared_fresh:
            self.queues_ensured[shared_key] = self.now
        if retired is not None:
            self.retired_classes.add(retired)
        changed = {key: outcome for key, outcome in outcomes.items() if outcome != "unchanged"}
        if changed:
            logger.info("kueue objects ensured", extra={"team": team, "changed": changed})

    # -- phase 3 --------------------------------------------------------------------------
    def scale(self, plan: CapacityPlan) -> None:
        """Scale-in (idle marks, then releases), moves back, hand-backs, bursts, and last
        the reasons of the jobs that wait."""
        for mark in plan.marks:
            try:
                self.gateway.mark_burst_node_idle(mark.claim, mark.since)
            except ClusterError as error:
                logger.warning(
                    "idle mark failed", extra={"claim": mark.claim.name, "error": str(error)}
                )
        self.release(plan.releases)
        for move in plan.move_backs:
            moved = self.lifecycle.preempt(
                move.job_id, reason=move.reason, fence=self.fence, nodes=list(move.nodes)
            )
            if self.count(moved):
                self.result.moved_back.append(move.job_id)
                self.stop(move.job_id)
        for hand_back in plan.hand_backs:
            moved = self.lifecycle.preempt(
                hand_back.job_id,
                reason=hand_back.reason,
                fence=self.fence,
                prefer_burst=True,
                nodes=list(hand_back.nodes),
            )
            if self.count(moved):
                self.result.handed_back.append(hand_back.job_id)
                self.stop(hand_back.job_id)
        reasons = {w.job_id: w for w in plan.reasons}
        for start in plan.bursts:
            name = start.request.burst_id
            try:
                self.bursts.ensure_started(  # type: ignore[union-attr]
                    name, {"request": start.request.model_dump(mode="json", by_alias=True)}
                )
            except Exception as error:  # the next pass starts it again
                logger.warning("burst not started", extra={"burst_id": name, "error": str(error)})
                for job_id in start.job_ids:
                    reasons.pop(job_id, None)
                reasons |= {w.job_id: w for w in start.unstarted}
                continue
            self.result.bursts.append(name)
        self.result.pending = plan.pending
        self.result.pending_by_team = dict(plan.pending_by_team)
        self.write_reasons(reasons.values())

    def release(self, claims: Iterable[BurstClaim]) -> None:
        """Idle burst nodes given back, unless a job holds one when the jobs are read once
        more (a recovery may have restarted a job there since the snapshot: a hot spare);
        a HyperPod node only once the burst its label names says it added it."""
        release = list(claims)
        if not release:
            return
        try:
            now_held = held_nodes(r.job for r in self.jobs.active())
        except AWS_ERRORS as error:  # the next pass looks again
            logger.warning("jobs unreadable", extra={"error": str(error)})
            return
        added: dict[str, frozenset[str]] = {}
        for claim in release:
            if claim.instance_id in now_held:
                continue
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
                continue
            mark_given_back(self.nodes, claim, self.now)

    def nodes_added_by(self, burst_id: str) -> frozenset[str]:
        """The NodeLogicalIds the burst's execution added to HyperPod, from its output (the
        node's label alone could be anyone's who may patch nodes, a kubelet's on its own
        node among them); none when it did not succeed or cannot be read."""
        try:
            output = self.bursts.succeeded_output(burst_id)  # type: ignore[union-attr]
        except AWS_ERRORS as error:  # the next pass looks again
            logger.warning("burst unreadable", extra={"burst_id": burst_id, "error": str(error)})
            return frozenset()
        added = (output or {}).get("added")
        return (
            frozenset(a for a in added if isinstance(a, str))
            if isinstance(added, list)
            else frozenset()
        )

    def write_reasons(self, writes: Collection[ReasonWrite]) -> None:
        """The waiting jobs' reasons, batched; one changed since the snapshot is a conflict
        (the next pass writes it anew)."""
        if not writes:
            return
        written = self.lifecycle.set_reasons([(w.job_id, w.reason, w.replacing) for w in writes])
        self.result.writes += len(written)
        self.result.conflicts += len(writes) - len(written)

    # -- the moves' bookkeeping --------------------------------------------------------------
    @property
    def fence(self) -> list[dict[str, Any]]:
        return [self.teams.lease_check(self.lease)]

    def count(self, outcome: Outcome) -> bool:
        self.result.writes += 1
        if not outcome:
            self.result.conflicts += 1
            logger.info("job move refused", extra={"why": outcome.why})
        return outcome.applied

    def stop(
        self,
        job_id: str,
        *,
        before_run: int | None = None,
        runs: Sequence[RunStatus] | None = None,
    ) -> bool:
        """Delete the job's runs (those below `before_run`, if given; `runs`: as the snapshot
        read them); False when the cluster refused, which the next pass's orphan sweep (or
        cancelled-job stop) retries. A run the snapshot did not have is the orphan sweep's."""
        try:
            self.gateway.stop_job(job_id, before_run=before_run, runs=runs)
        except ClusterError as exc:
            logger.error("stop_job failed", extra={"job_id": job_id, "error": str(exc)})
            return False
        self.result.stopped.append(job_id)
        return True
