"""HyperPod's scheduled patching, handled as planned (D101): a pure core over what
DescribeCluster reports of each instance group and the jobs that run on it.

HyperPod's automatic patching (an instance group's `AutoPatchConfig`) updates the group's
software at `NextPatchDate`. It does not move jobs: `WhenIdle` cordons the group and patches
each instance once no job runs on it (an instance that stays busy keeps the old AMI),
`WhenAllIdle` patches only if every instance becomes idle, `DrainFirst` evicts the running
pods (what they trained since their last checkpoint is lost). So from the repair policy's
`scheduledChangeLeadMins` before the date until HyperPod reports the update done, the pass:

- admits nothing onto the group's nodes (they are *fenced*), so a job placed there is not
  cut short by the patch;
- pauses each checkpointing job running there at a checkpoint boundary: as soon as a
  checkpoint completed after the fence began (a restart redoes no step), or, failing one,
  when `DEADLINE_SHARE` of the lead is left. A paused job goes back to the queue and resumes from
  that checkpoint wherever the pass can place it (another group, burst capacity), or on the
  patched group once it is back.

A job that writes no checkpoints is left running: a pause would cost it all its progress,
while `WhenIdle` and `WhenAllIdle` leave its instances unpatched instead.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from hyperguard.models import JobStatus
from hyperguard.models.cluster import InstanceGroupSize
from hyperguard.models.records import JobRecord

UPDATING = frozenset({"Pending", "InProgress", "RollbackInProgress"})
"""SoftwareUpdateStatus values of an update that has not ended."""
ENDED = frozenset({"Succeeded", "Failed", "RollbackComplete"})
START_GRACE = timedelta(minutes=5)
"""After the date, how long the fence holds while HyperPod reports no update yet (it may
start the update a little late, or report it after a poll): past it, an update that never
started releases the group."""
DEADLINE_SHARE = 0.25
"""A job that completed no checkpoint since the fence began is paused anyway once this share
of the lead time is left before the date (15 of the default 60 minutes): passes run every
minute, so it is paused before the patch, and what it trained since its last checkpoint is
lost either way (DrainFirst evicts it at the date)."""


@dataclass(frozen=True, slots=True)
class PatchFence:
    """An instance group HyperPod is about to patch, or patching now."""

    group: str
    patch_at: datetime
    fenced_from: datetime
    strategy: str | None

    def note(self) -> str:
        strategy = f", {self.strategy}" if self.strategy else ""
        at = self.patch_at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        return f"HyperPod patches instance group {self.group} at {at}{strategy}"


@dataclass(frozen=True, slots=True)
class Pause:
    job_id: str
    run: int
    reason: str


def fences(
    groups: Iterable[InstanceGroupSize], now: datetime, lead: timedelta
) -> dict[str, PatchFence]:
    """The groups whose nodes take no new jobs: a patch due within `lead`, or one HyperPod
    reports under way (after its date, the fence holds while the update runs, and for
    START_GRACE while HyperPod reports none)."""
    fenced: dict[str, PatchFence] = {}
    for group in groups:
        at = group.next_patch_at
        running = group.software_update_status in UPDATING
        if at is None:
            if running:
                fenced[group.name] = PatchFence(group.name, now, now, group.patching_strategy)
            continue
        # (before the date, an ended status is the last patch's)
        starting = now < at or (
            now < at + START_GRACE and group.software_update_status not in ENDED
        )
        if at - lead <= now and (starting or running):
            fenced[group.name] = PatchFence(group.name, at, at - lead, group.patching_strategy)
    return fenced


def pauses(
    fenced: Mapping[str, PatchFence],
    records: Iterable[JobRecord],
    group_of: Mapping[str, str],
    now: datetime,
    checkpointed: Mapping[str, int] | None = None,
) -> list[Pause]:
    """The running jobs to pause before their group's patch: those that write checkpoints,
    run on a fenced group's node, are not in a recovery's hands, and either completed a
    checkpoint since the fence began (or in `checkpointed`: the step this pass found) or
    have reached the deadline."""
    checkpointed = checkpointed or {}
    found: list[Pause] = []
    for record in records:
        job = record.job
        if job.status is not JobStatus.RUNNING or record.protected_by or record.stop_pending:
            continue
        if not job.checkpoint_location:
            continue
        fence = next((fenced[g] for n in job.nodes if (g := group_of.get(n, "")) in fenced), None)
        if fence is None:
            continue
        step = checkpointed.get(
            job.job_id, job.last_checkpoint.step if job.last_checkpoint else None
        )
        boundary = job.job_id in checkpointed or (
            record.progress_at is not None and record.progress_at >= fence.fenced_from
        )
        deadline = now >= fence.patch_at - (fence.patch_at - fence.fenced_from) * DEADLINE_SHARE
        if not (boundary or deadline):
            continue
        at = f"its checkpoint at step {step}" if step is not None else "its start (no checkpoint)"
        found.append(
            Pause(
                job.job_id,
                job.run,
                f"paused to resume from {at}: {fence.note()}"
                + ("" if boundary else " and no new checkpoint came before it"),
            )
        )
    return found
