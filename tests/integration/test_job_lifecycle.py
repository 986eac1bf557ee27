"""The job lifecycle on moto: random sequences of moves by every actor never take a job out
of a terminal status, never leave a job holding quota without nodes (or waiting with
some), and never run it backwards; restarts keep its size; the Live index always holds
exactly the active jobs and those with pods to stop; the replicas quota counts are the
nodes a job holds. Recovery may shrink a job, never grow it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from itertools import count
from typing import Any

import botocore.session
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from tests.conftest import Stack
from tests.integration.api_harness import quota_body

from hyperguard.governance.jobs import (
    Actor,
    AdmitRequest,
    FencedOutError,
    JobLifecycle,
    Outcome,
    PreemptRequest,
    SubmissionRules,
)
from hyperguard.models import Checkpoint, Job, JobStatus
from hyperguard.models.governance import ComputeQuota
from hyperguard.models.jobs import (
    ACTIVE_STATUSES,
    HOLDING_STATUSES,
    TERMINAL_STATUSES,
    WAITING_STATUSES,
)
from hyperguard.models.records import JobEvent
from hyperguard.store import JobStore, TeamStore
from hyperguard.store import jobs as store_jobs
from hyperguard.store.codec import wire_client

RULES = SubmissionRules(True, frozenset(), 8)
NODES = ["i-0000000000000000a", "i-0000000000000000b", "i-0000000000000000c"]
INCIDENT = "inc-1"
_ids = count()

MOVES = st.sampled_from(
    [
        "admit",
        "start",
        "undispatch",
        "preempt",
        "shrink",
        "cancel",
        "stopped",
        "succeed",
        "fail",
        "requeue_lost",
        "protect",
        "restart",
        "requeue_recovery",
        "release",
        "checkpoint",
        "grow",
        "relocate",
    ]
)


def apply(lifecycle: JobLifecycle, teams: TeamStore, job_id: str, move: str, step: int) -> None:
    record = lifecycle.store.record(job_id)
    assert record is not None
    job = record.job
    lease = teams.acquire_lease("c", f"pass-{step}", 60)
    assert lease is not None
    fence = [teams.lease_check(lease)]
    try:
        match move:
            case "admit":
                lifecycle.admit(
                    job_id,
                    nodes=NODES[:2],
                    pool="workers",
                    replicas=2,
                    restart=record.first_admitted_at is not None,
                    reason="admitted",
                    fence=fence,
                )
            case "start":
                lifecycle.start(job_id, nodes=job.nodes, pool=job.pool)
            case "undispatch":
                lifecycle.undispatch(job_id, "refused")
            case "preempt":
                lifecycle.preempt(job_id, reason="preempted", fence=fence)
            case "shrink":
                lifecycle.resize(
                    job_id,
                    nodes=job.nodes[:1],
                    by=Actor.SCHEDULER,
                    reason="shrunk",
                    grown=False,
                    fence=fence,
                )
            case "grow":
                lifecycle.resize(
                    job_id,
                    nodes=[*job.nodes, NODES[2]],
                    by=Actor.SCHEDULER,
                    reason="grown",
                    grown=True,
                    fence=fence,
                )
            case "relocate":
                if job.nodes:
                    lifecycle.relocate(job, old=job.nodes[0], new=NODES[2], incident_id=INCIDENT)
            case "cancel":
                lifecycle.cancel(job_id, principal="someone")
            case "stopped":
                lifecycle.stopped(job_id, job.nodes)
            case "succeed" | "fail":
                status = JobStatus.SUCCEEDED if move == "succeed" else JobStatus.FAILED
                lifecycle.finish(record, status, reason=move)
            case "requeue_lost":
                lifecycle.requeue(job_id, by=Actor.RECONCILER, run=job.run, reason="lost")
            case "protect":
                if job.nodes:
                    lifecycle.protect(job_id, incident_id=INCIDENT, node=job.nodes[0])
            case "restart":
                nodes = [NODES[2], *job.nodes[1:]]
                lifecycle.restart(
                    job_id, incident_id=INCIDENT, run=job.run, nodes=nodes, reason="restart"
                )
            case "requeue_recovery":
                lifecycle.requeue(
                    job_id, by=Actor.RECOVERY, protected_by=INCIDENT, reason="escalated"
                )
            case "release":
                lifecycle.release(job_id, incident_id=INCIDENT, reason="done")
            case "checkpoint":
                at = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=step)
                lifecycle.record_checkpoint(
                    job_id,
                    Checkpoint(step=step, uri=f"s3://b/step-{step}/", completed_at=at),
                    history=True,
                )
    finally:
        teams.release_lease(lease)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(st.lists(MOVES, min_size=1, max_size=25))
@example(["admit", "protect", "undispatch"])  # found in CI: undispatch kept protected_by
def test_random_moves_keep_the_lifecycles_invariants(stack: Stack, moves: list[str]) -> None:
    jobs = JobStore(stack.tables["JobsTable"])
    teams = TeamStore(stack.tables["TeamsTable"])
    lifecycle = JobLifecycle(jobs)
    job_id = f"job-{next(_ids)}"
    lifecycle.submit(
        Job(job_id=job_id, team="ml", image="i", replicas=2, submitted_at=datetime.now(UTC)),
        principal="p",
        rules=RULES,
    )
    before = jobs.record(job_id)
    assert before is not None
    for step, move in enumerate(moves, start=1):
        apply(lifecycle, teams, job_id, move, step)
        after = jobs.record(job_id)
        assert after is not None
        status, nodes = after.job.status, after.job.nodes
        if before.job.status in TERMINAL_STATUSES:
            assert status is before.job.status, (move, before.job.status, status)
        if status in HOLDING_STATUSES:
            assert nodes, (move, status)
        if status in WAITING_STATUSES:
            assert not nodes and after.protected_by is None, (move, status)
        if status is JobStatus.CANCELLED and not after.stop_pending:
            assert not nodes, move
        assert after.job.run >= before.job.run
        if move in ("restart", "relocate") and after.job.run >= before.job.run:
            assert len(nodes) == len(before.job.nodes)  # neither changes its size
        if move == "relocate":
            assert after.job.run == before.job.run  # the same run, recorded where it is
        if status in HOLDING_STATUSES and after.admitted_replicas is not None:
            assert after.admitted_replicas == len(nodes), move  # quota counts what it holds
        if after.job.last_checkpoint and before.job.last_checkpoint:
            assert after.job.last_checkpoint.step >= before.job.last_checkpoint.step
        statuses = [h.status for h in after.history if h.status is not None]
        assert statuses[-1] is status  # the history's last status is the job's
        # The Live index holds exactly the jobs a scheduling pass must see.
        live = {r.job.job_id for r in jobs.active()}
        assert (job_id in live) == (status in ACTIVE_STATUSES or after.stop_pending), move
        before = after
    # The examples share one table: end this job so that it leaves the Live index, or every
    # later example's reads of the index grow with the jobs of the ones before it.
    lifecycle.cancel(job_id, principal="p")
    record = jobs.record(job_id)
    if record is not None and record.stop_pending:
        lifecycle.stopped(job_id, record.job.nodes)


def admitted_on_two_nodes(stack: Stack, lifecycle: JobLifecycle) -> str:
    """A new job, submitted and admitted by a lease-holding pass onto NODES[:2]."""
    teams = TeamStore(stack.tables["TeamsTable"])
    job_id = f"job-{next(_ids)}"
    job = Job(job_id=job_id, team="ml", image="i", replicas=2, submitted_at=datetime.now(UTC))
    lifecycle.submit(job, principal="p", rules=RULES)
    lease = teams.acquire_lease("c", "pass", 60)
    assert lease is not None
    fence = [teams.lease_check(lease)]
    assert lifecycle.admit(
        job_id, nodes=NODES[:2], pool="w", replicas=2, restart=False, reason="a", fence=fence
    )
    return job_id


def test_a_submitted_job_is_stored_as_the_job_and_record_fields_only(stack: Stack) -> None:
    """The item is the job's fields, the record's, the Live key and the revision: nothing
    else (a keyword the item builder took for an attribute once stored `exclude` on every
    job)."""
    jobs = JobStore(stack.tables["JobsTable"])
    job = Job(job_id=f"job-{next(_ids)}", team="ml", image="i", submitted_at=datetime.now(UTC))
    JobLifecycle(jobs).submit(job, principal="p", rules=RULES)
    item = jobs.table.get_item(Key={"job_id": job.job_id}, ConsistentRead=True)["Item"]
    allowed = set(Job.model_fields) | store_jobs._RECORD_FIELDS | {"live", store_jobs.REV}
    assert set(item) <= allowed, set(item) - allowed
    assert item["live"] == store_jobs.LIVE and item["status"] == "Pending"
    assert item[store_jobs.REV] == 0


def test_recovery_may_shrink_a_job_it_protects_but_never_grow_it(stack: Stack) -> None:
    jobs = JobStore(stack.tables["JobsTable"])
    lifecycle = JobLifecycle(jobs)
    job_id = admitted_on_two_nodes(stack, lifecycle)
    assert lifecycle.protect(job_id, incident_id=INCIDENT, node=NODES[0])

    def resize(nodes: list[str], *, grown: bool) -> Outcome:
        return lifecycle.resize(
            job_id,
            nodes=nodes,
            by=Actor.RECOVERY,
            reason="recovery",
            grown=grown,
            protected_by=INCIDENT,
            run=0,
        )

    refused = resize(NODES, grown=True)
    assert not refused and refused.why == f"resize refused: recovery may only shrink job {job_id}"
    assert not resize(NODES, grown=False)  # more nodes, whatever the caller calls it
    assert resize(NODES[1:2], grown=False)
    record = jobs.record(job_id)
    assert record is not None and record.job.nodes == NODES[1:2]
    assert record.admitted_replicas == 1 and record.job.run == 1


def test_two_nodes_relocated_at_once_from_one_snapshot_both_land(stack: Stack) -> None:
    """Both nodes of an auto-resume job were replaced in a storm, and their incidents each
    relocated the job from the same snapshot. The second write must not put back the node
    the first one replaced (D97: the 64-node storm left a job on a node gone that way)."""
    jobs = JobStore(stack.tables["JobsTable"])
    lifecycle = JobLifecycle(jobs)
    job_id = admitted_on_two_nodes(stack, lifecycle)
    record = jobs.record(job_id)
    assert record is not None
    snapshot = record.job
    assert lifecycle.relocate(snapshot, old=NODES[0], new="i-000000000000000aa", incident_id="a")
    assert lifecycle.relocate(snapshot, old=NODES[1], new="i-000000000000000bb", incident_id="b")
    after = jobs.record(job_id)
    assert after is not None
    assert after.job.nodes == ["i-000000000000000aa", "i-000000000000000bb"]
    assert after.job.run == 0
    # A node the job no longer has is not relocated again.
    assert not lifecycle.relocate(
        snapshot, old=NODES[0], new="i-000000000000000cc", incident_id="c"
    )


@contextmanager
def transactions_sent(jobs: JobStore) -> Iterator[list[int]]:
    """The size of each TransactWriteItems the job store's client sends meanwhile."""
    sent: list[int] = []
    events = wire_client(jobs.table).meta.events  # the store's transactions (D180)
    hook = "provide-client-params.dynamodb.TransactWriteItems"

    def count(params: dict[str, list[object]], **_: object) -> None:
        sent.append(len(params["TransactItems"]))

    events.register(hook, count)
    try:
        yield sent
    finally:
        events.unregister(hook, count)


