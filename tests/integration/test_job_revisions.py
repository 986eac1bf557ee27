"""A job item's revision (D122): every write to it adds one, so `JobStore.active` re-reads
whole only the jobs whose revision moved since it last read them, and still sees every
change another writer made, strongly consistent."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from itertools import count
from typing import Any

from tests.conftest import Stack

from hyperguard.governance.jobs import JobLifecycle, SubmissionRules
from hyperguard.models import Checkpoint, Job
from hyperguard.models.jobs import WAITING_STATUSES
from hyperguard.models.records import JobEvent, JobHistoryEntry
from hyperguard.store import JobStore, TeamStore
from hyperguard.store.codec import BATCH_GET_MAX, wire_client
from hyperguard.store.jobs import REV

RULES = SubmissionRules(True, frozenset(), 8)
NODES = ["i-0000000000000000a", "i-0000000000000000b"]
_ids = count()


def submitted(jobs: JobStore, n: int) -> list[str]:
    lifecycle = JobLifecycle(jobs)
    ids = []
    for _ in range(n):
        job = Job(job_id=f"rev-{next(_ids):05d}", team="ml", image="i", submitted_at=now())
        lifecycle.submit(job, principal="p", rules=RULES)
        ids.append(job.job_id)
    return ids


def admitted(jobs: JobStore, job_id: str) -> Job:
    record = jobs.record(job_id)
    assert record is not None
    return record.job


def appended(jobs: JobStore, job_id: str, entry: JobHistoryEntry) -> bool:
    jobs.append_history(job_id, entry)  # refused only once the history is full
    return True


def now() -> datetime:
    return datetime.now(UTC)


def revision(jobs: JobStore, job_id: str) -> int:
    item = jobs.table.get_item(Key={"job_id": job_id}, ConsistentRead=True)["Item"]
    return int(item[REV])


@contextmanager
def whole_reads(jobs: JobStore) -> Iterator[list[str]]:
    """The job ids the store's BatchGetItems ask for whole (no ProjectionExpression)."""
    asked: list[str] = []

    def seen(params: dict[str, Any], **_: Any) -> None:
        for request in params["RequestItems"].values():
            if "ProjectionExpression" not in request:
                asked.extend(key["job_id"]["S"] for key in request["Keys"])

    events = wire_client(jobs.table).meta.events
    events.register("provide-client-params.dynamodb.BatchGetItem", seen, unique_id="revisions")
    try:
        yield asked
    finally:
        events.unregister("provide-client-params.dynamodb.BatchGetItem", unique_id="revisions")


def test_every_write_to_a_job_adds_one_to_its_revision(stack: Stack) -> None:
    jobs = JobStore(stack.tables["JobsTable"])
    teams = TeamStore(stack.tables["TeamsTable"])
    lifecycle = JobLifecycle(jobs)
    (job_id,) = submitted(jobs, 1)
    assert revision(jobs, job_id) == 0
    entry = JobHistoryEntry(at=now(), event=JobEvent.SLOW, reason="note")
    lease = teams.acquire_lease("c", "pass", 60)
    assert lease is not None
    writes: list[Callable[[], object]] = [
        lambda: jobs.set_reason(job_id, "waiting", expect=WAITING_STATUSES),
        lambda: jobs.set_reasons([(job_id, "still", "waiting")], expect=WAITING_STATUSES),
        lambda: appended(jobs, job_id, entry),
        lambda: lifecycle.admit(
            job_id,
            nodes=NODES,
            pool="w",
            replicas=2,
            restart=False,
            reason="admitted",
            fence=[teams.lease_check(lease)],
        ),
        lambda: lifecycle.start_all([admitted(jobs, job_id)])[job_id].applied,
        lambda: jobs.record_checkpoint(
            job_id, Checkpoint(step=10, uri="s3://b/10/", completed_at=now())
        ),
        lambda: jobs.record_timings(job_id, 10, {NODES[0]: 1.5}, None),
    ]
    for done, write in enumerate(writes, start=1):
        assert write(), f"write {done} was refused"
        assert revision(jobs, job_id) == done, f"write {done} did not count"
    assert not jobs.set_reason(job_id, "refused", expect=WAITING_STATUSES)
    assert revision(jobs, job_id) == len(writes), "a refused write counted"


