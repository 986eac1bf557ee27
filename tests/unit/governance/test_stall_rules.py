"""A stalled job's incident (D117), decided by the pass (governance.decide): about the job
(no node), its id fixed by the job, the run and its last progress, its strategy a requeue
whatever the job asked for, and nothing for a job that is not stalled."""

from __future__ import annotations

from datetime import timedelta

import pytest
from tests.unit.governance.pass_builders import (
    CLUSTER,
    NOW,
    hyperpod_node,
    live_run,
    pending,
    plan,
    quota,
    running,
    snapshot,
)

from hyperguard.governance.intents import Verdict
from hyperguard.governance.stalls import (
    NOT_REQUEUED,
    REQUEUED,
    Stall,
    for_stall,
    refused,
    stall_incident,
    stall_incident_id,
)
from hyperguard.models import Checkpoint, IncidentStatus, Repair
from hyperguard.models.jobs import (
    AppliedStrategy,
    Heartbeat,
    JobRecovery,
    ProgressTrouble,
    RecoveryStrategy,
)
from hyperguard.models.records import JobRecord
from hyperguard.policies.repair import NodeRepairConfig

LIMIT = NodeRepairConfig.model_validate({"stalledJobMins": 30})


def checkpointing(record: JobRecord, *, step: int | None = 40, idle_min: float = 31) -> JobRecord:
    """`record` writing checkpoints, its last progress `idle_min` minutes before NOW."""
    last = (
        Checkpoint(step=step, uri=f"s3://b/hang/step-{step}/", completed_at=NOW)
        if step is not None
        else None
    )
    job = record.job.model_copy(
        update={"checkpoint_location": "s3://b/hang/", "last_checkpoint": last}
    )
    return record.model_copy(update={"job": job, "progress_at": NOW - timedelta(minutes=idle_min)})


def hung(step: int | None = 40, idle_min: float = 31, **job: object) -> JobRecord:
    record = running(pending("hang", "nlp"), ["i-hp00", "i-hp01"])
    record = record.model_copy(update={"job": record.job.model_copy(update=job)})
    return checkpointing(record, step=step, idle_min=idle_min)


def test_a_stall_past_the_limit_is_requeued_with_an_incident_about_the_job() -> None:
    nodes = [hyperpod_node(0), hyperpod_node(1)]
    reconciled, *_ = plan(snapshot([hung()], nodes, [quota("nlp", 16)], repair=LIMIT))
    (verdict,) = reconciled.verdicts
    assert verdict.verdict is Verdict.STALLED
    incident = verdict.incident
    assert incident is not None and incident.about_job
    since = NOW - timedelta(minutes=31)
    assert incident.incident_id == f"hang-run0-stalled-{since:%Y%m%dT%H%M%SZ}"
    assert (incident.instance_id, incident.cluster, incident.kind) == ("", CLUSTER, "job_stalled")
    assert (incident.status, incident.resolution) == (IncidentStatus.RESOLVED, REQUEUED)
    assert (incident.repair, incident.first_signal_at, incident.opened_at) == (
        Repair.NONE,
        since,
        NOW,
    )
    assert incident.facts["stalled_min"] == 31 and incident.facts["limit_min"] == 30
    assert incident.timings == {"signal_to_detected_s": 1860.0, "signal_to_resolved_s": 1860.0}
    (job,) = incident.jobs
    assert (job.job_id, job.team, job.run, job.nodes) == ("hang", "nlp", 0, ["i-hp00", "i-hp01"])
    assert (job.strategy, job.checkpoint_step) == ("requeue", 40)
    assert job.outcome == "requeued to resume from step 40 on its next placement"


