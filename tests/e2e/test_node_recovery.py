"""A HyperPod cluster as AWS creates it, NodeRecovery Automatic (D142): HyperPod's own
recovery replaces the node its health agent finds faulty, and the deployed HyperGuard, with
its default `hyperpodNodeRecovery: defer`, never orders a repair of its own. It still
cordons, drains, protects and resumes the job, and says who repaired on the incident."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from tests.e2e.conftest import running_twin
from tests.e2e.test_recovery import Service

from hyperguard.models import IncidentStatus
from hyperguard_twin.runtime import Twin

REPAIR_CALLS = {"sagemaker:BatchRebootClusterNodes", "sagemaker:BatchReplaceClusterNodes"}


@pytest.fixture(scope="module")
def twin() -> Iterator[Twin]:
    with running_twin(hyperpod_nodes=9, node_recovery="Automatic") as running:
        yield running


def test_hyperpods_automatic_recovery_replaces_the_node_and_hyperguard_resumes_the_job(
    twin: Twin,
) -> None:
    service = Service(twin)
    llama = service.job_id("llama3-70b-pretrain")
    service.until(lambda: twin.cluster.step_of(llama) >= 1211, what="llama reaches step 1211")
    faulty = service.nodes_of("llama3-70b-pretrain")[1]
    twin.fault(faulty, "persistent")  # HyperPod's agent reports it: RepairAction Replace
    incident = service.incident_for(faulty)
    execution = service.finish(incident.execution_arn)
    assert execution["status"] == "SUCCEEDED", (execution.get("cause"), execution["name"])
    closed = service.incidents.get(incident.incident_id)
    assert closed is not None and closed.status is IncidentStatus.RESOLVED
    assert twin.cluster.instance(faulty) is None  # HyperPod replaced it
    assert closed.repaired_by == "hyperpod"
    if closed.resolution == "replaced" and not closed.jobs:
        # Diagnosed while HyperPod replaced it, but HyperPod's recovery had killed the run
        # before any incident held the job, and a pass requeued it as lost (D167): the
        # incident had no job left to resume. A full run of the concurrent pass (D162) met
        # it; its shorter passes find the lost run sooner.
        record = service.jobs.record(llama)
        assert record is not None
        assert any(
            entry.reason.startswith("requeued to resume from its checkpoint")
            for entry in record.history
        ), [(entry.event, entry.reason) for entry in record.history]
    elif closed.resolution == "replaced":
        # Diagnosed while HyperPod replaced it: protected, drained, resumed on the replacement.
        # The recovery ends once the resumed run is dispatched; its pods start after (one run
        # found 1 of its 4 pods placed at that moment), so the run is waited for.
        replacement = closed.replacement_instance_id
        service.until(
            lambda: replacement in (nodes := twin.cluster.job_instances(llama)) and len(nodes) == 4,
            timeout_s=240,
            what="llama runs on the replacement",
        )
        (plan,) = closed.jobs
        assert plan.job_id == llama and plan.resumed
    else:
        # At x60 a loaded host's few seconds to the diagnosis are minutes of cluster time:
        # HyperPod had replaced the node already. Its run went with it, and the scheduler
        # requeues the job from its checkpoint.
        assert closed.resolution == "instance_gone" and closed.jobs == []
    # Requeued, the job waits for HyperPod's replacement to boot (940 s of cluster time, at
    # x60 about 16 s) and for the inventory to list it; one run of four timed out at 90 s.
    service.until(
        lambda: faulty not in (nodes := twin.cluster.job_instances(llama)) and len(nodes) == 4,
        timeout_s=240,
        what="llama runs again, off the replaced node",
    )
    # Exactly one system repaired: HyperGuard read NodeRecovery and ordered nothing.
    calls = set(twin.function_calls())
    assert ("RecoveryFunction", "sagemaker:DescribeCluster") in calls
    assert not {action for function, action in calls if function == "RecoveryFunction"} & (
        REPAIR_CALLS
    )