def test_active_reads_whole_only_what_changed_and_sees_every_change(stack: Stack) -> None:
    table = stack.tables["JobsTable"]
    reader, other = JobStore(table), JobStore(table)
    ids = submitted(reader, BATCH_GET_MAX + 20)
    with whole_reads(reader) as first:
        assert [r.job.job_id for r in reader.active()] == ids
    assert sorted(first) == ids, "the first read is whole"

    cancelled, noted = ids[3], ids[BATCH_GET_MAX + 5]
    outcome, _ = JobLifecycle(other).cancel(cancelled, principal="p")
    assert outcome
    assert other.set_reason(noted, "a note", expect=WAITING_STATUSES)
    (late,) = submitted(other, 1)
    with whole_reads(reader) as second:
        active = {r.job.job_id: r for r in reader.active(also=[late])}
    # the cancelled job left the Live index, the late one is named by its wake-up
    assert sorted(second) == sorted([noted, late])
    assert cancelled not in active and late in active
    assert active[noted].reason == "a note"

    with whole_reads(reader) as third:
        assert len(reader.active()) == len(ids)  # one cancelled, one submitted
    assert third == [], "nothing changed: nothing read whole"


def test_reasons_the_store_wrote_are_not_read_whole_again_unless_another_writer_came_between(
    stack: Stack,
) -> None:
    """D181: a pass's reason writes leave the records it read current at revision + 1, so the
    next pass reads none of them whole; a job another writer changed between the read and the
    reason write is read whole, with both changes."""
    table = stack.tables["JobsTable"]
    reader, other = JobStore(table), JobStore(table)
    ids = submitted(reader, BATCH_GET_MAX + 20)
    read = {r.job.job_id: r for r in reader.active()}
    given, crossed = ids[: BATCH_GET_MAX + 10], ids[7]
    # another writer changes one of them after the read, before the reason write
    theirs = [(crossed, "theirs", read[crossed].reason)]
    assert other.set_reasons(theirs, expect=WAITING_STATUSES) == {crossed}
    writes = [(j, f"pending {j}", read[j].reason) for j in given if j != crossed]
    writes.append((crossed, "ours", "theirs"))
    assert reader.set_reasons(writes, expect=WAITING_STATUSES) == set(given)

    with whole_reads(reader) as asked:
        active = {r.job.job_id: r for r in reader.active()}
    assert asked == [crossed]
    assert active[crossed].reason == "ours"
    assert revision(reader, crossed) == 2
    assert all(active[j].reason == f"pending {j}" for j in given if j != crossed)
    stored = {r.job.job_id: r.model_dump() for r in reader.records_of(list(active))}
    assert {j: r.model_dump() for j, r in active.items()} == stored, (
        "a remembered record is the item as stored"
    )


def test_a_small_active_set_is_read_whole_in_one_call(stack: Stack) -> None:
    """Below one BatchGetItem's worth of jobs, the revisions would cost a call more."""
    jobs = JobStore(stack.tables["JobsTable"])
    ids = submitted(jobs, 5)
    jobs.active()
    with whole_reads(jobs) as asked:
        assert [r.job.job_id for r in jobs.active()] == ids
    assert sorted(asked) == ids


def test_a_named_job_that_no_longer_counts_is_left_out_read_whole_or_remembered(
    stack: Stack,
) -> None:
    """`also` names a job by key whether the index has it or not; one that ended is not
    active, whether its record was read whole this time or is the one remembered."""
    jobs = JobStore(stack.tables["JobsTable"])
    ids = submitted(jobs, BATCH_GET_MAX + 5)
    cancelled = ids[10]
    outcome, _ = JobLifecycle(jobs).cancel(cancelled, principal="p")
    assert outcome
    with whole_reads(jobs) as first:
        active = [r.job.job_id for r in jobs.active(also=[cancelled])]
    assert cancelled in first and cancelled not in active
    assert active == sorted(set(ids) - {cancelled}), "every other job, by id"
    with whole_reads(jobs) as second:
        again = [r.job.job_id for r in jobs.active(also=[cancelled])]
    assert second == [], "nothing changed: the ended job's record is the remembered one"
    assert again == active