def test_a_pass_writes_its_reasons_in_transactions_skipping_only_the_changed_ones(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reasons go in TransactWriteItems of TRANSACT_LIMIT (made 4 here: DynamoDB's 100 is
    checked against botocore's model below); a transaction a job's condition cancels is sent
    again without it. A job whose reason changed since it was read, and one admitted
    meanwhile, keep theirs, and only they."""
    monkeypatch.setattr(store_jobs, "TRANSACT_LIMIT", 4)
    jobs = JobStore(stack.tables["JobsTable"])
    lifecycle = JobLifecycle(jobs)
    waiting = []
    for _ in range(8):
        job = Job(job_id=f"job-{next(_ids)}", team="ml", image="i", submitted_at=datetime.now(UTC))
        lifecycle.submit(job, principal="p", rules=RULES)
        waiting.append(job.job_id)
    first = jobs.record(waiting[0])
    assert first is not None
    was = first.reason
    assert lifecycle.set_reason(waiting[2], "a burst's note", replacing=was)
    admitted = admitted_on_two_nodes(stack, lifecycle)

    with transactions_sent(jobs) as sent:
        writes = [(job_id, "pending: quota", was) for job_id in [*waiting, admitted]]
        written = lifecycle.set_reasons(writes)
    assert written == set(waiting) - {waiting[2]}
    assert sent == [4, 3, 4, 1]  # 4 cancelled by waiting[2]; 4; 1 cancelled by `admitted`
    kept = {job_id: jobs.record(job_id) for job_id in (waiting[0], waiting[2], admitted)}
    assert {job_id: r.reason if r else None for job_id, r in kept.items()} == {
        waiting[0]: "pending: quota",
        waiting[2]: "a burst's note",
        admitted: "a",
    }


def test_the_transaction_size_is_dynamodbs() -> None:
    model = botocore.session.get_session().get_service_model("dynamodb")
    items = model.operation_model("TransactWriteItems").input_shape.members["TransactItems"]
    assert store_jobs.TRANSACT_LIMIT == items.metadata["max"] == 100


def test_a_pass_marks_its_dispatched_jobs_running_in_one_transaction(stack: Stack) -> None:
    """Three jobs admitted and dispatched: one transaction moves the two still Admitted; the
    one cancelled meanwhile is tried alone and refused with its status, as `start` says."""
    jobs = JobStore(stack.tables["JobsTable"])
    lifecycle = JobLifecycle(jobs)
    admitted = [admitted_on_two_nodes(stack, lifecycle) for _ in range(3)]
    assert lifecycle.cancel(admitted[1], principal="p")[0]
    records = [jobs.record(job_id) for job_id in admitted]
    dispatched = [r.job for r in records if r is not None]
    with transactions_sent(jobs) as sent:
        outcomes = lifecycle.start_all(dispatched)
    assert sent == [3, 2]  # cancelled by admitted[1]'s condition, then the two
    assert [bool(outcomes[job_id]) for job_id in admitted] == [True, False, True]
    assert "is Cancelled, not Admitted" in outcomes[admitted[1]].why
    for job_id in (admitted[0], admitted[2]):
        record = jobs.record(job_id)
        assert record is not None and record.job.status is JobStatus.RUNNING
        assert record.history[-1].event == "dispatched"
        assert record.history[-1].details == {"nodes": NODES[:2]}


def waiting_jobs(lifecycle: JobLifecycle, teams: TeamStore, *names: str) -> list[str]:
    """One new job a team, each team with a quota (version 1)."""
    ids = []
    for team in names:
        if team not in {q.compute_quota_target.team_name for q in teams.quotas()}:
            body = quota_body(team, 64, strategy="LendAndBorrow", borrow=50)
            teams.put_quota(ComputeQuota.model_validate(body), target_version=None)
        job = Job(job_id=f"job-{next(_ids)}", team=team, image="i", submitted_at=datetime.now(UTC))
        lifecycle.submit(job, principal="p", rules=RULES)
        ids.append(job.job_id)
    return ids


def admissions(teams: TeamStore, job_ids: list[str], team_of: dict[str, str]) -> list[AdmitRequest]:
    lease = teams.acquire_lease("c", "pass", 60)
    assert lease is not None
    return [
        AdmitRequest(
            job_id,
            nodes=NODES[:1],
            pool="w",
            replicas=1,
            restart=False,
            reason="fits",
            fence=(teams.lease_check(lease), teams.quota_version_check(team_of[job_id], 1)),
        )
        for job_id in job_ids
    ]


def test_a_pass_admits_its_jobs_in_transactions_each_check_sent_once(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seven admissions of two teams, transactions of at most 6 actions (TRANSACT_LIMIT made
    6 here): each carries the lease's check and its jobs' teams' quota checks once, and a job
    cancelled since the snapshot is dropped from its transaction, then refused alone with
    its status. The others are Admitted, once each."""
    monkeypatch.setattr(store_jobs, "TRANSACT_LIMIT", 6)
    jobs, teams = JobStore(stack.tables["JobsTable"]), TeamStore(stack.tables["TeamsTable"])
    lifecycle = JobLifecycle(jobs)
    names = ["ml", "ml", "ml", "cv", "cv", "ml", "ml"]
    ids = waiting_jobs(lifecycle, teams, *names)
    assert lifecycle.cancel(ids[1], principal="p")[0]
    with transactions_sent(jobs) as sent:
        batch = lifecycle.admit_all(admissions(teams, ids, dict(zip(ids, names, strict=True))))
    # lease + ml + 3 jobs, sent again without the cancelled one; lease + ml + cv + 3 jobs;
    # lease + ml + 1 job; then the cancelled job alone with its two checks, and once more
    # without its history entry (as `transition` tells a full history from a moved job).
    assert sent == [5, 4, 6, 3, 3, 3]
    assert batch.error is None
    assert [bool(batch.outcomes[job_id]) for job_id in ids] == [True, False, *[True] * 5]
    assert "is Cancelled, not Pending" in batch.outcomes[ids[1]].why
    for job_id in (ids[0], *ids[2:]):
        record = jobs.record(job_id)
        assert record is not None and record.job.status is JobStatus.ADMITTED
        assert [h.event for h in record.history].count(JobEvent.ADMITTED) == 1
        assert record.history[-1].details == {"nodes": NODES[:1], "pool": "w", "replicas": 1}


def test_a_quota_changed_since_the_snapshot_fences_the_rest_of_the_batch(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failed fence check cancels its transaction and sends nothing more: what earlier
    transactions wrote stands (a job written after one dropped for its own condition too),
    the rest stays waiting, nothing is tried alone, and the batch says it was fenced."""
    monkeypatch.setattr(store_jobs, "TRANSACT_LIMIT", 5)
    jobs, teams = JobStore(stack.tables["JobsTable"]), TeamStore(stack.tables["TeamsTable"])
    lifecycle = JobLifecycle(jobs)
    names = ["ml", "ml", "ml", "cv", "cv"]
    ids = waiting_jobs(lifecycle, teams, *names)
    assert lifecycle.cancel(ids[0], principal="p")[0]
    requests = admissions(teams, ids, dict(zip(ids, names, strict=True)))
    body = quota_body("cv", 32, strategy="LendAndBorrow", borrow=50)
    teams.put_quota(ComputeQuota.model_validate(body), target_version=1)  # cv's is now 2
    with transactions_sent(jobs) as sent:
        batch = lifecycle.admit_all(requests)
    # lease + ml + 3 ml jobs, sent again without the cancelled one; lease + cv + 2 cv jobs,
    # cancelled by cv's check.
    assert sent == [5, 4, 4]
    assert isinstance(batch.error, FencedOutError)
    assert set(batch.outcomes) == {ids[1], ids[2]} and all(batch.outcomes.values())
    statuses = {job_id: (r.job.status if (r := jobs.record(job_id)) else None) for job_id in ids}
    assert statuses == {
        ids[0]: JobStatus.CANCELLED,
        **dict.fromkeys(ids[1:3], JobStatus.ADMITTED),
        **dict.fromkeys(ids[3:], JobStatus.PENDING),
    }


def test_a_pass_preempts_its_victims_in_transactions_as_each_alone(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """D177: five victims, transactions of at most 4 actions (TRANSACT_LIMIT made 4), each
    with the lease's check once; a victim cancelled since the snapshot is dropped from its
    transaction, then refused alone with its status. The others are written as `preempt`
    writes a victim alone: the same status, fields and history entry."""
    monkeypatch.setattr(store_jobs, "TRANSACT_LIMIT", 4)
    jobs, teams = JobStore(stack.tables["JobsTable"]), TeamStore(stack.tables["TeamsTable"])
    lifecycle = JobLifecycle(jobs)
    running = [admitted_on_two_nodes(stack, lifecycle) for _ in range(6)]
    for job_id in running:
        assert lifecycle.start(job_id, nodes=NODES[:2], pool="w")
    alone, victims = running[0], running[1:]
    assert lifecycle.cancel(victims[1], principal="p")[0]
    lease = teams.acquire_lease("c", "pass", 60)
    assert lease is not None
    fence = (teams.lease_check(lease),)
    details: dict[str, Any] = {"for_job": "urgent", "nodes": NODES[:2]}
    assert lifecycle.preempt(alone, reason="for urgent", fence=list(fence), **details)
    with transactions_sent(jobs) as sent:
        batch = lifecycle.preempt_all(
            [PreemptRequest(job_id, "for urgent", fence, details) for job_id in victims]
        )
    # lease + 3 victims, sent again without the cancelled one; lease + the last 2; then the
    # cancelled one alone, and once more without its history entry.
    assert sent == [4, 3, 3, 2, 2]
    assert batch.error is None
    assert [bool(batch.outcomes[job_id]) for job_id in victims] == [True, False, True, True, True]
    assert "is Cancelled, not" in batch.outcomes[victims[1]].why
    expected = jobs.record(alone)
    assert expected is not None and expected.history[-1].event == JobEvent.PREEMPTED

    def written(job_id: str) -> tuple[object, ...]:
        record = jobs.record(job_id)
        assert record is not None
        job = record.job.model_dump(exclude={"job_id", "submitted_at"})
        entry = record.history[-1]
        return job, entry.event, entry.reason, entry.details, record.admitted_replicas

    for job_id in (victims[0], *victims[2:]):
        assert written(job_id) == written(alone)


def test_a_pass_finishes_its_ended_jobs_in_one_transaction(stack: Stack) -> None:
    """Three running jobs whose runs ended: one transaction finishes the two whose run is
    still the one that ended; the one restarted meanwhile (a newer run) is tried alone and
    refused, as `finish` refuses it, and keeps running."""
    jobs = JobStore(stack.tables["JobsTable"])
    lifecycle = JobLifecycle(jobs)
    running = [admitted_on_two_nodes(stack, lifecycle) for _ in range(3)]
    for job_id in running:
        assert lifecycle.start(job_id, nodes=NODES[:2], pool="w")
    ended = [jobs.record(job_id) for job_id in running]
    assert lifecycle.protect(running[0], incident_id=INCIDENT, node=NODES[0])
    assert lifecycle.protect(running[1], incident_id=INCIDENT, node=NODES[0])
    assert lifecycle.restart(
        running[1], incident_id=INCIDENT, run=0, nodes=NODES[:2], reason="node replaced"
    )
    with transactions_sent(jobs) as sent:
        outcomes = lifecycle.finish_all(
            [(r, JobStatus.SUCCEEDED, "run completed") for r in ended if r is not None]
        )
    assert sent == [3, 2]  # cancelled by running[1]'s newer run, then the two
    assert [bool(outcomes[job_id]) for job_id in running] == [True, False, True]
    for job_id in (running[0], running[2]):
        record = jobs.record(job_id)
        assert record is not None and record.job.status is JobStatus.SUCCEEDED
        assert record.job.nodes == [] and record.admitted_replicas is None
        assert record.protected_by is None  # protection ends with the job
        assert record.history[-1].event == "finished"
        assert set(record.history[-1].details) == {"run_time_s", "restarts"}
    record = jobs.record(running[1])
    assert record is not None and record.job.status is JobStatus.RUNNING
