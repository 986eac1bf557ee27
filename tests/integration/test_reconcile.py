"""The scheduling pass reconciles jobs with their runs on the cluster: completion frees
quota, a run's own failure ends the job, a lost run resumes from its checkpoint, and a
node fault is left to node recovery. Progress comes from the checkpoint markers. Hot
spares are held back, never a lemon. Moto tables, the simulated cluster behind real APIs,
manual clock."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import boto3
import pytest
from botocore.client import BaseClient
from tests.conftest import Stack
from tests.integration.api_harness import Api, member
from tests.integration.cluster_harness import BUCKET, REGION, ROLE_BINDINGS, ClusterApis
from tests.integration.conftest import MakeCluster
from tests.integration.incident_harness import closed_fault
from tests.integration.scheduler_harness import admitted_again, running_jobs, scheduler

from hyperguard.cluster.conventions import NODEPOOL_LABEL
from hyperguard.cluster.gateway import NodeNotFoundError
from hyperguard.cluster.hyperpod_eks import EKS_PLATFORM
from hyperguard.cluster.kueue import team_objects
from hyperguard.cluster.workloads import team_namespace
from hyperguard.governance.applier import QUEUES_RECHECK
from hyperguard.governance.jobs import JobLifecycle
from hyperguard.governance.service import SchedulerService
from hyperguard.policies.repair import NodeRepairConfig
from hyperguard.store import IncidentStore, JobStore, NodeStore
from hyperguard.store.policy import RepairPolicyStore
from hyperguard_twin.cloud.hyperpod_nodes import NodeRecovery
from hyperguard_twin.plane.kube import HYPERPOD_PYTORCH_JOBS, NODES
from hyperguard_twin.plane.kube import JOBS as BATCH_JOBS

GRACE_S = 60


def setup(stack: Stack, apis: ClusterApis, bucket: str = BUCKET, **policy: Any) -> Api:
    """`bucket`: the stack's CheckpointBucketName."""
    RepairPolicyStore(stack.tables["TeamsTable"]).put(
        NodeRepairConfig.model_validate({"failedRunGraceS": GRACE_S, **policy})
    )
    api = Api(stack, checkpoint_bucket=bucket)
    api.quota("solo", 16, strategy="DontLend", borrow=None)
    return api


def dispatched(
    stack: Stack, make_cluster: MakeCluster, *, node_recovery: NodeRecovery = "None", **submit: Any
) -> tuple[ClusterApis, Api, SchedulerService, str]:
    """Team solo's job of one 8-GPU replica on a two-node cluster (HyperPod's NodeRecovery
    as given), dispatched by a first pass: the cluster, the API, the scheduler and the job's
    id."""
    apis = make_cluster(hyperpod_nodes=2, node_recovery=node_recovery)
    api = setup(stack, apis)
    job_id = api.submit("solo", 8, **submit).body["job_id"]
    service = scheduler(stack, apis)
    service.run_pass()
    return apis, api, service, job_id


def test_a_finished_job_succeeds_frees_its_quota_and_the_next_job_starts(
    stack: Stack, make_cluster: MakeCluster
) -> None:
    apis = make_cluster(hyperpod_nodes=2)
    api = setup(stack, apis)
    location = f"s3://{BUCKET}/short/"
    short = api.submit("solo", 8, replicas=2, max_steps=25, checkpoint_location=location).body[
        "job_id"
    ]
    waiting = api.submit("solo", 8, replicas=2).body["job_id"]
    service = scheduler(stack, apis)
    assert service.run_pass().admitted == [short]
    apis.advance(60 + 30 * 12)  # restart overhead, then 12 steps: checkpoint 10 is in S3
    assert service.run_pass().admitted == []
    view = api.call("GET", f"/jobs/{short}").body
    assert view["status"] == "Running" and view["last_checkpoint"]["step"] == 10  # progress

    apis.advance(30 * 14)  # past step 25
    result = service.run_pass()
    assert result.succeeded == [short] and result.admitted == [waiting]
    done = api.call("GET", f"/jobs/{short}").body
    assert done["status"] == "Succeeded" and done["nodes"] == []
    assert done["last_checkpoint"]["step"] == 25  # the final checkpoint
    assert done["run_time_s"] == 60 + 30 * 26
    assert done["history"][-1]["event"] == "finished"
    assert done["history"][-1]["details"] == {"run_time_s": 840.0, "restarts": 0}
    assert running_jobs(apis) == {waiting}
    teams = {t["team"]: t for t in api.call("GET", "/views/teams").body["teams"]}
    assert teams["solo"]["gpus_in_use"] == 16  # the waiting job's, not the finished one's
    assert (teams["solo"]["running_jobs"], teams["solo"]["pending_jobs"]) == (1, 0)


