"""HyperPod's scheduled patching on the twin's deployed path (D101): the operator schedules
the instance group's automatic patching (its AutoPatchConfig's NextPatchDate); the
scheduler function reads it through DescribeCluster, pauses the job at its first checkpoint
within the repair policy's lead, HyperPod patches the idle group (WhenIdle), and the job
resumes from that checkpoint on the patched nodes. Every call is checked against the
functions' roles when the twin stops."""

from __future__ import annotations

import re
import time
from datetime import timedelta

from tests.deadlines import loaded
from tests.e2e.conftest import running_twin
from tests.e2e.http import Http, member

LEAD_MINS = 0.25
"""The repair policy's scheduledChangeLeadMins, in real minutes: 15 minutes of the twin's
clock at its speed of 60."""


def test_a_scheduled_patch_pauses_the_job_at_a_checkpoint_and_it_resumes_once_patched() -> None:
    with running_twin(hyperpod_nodes=2, burst_nodes=0, seed_jobs=False) as twin:
        http = Http(twin.api_endpoint)
        assert http("PUT", "/principals", {"principal_arn": member("solo"), "team": "solo"})[0] in (
            200,
            201,
        )
        assert http.quota("solo", 16) == 201
        config = {"PriorityClasses": [{"Name": "low", "Weight": 10}]}
        assert http("PUT", "/scheduler-config", config)[0] == 200
        policy = http("GET", "/policies/node-repair")[1]
        assert (
            http("PUT", "/policies/node-repair", policy | {"scheduledChangeLeadMins": LEAD_MINS})[0]
            == 200
        )
        job_id = http.submit("solo", 8, replicas=2)
        http.wait({job_id: "Running"})
        nodes = set(twin.cluster.job_instances(job_id))
        patch_at = twin.cluster.clock.now() + timedelta(minutes=25)
        twin.cluster.schedule_patch("workers", patch_at)

        deadline = time.monotonic() + loaded(60)
        paused: list[dict[str, str]] = []
        while not paused and time.monotonic() < deadline:
            history = http("GET", f"/jobs/{job_id}")[1]["history"]
            paused = [h for h in history if h["event"] == "paused"]
            time.sleep(0.3)
        assert paused, "the job was never paused"
        assert twin.cluster.clock.now() < patch_at  # before the patch began
        wall = twin.cluster.clock.wall(patch_at)
        note = f"HyperPod patches instance group workers at {wall:%Y-%m-%dT%H:%M:%S}Z"
        reason = re.fullmatch(
            r"paused to resume from its checkpoint at step (\d+): (.*), WhenIdle",
            paused[0]["reason"],
        )
        assert reason is not None and reason.group(2) == note
        step = int(reason.group(1))
        view = http("GET", f"/jobs/{job_id}")[1]
        assert view["status"] == "Pending" and note in view["reason"]

        http.wait({job_id: "Running"}, timeout_s=90)  # once HyperPod's update succeeded
        sagemaker = twin.client("sagemaker")
        for instance_id in nodes:
            details = sagemaker.describe_cluster_node(
                ClusterName=twin.config.cluster_name, NodeId=instance_id
            )["NodeDetails"]
            assert "LastSoftwareUpdateTime" in details  # idle at the date: patched
        twin.cluster.advance()
        # Resumed from that checkpoint (or one the run wrote while the pass stopped it).
        assert twin.cluster.runs()[job_id].anchor_step >= step
        assert twin.cluster.clock.now() >= patch_at
