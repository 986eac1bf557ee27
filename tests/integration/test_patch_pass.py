"""HyperPod's scheduled patching handled as planned (D101): the pass reads each instance
group's AutoPatchConfig through DescribeCluster, takes no new job onto a group within the
lead time of its NextPatchDate, and pauses a job running there at its next checkpoint, so
that it resumes from that checkpoint elsewhere; the group, idle at its date, is patched
(WhenIdle) and takes jobs again once HyperPod says the update succeeded. Moto tables, the
simulated cluster behind real APIs, manual clock."""

from __future__ import annotations

from datetime import timedelta

import boto3
from tests.conftest import Stack
from tests.integration.api_harness import Api
from tests.integration.cluster_harness import BUCKET, HYPERPOD, P5, REGION
from tests.integration.conftest import MakeCluster
from tests.integration.scheduler_harness import admitted_again, scheduler, until_running

from hyperguard.policies.repair import NodeRepairConfig
from hyperguard.store.policy import RepairPolicyStore

LEAD_MINS = 60
START_S = 60
"""The run's start overhead; then a step every 30 s and a checkpoint every 10 steps."""


def test_a_job_on_a_group_about_to_be_patched_moves_at_its_next_checkpoint(
    stack: Stack, make_cluster: MakeCluster
) -> None:
    apis = make_cluster(hyperpod_nodes=1)
    RepairPolicyStore(stack.tables["TeamsTable"]).put(
        NodeRepairConfig.model_validate({"scheduledChangeLeadMins": LEAD_MINS})
    )
    api = Api(stack)
    api.quota("solo", 16, strategy="DontLend", borrow=None)
    location = f"s3://{BUCKET}/patched/"
    job_id = api.submit("solo", 8, checkpoint_location=location).body["job_id"]
    service = scheduler(stack, apis)
    start = apis.clock.now()
    assert service.run_pass().admitted == [job_id]
    (patched,) = apis.hyperpod
    until_running(apis, job_id)
    assert apis.cluster.job_instances(job_id) == [patched]
    (spare,) = apis.cluster.add_instance_group("spare", P5, 1)
    patch_at = start + timedelta(minutes=90)
    apis.cluster.schedule_patch("workers", patch_at)
    fence_from = patch_at - timedelta(minutes=LEAD_MINS)

    def at(seconds: float) -> None:
        apis.advance((start + timedelta(seconds=seconds) - apis.clock.now()).total_seconds())

    at((fence_from - start).total_seconds() - 10)  # checkpoint step 50 completed at 1,560 s
    result = service.run_pass()
    assert result.paused == [] and result.admitted == []  # not within the lead yet
    at((fence_from - start).total_seconds() + 30)
    assert service.run_pass().paused == []  # within it, but no checkpoint since: keeps training
    other = api.submit("solo", 8).body["job_id"]
    result = service.run_pass()
    assert result.admitted == [other]
    until_running(apis, job_id, other)
    assert apis.cluster.job_instances(other) == [spare]  # never onto the fenced group

    api.call("DELETE", f"/jobs/{other}")
    service.run_pass()
    at(START_S + 30 * 60 + 10)  # checkpoint step 60 completed at 1,860 s
    result = service.run_pass()
    assert result.paused == [job_id]
    admitted_again(service, apis, job_id, result)
    view = api.call("GET", f"/jobs/{job_id}").body
    assert view["status"] == "Running" and view["nodes"] == [spare]
    paused = [h for h in view["history"] if h["event"] == "paused"]
    assert len(paused) == 1
    assert paused[0]["reason"] == (
        "paused to resume from its checkpoint at step 60: HyperPod patches instance group "
        f"workers at {patch_at:%Y-%m-%dT%H:%M:%S}Z, WhenIdle"
    )
    apis.settle()
    assert apis.cluster.runs()[job_id].anchor_step == 60  # resumed there: no step redone

    sagemaker = boto3.client("sagemaker", region_name=REGION)
    at((patch_at - start).total_seconds() + 60)  # the group is idle: its node is patched
    node = sagemaker.describe_cluster_node(ClusterName=HYPERPOD, NodeId=patched)["NodeDetails"]
    assert node["InstanceStatus"]["Status"] == "SystemUpdating"
    waiting = api.submit("solo", 8).body["job_id"]
    assert service.run_pass().admitted == []  # the update is under way
    reason = api.call("GET", f"/jobs/{waiting}").body["reason"]
    assert reason.endswith(
        f"; HyperPod patches instance group workers at {patch_at:%Y-%m-%dT%H:%M:%S}Z, "
        "WhenIdle: its nodes take no new jobs until the update is done"
    )

    at((patch_at - start).total_seconds() + 15 * 60 + 60)
    node = sagemaker.describe_cluster_node(ClusterName=HYPERPOD, NodeId=patched)["NodeDetails"]
    assert node["InstanceStatus"]["Status"] == "Running" and "LastSoftwareUpdateTime" in node
    (group,) = [
        g
        for g in sagemaker.describe_cluster(ClusterName=HYPERPOD)["InstanceGroups"]
        if g["InstanceGroupName"] == "workers"
    ]
    assert group["SoftwareUpdateStatus"] == "Succeeded" and "AutoPatchConfig" not in group
    assert service.run_pass().admitted == [waiting]
    until_running(apis, job_id, waiting)
    assert apis.cluster.job_instances(waiting) == [patched]  # the patched group takes jobs
