"""The pure core of HyperPod's scheduled patching (D101): which instance groups are fenced,
and which running jobs are paused, at what moment."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from hyperguard.governance.patching import DEADLINE_SHARE, PatchFence, fences, pauses
from hyperguard.models import Job, JobStatus
from hyperguard.models.cluster import InstanceGroupSize
from hyperguard.models.jobs import Checkpoint
from hyperguard.models.records import JobRecord

PATCH_AT = datetime(2026, 11, 24, 4, 0, tzinfo=UTC)
LEAD = timedelta(minutes=60)
FENCE = PatchFence("workers", PATCH_AT, PATCH_AT - LEAD, "WhenIdle")
GROUP_OF = {"i-0aaaaaaaaaaaaaaa1": "workers", "i-0bbbbbbbbbbbbbbb2": "spare"}


def group(
    at: datetime | None = PATCH_AT, status: str | None = None, name: str = "workers"
) -> InstanceGroupSize:
    return InstanceGroupSize(
        name=name,
        instance_type="ml.p5.48xlarge",
        target_count=1,
        current_count=1,
        next_patch_at=at,
        patching_strategy="WhenIdle" if at else None,
        software_update_status=status,
    )


def running(
    node: str = "i-0aaaaaaaaaaaaaaa1",
    *,
    location: str | None = "s3://bucket/ckpt/",
    progress_at: datetime | None = None,
    protected_by: str | None = None,
    status: JobStatus = JobStatus.RUNNING,
) -> JobRecord:
    job = Job(
        job_id="solo-1",
        team="solo",
        image="train:1",
        nodes=[node],
        status=status,
        checkpoint_location=location,
        last_checkpoint=Checkpoint(step=50, uri="s3://bucket/ckpt/step-50/", completed_at=PATCH_AT)
        if location
        else None,
        run=2,
    )
    return JobRecord(job=job, progress_at=progress_at, protected_by=protected_by)


def test_a_group_is_fenced_from_the_lead_until_hyperpod_says_its_update_ended() -> None:
    assert fences([group()], PATCH_AT - LEAD - timedelta(seconds=1), LEAD) == {}
    assert fences([group()], PATCH_AT - LEAD, LEAD) == {"workers": FENCE}
    assert fences([group()], PATCH_AT - timedelta(seconds=1), LEAD) == {"workers": FENCE}
    # HyperPod may report the update a little after the date: the fence holds a while.
    assert fences([group()], PATCH_AT + timedelta(minutes=4), LEAD) == {"workers": FENCE}
    after = PATCH_AT + timedelta(minutes=5)
    assert fences([group()], after, LEAD) == {}  # the date passed and no update runs
    for status in ("Pending", "InProgress", "RollbackInProgress"):
        assert fences([group(status=status)], after, LEAD) == {"workers": FENCE}
    for status in ("Succeeded", "Failed", "RollbackComplete"):
        assert fences([group(status=status)], after, LEAD) == {}
        # the last patch's status does not release the next one
        assert list(fences([group(status=status)], PATCH_AT - LEAD, LEAD)) == ["workers"]
    # An update HyperPod runs without a schedule (UpdateClusterSoftware) fences it too.
    assert list(fences([group(at=None, status="InProgress")], after, LEAD)) == ["workers"]
    assert fences([group(at=None)], after, LEAD) == {}


def test_a_job_pauses_at_its_first_checkpoint_within_the_lead() -> None:
    now = PATCH_AT - timedelta(minutes=40)
    assert pauses(FENCES, [running(progress_at=now - timedelta(minutes=21))], GROUP_OF, now) == []
    (pause,) = pauses(FENCES, [running(progress_at=now - timedelta(minutes=19))], GROUP_OF, now)
    assert (pause.job_id, pause.run) == ("solo-1", 2)
    assert pause.reason == (
        "paused to resume from its checkpoint at step 50: HyperPod patches instance group "
        "workers at 2026-11-24T04:00:00Z, WhenIdle"
    )
    # One the pass itself just found counts, with its step.
    (found,) = pauses(FENCES, [running()], GROUP_OF, now, {"solo-1": 60})
    assert "checkpoint at step 60" in found.reason


def test_without_a_new_checkpoint_a_job_pauses_when_a_quarter_of_the_lead_is_left() -> None:
    deadline = PATCH_AT - LEAD * DEADLINE_SHARE
    assert pauses(FENCES, [running()], GROUP_OF, deadline - timedelta(seconds=1)) == []
    (pause,) = pauses(FENCES, [running()], GROUP_OF, deadline)
    assert pause.reason.endswith("WhenIdle and no new checkpoint came before it")


def test_jobs_elsewhere_without_checkpoints_or_in_a_recoverys_hands_are_left() -> None:
    now = PATCH_AT
    left = [
        running("i-0bbbbbbbbbbbbbbb2"),  # another group
        running(location=None),  # a pause would cost it all its progress
        running(protected_by="inc-1"),
        running(status=JobStatus.PENDING),
    ]
    assert pauses(FENCES, left, GROUP_OF, now) == []


FENCES = {"workers": FENCE}


@given(
    st.integers(min_value=-200, max_value=200),
    st.one_of(st.none(), st.sampled_from(["Pending", "InProgress", "Succeeded", "Failed"])),
    st.integers(min_value=0, max_value=120),
)
def test_fenced_exactly_within_the_lead_or_while_an_update_runs(
    minutes: int, status: str | None, lead_mins: int
) -> None:
    now = PATCH_AT + timedelta(minutes=minutes)
    lead = timedelta(minutes=lead_mins)
    fenced = "workers" in fences([group(status=status)], now, lead)
    updating = status in ("Pending", "InProgress")
    ended = status in ("Succeeded", "Failed")
    starting = now < PATCH_AT or (now < PATCH_AT + timedelta(minutes=5) and not ended)
    assert fenced == (PATCH_AT - lead <= now and (starting or updating))


@given(st.integers(min_value=-120, max_value=10), st.one_of(st.none(), st.integers(-90, 0)))
def test_a_job_is_paused_only_at_a_fresh_checkpoint_or_past_the_deadline(
    minutes: int, progress_minutes: int | None
) -> None:
    now = PATCH_AT + timedelta(minutes=minutes)
    progress = None if progress_minutes is None else now + timedelta(minutes=progress_minutes)
    paused = pauses(FENCES, [running(progress_at=progress)], GROUP_OF, now) != []
    fresh = progress is not None and progress >= PATCH_AT - LEAD
    assert paused == (fresh or now >= PATCH_AT - LEAD * DEADLINE_SHARE)
