"""A stalled job (D94) and the incident its requeue records (D117), pure.

A running job that writes checkpoints and has completed none for the repair policy's
`stalledJobMins` is stalled: the reconciler requeues it to resume from its latest complete
checkpoint. The requeue records an incident of kind `job_stalled`: about the job, not a node
(its `instance_id` is empty and no node's lock is taken), its id fixed by the job, the run and
when the job last made progress, so that a pass that runs again records it once.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from hyperguard.models import Incident, IncidentStatus, Job, ProtectedJob, Repair, Severity
from hyperguard.models.incidents import JOB_STALLED
from hyperguard.models.jobs import AppliedStrategy, RecoveryStrategy
from hyperguard.models.records import JobRecord

REQUEUED = "requeued"
"""The resolution of a stall whose job was requeued."""
NOT_REQUEUED = "not_requeued"
"""The resolution of a stall whose requeue was refused: the job moved on since the pass read
it (a recovery protects it, it ended)."""

STALL_WHY = {
    RecoveryStrategy.AUTO: "auto: its nodes are healthy, so there is no repair to wait for and "
    "a restart from the checkpoint loses the least",
    RecoveryStrategy.WAIT_FOR_REPAIR: "asked for wait_for_repair: its nodes are healthy and "
    "there is no repair to wait for, so it restarts now",
    RecoveryStrategy.HOT_SPARE: "asked for hot_spare: no node failed, so none needs a spare; "
    "it restarts where it is placed again",
    RecoveryStrategy.ELASTIC_SHRINK: "asked for elastic_shrink: a hang stops every rank and no "
    "node is to be left out, so it restarts at its size",
    RecoveryStrategy.MOVE: "asked for move: no node failed, so nothing argues for burst "
    "capacity; it is placed again as its template allows",
}
"""Why a stalled job's strategy comes to a requeue, per strategy it asked for (D117)."""


def for_stall(job: Job) -> tuple[AppliedStrategy, str]:
    """A stalled job's strategy: a requeue to resume from its latest complete checkpoint,
    whatever it asked for (D117). The strategies answer a node fault: how to get around a
    node that is gone or being repaired (hyperguard.recovery.strategy). A hang leaves every
    node healthy, so each comes to the same restart from the checkpoint, and the scheduler
    places the job again."""
    if job.auto_resume:
        why = (
            "hyperpod_auto_resume: HyperPod restarts a run whose pods fail, not one that "
            "hangs, so HyperGuard restarts it from the checkpoint"
        )
    else:
        why = STALL_WHY[job.recovery.strategy]
    return AppliedStrategy.REQUEUE, why


@dataclass(frozen=True, slots=True)
class Stall:
    """A running job without a new complete checkpoint since `since` for `idle_min` minutes,
    at least the policy's `limit_min`."""

    since: datetime
    idle_min: float
    limit_min: float
    step: int | None
    """The latest complete checkpoint's step: where the job resumes (None: from the start)."""
    by: str = "checkpoints"
    """What showed no progress: checkpoints, or the training's heartbeats (D165)."""

    @property
    def reason(self) -> str:
        where = f"step {self.step}" if self.step is not None else "none yet"
        if self.by == "heartbeats":
            return (
                f"stalled: its heartbeats show no new step for {self.idle_min:.0f} min (limit "
                f"{self.limit_min:g}; latest checkpoint {where})"
            )
        return (
            f"stalled: no new checkpoint for {self.idle_min:.0f} min (limit "
            f"{self.limit_min:g}; latest {where})"
        )


def stall_incident_id(job_id: str, run: int, since: datetime) -> str:
    """The job, its run and its last progress: one stall of one run, whoever records it."""
    return f"{job_id}-run{run}-stalled-{since:%Y%m%dT%H%M%SZ}"


def stall_incident(record: JobRecord, stall: Stall, now: datetime, cluster: str) -> Incident:
    """The incident of a stall the pass requeues: resolved as it is recorded (the requeue is
    its resolution), timed from the job's last progress (when the hang began at the
    earliest)."""
    job = record.job
    last = job.last_checkpoint
    strategy, why = for_stall(job)
    resumes = f"step {last.step}" if last else "the start (no checkpoint yet)"
    idle_s = round((now - stall.since).total_seconds(), 3)
    return Incident(
        incident_id=stall_incident_id(job.job_id, job.run, stall.since),
        instance_id="",
        cluster=cluster,
        status=IncidentStatus.RESOLVED,
        kind=JOB_STALLED,
        severity=Severity.DEGRADED.value,
        repair=Repair.NONE,
        reason=f"job {job.job_id} of team {job.team}, run {job.run}: {stall.reason}",
        opened_at=now,
        first_signal_at=stall.since,
        signal_count=0,
        facts={
            "job_id": job.job_id,
            "team": job.team,
            "run": job.run,
            "stalled_min": round(stall.idle_min, 1),
            "limit_min": stall.limit_min,
            "last_progress_at": stall.since.isoformat(),
        },
        timings={"signal_to_detected_s": idle_s, "signal_to_resolved_s": idle_s},
        jobs=[
            ProtectedJob(
                job_id=job.job_id,
                team=job.team,
                strategy=strategy.value,
                why=why,
                checkpoint_step=last.step if last else None,
                checkpoint_uri=last.uri if last else None,
                nodes=list(job.nodes),
                run=job.run,
                outcome=f"requeued to resume from {resumes} on its next placement",
            )
        ],
        resolution=REQUEUED,
    )


def refused(incident: Incident, why: str) -> Incident:
    """The stall's incident once its requeue was refused: not requeued, and why."""
    jobs = [j.model_copy(update={"outcome": f"not requeued: {why}"}) for j in incident.jobs]
    return incident.model_copy(update={"resolution": NOT_REQUEUED, "jobs": jobs})
