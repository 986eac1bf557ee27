"""What one scheduling pass decides from: the pass's snapshot, as values.

`hyperguard.governance.reader.SnapshotReader` reads it at the start of a pass;
`hyperguard.governance.decide` decides from it alone. This module does no I/O and imports
no store, adapter or SDK module, so `governance.decide` and its tests load none.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime

from hyperguard.models import Checkpoint, JobStatus, Node
from hyperguard.models.cluster import BurstClaim, InstanceGroupSize, RunPhase, RunStatus
from hyperguard.models.governance import ComputeQuota, SchedulerConfig
from hyperguard.models.jobs import ACTIVE_STATUSES, HOLDING_STATUSES, RefusedCheckpoint
from hyperguard.models.records import JobRecord
from hyperguard.policies.burst import BurstPolicy
from hyperguard.policies.repair import NodeRepairConfig

ORPHAN_STOPS_PER_PASS = 20
"""Jobs whose orphaned runs one pass stops, so that a backlog cannot stretch a pass."""

LIVE_PHASES = frozenset({RunPhase.PENDING, RunPhase.RUNNING})
PROGRESS_PHASES = LIVE_PHASES | {RunPhase.SUCCEEDED}
"""A run in one of these has its job's progress read (a succeeded run's last checkpoint too)."""


@dataclass(frozen=True, slots=True)
class InstanceGroups:
    """HyperPod's instance groups as DescribeCluster reports them."""

    continuous: bool
    """NodeProvisioningMode Continuous: groups may grow on request (BatchAddClusterNodes)."""
    groups: tuple[InstanceGroupSize, ...]


def _holds(record: JobRecord) -> bool:
    return record.job.status in HOLDING_STATUSES


def _runs(record: JobRecord) -> bool:
    return record.job.status is JobStatus.RUNNING


def _admitted(record: JobRecord) -> bool:
    return record.job.status is JobStatus.ADMITTED


def _stops(record: JobRecord) -> bool:
    return record.stop_pending


def _active(record: JobRecord) -> bool:
    return record.job.status in ACTIVE_STATUSES


_PARTS: Mapping[str, Callable[[JobRecord], bool]] = {
    "holding": _holds,
    "running": _runs,
    "admitted": _admitted,
    "stopping": _stops,
}


@dataclass(frozen=True, slots=True)
class JobViews:
    """A pass's jobs sorted once by what the pass asks of them, in their order. A large
    pass holds thousands of waiting jobs and few running ones; each question asked of every
    record (its status, its flags: pointers into a heap far larger than the cache) cost a
    pass about as much as the answer's work, so the records are walked once, here, and each
    step walks only the part it is about (BENCHMARKS.md, "One walk of a pass's jobs")."""

    jobs: tuple[JobRecord, ...]
    """What the views were made from."""
    by_id: Mapping[str, JobRecord]
    teams: Mapping[str, str]
    """Each job's team, by id."""
    active_ids: tuple[str, ...]
    """The jobs that hold or wait for quota (not those only listed for pods to stop)."""
    holding: tuple[JobRecord, ...]
    """Admitted or Running: they hold quota and nodes."""
    running: tuple[JobRecord, ...]
    admitted: tuple[JobRecord, ...]
    stopping: tuple[JobRecord, ...]
    """Those with pods still to stop (`stop_pending`), whatever their status."""

    @classmethod
    def of(cls, jobs: tuple[JobRecord, ...]) -> JobViews:
        by_id: dict[str, JobRecord] = {}
        teams: dict[str, str] = {}
        active_ids: list[str] = []
        holding: list[JobRecord] = []
        running: list[JobRecord] = []
        admitted: list[JobRecord] = []
        stopping: list[JobRecord] = []
        is_running, is_admitted = JobStatus.RUNNING, JobStatus.ADMITTED
        for record in jobs:
            job = record.job
            job_id, status = job.job_id, job.status
            by_id[job_id] = record
            teams[job_id] = job.team
            if record.stop_pending:
                stopping.append(record)
            if status not in ACTIVE_STATUSES:
                continue
            active_ids.append(job_id)
            if status is is_running:
                running.append(record)
                holding.append(record)
            elif status is is_admitted:
                admitted.append(record)
                holding.append(record)
        return cls(
            jobs,
            by_id,
            teams,
            tuple(active_ids),
            tuple(holding),
            tuple(running),
            tuple(admitted),
            tuple(stopping),
        )

    def replaced(self, fresh: Iterable[JobRecord]) -> JobViews:
        """The views with these records in place of theirs (records of other jobs are left
        out), without walking every record again: a job a pass moved leaves views (its run
        ended, it was requeued), and one that joins a view it was not in (rare: a leftover
        marked Running) has the views made again."""
        moved = {r.job.job_id: r for r in fresh if r.job.job_id in self.by_id}
        if not moved:
            return self
        by_id = {**self.by_id, **moved}
        jobs = tuple(by_id.values())
        for job_id, record in moved.items():
            was = self.by_id[job_id]
            if any(belongs(record) and not belongs(was) for belongs in (_active, *_PARTS.values())):
                return JobViews.of(jobs)
        parts = {
            name: tuple(
                moved.get(r.job.job_id, r)
                for r in getattr(self, name)
                if r.job.job_id not in moved or belongs(moved[r.job.job_id])
            )
            for name, belongs in _PARTS.items()
        }
        return JobViews(
            jobs,
            by_id,
            {**self.teams, **{job_id: r.job.team for job_id, r in moved.items()}},
            tuple(j for j in self.active_ids if j not in moved or _active(moved[j])),
            **parts,
        )


