"""The pass's snapshot sorts its jobs once (`JobViews`): each view is exactly what a filter
over every record would give, in the records' order, and stays so as the snapshot is
refreshed or replaced."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st
from tests.unit.governance.pass_builders import pending, snapshot

from hyperguard.governance.snapshot import JobViews
from hyperguard.models import JobStatus
from hyperguard.models.jobs import ACTIVE_STATUSES, HOLDING_STATUSES
from hyperguard.models.records import JobRecord


def record(index: int, status: JobStatus, stop_pending: bool) -> JobRecord:
    base = pending(f"job-{index:03d}", f"team-{index % 3}")
    job = base.job.model_copy(update={"status": status})
    return base.model_copy(update={"job": job, "stop_pending": stop_pending})


records = st.lists(st.tuples(st.sampled_from(list(JobStatus)), st.booleans()), max_size=30).map(
    lambda drawn: tuple(record(i, status, stop) for i, (status, stop) in enumerate(drawn))
)


def filtered(jobs: tuple[JobRecord, ...]) -> dict[str, object]:
    """The views as the filters they replace wrote them, each over every record."""
    return {
        "by_id": {r.job.job_id: r for r in jobs},
        "teams": {r.job.job_id: r.job.team for r in jobs},
        "active_ids": tuple(r.job.job_id for r in jobs if r.job.status in ACTIVE_STATUSES),
        "holding": tuple(r for r in jobs if r.job.status in HOLDING_STATUSES),
        "running": tuple(r for r in jobs if r.job.status is JobStatus.RUNNING),
        "admitted": tuple(r for r in jobs if r.job.status is JobStatus.ADMITTED),
        "stopping": tuple(r for r in jobs if r.stop_pending),
    }


def views_of(views: JobViews) -> dict[str, object]:
    return {name: getattr(views, name) for name in filtered(())}


@given(records)
def test_each_view_is_the_filter_it_replaces_in_the_records_order(
    jobs: tuple[JobRecord, ...],
) -> None:
    views = JobViews.of(jobs)
    assert views.jobs is jobs
    assert views_of(views) == filtered(jobs)


@given(records, st.data())
def test_a_refreshed_snapshot_has_the_fresh_records_and_views_made_from_them(
    jobs: tuple[JobRecord, ...], data: st.DataObject
) -> None:
    """Moved jobs leave views, join others, or stay: the views are the filters' each time."""
    snap = snapshot(jobs, [], [])
    moved = data.draw(st.sets(st.sampled_from(range(len(jobs)))) if jobs else st.just(set()))
    fresh = []
    for index in sorted(moved):
        status = data.draw(st.sampled_from(list(JobStatus)))
        stop = data.draw(st.booleans())
        fresh.append(record(index, status, stop))
    unknown = record(999, JobStatus.PENDING, False)  # not in the snapshot: not added
    refreshed = snap.refreshed([*fresh, unknown])
    by_id = {r.job.job_id: r for r in fresh}
    expected = tuple(by_id.get(r.job.job_id, r) for r in snap.jobs)
    assert refreshed.jobs == expected
    assert views_of(refreshed.view) == filtered(expected)
    assert snap.view.jobs is snap.jobs, "the snapshot refreshed is left as it was"


def test_a_job_that_only_leaves_views_is_refreshed_in_place() -> None:
    """The common move (a run ended): the views are updated, not made again."""
    jobs = tuple(
        record(i, JobStatus.RUNNING if i < 2 else JobStatus.PENDING, False) for i in range(4)
    )
    snap = snapshot(jobs, [], [])
    ended = record(0, JobStatus.SUCCEEDED, False)
    refreshed = snap.refreshed([ended])
    assert [r.job.job_id for r in refreshed.view.running] == ["job-001"]
    assert refreshed.view.active_ids == ("job-001", "job-002", "job-003")
    assert refreshed.view.by_id["job-000"] is ended and refreshed.jobs[0] is ended
    assert snap.refreshed([record(9, JobStatus.RUNNING, False)]) is snap, "no job of its"


def test_views_made_from_other_jobs_are_made_again() -> None:
    jobs = (record(1, JobStatus.RUNNING, False), record(2, JobStatus.PENDING, True))
    snap = snapshot(jobs, [], [], views=JobViews.of(jobs[:1]))
    assert snap.view.jobs is snap.jobs
    assert [r.job.job_id for r in snap.view.stopping] == ["job-002"]
    other = replace(snap, jobs=jobs[1:])
    assert other.view.by_id.keys() == {"job-002"} and other.view.running == ()
