"""What a scheduling pass decided: the typed intents `hyperguard.governance.decide` returns
and `hyperguard.governance.applier` carries out. Plain frozen data; each names the job (or
claim) it is about and everything its write or cluster call needs, so that the applier
decides nothing.

A pass plans in two phases (docs/architecture.md, "A scheduling pass"): a `ReconcilePlan`
from the snapshot, applied before anything is admitted; then, from the snapshot with the
jobs reconciliation moved read again, an `AdmissionPlan` and a `CapacityPlan`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from hyperguard.bursting.requests import BurstRequest
from hyperguard.governance.patching import PatchFence
from hyperguard.models import Checkpoint, Incident, Job
from hyperguard.models.cluster import BurstClaim, RunKind, RunStatus
from hyperguard.models.jobs import ProgressTrouble, RefusedCheckpoint
from hyperguard.models.records import JobRecord

# -- reconciliation -----------------------------------------------------------------------


class Verdict(StrEnum):
    """What reconciliation found of a running job's current run."""

    SUCCEEDED = "succeeded"
    """It completed: the job ends Succeeded."""
    FAILED = "failed"
    """It failed by itself (after the grace): the job ends Failed, its runs stopped."""
    LOST = "lost"
    """The cluster lost it or no longer has it: back to the queue, to resume from its
    checkpoint."""
    STALLED = "stalled"
    """No new checkpoint for `stalledJobMins` (D94): back to the queue."""
    PAUSED = "paused"
    """Its instance group is about to be patched (D101): back to the queue at a checkpoint."""


@dataclass(frozen=True, slots=True)
class StopCancelled:
    """A cancelled job's pods: stop them, then record `stopped` (clearing `stop_pending`)."""

    job_id: str
    nodes: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class RecordCheckpoint:
    """A newer complete checkpoint the snapshot found for a running job."""

    record: JobRecord
    checkpoint: Checkpoint
    slow_ratio: float = 0.0
    """The repair policy's `slowJobRatio`: the job's pace judged with it (D100)."""


@dataclass(frozen=True, slots=True)
class NoteProgressTrouble:
    """S3 refused a running job's checkpoint location again (`trouble`: when to read it
    next), or read it after refusals (None: cleared) (D139)."""

    record: JobRecord
    trouble: ProgressTrouble | None


@dataclass(frozen=True, slots=True)
class NoteRefusedCheckpoint:
    """A running job's newest checkpoint was refused by contract v2 (D164)."""

    job_id: str
    refused: RefusedCheckpoint


@dataclass(frozen=True, slots=True)
class NoteOperatorRestarts:
    """The cluster restarted a running job's run `run` more times than recorded, by itself:
    the HyperPod training operator (its restartCount is now `count`, D155), or for a team's
    own Job the Job controller (`count` of its pods failed and were replaced, D179)."""

    record: JobRecord
    run: int
    count: int
    kind: RunKind


@dataclass(frozen=True, slots=True)
class Reconcile:
    """A verdict on a running job, with the reason its history gets."""

    verdict: Verdict
    record: JobRecord
    reason: str
    incident: Incident | None = None
    """A stall's: the `job_stalled` incident its requeue records (D117)."""

    @property
    def job_id(self) -> str:
        return self.record.job.job_id

    @property
    def stops_runs(self) -> bool:
        """Every verdict but success stops the job's runs (a succeeded run has ended)."""
        return self.verdict is not Verdict.SUCCEEDED


@dataclass(frozen=True, slots=True)
class StopRuns:
    """Live runs no job should have: all of the job's, or those older than `before_run`."""

    job_id: str
    before_run: int | None = None


@dataclass(frozen=True, slots=True)
class Relocate:
    """A running auto-resume job whose current run's pods all run on `nodes`, not where it
    is recorded: HyperPod's auto-resume placed its restart (D136)."""

    record: JobRecord
    nodes: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Leftover:
    """A job an earlier pass admitted and left Admitted: it ended between the job's dispatch
    and its Running mark (killed, timed out). With its current run on the cluster
    (`dispatched`) it is marked Running; without, it goes back to Pending to be placed
    again."""

    record: JobRecord
    dispatched: bool


@dataclass(frozen=True, slots=True)
class ReconcilePlan:
    cancelled: tuple[StopCancelled, ...] = ()
    checkpoints: tuple[RecordCheckpoint, ...] = ()
    troubles: tuple[NoteProgressTrouble, ...] = ()
    restarts: tuple[NoteOperatorRestarts, ...] = ()
    refusals: tuple[NoteRefusedCheckpoint, ...] = ()
    verdicts: tuple[Reconcile, ...] = ()
    """Succeeded, failed, lost and stalled runs, in job order."""
    orphans: tuple[StopRuns, ...] = ()
    relocations: tuple[Relocate, ...] = ()
    pauses: tuple[Reconcile, ...] = ()
    """Jobs paused before their group's patch (no job with another verdict among them)."""
    leftovers: tuple[Leftover, ...] = ()
    fences: Mapping[str, PatchFence] = field(default_factory=dict)
    """Instance groups a patch is due on."""
    fenced_nodes: frozenset[str] = frozenset()
    """Their nodes: nothing new is placed there."""
    found: Mapping[str, int] = field(default_factory=dict)
    """Jobs whose newer checkpoint the snapshot found, and its step."""


