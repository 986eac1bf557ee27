"""What recovery does with the jobs of a failed node, decided apart from doing it (D111).

ProtectJobs reads what its decision needs once (`ProtectionSnapshot`: the incident, the
node, its jobs with their latest checkpoints, the pool's spares, the strategy estimates'
component times) and `plan_protection` returns one `Protection` per job to protect: the
strategy, the spare it takes, the checkpoint it resumes from. Drain and ResumeJobs carry a
job's plan out: `carry_out` turns the plan, the job as it is now and which of its next
nodes are out of service into one intent (`LeaveToAutoResume`, `Restart`, `Shrink`,
`Requeue`) that `hyperguard.recovery.steps` applies through the job lifecycle and the
cluster gateway. Nothing here reads or writes anything.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from hyperguard.models import Checkpoint, Incident, Job, Node, ProtectedJob, Repair
from hyperguard.models.jobs import HOLDING_STATUSES, AppliedStrategy
from hyperguard.models.records import JobRecord
from hyperguard.policies.burst import allows_burst
from hyperguard.policies.repair import ComponentTimes
from hyperguard.recovery.strategy import Choice, Situation, choose

# -- ProtectJobs --------------------------------------------------------------------------


def protectable(incident: Incident, active: Iterable[JobRecord]) -> list[Job]:
    """The jobs on the incident's node this incident may protect, by job id: those holding
    nodes, and not another incident's already."""
    return [
        record.job
        for record in sorted(active, key=lambda record: record.job.job_id)
        if incident.instance_id in record.job.nodes
        and record.job.status in HOLDING_STATUSES
        and record.protected_by in (None, "", incident.incident_id)
    ]


@dataclass(frozen=True, slots=True)
class JobToProtect:
    job: Job
    checkpoint: Checkpoint | None
    """The newer of the reported checkpoint and the newest complete one in storage."""


@dataclass(frozen=True, slots=True)
class ProtectionSnapshot:
    """What ProtectJobs read, once, before deciding."""

    incident: Incident
    round: int
    """The diagnosis the plans belong to."""
    repair: Repair
    """The repair decided for the node."""
    node: Node | None
    """The incident's node as the inventory has it (None: no longer known)."""
    jobs: tuple[JobToProtect, ...]
    """`protectable`'s jobs, in that order."""
    spares: tuple[str, ...]
    """The pool's idle healthy nodes a job may move to, in the order they are handed out."""
    times: ComponentTimes
    source: str
    """Where `times` come from (the policy's figures, or this deployment's incidents)."""
    now: datetime


@dataclass(frozen=True, slots=True)
class Protection:
    """Protect `job` under the incident with `choice`'s strategy (on `spare` for a hot
    spare); once the job lifecycle accepts, `planned` is its entry in the incident's plan."""

    job: Job
    choice: Choice
    spare: str | None
    checkpoint: Checkpoint | None
    checkpoint_age_s: float | None
    """How old the checkpoint every strategy resumes from is: the work lost whichever
    strategy is chosen, so recorded for the operator rather than weighed in the choice."""
    round: int

    def planned(self) -> ProtectedJob:
        return ProtectedJob(
            job_id=self.job.job_id,
            team=self.job.team,
            strategy=self.choice.strategy.value,
            why=self.choice.why,
            lost_gpu_minutes=self.choice.lost_gpu_minutes,
            checkpoint_step=self.checkpoint.step if self.checkpoint else None,
            checkpoint_uri=self.checkpoint.uri if self.checkpoint else None,
            nodes=self.job.nodes,
            spare=self.spare,
            run=self.job.run,
            round=self.round,
        )


def plan_protection(snapshot: ProtectionSnapshot) -> list[Protection]:
    """Each job's strategy, in job order: a hot spare goes to the first job that chooses
    one, and a job deciding after the spares ran out sees none (a spare is handed out even
    if the lifecycle then refuses its job, as a spare once offered is not offered twice)."""
    incident, node = snapshot.incident, snapshot.node
    returns = (
        snapshot.repair is not Repair.DRAIN and node is not None and node.platform == "hyperpod"
    )
    spares = list(snapshot.spares)
    planned: list[Protection] = []
    for candidate in snapshot.jobs:
        job = candidate.job
        choice = choose(
            Situation(
                job=job,
                replicas_on_node=job.nodes.count(incident.instance_id),
                repair=snapshot.repair,
                node_returns=returns,
                spare=bool(spares),
                template_allows_burst=allows_burst(job.template),
            ),
            snapshot.times,
            snapshot.source,
        )
        spare = spares.pop(0) if choice.strategy is AppliedStrategy.HOT_SPARE else None
        checkpoint = candidate.checkpoint
        age = (
            round((snapshot.now - checkpoint.completed_at).total_seconds(), 1)
            if checkpoint
            else None
        )
        planned.append(Protection(job, choice, spare, checkpoint, age, snapshot.round))
    return planned


