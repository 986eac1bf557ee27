"""What recovery decides for a failed node's jobs, over what ProtectJobs read (no store, no
cluster): which jobs it protects, each one's strategy and spare, and what carrying a plan
out comes to."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from hyperguard.models import Checkpoint, Incident, Job, JobStatus, Node, ProtectedJob, Repair
from hyperguard.models.jobs import AppliedStrategy, ElasticPolicy, JobRecovery, RecoveryStrategy
from hyperguard.models.records import JobRecord
from hyperguard.policies.repair import ComponentTimes
from hyperguard.recovery.protection import (
    JobToProtect,
    LeaveToAutoResume,
    ProtectionSnapshot,
    Requeue,
    Restart,
    Shrink,
    carry_out,
    next_nodes,
    plan_protection,
    protectable,
)

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
FAILED = "i-1"
INCIDENT = Incident(
    incident_id="inc-1",
    instance_id=FAILED,
    cluster="c",
    kind="hyperpod_node_health",
    severity="fatal",
    repair=Repair.REPLACE,
    reason="gpu",
    opened_at=NOW,
    first_signal_at=NOW,
)
NODE = Node(
    instance_id=FAILED,
    cluster="c",
    pool="workers",
    platform="hyperpod",
    instance_type="ml.p5.48xlarge",
)


def job(job_id: str = "j", **overrides: Any) -> Job:
    values: dict[str, Any] = {
        "job_id": job_id,
        "team": "ml",
        "replicas": 2,
        "nodes": [FAILED, "i-2"],
        "status": JobStatus.RUNNING,
    }
    return Job(**(values | overrides))


def snapshot(*jobs: Job, **overrides: Any) -> ProtectionSnapshot:
    values: dict[str, Any] = {
        "incident": INCIDENT,
        "round": 1,
        "repair": Repair.REPLACE,
        "node": NODE,
        "jobs": tuple(JobToProtect(j, None) for j in jobs),
        "spares": (),
        "times": ComponentTimes(),
        "source": "published",
        "now": NOW,
    }
    return ProtectionSnapshot(**(values | overrides))


def test_only_jobs_holding_the_node_and_no_other_incidents_are_protected() -> None:
    records = [
        JobRecord(job=job("z-own"), protected_by="inc-1"),
        JobRecord(job=job("b-free")),
        JobRecord(job=job("c-other"), protected_by="inc-2"),
        JobRecord(job=job("d-elsewhere", nodes=["i-3"])),
        JobRecord(job=job("e-queued", status=JobStatus.PENDING, nodes=[FAILED])),
        JobRecord(job=job("a-admitted", status=JobStatus.ADMITTED)),
    ]
    assert [j.job_id for j in protectable(INCIDENT, records)] == ["a-admitted", "b-free", "z-own"]


def test_the_first_job_that_takes_a_spare_gets_it_and_the_next_sees_none_left() -> None:
    plans = plan_protection(snapshot(job("a"), job("b"), spares=("i-9",)))
    assert [(p.choice.strategy, p.spare) for p in plans] == [
        (AppliedStrategy.HOT_SPARE, "i-9"),
        (AppliedStrategy.WAIT_FOR_REPAIR, None),
    ]


def test_a_plan_records_the_checkpoint_it_resumes_from_and_how_old_it_is() -> None:
    checkpoint = Checkpoint(
        step=400, uri="s3://b/ckpt/400", completed_at=NOW - timedelta(seconds=90)
    )
    running = job(run=3)
    (plan,) = plan_protection(snapshot(jobs=(JobToProtect(running, checkpoint),), round=2))
    assert plan.checkpoint_age_s == 90.0
    planned = plan.planned()
    assert (planned.checkpoint_step, planned.checkpoint_uri) == (400, "s3://b/ckpt/400")
    assert (planned.nodes, planned.run, planned.round, planned.team) == (
        [FAILED, "i-2"],
        3,
        2,
        "ml",
    )
    assert planned.strategy == AppliedStrategy.WAIT_FOR_REPAIR.value
    assert not planned.resumed
    (fresh,) = plan_protection(snapshot(job()))
    assert fresh.checkpoint_age_s is None and fresh.planned().checkpoint_step is None


@pytest.mark.parametrize(
    ("repair", "node"),
    [
        (Repair.DRAIN, NODE),
        (Repair.REPLACE, None),
        (Repair.REPLACE, NODE.model_copy(update={"platform": "eks"})),
    ],
)
def test_a_node_that_does_not_come_back_is_not_waited_for(
    repair: Repair, node: Node | None
) -> None:
    asked = job(recovery=JobRecovery(strategy=RecoveryStrategy.WAIT_FOR_REPAIR))
    (plan,) = plan_protection(snapshot(asked, repair=repair, node=node))
    assert plan.choice.strategy is not AppliedStrategy.WAIT_FOR_REPAIR


def planned(strategy: AppliedStrategy, **overrides: Any) -> ProtectedJob:
    values: dict[str, Any] = {
        "job_id": "j",
        "strategy": strategy.value,
        "nodes": [FAILED, "i-2"],
        "checkpoint_step": 400,
        "run": 3,
        "round": 1,
    }
    return ProtectedJob(**(values | overrides))


def decide(plan: ProtectedJob, now: Job | None = None, **overrides: Any) -> Any:
    values: dict[str, Any] = {"failed": FAILED, "replacement": None, "lost": ""}
    return carry_out(AppliedStrategy(plan.strategy), plan, now or job(), **(values | overrides))


def test_a_job_waiting_for_the_repair_restarts_on_the_replacement_or_the_repaired_node() -> None:
    waiting = planned(AppliedStrategy.WAIT_FOR_REPAIR)
    assert decide(waiting, replacement="i-7") == Restart(
        "i-7", ["i-7", "i-2"], "restarted on i-7 by wait_for_repair from checkpoint step 400"
    )
    assert decide(waiting) == Restart(
        FAILED,
        [FAILED, "i-2"],
        f"restarted on {FAILED} by wait_for_repair from checkpoint step 400",
    )


def test_a_hot_spare_restarts_on_its_spare_or_requeues_without_one() -> None:
    spare = planned(AppliedStrategy.HOT_SPARE, spare="i-9")
    assert next_nodes(AppliedStrategy.HOT_SPARE, spare, FAILED, "i-7") == ["i-9", "i-2"]
    assert decide(spare, replacement="i-7") == Restart(
        "i-9", ["i-9", "i-2"], "restarted on i-9 by hot_spare from checkpoint step 400"
    )
    without = planned(AppliedStrategy.HOT_SPARE)
    assert next_nodes(AppliedStrategy.HOT_SPARE, without, FAILED, None) is None
    assert decide(without) == Requeue("no node to restart on")


def test_a_next_node_out_of_service_sends_the_job_back_to_the_queue() -> None:
    assert decide(planned(AppliedStrategy.HOT_SPARE, spare="i-9"), lost="i-2") == Requeue(
        "i-2 out of service"
    )
    elastic = job(elastic_policy=ElasticPolicy(min_replicas=1, max_replicas=2))
    assert decide(planned(AppliedStrategy.ELASTIC_SHRINK), elastic, lost="i-2") == Requeue(
        "i-2 out of service"
    )


def test_an_elastic_job_shrinks_to_the_largest_size_its_policy_allows_or_requeues() -> None:
    four = planned(AppliedStrategy.ELASTIC_SHRINK, nodes=[FAILED, "i-2", "i-3", "i-4"])
    assert next_nodes(AppliedStrategy.ELASTIC_SHRINK, four, FAILED, None) == ["i-2", "i-3", "i-4"]
    even = job(
        elastic_policy=ElasticPolicy(min_replicas=2, max_replicas=4, replica_increment_step=2)
    )
    assert decide(four, even) == Shrink(
        ["i-2", "i-3"],
        2,
        f"shrunk to 2 replica(s) off failed node {FAILED}; grows back when capacity returns",
    )
    at_minimum = job(elastic_policy=ElasticPolicy(min_replicas=2, max_replicas=4))
    assert decide(planned(AppliedStrategy.ELASTIC_SHRINK), at_minimum) == Requeue(
        "cannot shrink below min"
    )
    assert decide(planned(AppliedStrategy.ELASTIC_SHRINK)) == Requeue("cannot shrink below min")


def test_the_other_plans_leave_the_job_to_hyperpod_or_send_it_to_the_queue() -> None:
    auto = planned(AppliedStrategy.HYPERPOD_AUTO_RESUME)
    assert decide(auto) == LeaveToAutoResume()
    assert next_nodes(AppliedStrategy.HYPERPOD_AUTO_RESUME, auto, FAILED, None) is None
    assert decide(planned(AppliedStrategy.MOVE)) == Requeue("move", prefer_burst=True)
    assert decide(planned(AppliedStrategy.REQUEUE)) == Requeue("requeue")