# -- admission ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EnsureTeam:
    """A team's namespaced objects (Kueue's queues, Recovery's RoleBindings), for a team
    with a quota or a job that holds capacity: once per scheduler process (D98). Without
    them a job the team applies itself would not be held for HyperGuard (D170)."""

    team: str
    priority_class: str | None = None
    """The class of a job of the team that holds capacity, if it names one."""


@dataclass(frozen=True, slots=True)
class Preemption:
    """A job that gives way: written Preempted (fenced), then its runs stopped: `runs`, its
    run objects as the snapshot read them (D177)."""

    job_id: str
    reason: str
    nodes: tuple[str, ...]
    for_job: str | None = None
    runs: tuple[RunStatus, ...] = ()


@dataclass(frozen=True, slots=True)
class Shrink:
    """An elastic job that gives way by shrinking: `job` as it is after (fewer nodes, a new
    run); written (fenced), and resized on the cluster once, before the admissions are
    dispatched (to the size last written, when several shrink it)."""

    job: Job
    reason: str
    for_job: str | None = None

    @property
    def job_id(self) -> str:
        return self.job.job_id


@dataclass(frozen=True, slots=True)
class Admission:
    """A job admitted and placed: `job` as placed (nodes, pool, Admitted, its run). Its
    victims give way first; the admission is fenced on the lease and on the team's quota
    at `quota_version`; then the job is dispatched and started."""

    job: Job
    replicas: int
    restart: bool
    reason: str
    pool_kind: str | None
    hourly_price: float
    hourly_cost: float
    quota_version: int
    victims: tuple[Preemption | Shrink, ...] = ()


@dataclass(frozen=True, slots=True)
class Growth:
    """A running elastic job grown into idle capacity: `job` as grown (more nodes, a new
    run); fenced like an admission, then resized on the cluster."""

    job: Job
    reason: str
    quota_version: int


@dataclass(frozen=True, slots=True)
class AdmissionPlan:
    ensure_teams: tuple[EnsureTeam, ...] = ()
    admissions: tuple[Admission, ...] = ()
    growths: tuple[Growth, ...] = ()
    unplaced: tuple[str, ...] = ()
    """Jobs the engine admitted that no allowed pool could place."""
    spares: int = 0
    slow: int = 0
    """Running jobs flagged slow (D100), as the snapshot has them."""


# -- capacity and reasons ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class IdleMark:
    """Set (`since`) or clear (None) a burst node's idle mark."""

    claim: BurstClaim
    since: datetime | None


@dataclass(frozen=True, slots=True)
class MoveBack:
    """A development job on burst capacity, back to the queue at a fresh checkpoint (a
    preemption, then its runs stopped): HyperPod has room for it."""

    job_id: str
    reason: str
    nodes: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class HandBack:
    """A job that preempted HyperPod-only work of its team, to burst capacity at a fresh
    checkpoint (a preemption that places it next on burst capacity first, then its runs
    stopped): the work it preempted takes its HyperPod nodes back (D121)."""

    job_id: str
    reason: str
    nodes: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ReasonWrite:
    """Why a waiting job waits, written only over the reason the snapshot read (D61)."""

    job_id: str
    reason: str
    replacing: str


@dataclass(frozen=True, slots=True)
class BurstStart:
    """One BurstCapacity execution, named by its burst id. `unstarted`: the reasons its jobs
    get instead of the planned ones if the start fails (the next pass starts it again)."""

    request: BurstRequest
    unstarted: tuple[ReasonWrite, ...] = ()

    @property
    def job_ids(self) -> tuple[str, ...]:
        return tuple(j.job_id for j in self.request.jobs)


@dataclass(frozen=True, slots=True)
class CapacityPlan:
    marks: tuple[IdleMark, ...] = ()
    releases: tuple[BurstClaim, ...] = ()
    """Burst nodes idle past the cooldown, released unless a job holds them when the jobs
    are read once more (the applier's guarded re-check)."""
    move_backs: tuple[MoveBack, ...] = ()
    hand_backs: tuple[HandBack, ...] = ()
    bursts: tuple[BurstStart, ...] = ()
    reasons: tuple[ReasonWrite, ...] = ()
    """Reasons whose stored form changes; every other waiting job keeps its own."""
    pending: int = 0
    pending_by_team: Mapping[str, int] = field(default_factory=dict)