@pytest.mark.parametrize(
    ("record", "policy"),
    [
        (hung(idle_min=29), LIMIT),  # not yet
        (hung(), NodeRepairConfig()),  # the rule is off
        (
            hung().model_copy(
                update={"job": hung().job.model_copy(update={"checkpoint_location": None})}
            ),
            LIMIT,
        ),
    ],
    ids=["below-the-limit", "rule-off", "no-checkpoints"],
)
def test_no_stall_no_incident(record: JobRecord, policy: NodeRepairConfig) -> None:
    nodes = [hyperpod_node(0), hyperpod_node(1)]
    reconciled, *_ = plan(snapshot([record], nodes, [quota("nlp", 16)], repair=policy))
    assert reconciled.verdicts == ()


def test_the_same_stall_has_the_same_id_and_a_later_one_another() -> None:
    """A pass that runs again records the stall once; a stall after new progress, or on the
    next run, is a new one."""
    since = NOW - timedelta(minutes=31)
    stall = Stall(since, 31, 30, 40)
    first = stall_incident(hung(), stall, NOW, CLUSTER)
    again = stall_incident(hung(), stall, NOW + timedelta(minutes=1), CLUSTER)
    assert first.incident_id == again.incident_id == stall_incident_id("hang", 0, since)
    assert stall_incident_id("hang", 0, since + timedelta(minutes=5)) != first.incident_id
    assert stall_incident_id("hang", 1, since) != first.incident_id


def test_a_job_without_a_checkpoint_resumes_from_the_start() -> None:
    incident = stall_incident(hung(step=None), Stall(NOW, 31, 30, None), NOW, CLUSTER)
    assert incident.jobs[0].checkpoint_step is None
    assert "the start" in incident.jobs[0].outcome and "latest none yet" in incident.reason


@pytest.mark.parametrize("asked", list(RecoveryStrategy))
def test_every_strategy_comes_to_a_requeue_and_says_why(asked: RecoveryStrategy) -> None:
    record = hung(recovery=JobRecovery(strategy=asked))
    strategy, why = for_stall(record.job)
    assert strategy is AppliedStrategy.REQUEUE
    assert why.startswith(asked.value if asked is RecoveryStrategy.AUTO else f"asked for {asked}")


def test_an_auto_resume_job_is_requeued_too_hyperpod_does_not_restart_a_hang() -> None:
    strategy, why = for_stall(hung(auto_resume=True).job)
    assert strategy is AppliedStrategy.REQUEUE and why.startswith("hyperpod_auto_resume")


def test_a_refused_requeue_is_said_on_the_incident() -> None:
    incident = stall_incident(hung(), Stall(NOW, 31, 30, 40), NOW, CLUSTER)
    marked = refused(incident, "requeue refused: job hang is Succeeded")
    assert marked.resolution == NOT_REQUEUED
    assert marked.jobs[0].outcome == "not requeued: requeue refused: job hang is Succeeded"
    assert incident.resolution == REQUEUED  # the planned one is untouched


def test_a_refused_checkpoint_location_is_read_again_after_a_doubling_wait_and_never_stalls() -> (
    None
):
    """S3 refused the job's location this pass: a trouble noted, read again after 1, 2, 4 …
    minutes in a row, at most 30 minutes apart (D139); unknown progress is no stall, while it
    is refused and while it waits for its retry."""
    nodes = [hyperpod_node(0), hyperpod_node(1)]
    record = hung(idle_min=45)
    waits = []
    for _ in range(8):
        reconciled, *_ = plan(
            snapshot(
                [record], nodes, [quota("nlp", 16)], repair=LIMIT, unreadable={"hang": "Denied"}
            )
        )
        assert reconciled.verdicts == ()
        (noted,) = reconciled.troubles
        assert noted.trouble is not None and noted.trouble.error == "Denied"
        assert noted.trouble.since == (record.progress_trouble or noted.trouble).since
        waits.append((noted.trouble.retry_at - NOW).total_seconds() / 60)
        record = record.model_copy(update={"progress_trouble": noted.trouble})
    assert waits == [1, 2, 4, 8, 16, 30, 30, 30]
    # Waiting for its retry: not read, no stall, nothing written.
    reconciled, *_ = plan(snapshot([record], nodes, [quota("nlp", 16)], repair=LIMIT))
    assert (reconciled.verdicts, reconciled.troubles) == ((), ())


