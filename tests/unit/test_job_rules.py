"""The job lifecycle's rules, the elastic policy's sizes, and how runs are read back."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from hyperguard.cluster.workloads import (
    RENDEZVOUS_PORT,
    WORKLOAD_ANNOTATION,
    batch_job_manifest,
    hyperpod_job_manifest,
    rendezvous_service,
    resize_patch,
    run_status,
)
from hyperguard.governance.jobs import RULES, Actor, JobLifecycle, Move, MoveNotAllowedError
from hyperguard.models import Job, JobStatus
from hyperguard.models.cluster import RunKind, RunPhase
from hyperguard.models.jobs import TERMINAL_STATUSES, ElasticPolicy, LogMonitoringRule
from hyperguard.store import JobStore


def test_no_rule_moves_a_job_out_of_a_terminal_status() -> None:
    for move, rule in RULES.items():
        for status in rule.expect & TERMINAL_STATUSES:
            assert rule.to in (None, status), move
    # and only cancelling's pod clean-up even looks at a terminal job
    assert {m for m, r in RULES.items() if r.expect & TERMINAL_STATUSES} == {Move.STOPPED}


def test_every_move_names_who_may_ask_and_others_are_refused() -> None:
    assert RULES[Move.ADMIT].by == {Actor.SCHEDULER}
    assert RULES[Move.RESTART].by == {Actor.RECOVERY}
    assert RULES[Move.SUCCEED].by == {Actor.RECONCILER}
    assert RULES[Move.CANCEL].by == {Actor.API}
    lifecycle = JobLifecycle(JobStore("-"))
    with pytest.raises(MoveNotAllowedError, match="api may not resize"):
        lifecycle.resize("j", nodes=[], by=Actor.API, reason="", grown=False)
    with pytest.raises(MoveNotAllowedError, match="reconciler may not resize"):
        lifecycle.resize("j", nodes=[], by=Actor.RECONCILER, reason="", grown=True)


@pytest.mark.parametrize(
    ("policy", "sizes"),
    [
        ({"minReplicas": 2, "maxReplicas": 8, "replicaIncrementStep": 2}, [2, 4, 6, 8]),
        ({"minReplicas": 2, "maxReplicas": 7, "replicaIncrementStep": 2}, [2, 4, 6]),
        ({"minReplicas": 1, "maxReplicas": 3}, [1, 2, 3]),
        ({"minReplicas": 2, "maxReplicas": 8, "replicaDiscreteValues": [8, 4, 1]}, [2, 4, 8]),
    ],
)
def test_elastic_sizes_follow_hyperpods_rules(policy: dict[str, Any], sizes: list[int]) -> None:
    elastic = ElasticPolicy.model_validate(policy)
    assert elastic.sizes() == sizes
    assert elastic.at_most(sizes[-1] + 5) == sizes[-1]
    assert elastic.at_most(sizes[0] - 1) is None


@pytest.mark.parametrize(
    "policy",
    [
        {"minReplicas": 4, "maxReplicas": 2},
        {
            "minReplicas": 1,
            "maxReplicas": 4,
            "replicaIncrementStep": 1,
            "replicaDiscreteValues": [2],
        },
        {"minReplicas": 1, "maxReplicas": 4, "replicaDiscreteValues": [5]},
        {"minReplicas": 1, "maxReplicas": 4, "replicaDiscreteValues": [2, 2]},
        {"minReplicas": 0, "maxReplicas": 4},
        {"minReplicas": 1, "maxReplicas": 4, "scalingTimeoutInSeconds": -1},
        {"minReplicas": 1, "maxReplicas": 4, "unknownField": 1},
    ],
)
def test_invalid_elastic_policies_are_refused(policy: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        ElasticPolicy.model_validate(policy)


def _job(**overrides: Any) -> Job:
    return Job(
        job_id="llama-pretrain",
        team="ml",
        image="repo/llama:1",
        replicas=2,
        status=JobStatus.RUNNING,
        **overrides,
    )


def _with_status(manifest: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
    return {**manifest, "status": status, "spec": {**manifest["spec"]}}


def condition(kind: str, reason: str = "", message: str = "") -> dict[str, Any]:
    return {
        "type": kind,
        "status": "True",
        "reason": reason,
        "message": message,
        "lastTransitionTime": "2026-11-22T10:00:00Z",
    }


def test_a_batch_run_reads_back_as_pending_running_succeeded_lost_or_failed() -> None:
    manifest = batch_job_manifest(_job(run=3), ["node-a", "node-b"])
    pending = run_status(manifest)
    assert pending is not None
    assert (pending.job_id, pending.run, pending.kind, pending.replicas) == (
        "llama-pretrain",
        3,
        RunKind.BATCH,
        2,
    )
    assert pending.phase is RunPhase.PENDING  # suspended: Kueue has not admitted it
    admitted = {**manifest, "spec": {**manifest["spec"], "suspend": False}}
    running = run_status(_with_status(admitted, {"active": 2}))
    assert running is not None and running.phase is RunPhase.RUNNING
    done = run_status(_with_status(admitted, {"conditions": [condition("Complete")]}))
    assert done is not None and done.phase is RunPhase.SUCCEEDED
    assert done.since is not None and done.since.isoformat() == "2026-11-22T10:00:00+00:00"
    lost = run_status(
        _with_status(
            admitted,
            {"conditions": [condition("Failed", "PodFailurePolicy", "DisruptionTarget ...")]},
        )
    )
    assert lost is not None and lost.phase is RunPhase.LOST
    failed = run_status(
        _with_status(admitted, {"conditions": [condition("Failed", "BackoffLimitExceeded")]})
    )
    assert failed is not None and failed.phase is RunPhase.FAILED
    assert failed.reason == "BackoffLimitExceeded"
    # A failed pod of a run HyperGuard made ends it (backoffLimit 0): no restart, even while
    # its other pods are still active before the Job controller marks it Failed.
    failing = run_status(_with_status(admitted, {"active": 1, "failed": 1}))
    assert failing is not None and failing.restarts == 0


def test_a_teams_own_job_counts_its_failed_pods_as_restarts() -> None:
    """The Job controller replaces a failed pod of a team's Job up to its backoffLimit: each
    failed pod is a restart of the run by the cluster itself (D179)."""
    manifest = batch_job_manifest(_job(run=1), ["node-a"])
    meta = manifest["metadata"]
    held = {
        **manifest,
        "metadata": {**meta, "annotations": {**meta["annotations"], WORKLOAD_ANNOTATION: "w"}},
        "spec": {**manifest["spec"], "suspend": False},
    }
    replaced = run_status(_with_status(held, {"active": 1, "failed": 2}))
    assert replaced is not None and replaced.phase is RunPhase.RUNNING
    assert (replaced.restarts, replaced.workload) == (2, "w")
    for nonsense in (-1, "2", None, True):
        odd = run_status(_with_status(held, {"active": 1, "failed": nonsense}))
        assert odd is not None and odd.restarts == 0


def test_a_hyperpod_run_reads_back_with_the_operators_conditions() -> None:
    manifest = hyperpod_job_manifest(_job(), ["node-a", "node-b"])
    pending = run_status(manifest)
    assert pending is not None and pending.phase is RunPhase.PENDING
    spec = {**manifest["spec"], "runPolicy": {**manifest["spec"]["runPolicy"], "suspend": False}}
    admitted = {**manifest, "spec": spec}
    running = run_status({**admitted, "status": {"conditions": [condition("Running")]}})
    assert running is not None and running.phase is RunPhase.RUNNING
    completed = run_status({**admitted, "status": {"conditions": [condition("Completed")]}})
    assert completed is not None and completed.phase is RunPhase.SUCCEEDED
    faulted = {
        "conditions": [condition("Failed", "NodeFault")],
        "latestFaultyPodInstanceList": {"faultyInstanceIdList": ["i-0123456789abcdef0"]},
    }
    lost = run_status({**admitted, "status": faulted})
    assert lost is not None and lost.phase is RunPhase.LOST
    crashed = {"conditions": [condition("Failed", "PodFailed", "exited with code 1")]}
    failed = run_status({**admitted, "status": crashed})
    assert failed is not None and failed.phase is RunPhase.FAILED
    assert failed.message == "exited with code 1"


def test_objects_hyperguard_did_not_create_are_not_runs() -> None:
    manifest = batch_job_manifest(_job(), [])
    del manifest["metadata"]["annotations"]
    assert run_status(manifest) is None
    other = batch_job_manifest(_job(), [])
    other["metadata"]["labels"]["hyperguard.io/run"] = "latest"
    assert run_status(other) is None


def test_a_resize_patch_repins_and_renumbers_a_hyperpod_run() -> None:
    policy = ElasticPolicy(min_replicas=2, max_replicas=4, faulty_scale_down_timeout_in_seconds=30)
    patch = resize_patch(_job(elastic_policy=policy, run=2), ["node-a", "node-c", "node-d"])
    assert patch["metadata"] == {"labels": {"hyperguard.io/run": "2"}}
    (replicas,) = patch["spec"]["replicaSpecs"]
    assert (replicas["replicas"], replicas["maxReplicas"]) == (3, 3)
    assert patch["spec"]["elasticPolicy"] == {
        "minReplicas": 2,
        "maxReplicas": 3,
        "faultyScaleDownTimeoutInSeconds": 30,
    }


def test_an_auto_resume_hyperpod_run_may_restart_anywhere_in_its_group() -> None:
    """HyperPod's auto-resume recreates the pods on a replacement node, whose name the pin
    cannot know: the run's pods may also go to any node of its instance group."""
    pinned = hyperpod_job_manifest(_job(pool="workers"), ["hyperpod-i-0a"])
    resuming = hyperpod_job_manifest(_job(pool="workers", auto_resume=True), ["hyperpod-i-0a"])

    def terms(manifest: dict[str, Any]) -> list[dict[str, Any]]:
        spec = manifest["spec"]["replicaSpecs"][0]["template"]["spec"]
        required = spec["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]
        return list(required["nodeSelectorTerms"])

    name_pin = {
        "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["hyperpod-i-0a"]}]
    }
    assert terms(pinned) == [name_pin]
    group = {
        "key": "sagemaker.amazonaws.com/instance-group-name",
        "operator": "In",
        "values": ["workers"],
    }
    assert terms(resuming) == [name_pin, {"matchExpressions": [group]}]


# The AWS documentation's example rules ("Using the training operator to run jobs").
LOG_RULES = [
    {
        "name": "JobStart",
        "logPattern": ".*Experiment configuration.*",
        "expectedStartCutOffInSeconds": 120,
    },
    {
        "name": "JobHangingDetection",
        "logPattern": ".*\\[Epoch 0 Batch \\d+.*'training_loss_step': (\\d+(\\.\\d+)?).*",
        "expectedRecurringFrequencyInSeconds": 300,
        "expectedStartCutOffInSeconds": 600,
    },
    {
        "name": "HighLossDetection",
        "logPattern": ".*\\[Epoch \\d+ Batch \\d+.*'training_loss_step': (\\d+(\\.\\d+)?).*",
        "metricThreshold": 1,
        "operator": "lteq",
        "metricEvaluationDataPoints": 100,
    },
]


def test_log_monitoring_rules_reach_the_hyperpod_run_as_the_operator_spells_them() -> None:
    rules = [LogMonitoringRule.model_validate(r) for r in LOG_RULES]
    job = _job().model_copy(update={"log_monitoring_configuration": rules})
    manifest = hyperpod_job_manifest(job, ["hyperpod-i-0a"])
    assert manifest["spec"]["runPolicy"]["logMonitoringConfiguration"] == LOG_RULES
    assert (
        "logMonitoringConfiguration"
        not in hyperpod_job_manifest(_job(), ["n"])["spec"]["runPolicy"]
    )


@pytest.mark.parametrize(
    ("update", "retries"),
    [
        ({}, 0),  # HyperGuard's recovery decides what a node fault costs
        ({"auto_resume": True}, 10),  # HyperPod restarts it after a node fault
        ({"log_monitoring_configuration": LOG_RULES}, 3),  # a hang is restarted
        ({"log_monitoring_configuration": LOG_RULES, "max_retries": 0}, 0),  # as asked
        ({"auto_resume": True, "max_retries": 50}, 50),
    ],
)
def test_the_operators_retry_count_is_the_jobs_or_its_default(
    update: dict[str, Any], retries: int
) -> None:
    """runPolicy.jobMaxRetryCount (D168)."""
    job = Job.model_validate({**_job().model_dump(), **update})
    manifest = hyperpod_job_manifest(job, ["hyperpod-i-0a"])
    assert manifest["spec"]["runPolicy"]["jobMaxRetryCount"] == retries


@pytest.mark.parametrize(
    ("rule", "why"),
    [
        ({"name": "r", "logPattern": "(", "expectedStartCutOffInSeconds": 1}, "regular"),
        ({"name": "r", "logPattern": ".*"}, "a rule needs"),
        ({"name": "r", "logPattern": ".*", "metricThreshold": 1}, "together"),
        (
            {"name": "r", "logPattern": ".*", "expectedStartCutOffInSeconds": 1, "op": "gt"},
            "Extra inputs",
        ),
        ({"name": "r", "logPattern": ".*", "metricThreshold": 1, "operator": "ge"}, "operator"),
        ({"name": "r", "logPattern": ".*", "expectedStartCutOffInSeconds": 0}, "greater"),
        (
            {"name": "r", "logPattern": ".*", "metricThreshold": float("nan"), "operator": "gt"},
            "metricThreshold",
        ),
    ],
)
def test_invalid_log_monitoring_rules_are_refused(rule: dict[str, Any], why: str) -> None:
    with pytest.raises(ValidationError, match=why):
        LogMonitoringRule.model_validate(rule)


def test_a_batch_runs_pods_find_each_other_through_its_headless_service() -> None:
    """torchrun's variables on every pod (rank from the completion index), the pods'
    hostnames in the run's headless Service, which the run's Job owns."""
    job = _job(run=3)
    manifest = batch_job_manifest(job, ["node-a", "node-b"])
    name = manifest["metadata"]["name"]
    spec = manifest["spec"]["template"]["spec"]
    assert spec["subdomain"] == name
    env = {e["name"]: e for e in spec["containers"][0]["env"]}
    assert env["MASTER_ADDR"]["value"] == env["PET_MASTER_ADDR"]["value"] == f"{name}-0.{name}"
    assert env["MASTER_PORT"]["value"] == str(RENDEZVOUS_PORT)
    assert env["WORLD_SIZE"]["value"] == env["PET_NNODES"]["value"] == "2"
    assert env["PET_NPROC_PER_NODE"]["value"] == str(job.accelerators_per_replica)
    index = "metadata.annotations['batch.kubernetes.io/job-completion-index']"
    for rank in ("RANK", "NODE_RANK", "PET_NODE_RANK"):
        assert env[rank]["valueFrom"]["fieldRef"]["fieldPath"] == index
    service = rendezvous_service(job, "uid-1")
    assert service["metadata"]["name"] == name
    assert service["metadata"]["ownerReferences"] == [
        {"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": "uid-1"}
    ]
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"]
    assert service["spec"]["selector"] == {"batch.kubernetes.io/job-name": name}


def test_an_elastic_burst_run_shrunk_from_4_to_2_has_ranks_0_and_1_of_a_world_of_2() -> None:
    """A batch Job cannot change size: the shrink is a new run (a new Job, Service and
    rendezvous), whose completion indexes, and so its ranks, are 0..1 of 2, rank 0 its own."""
    policy = ElasticPolicy(min_replicas=2, max_replicas=4)
    before = batch_job_manifest(_job(run=1, elastic_policy=policy), ["a", "b", "c", "d"])
    after = batch_job_manifest(_job(run=2, elastic_policy=policy), ["a", "c"])
    for manifest, size in ((before, 4), (after, 2)):
        spec = manifest["spec"]
        assert spec["completionMode"] == "Indexed"
        assert spec["parallelism"] == spec["completions"] == size  # indexes 0..size-1
        name = manifest["metadata"]["name"]
        env = {e["name"]: e for e in spec["template"]["spec"]["containers"][0]["env"]}
        assert env["WORLD_SIZE"]["value"] == env["PET_NNODES"]["value"] == str(size)
        assert env["MASTER_ADDR"]["value"] == f"{name}-0.{name}"
        assert spec["template"]["spec"]["subdomain"] == name
    assert after["metadata"]["name"] != before["metadata"]["name"]


def test_a_hyperpod_run_reads_back_the_operators_restart_count() -> None:
    manifest = hyperpod_job_manifest(_job(run=1), ["node-a"])
    restarted = run_status(_with_status(manifest, {"restartCount": 3}))
    assert restarted is not None and restarted.restarts == 3
    for odd in (None, -1, "3", True):
        read = run_status(_with_status(manifest, {"restartCount": odd}))
        assert read is not None and read.restarts == 0
