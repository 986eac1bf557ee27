"""The jobs teams applied themselves that a pass records (D170): decide, then apply.

A wake-up of the in-cluster forwarder names a Kueue Workload held on HyperGuard's admission
check (hyperguard.cluster.held). The pass reads it and `plan_adoption` decides, from the
Workload, the job records of the ids it would get and the submission rules of its team:
- `Adopt`: a new job of the team (source `cluster`), Pending, checked by the rules an API
  submission is checked by;
- `Refuse`: the check rejected with the reason (a namespace that is no team's, a shape
  HyperGuard cannot run, a team without quota, or a job that already ended: its object is
  held again after a cancel or a failure, and is not run twice);
- nothing: a Workload that does not wait on the check (admitted, deactivated, or another
  queue's), or whose job is already recorded and waiting.

The applier records an adopted job through the one writer (a conditional put: two passes
that read the same Workload record it once) and wakes nothing: the same pass reads it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from hyperguard.cluster.held import HeldRefusal, held_job, waiting
from hyperguard.cluster.kueue import ADMISSION_CHECK
from hyperguard.governance.jobs import JobRejectedError, SubmissionRules, check_submission
from hyperguard.models import Job
from hyperguard.models.jobs import ACTIVE_STATUSES
from hyperguard.models.records import JobRecord

MAX_ADOPTED_PER_PASS = 100
"""Held Workloads a pass reads at most (a batch of wake-ups names at most 10; a pass that
finds more leaves them to the forwarder's next event for them)."""


@dataclass(frozen=True, slots=True)
class Adopt:
    job: Job


@dataclass(frozen=True, slots=True)
class Refuse:
    namespace: str
    workload: str
    reason: str


def plan_adoption(
    workloads: Iterable[Mapping[str, Any]],
    records: Mapping[str, JobRecord],
    *,
    instance_type: Callable[[str], tuple[str, int]],
    rules_for: Callable[[Job], SubmissionRules],
) -> list[Adopt | Refuse]:
    """What to do with each held Workload (see the module's docstring). `records`: the
    recorded jobs among the ids these Workloads' jobs would have."""
    intents: list[Adopt | Refuse] = []
    for workload in workloads:
        if not waiting(workload, ADMISSION_CHECK):
            continue
        meta = workload.get("metadata") or {}
        where = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        try:
            job = held_job(workload, instance_type=instance_type)
            recorded = records.get(job.job_id)
            if recorded is not None:
                if recorded.job.status in ACTIVE_STATUSES:
                    continue
                status = recorded.job.status.value
                raise HeldRefusal(f"job {job.job_id} is {status}: apply it again to rerun it")
            check_submission(job, rules_for(job))
        except HeldRefusal as refusal:
            intents.append(Refuse(*where, str(refusal)))
            continue
        except JobRejectedError as rejected:
            intents.append(Refuse(*where, f"{rejected.field}: {rejected.message}"))
            continue
        intents.append(Adopt(job))
    return intents


def adopted_ids(
    workloads: Iterable[Mapping[str, Any]], *, instance_type: Callable[[str], tuple[str, int]]
) -> list[str]:
    """The job ids these held Workloads' jobs have (those HyperGuard could run)."""
    ids = []
    for workload in workloads:
        try:
            ids.append(held_job(workload, instance_type=instance_type).job_id)
        except HeldRefusal:
            continue
    return ids