@dataclass(frozen=True, slots=True)
class PassSnapshot:
    """Everything one pass decides from, as read at its start."""

    now: datetime
    repair: NodeRepairConfig
    burst: BurstPolicy
    jobs: tuple[JobRecord, ...]
    """The active jobs, those with pods to stop, and those the wake-ups named, by id."""
    nodes: tuple[Node, ...]
    runs: tuple[RunStatus, ...]
    groups: InstanceGroups | None
    """None: DescribeCluster failed (no group is fenced, none may grow this pass)."""
    checkpoints: Mapping[str, Checkpoint] = field(default_factory=dict)
    """Running jobs' complete checkpoints newer than their last known one, found in S3."""
    refused: Mapping[str, RefusedCheckpoint] = field(default_factory=dict)
    """Running jobs' newest checkpoints that contract v2 refused (D164)."""
    unreadable: Mapping[str, str] = field(default_factory=dict)
    """Running jobs whose checkpoint location S3 would not list, with its answer: no
    progress is known, and none is held against them as a stall (D138)."""
    placed: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Where the pods of running auto-resume jobs' current runs run, for those whose pods
    are all bound and running (HyperPod's auto-resume, not HyperGuard, places a restart)."""
    ended: Mapping[str, JobRecord] = field(default_factory=dict)
    """Jobs that are not in `jobs` (they ended) but whose runs still live: read by key."""
    winding_down: frozenset[str] = frozenset()
    """Waiting jobs that ran before, with a checkpoint location, whose stopped run still
    has pods on Ready nodes: running, or in their grace period (D210). Read after a first
    admission plan, for the restarts it admits (`SchedulerService`)."""
    quotas: tuple[ComputeQuota, ...] = ()
    config: SchedulerConfig = field(default_factory=SchedulerConfig)
    stand_ins: Mapping[str, str] = field(default_factory=dict)
    """Nodes jobs hold that HyperPod replaced, each with its replacement (D84)."""
    lemons: frozenset[str] = frozenset()
    """Nodes in lemon slots (read only when hot spares are kept: D91)."""
    claims: tuple[BurstClaim, ...] | None = None
    """HyperGuard's burst nodes; None when the pass does not burst or cannot read them."""
    bursting: bool = False
    """BurstCapacity is deployed: the pass may start bursts and scale burst nodes in."""
    teams_ensured: frozenset[str] = frozenset()
    """Teams whose namespaced objects this scheduler process has ensured already (D98)."""
    views: JobViews | None = field(default=None, compare=False, repr=False)
    """`jobs` sorted once (`JobViews`); made from `jobs` when missing or made from others."""

    def __post_init__(self) -> None:
        if self.views is None or self.views.jobs is not self.jobs:
            object.__setattr__(self, "views", JobViews.of(self.jobs))

    @property
    def view(self) -> JobViews:
        assert self.views is not None  # set by __post_init__
        return self.views

    def refreshed(self, fresh: Iterable[JobRecord]) -> PassSnapshot:
        """The snapshot with these records in place of the ones it read."""
        views = self.view.replaced(fresh)
        return self if views is self.view else replace(self, jobs=views.jobs, views=views)


def may_wind_down(record: JobRecord) -> bool:
    """Whether a waiting job's admission waits for its stopped run's pods (D210): it ran
    before (a restart resumes from its newest checkpoint) and writes checkpoints."""
    return (
        record.job.status in RESUMABLE_STATUSES
        and record.first_admitted_at is not None
        and bool(record.job.checkpoint_location)
    )


RESUMABLE_STATUSES = frozenset({JobStatus.PENDING, JobStatus.PREEMPTED})
"""Waiting statuses a pass admits from (a suspended job waits for its team)."""


def reads_progress(record: JobRecord, run: RunStatus | None) -> bool:
    """Whether the pass looks for a newer checkpoint of the job: a running job that writes
    checkpoints and whose current run the cluster still has, live or succeeded."""
    return (
        record.job.status is JobStatus.RUNNING
        and not record.stop_pending
        and bool(record.job.checkpoint_location)
        and run is not None
        and run.phase in PROGRESS_PHASES
    )


def backed_off(record: JobRecord, now: datetime) -> bool:
    """Whether the job's checkpoint location, refused before, waits for its retry time."""
    trouble = record.progress_trouble
    return trouble is not None and trouble.retry_at > now


def unread_run_jobs(known: Container[str], runs: Iterable[RunStatus]) -> list[str]:
    """Jobs with live runs whose ids `known` lacks (they ended, or the index has not named
    them yet: D178): the first ORPHAN_STOPS_PER_PASS by id, read by key so that the runs of
    those that ended can be stopped and those still active counted."""
    live = {r.job_id for r in runs if r.phase in LIVE_PHASES}
    return sorted(j for j in live if j not in known)[:ORPHAN_STOPS_PER_PASS]