def test_a_location_read_again_clears_its_trouble_and_the_stall_rule_applies_again() -> None:
    nodes = [hyperpod_node(0), hyperpod_node(1)]
    was = ProgressTrouble(
        since=NOW - timedelta(hours=1), failures=3, retry_at=NOW - timedelta(seconds=1), error="x"
    )
    record = hung(idle_min=45).model_copy(update={"progress_trouble": was})
    reconciled, *_ = plan(snapshot([record], nodes, [quota("nlp", 16)], repair=LIMIT))
    (noted,) = reconciled.troubles
    assert noted.trouble is None and noted.record is record
    (verdict,) = reconciled.verdicts  # read, and nothing newer for 45 minutes: a stall
    assert verdict.verdict is Verdict.STALLED


def test_a_run_the_operator_keeps_restarting_without_progress_is_a_stall() -> None:
    """The HyperPod training operator restarting a hung run (its restartCount going up, the
    run Running again each time) is no progress: the stall counts from the last checkpoint,
    not from the last restart, and the restarts are noted besides (D155)."""
    record = hung()
    nodes = [hyperpod_node(0), hyperpod_node(1)]
    runs = [live_run(record, restarts=4, since=NOW - timedelta(minutes=2))]
    reconciled, *_ = plan(snapshot([record], nodes, [quota("nlp", 16)], runs=runs, repair=LIMIT))
    (verdict,) = reconciled.verdicts
    assert verdict.verdict is Verdict.STALLED and verdict.incident is not None
    assert verdict.incident.kind == "job_stalled"
    assert reconciled.restarts == ()  # the stall decides: the job leaves this run


def beating(record: JobRecord, *, stepped_min: float) -> JobRecord:
    """`record` sending heartbeats of its current run, its step last up `stepped_min` ago."""
    beat = Heartbeat(
        run=record.job.run,
        step=41,
        at=NOW - timedelta(minutes=1),
        advanced_at=NOW - timedelta(minutes=stepped_min),
    )
    return record.model_copy(update={"heartbeat": beat})


HEARTBEATS = NodeRepairConfig.model_validate({"stalledJobMins": 90, "heartbeatStallMins": 10})


def test_a_run_that_sends_heartbeats_is_stalled_by_them_in_minutes() -> None:
    """Its step stopped 11 minutes ago and its last checkpoint is 31 minutes old: stalled by
    the heartbeat limit (10), long before the checkpoint limit (90)."""
    nodes = [hyperpod_node(0), hyperpod_node(1)]
    record = beating(hung(idle_min=31), stepped_min=11)
    reconciled, *_ = plan(snapshot([record], nodes, [quota("nlp", 16)], repair=HEARTBEATS))
    (verdict,) = reconciled.verdicts
    assert verdict.verdict is Verdict.STALLED
    assert verdict.reason == (
        "requeued to resume from its checkpoint: stalled: its heartbeats show no new step for "
        "11 min (limit 10; latest checkpoint step 40)"
    )
    assert verdict.incident is not None and verdict.incident.facts["limit_min"] == 10


@pytest.mark.parametrize(
    "record",
    [
        beating(hung(idle_min=31), stepped_min=9),  # its step went up 9 minutes ago
        beating(hung(idle_min=5), stepped_min=60),  # heartbeats stuck, checkpoints still come
        hung(idle_min=31).model_copy(  # an earlier run's heartbeat: the checkpoint rule (90)
            update={"heartbeat": beating(hung(), stepped_min=60).heartbeat, "job": hung(run=1).job}
        ),
    ],
    ids=["stepping", "checkpointing", "another-runs-heartbeat"],
)
def test_heartbeats_that_show_progress_are_no_stall(record: JobRecord) -> None:
    nodes = [hyperpod_node(0), hyperpod_node(1)]
    reconciled, *_ = plan(snapshot([record], nodes, [quota("nlp", 16)], repair=HEARTBEATS))
    assert reconciled.verdicts == ()