# -- Drain and ResumeJobs -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LeaveToAutoResume:
    """HyperPod restarts the job itself: recovery lets go of it."""


@dataclass(frozen=True, slots=True)
class Restart:
    """The job's next run on `nodes`: the failed node's place taken by `target`."""

    target: str
    nodes: list[str]
    reason: str


@dataclass(frozen=True, slots=True)
class Shrink:
    """The job's next run on `nodes`, the failed node left out (`size` replicas)."""

    nodes: list[str]
    size: int
    reason: str


@dataclass(frozen=True, slots=True)
class Requeue:
    """Back to the queue with its checkpoint; `prefer_burst`: placed next on EKS burst
    capacity where it has room."""

    why: str
    prefer_burst: bool = False


CarryOut = LeaveToAutoResume | Restart | Shrink | Requeue


def _restart_target(
    strategy: AppliedStrategy, planned: ProtectedJob, failed: str, replacement: str | None
) -> str | None:
    """Where a job that restarts whole goes: its hot spare, else the failed node's
    replacement or the repaired node itself."""
    return planned.spare if strategy is AppliedStrategy.HOT_SPARE else replacement or failed


def next_nodes(
    strategy: AppliedStrategy, planned: ProtectedJob, failed: str, replacement: str | None
) -> list[str] | None:
    """The nodes the job's next run takes under its plan: its nodes with the failed one's
    place taken (`_restart_target`), or without it (a shrink); None when the plan runs it
    nowhere, or a hot spare has no spare."""
    match strategy:
        case AppliedStrategy.HOT_SPARE | AppliedStrategy.WAIT_FOR_REPAIR:
            target = _restart_target(strategy, planned, failed, replacement)
            if target is None:
                return None
            return [target if n == failed else n for n in planned.nodes]
        case AppliedStrategy.ELASTIC_SHRINK:
            return [n for n in planned.nodes if n != failed]
        case _:
            return None


def carry_out(
    strategy: AppliedStrategy,
    planned: ProtectedJob,
    job: Job,
    *,
    failed: str,
    replacement: str | None,
    lost: str,
) -> CarryOut:
    """What carrying out `planned` for `job` (as it is now) comes to. `lost`: which of
    `next_nodes` cannot take the next run ("" if all can, or if an earlier attempt already
    moved the job on)."""
    nodes = next_nodes(strategy, planned, failed, replacement)
    match strategy:
        case AppliedStrategy.HYPERPOD_AUTO_RESUME:
            return LeaveToAutoResume()
        case AppliedStrategy.HOT_SPARE | AppliedStrategy.WAIT_FOR_REPAIR:
            target = _restart_target(strategy, planned, failed, replacement)
            if target is None or nodes is None:
                return Requeue("no node to restart on")
            if lost:
                return Requeue(f"{lost} out of service")
            return Restart(
                target,
                nodes,
                f"restarted on {target} by {strategy.value} from checkpoint step "
                f"{planned.checkpoint_step}",
            )
        case AppliedStrategy.ELASTIC_SHRINK:
            return _shrink_or_requeue(job, nodes or [], failed, lost)
        case AppliedStrategy.MOVE:
            return Requeue("move", prefer_burst=True)
        case _:
            return Requeue(strategy.value)


def _shrink_or_requeue(job: Job, kept: list[str], failed: str, lost: str) -> CarryOut:
    """An elastic job's next run without the failed node, at the largest size its policy
    allows there; back to the queue below its minimum."""
    if lost:
        return Requeue(f"{lost} out of service")
    size = job.elastic_policy.at_most(len(kept)) if job.elastic_policy else None
    if not size:
        return Requeue("cannot shrink below min")
    return Shrink(
        kept[:size],
        size,
        f"shrunk to {size} replica(s) off failed node {failed}; grows back when capacity returns",
    )