def test_a_pass_that_frees_quota_lists_the_active_jobs_once(
    stack: Stack, make_cluster: MakeCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    apis = make_cluster(hyperpod_nodes=2)
    api = setup(stack, apis)
    short = api.submit("solo", 8, replicas=2, max_steps=2).body["job_id"]
    waiting = api.submit("solo", 8, replicas=2).body["job_id"]
    service = scheduler(stack, apis)
    assert service.run_pass().admitted == [short]
    apis.advance(60 + 30 * 3)
    live_queries = []
    call = BaseClient._make_api_call

    def recorded(client: BaseClient, operation: str, params: dict[str, Any]) -> Any:
        if operation == "Query" and params.get("IndexName") == "Live":
            live_queries.append(params)
        return call(client, operation, params)

    monkeypatch.setattr(BaseClient, "_make_api_call", recorded)
    result = service.run_pass()
    assert result.succeeded == [short] and result.admitted == [waiting]
    assert len(live_queries) == 1
    assert running_jobs(apis) == {waiting}


def test_a_run_that_fails_by_itself_ends_the_job_after_the_grace(
    stack: Stack, make_cluster: MakeCluster
) -> None:
    apis, api, service, job_id = dispatched(stack, make_cluster)
    apis.advance(120)
    apis.cluster.fail_job(job_id, exit_code=3)
    assert service.run_pass().failed == []  # within the grace: a node report may follow
    apis.advance(GRACE_S)
    assert service.run_pass().failed == [job_id]
    view = api.call("GET", f"/jobs/{job_id}").body
    assert view["status"] == "Failed"
    assert view["reason"] == (
        f"failed: PodFailed: pod hyperpod-ns-solo/{view['job_id']}-pods-0 failed"
    )


def test_a_run_with_retries_is_restarted_by_the_operator_until_they_run_out(
    stack: Stack, make_cluster: MakeCluster
) -> None:
    """`max_retries` is the HyperPodPyTorchJob's jobMaxRetryCount (D168): the training
    operator restarts a run that failed by itself in place while retries are left, and the
    restart is in the job's history; the failure after that ends the job."""
    apis, api, service, job_id = dispatched(stack, make_cluster, max_retries=1)
    apis.settle()
    run = apis.cluster.runs()[job_id]
    manifest = apis.kube.get(HYPERPOD_PYTORCH_JOBS, run.name, run.namespace)
    assert manifest is not None and manifest["spec"]["runPolicy"]["jobMaxRetryCount"] == 1
    assert api.call("GET", f"/jobs/{job_id}").body["operator_retries"] == 1
    apis.advance(120)
    apis.cluster.fail_job(job_id, exit_code=3)
    apis.advance(GRACE_S * 2)
    apis.settle()
    result = service.run_pass()
    assert (result.failed, result.operator_restarts) == ([], [job_id])
    assert apis.cluster.runs()[job_id].restarts == 1
    record = JobStore(stack.tables["JobsTable"]).record(job_id)
    assert record is not None and record.job.status.value == "Running"
    assert [e.event for e in record.history][-1] == "operator_restarted"

    apis.advance(120)
    apis.cluster.fail_job(job_id, exit_code=3)  # no retry left
    apis.advance(GRACE_S * 2)
    assert service.run_pass().failed == [job_id]


def test_a_run_the_cluster_lost_resumes_from_its_checkpoint(
    stack: Stack, make_cluster: MakeCluster
) -> None:
    apis, api, service, job_id = dispatched(
        stack, make_cluster, checkpoint_location=f"s3://{BUCKET}/lost/"
    )
    apis.advance(60 + 30 * 15)  # checkpoint 10
    run = apis.cluster.runs()[job_id]
    assert apis.kube.delete(HYPERPOD_PYTORCH_JOBS, run.name, run.namespace)  # by someone
    apis.advance(GRACE_S)
    result = service.run_pass()
    assert result.lost == [job_id] and result.admitted == [job_id]  # requeued, re-placed
    view = api.call("GET", f"/jobs/{job_id}").body
    assert view["status"] == "Running" and view["run"] == 1 and view["restart_count"] == 1
    assert [h["event"] for h in view["history"] if h["event"] != "checkpoint"][-3:] == [
        "lost",
        "restarted",
        "dispatched",
    ]
    apis.settle()
    assert apis.cluster.runs()[job_id].anchor_step == 10


def test_a_run_killed_by_a_node_fault_is_left_to_node_recovery(
    stack: Stack, make_cluster: MakeCluster
) -> None:
    apis, api, service, job_id = dispatched(stack, make_cluster)
    apis.settle()  # Kueue admits the run, the operator starts its pods
    node = apis.cluster.job_instances(job_id)[0]
    apis.cluster.inject_fault(node, "persistent")
    apis.advance(GRACE_S * 10)
    result = service.run_pass()
    assert (result.lost, result.failed) == ([], [])
    assert api.call("GET", f"/jobs/{job_id}").body["status"] == "Running"


def test_a_run_that_failed_when_hyperpods_recovery_took_its_node_is_requeued(
    stack: Stack, make_cluster: MakeCluster
) -> None:
    """HyperPod's automatic recovery replaced the node before any incident held the job (at
    x60 a loaded twin's diagnosis came after it: CI's run of 2026-11-27): the run failed for
    want of its node, and the job resumes from its checkpoint instead of failing (D167)."""
    apis, api, service, job_id = dispatched(stack, make_cluster, node_recovery="Automatic")
    apis.settle()  # Kueue admits the run, the operator starts its pods
    node = apis.cluster.job_instances(job_id)[0]
    apis.cluster.inject_fault(node, "persistent")
    apis.advance(300 + GRACE_S * 2)  # HyperPod replaces the node; the old one goes at 240 s
    assert apis.cluster.instance(node) is None
    result = service.run_pass()
    assert (result.lost, result.failed) == ([job_id], [])
    view = api.call("GET", f"/jobs/{job_id}").body
    assert view["status"] != "Failed" and view["restart_count"] == 1


def test_hot_spares_are_held_back_from_admission(stack: Stack, make_cluster: MakeCluster) -> None:
    apis = make_cluster(hyperpod_nodes=2)
    api = setup(stack, apis, hotSpares={"workers": 1})
    first = api.submit("solo", 8).body["job_id"]
    second = api.submit("solo", 8).body["job_id"]
    result = scheduler(stack, apis).run_pass()
    assert result.admitted == [first] and result.spares == 1
    reason = api.call("GET", f"/jobs/{second}").body["reason"]
    assert "installed capacity of ml.p5.48xlarge exhausted" in reason


def test_a_lemon_is_never_held_back_as_a_hot_spare(stack: Stack, make_cluster: MakeCluster) -> None:
    """The spare by id would be the lemon, which recovery never moves a job onto (D87): the
    other idle node is held back instead, and the lemon takes the job (D91)."""
    apis = make_cluster(hyperpod_nodes=2)
    api = setup(stack, apis, hotSpares={"workers": 1})
    inventory = NodeStore(stack.tables["NodesTable"])
    incidents = IncidentStore(stack.tables["IncidentsTable"], stack.tables["NodesTable"])
    nodes = apis.gateway.list_nodes()
    inventory.upsert_inventory(nodes)
    lemon, other = sorted(n.instance_id for n in nodes)
    node = inventory.get(lemon)
    assert node is not None
    for days_ago in (9, 5, 1):  # three node faults within the 30-day window: a lemon
        closed_fault(incidents, node, apis.clock.now() - timedelta(days=days_ago))
    job = api.submit("solo", 8).body["job_id"]
    service = scheduler(stack, apis, nodes=inventory, incidents=incidents)
    result = service.run_pass()
    assert result.admitted == [job] and result.spares == 1
    apis.settle()  # Kueue admits the run, the operator starts its pods
    assert apis.cluster.job_instances(job) == [lemon]
    assert other not in apis.cluster.job_instances(job)


def test_a_job_whose_checkpoints_s3_refuses_stops_neither_the_pass_nor_the_other_teams(
    stack: Stack, make_cluster: MakeCluster
) -> None:
    """The stack was deployed with a mistyped CheckpointBucketName, so the API took the job's
    location in it: that is the job's trouble (D138), the pass goes on, another team's job is
    admitted, the job is counted unreadable every pass, and an unknown progress is never
    taken for a stall."""
    apis = make_cluster(hyperpod_nodes=2)
    api = setup(stack, apis, bucket="hyperguard-mistyped", stalledJobMins=10)
    api.quota("other", 8, strategy="DontLend", borrow=None)
    bad = api.submit("solo", 8, checkpoint_location="s3://hyperguard-mistyped/ckpt/").body["job_id"]
    service = scheduler(stack, apis)
    assert service.run_pass().admitted == [bad]
    apis.advance(60 + 30 * 12)  # it trains; where it writes its checkpoints is its own affair
    good = api.submit("other", 8).body["job_id"]
    result = service.run_pass()
    assert (result.admitted, result.unreadable) == ([good], [bad])

    def unreadable_entries() -> list[str]:
        history = api.call("GET", f"/jobs/{bad}").body["history"]
        return [h["event"] for h in history if h["event"].startswith("checkpoints_")]

    # The refusal is in the job's history once, and S3 is asked again only after a minute.
    assert unreadable_entries() == ["checkpoints_unreadable"]
    apis.advance(30)
    assert service.run_pass().unreadable == []
    apis.advance(11 * 60)
    result = service.run_pass()
    assert (result.stalled, result.unreadable) == ([], [bad])
    assert api.call("GET", f"/jobs/{bad}").body["status"] == "Running"
    assert running_jobs(apis) == {bad, good}
    assert unreadable_entries() == ["checkpoints_unreadable"]  # not one per retry
    # The bucket is created: the job's next checkpoints land, and the next read, two minutes
    # after the second refusal, finds them and says so.
    boto3.client("s3", region_name=REGION).create_bucket(Bucket="hyperguard-mistyped")
    apis.advance(60)
    assert service.run_pass().unreadable == []  # still waiting for its retry
    apis.advance(90)
    result = service.run_pass()
    assert (result.stalled, result.unreadable) == ([], [])
    view = api.call("GET", f"/jobs/{bad}").body
    assert view["last_checkpoint"] is not None
    assert unreadable_entries() == ["checkpoints_unreadable", "checkpoints_readable"]


def test_a_stalled_run_is_restarted_from_its_checkpoint(
    stack: Stack, make_cluster: MakeCluster
) -> None:
    """The training hangs: its pods run and the run reports Running, but no checkpoint comes.
    Past `stalledJobMins` from its last new checkpoint the job is requeued and resumes from
    that checkpoint on a new run (D94), and the stall is an incident of its own, about the
    job (D117); before it, and for a job that keeps checkpointing, nothing happens."""
    apis = make_cluster(hyperpod_nodes=2)
    api = setup(stack, apis, stalledJobMins=30)
    for team in ("solo", "other"):
        api.call("PUT", "/principals", {"principal_arn": member(team), "team": team})
    location = f"s3://{BUCKET}/hang/"
    job_id = api.submit("solo", 8, checkpoint_location=location).body["job_id"]
    inventory = NodeStore(stack.tables["NodesTable"])
    inventory.upsert_inventory(apis.gateway.list_nodes())
    incidents = IncidentStore(stack.tables["IncidentsTable"], stack.tables["NodesTable"])
    service = scheduler(stack, apis, nodes=inventory, incidents=incidents)
    service.run_pass()
    apis.advance(60 + 30 * 15)  # checkpoint 10
    assert service.run_pass().stalled == []
    assert api.call("GET", f"/jobs/{job_id}").body["last_checkpoint"]["step"] == 10
    apis.advance(29 * 60)  # checkpoints 20..60 keep coming: progress
    assert service.run_pass().stalled == []
    step = api.call("GET", f"/jobs/{job_id}").body["last_checkpoint"]["step"]
    apis.cluster.hang_job(job_id)
    apis.advance(29 * 60)
    assert service.run_pass().stalled == []  # 29 minutes without progress: not yet
    assert api.call("GET", f"/jobs/{job_id}").body["last_checkpoint"]["step"] == step
    hung_on = api.call("GET", f"/jobs/{job_id}").body["nodes"]
    apis.advance(2 * 60)
    assert api.call("GET", "/incidents").body == {"incidents": []}
    result = service.run_pass()
    assert result.stalled == [job_id]  # requeued
    admitted_again(service, apis, job_id, result)  # re-placed
    view = api.call("GET", f"/jobs/{job_id}").body
    assert view["status"] == "Running" and view["run"] == 1
    stalled = [h for h in view["history"] if h["event"] == "stalled"]
    assert len(stalled) == 1 and "no new checkpoint for 31 min" in stalled[0]["reason"]
    apis.settle()
    new_run = apis.cluster.runs()[job_id]
    assert not new_run.hung and new_run.anchor_step == step

    (incident,) = api.call("GET", "/incidents").body["incidents"]
    assert stalled[0]["details"]["incident_id"] == incident["incident_id"]
    assert incident["incident_id"].startswith(f"{job_id}-run0-stalled-")
    assert (incident["kind"], incident["instance_id"], incident["repair"]) == (
        "job_stalled",
        "",
        "none",
    )
    assert (incident["status"], incident["resolution"]) == ("resolved", "requeued")
    assert incident["facts"]["stalled_min"] == 31 and incident["facts"]["limit_min"] == 30
    assert incident["timings"]["signal_to_detected_s"] == 31 * 60
    (plan,) = incident["jobs"]
    assert (plan["job_id"], plan["team"], plan["run"], plan["nodes"]) == (
        job_id,
        "solo",
        0,
        hung_on,
    )
    assert (plan["strategy"], plan["checkpoint_step"]) == ("requeue", step)
    assert plan["why"].startswith("auto: its nodes are healthy")
    # No node's lock: the nodes it hung on are free for incidents of their own.
    assert [n.open_incident_id for n in inventory.many(hung_on)] == [None] * len(hung_on)
    # The job's team sees it; another team sees neither the incident nor that it exists.
    mine = api.call("GET", "/incidents", principal=member("solo")).body["incidents"]
    assert [i["incident_id"] for i in mine] == [incident["incident_id"]]
    assert api.call("GET", "/incidents", principal=member("other")).body == {"incidents": []}
    path = f"/incidents/{incident['incident_id']}"
    assert api.call("GET", path, principal=member("solo")).status == 200
    assert api.call("GET", path, principal=member("other")).status == 404


def test_a_pass_that_dies_after_recording_a_stall_records_it_once(
    stack: Stack, make_cluster: MakeCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At least once: the pass that found the stall dies after writing its incident and
    before the requeue. The pass that runs again finds the same stall, writes nothing new
    and requeues the job; the passes after find nothing to record. One incident, one
    `stalled` entry."""
    apis = make_cluster(hyperpod_nodes=2)
    api = setup(stack, apis, stalledJobMins=30)
    job_id = api.submit("solo", 8, checkpoint_location=f"s3://{BUCKET}/twice/").body["job_id"]
    incidents = IncidentStore(stack.tables["IncidentsTable"], stack.tables["NodesTable"])
    service = scheduler(stack, apis, incidents=incidents)
    service.run_pass()
    apis.advance(60 + 30 * 15)  # checkpoint 10
    service.run_pass()
    apis.cluster.hang_job(job_id)
    apis.advance(31 * 60)

    def dies(*_args: Any, **_kwargs: Any) -> None:
        raise RuntimeError("the pass's sandbox went away")

    with monkeypatch.context() as patch:
        patch.setattr(JobLifecycle, "requeue", dies)
        with pytest.raises(RuntimeError, match="went away"):
            service.run_pass()
    written = incidents.recent()
    assert [i.kind for i in written] == ["job_stalled"]
    assert api.call("GET", f"/jobs/{job_id}").body["status"] == "Running"  # not requeued yet

    result = service.run_pass()
    assert result.stalled == [job_id]
    admitted_again(service, apis, job_id, result)
    for _ in range(2):
        assert service.run_pass().stalled == []
    assert [i.incident_id for i in incidents.recent()] == [written[0].incident_id]
    (again,) = incidents.recent()
    assert again.resolution == "requeued" and again.jobs[0].checkpoint_step == 10
    history = api.call("GET", f"/jobs/{job_id}").body["history"]
    assert [h["details"]["incident_id"] for h in history if h["event"] == "stalled"] == [
        again.incident_id
    ]


def test_a_fresh_scheduler_grants_recovery_in_the_namespaces_of_running_teams(
    stack: Stack, make_cluster: MakeCluster
) -> None:
    """A deployment upgraded to namespaced grants (D98): a team that keeps running without a
    new dispatch had no RoleBindings, so Recovery's restarts there were refused. The first
    pass of each scheduler process ensures the team objects of every team with running jobs;
    later passes of the same process leave that to dispatches, as before."""
    apis = make_cluster(hyperpod_nodes=2)
    api = setup(stack, apis)
    api.submit("solo", 8)
    scheduler(stack, apis).run_pass()
    namespace = "hyperpod-ns-solo"
    assert apis.kube.get(ROLE_BINDINGS, "hyperguard-recovery", namespace) is not None
    apis.kube.delete(ROLE_BINDINGS, "hyperguard-recovery", namespace)  # as before D98
    apis.kube.delete(ROLE_BINDINGS, "hyperguard-scheduler", namespace)
    service = scheduler(stack, apis)  # a new process: the upgraded function's first pass
    service.run_pass()
    binding = apis.kube.get(ROLE_BINDINGS, "hyperguard-recovery", namespace)
    assert binding is not None
    assert binding["roleRef"]["name"] == "hyperguard-recovery-in-team"
    apis.kube.delete(ROLE_BINDINGS, "hyperguard-recovery", namespace)
    service.run_pass()  # once per process: nothing dispatched, nothing re-read
    assert apis.kube.get(ROLE_BINDINGS, "hyperguard-recovery", namespace) is None


def test_a_scheduler_checks_a_teams_objects_again_a_minute_after_it_ensured_them(
    stack: Stack, make_cluster: MakeCluster
) -> None:
    """D71: a team's Kueue objects are ensured at a dispatch, then trusted for
    QUEUES_RECHECK (a pass every few seconds would read five objects per team each time);
    a dispatch after that puts a missing one back."""
    apis = make_cluster(hyperpod_nodes=2)
    api = setup(stack, apis)
    service = scheduler(stack, apis)
    namespace = "hyperpod-ns-solo"
    api.submit("solo", 4)
    service.run_pass()
    apis.kube.delete(ROLE_BINDINGS, "hyperguard-recovery", namespace)
    apis.advance(QUEUES_RECHECK.total_seconds() - 5)
    api.submit("solo", 4)
    assert len(service.run_pass().admitted) == 1
    assert apis.kube.get(ROLE_BINDINGS, "hyperguard-recovery", namespace) is None
    apis.advance(10)
    api.submit("solo", 4)
    assert len(service.run_pass().admitted) == 1
    assert apis.kube.get(ROLE_BINDINGS, "hyperguard-recovery", namespace) is not None


def test_a_pass_lists_the_kubernetes_nodes_once_for_all_its_dispatches(
    stack: Stack, make_cluster: MakeCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pass's own listing names the nodes its runs are pinned to; a dispatch lists them
    again only for a node the listing lacks, or once the listing is NODE_NAMES_TTL_S old."""
    apis = make_cluster(hyperpod_nodes=2)
    api = setup(stack, apis)
    kubernetes = apis.gateway.kubernetes
    listings = []
    list_nodes = kubernetes.list_nodes

    def counted() -> Any:
        listings.append(1)
        return list_nodes()

    monkeypatch.setattr(kubernetes, "list_nodes", counted)
    for _ in range(4):
        api.submit("solo", 4)
    assert len(scheduler(stack, apis).run_pass().admitted) == 4
    assert len(listings) == 1
    node = apis.gateway.list_nodes()[0].instance_id
    job = api.submit("solo", 4).body
    placed = JobStore(stack.tables["JobsTable"]).record(job["job_id"])
    assert placed is not None
    monkeypatch.setattr(time, "monotonic", lambda: 1e12)  # the listing is old
    listings.clear()
    apis.gateway.dispatch(placed.job.model_copy(update={"nodes": [node]}), [node])
    assert len(listings) == 1
    with pytest.raises(NodeNotFoundError):  # a node the listing lacks: listed again
        apis.gateway.dispatch(placed.job, ["i-00000000000000bad"])
    assert len(listings) == 2


def test_a_dispatch_onto_a_burst_node_listed_before_its_registration_lists_again(
    stack: Stack, make_cluster: MakeCluster
) -> None:
    """Karpenter labels its node with its NodePool when it registers it. A listing from
    before that shows the node with neither a NodePool nor an instance group; a dispatch onto
    it within NODE_NAMES_TTL_S lists the nodes again, so its run is a batch Job, as on every
    burst node, and not a HyperPodPyTorchJob (bench/plane_burst.py dispatched 5 of 25 runs
    so, and their pods never came)."""
    apis = make_cluster(hyperpod_nodes=2, burst_nodes=1)
    api = setup(stack, apis)
    nodes = apis.gateway.list_nodes()
    burst = next(n for n in nodes if n.platform == EKS_PLATFORM)
    hyperpod = next(n for n in nodes if n.platform == "hyperpod")
    assert burst.node_name is not None
    pool = burst.labels[NODEPOOL_LABEL]
    apis.gateway.ensure_queues(team_objects("solo"))  # as a pass does before its dispatches
    jobs = JobStore(stack.tables["JobsTable"])
    first, second = (jobs.record(api.submit("solo", 4).body["job_id"]) for _ in range(2))
    assert first is not None and second is not None
    apis.kube.patch(NODES, burst.node_name, {"metadata": {"labels": {NODEPOOL_LABEL: None}}})
    # the pass's listing, taken while the burst node is not yet labelled, and a first run
    apis.gateway.list_nodes()
    apis.gateway.dispatch(
        first.job.model_copy(update={"nodes": [hyperpod.instance_id]}), [hyperpod.instance_id]
    )
    apis.kube.patch(NODES, burst.node_name, {"metadata": {"labels": {NODEPOOL_LABEL: pool}}})
    apis.gateway.dispatch(
        second.job.model_copy(update={"nodes": [burst.instance_id]}), [burst.instance_id]
    )
    namespace = team_namespace("solo")
    kinds = {
        "Job": [j["metadata"]["name"] for j in apis.kube.list_objects(BATCH_JOBS, namespace)],
        "HyperPodPyTorchJob": [
            j["metadata"]["name"] for j in apis.kube.list_objects(HYPERPOD_PYTORCH_JOBS, namespace)
        ],
    }
    assert len(kinds["Job"]) == 1 and len(kinds["HyperPodPyTorchJob"]) == 1, kinds
    assert second.job.job_id in kinds["Job"][0], kinds
