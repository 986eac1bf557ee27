"""A job as the governance API shows it (`JobRecord`): the job, why it is in its status, its
history, and what the scheduler recorded about its runs. JobsTable's one writer,
`hyperguard.store.jobs`, stores it; the scheduling pass decides from it (`governance.decide`)."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, Field, field_validator

from hyperguard.models.jobs import (
    ACTIVE_STATUSES,
    WAITING_STATUSES,
    Heartbeat,
    Job,
    JobStatus,
    OperatorRestarts,
    PacePoint,
    ProgressTrouble,
    RefusedCheckpoint,
    SlowFlag,
)

MAX_REASON = 500
MAX_LISTED = 16


class JobEvent(StrEnum):
    SUBMITTED = "submitted"
    ADMITTED = "admitted"
    DISPATCHED = "dispatched"
    REQUEUED = "requeued"
    PREEMPTED = "preempted"
    SHRUNK = "shrunk"
    GROWN = "grown"
    RESTARTED = "restarted"
    CHECKPOINT = "checkpoint"
    CANCELLED = "cancelled"
    STOPPED = "stopped"
    FINISHED = "finished"
    PROTECTED = "protected"
    RELEASED = "released"
    RELOCATED = "relocated"
    LOST = "lost"
    STALLED = "stalled"
    PAUSED = "paused"
    SLOW = "slow"
    BACK_TO_PACE = "back_to_pace"
    CHECKPOINTS_UNREADABLE = "checkpoints_unreadable"
    CHECKPOINTS_READABLE = "checkpoints_readable"
    OPERATOR_RESTARTED = "operator_restarted"
    CHECKPOINT_REFUSED = "checkpoint_refused"


def short(text: str, limit: int = MAX_REASON) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _compact(value: Any) -> Any:
    """Long lists (a 1,024-node placement) become their first entries and their count."""
    if isinstance(value, list) and len(value) > MAX_LISTED:
        return {"first": value[:MAX_LISTED], "count": len(value)}
    if isinstance(value, str):
        return short(value)
    return value


class JobHistoryEntry(BaseModel):
    at: datetime
    event: JobEvent
    status: JobStatus | None = None
    reason: str = ""
    details: dict[str, Any] = Field(default_factory=dict)

    @field_validator("reason")
    @classmethod
    def _short_reason(cls, value: str) -> str:
        return short(value)

    @field_validator("details")
    @classmethod
    def _small_details(cls, value: dict[str, Any]) -> dict[str, Any]:
        return {key: _compact(item) for key, item in value.items()}


class JobRecord(BaseModel):
    """A job with what the API shows about it."""

    job: Job
    reason: str = ""
    history: list[JobHistoryEntry] = Field(default_factory=list)
    first_admitted_at: datetime | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    admitted_replicas: int | None = None
    stop_pending: bool = False
    principal: str | None = None
    protected_by: str | None = None
    """The incident whose recovery decides this job's next run (set while it does)."""
    scaled_at: datetime | None = None
    """When the job last changed size (elastic jobs: scalingTimeoutInSeconds counts from it)."""
    run_time_s: float | None = None
    """Set when the job ends: seconds from its first admission to its end."""
    prefer_burst: bool = False
    """Recovery moved the job off a failed node (`move`), or the scheduler moved it to hand
    HyperPod back (D121): its next placement tries EKS burst capacity first, where its
    template allows; that admission clears it."""
    history_dropped: int = 0
    """History entries not kept because the history was full (MAX_HISTORY)."""
    pool_kind: str | None = None
    """hyperpod, eks-on-demand or eks-spot: the kind of `job.pool` when the scheduler placed
    it (None for jobs placed before kinds were recorded)."""
    progress_at: datetime | None = None
    """When a newer checkpoint than the last was last recorded (by the writer's clock): how
    long a running job has made no progress counts from the later of it and `started_at`."""
    pace: list[PacePoint] = Field(default_factory=list)
    """The current run's latest checkpoints (governance.pace): its own step rate."""
    slow: SlowFlag | None = None
    """Set while the job runs far below its own recent step rate (D100)."""
    progress_trouble: ProgressTrouble | None = None
    """Set while S3 refuses the job's checkpoint location (D139)."""
    operator_restarts: OperatorRestarts | None = None
    """The training operator's restartCount of the job's run, as the scheduler last recorded
    it (D155)."""
    checkpoint_refused: RefusedCheckpoint | None = None
    """The newest checkpoint refused by contract v2, as last noted (D164)."""
    heartbeat: Heartbeat | None = None
    """The training's last progress report (D165): while it is of the current run, the job's
    pace and the stall rule go by it, not by its checkpoints."""

    def is_live(self) -> bool:
        """Whether a scheduling pass counts the job: it holds or waits for quota, or still
        has pods to stop (what the jobs table's `Live` index files under `1`)."""
        return self.job.status in ACTIVE_STATUSES or self.stop_pending

    def heartbeats(self) -> Heartbeat | None:
        """The last heartbeat, if it is of the job's current run."""
        beat = self.heartbeat
        return beat if beat is not None and beat.run == self.job.run else None

    def waiting_since(self) -> datetime | None:
        """When the job last began waiting for admission (submitted, preempted, requeued);
        None when it does not wait."""
        if self.job.status not in WAITING_STATUSES:
            return None
        since = self.job.submitted_at
        waiting = True
        for entry in self.history:
            if entry.status is None:
                continue
            now_waiting = entry.status in WAITING_STATUSES
            if now_waiting and not waiting:
                since = entry.at
            waiting = now_waiting
        return since
