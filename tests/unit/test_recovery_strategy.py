"""Which recovery strategy a job gets: asked for, or the least expected lost GPU-time."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from hyperguard.models import Incident, IncidentStatus, Job, JobStatus, Repair
from hyperguard.models.jobs import AppliedStrategy, ElasticPolicy, JobRecovery, RecoveryStrategy
from hyperguard.policies.repair import ComponentTimes
from hyperguard.recovery.strategy import Situation, choose, estimates, measured

TIMES = ComponentTimes()


def job(**overrides: Any) -> Job:
    values: dict[str, Any] = {
        "job_id": "j",
        "team": "ml",
        "replicas": 4,
        "nodes": ["i-1", "i-2", "i-3", "i-4"],
        "status": JobStatus.RUNNING,
    }
    return Job(**(values | overrides))


def situation(j: Job, **overrides: Any) -> Situation:
    values: dict[str, Any] = {
        "job": j,
        "replicas_on_node": 1,
        "repair": Repair.REPLACE,
        "node_returns": True,
        "spare": False,
        "template_allows_burst": False,
    }
    return Situation(**(values | overrides))


def test_the_estimates_follow_the_published_component_times() -> None:
    costs = estimates(situation(job(), spare=True, template_allows_burst=True), TIMES)
    gpus = 4 * 8
    assert costs[AppliedStrategy.WAIT_FOR_REPAIR] == gpus * (900 + 1410)
    assert costs[AppliedStrategy.HOT_SPARE] == gpus * 1410
    assert costs[AppliedStrategy.MOVE] == gpus * (300 + 1410)
    assert AppliedStrategy.ELASTIC_SHRINK not in costs  # not an elastic job


def test_auto_takes_a_spare_when_there_is_one_else_waits_for_the_repair() -> None:
    spare = choose(situation(job(), spare=True), TIMES, "published")
    assert spare.strategy is AppliedStrategy.HOT_SPARE
    assert spare.why.startswith("auto: least expected lost GPU-minutes (hot_spare 752")
    assert spare.lost_gpu_minutes == {"wait_for_repair": 1232.0, "hot_spare": 752.0}
    assert choose(situation(job()), TIMES, "").strategy is AppliedStrategy.WAIT_FOR_REPAIR


def test_an_elastic_job_above_its_minimum_shrinks_when_that_loses_least() -> None:
    elastic = job(elastic_policy=ElasticPolicy(min_replicas=2, max_replicas=4))
    choice = choose(situation(elastic), TIMES, "")
    # shrink now (rescale) + one node's GPUs for the repair + grow back: 32*300 + 8*900
    # + 32*300 = 26400 GPU-s, against 32 * (900 + 1410) = 73920 for waiting
    assert choice.strategy is AppliedStrategy.ELASTIC_SHRINK
    assert choice.lost_gpu_minutes["elastic_shrink"] == 440.0
    at_minimum = job(
        replicas=2,
        nodes=["i-1", "i-2"],
        elastic_policy=ElasticPolicy(min_replicas=2, max_replicas=4),
    )
    assert "elastic_shrink" not in choose(situation(at_minimum), TIMES, "").lost_gpu_minutes


def test_an_asked_strategy_is_honoured_or_refused_with_the_reason() -> None:
    asked = job(recovery=JobRecovery(strategy=RecoveryStrategy.WAIT_FOR_REPAIR))
    honoured = choose(situation(asked, spare=True), TIMES, "")
    assert (honoured.strategy, honoured.why) == (
        AppliedStrategy.WAIT_FOR_REPAIR,
        "asked for wait_for_repair",
    )
    drained = choose(
        situation(asked, repair=Repair.DRAIN, node_returns=False, spare=True), TIMES, ""
    )
    assert drained.strategy is AppliedStrategy.HOT_SPARE
    assert "not possible here (the node does not come back)" in drained.why
    no_burst = job(recovery=JobRecovery(strategy=RecoveryStrategy.MOVE), template="production")
    moved = choose(situation(no_burst), TIMES, "")
    assert moved.strategy is AppliedStrategy.WAIT_FOR_REPAIR
    assert "template production does not allow burst capacity" in moved.why


def test_auto_resume_is_hyperpods_and_nothing_possible_means_requeue() -> None:
    assert (
        choose(situation(job(auto_resume=True)), TIMES, "").strategy
        is AppliedStrategy.HYPERPOD_AUTO_RESUME
    )
    stranded = choose(situation(job(), repair=Repair.DRAIN, node_returns=False), TIMES, "").strategy
    assert stranded is AppliedStrategy.REQUEUE


def incident(action: str, requested: float, healthy: float, n: int) -> Incident:
    now = datetime(2026, 11, 22, tzinfo=UTC)
    return Incident(
        incident_id=f"inc-{action}-{n}",
        instance_id="i-1",
        cluster="c",
        status=IncidentStatus.RESOLVED,
        kind="hyperpod_node_health",
        severity="fatal",
        repair=Repair(action),
        reason="",
        opened_at=now,
        first_signal_at=now,
        action=action,
        timings={"signal_to_repair_requested_s": requested, "signal_to_healthy_s": healthy},
    )


def test_repair_durations_this_deployment_measured_replace_the_defaults() -> None:
    seen = [incident("replace", 60, 60 + d, i) for i, d in enumerate((1000, 1200, 1100))]
    seen.append(incident("reboot", 10, 200, 9))  # one reboot is not enough to go by
    times, source = measured(TIMES, seen)
    assert times.replace_s == 1100 and times.reboot_s == TIMES.reboot_s
    assert source == "measured replace 1100s (median of 3)"
    assert measured(TIMES, [])[1] == "policy/published times"
