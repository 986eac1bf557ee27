"""Jobs a team applies itself (D170), decided without a cluster: the job a held Kueue Workload
becomes, the Workloads HyperGuard refuses and why, what a pass does with each, what the
forwarder forwards, and the wake-ups that name them."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from typing import Any

import pytest

from hyperguard.catalogue import ml_name
from hyperguard.cluster.held import HeldRefusal, held_job, job_id_of
from hyperguard.cluster.kueue import ADMISSION_CHECK
from hyperguard.events.kubernetes import woken_held
from hyperguard.forwarder import HeldTracker
from hyperguard.governance.adoption import Adopt, Refuse, plan_adoption
from hyperguard.governance.jobs import SubmissionRules
from hyperguard.models import Job, JobSource, JobStatus
from hyperguard.models.cluster import HeldWorkload
from hyperguard.models.records import JobRecord

OWNER_UID = "4f1c2a9e-0d3b-4c55-9e61-7a2b8c9d0e1f"
CREATED = "2026-11-27T09:30:00Z"
ACCELERATORS = {"ml.p5.48xlarge": 8, "ml.g5.xlarge": 1}


def instance_type(name: str) -> tuple[str, int]:
    return ml_name(name), ACCELERATORS[ml_name(name)]


def workload(
    *,
    namespace: str = "hyperpod-ns-nlp",
    state: str | None = "Pending",
    gpus: str = "8",
    count: Any = 2,
    selector: dict[str, str] | None = None,
    owner_kind: str = "Job",
    owner_api: str = "batch/v1",
) -> dict[str, Any]:
    """A Kueue v1beta2 Workload as Kueue's job reconciler makes it for a batch Job labelled
    with the team's LocalQueue, its HyperGuard check in `state`."""
    checks = [] if state is None else [{"name": ADMISSION_CHECK, "state": state, "message": ""}]
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {
            "name": "job-pretrain-7b-3c9d1",
            "namespace": namespace,
            "uid": "0b8e6a52-1111-4a2b-9c3d-5e6f7a8b9c0d",
            "creationTimestamp": CREATED,
            "ownerReferences": [
                {
                    "apiVersion": owner_api,
                    "kind": owner_kind,
                    "name": "pretrain-7b",
                    "uid": OWNER_UID,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "queueName": "hyperpod-ns-nlp-localqueue",
            "priorityClassRef": {
                "group": "kueue.x-k8s.io",
                "kind": "WorkloadPriorityClass",
                "name": "training-priority",
            },
            "podSets": [
                {
                    "name": "main",
                    "count": count,
                    "template": {
                        "metadata": {"labels": {"app": "pretrain"}},
                        "spec": {
                            "nodeSelector": (
                                {"node.kubernetes.io/instance-type": "ml.p5.48xlarge"}
                                if selector is None
                                else selector
                            ),
                            "containers": [
                                {
                                    "name": "trainer",
                                    "image": "nlp/pretrain:7b",
                                    "command": ["torchrun", "train.py"],
                                    "resources": {"limits": {"nvidia.com/gpu": gpus}},
                                }
                            ],
                            "restartPolicy": "Never",
                        },
                    },
                }
            ],
        },
        "status": {
            "conditions": [{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved"}],
            "admissionChecks": checks,
        },
    }


def test_a_held_workload_is_a_job_of_its_team_with_the_objects_own_shape() -> None:
    job = held_job(workload(), instance_type=instance_type)
    assert job.job_id == job_id_of("nlp", datetime(2026, 11, 27, 9, 30, tzinfo=UTC), OWNER_UID)
    assert job.job_id == "nlp-20261127093000-4f1c2a"
    assert (job.team, job.name, job.source) == ("nlp", "pretrain-7b", JobSource.CLUSTER)
    assert (job.instance_type, job.replicas, job.accelerators_per_replica) == (
        "ml.p5.48xlarge",
        2,
        8,
    )
    assert job.priority_class == "training"
    assert (job.image, job.command) == ("nlp/pretrain:7b", ["torchrun", "train.py"])
    assert job.pod_template is None  # the object on the cluster is its template
    assert job.cluster_object is not None
    assert job.cluster_object.model_dump() == {
        "kind": "Job",
        "namespace": "hyperpod-ns-nlp",
        "name": "pretrain-7b",
        "uid": OWNER_UID,
        "workload": "job-pretrain-7b-3c9d1",
        "pod_set": "main",
    }
    # The same Workload read again is the same job: a second pass records nothing new.
    assert held_job(workload(), instance_type=instance_type) == job


def test_an_ec2_instance_type_name_is_hyperpods_and_a_hyperpod_job_is_governed_too() -> None:
    held = workload(
        selector={"node.kubernetes.io/instance-type": "g5.xlarge"},
        gpus="1",
        owner_kind="HyperPodPyTorchJob",
        owner_api="sagemaker.amazonaws.com/v1",
    )
    job = held_job(held, instance_type=instance_type)
    assert job.instance_type == "ml.g5.xlarge"
    assert job.cluster_object is not None and job.cluster_object.kind == "HyperPodPyTorchJob"


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"namespace": "default"}, "namespace default is no team's"),
        ({"owner_kind": "RayJob", "owner_api": "ray.io/v1"}, "belongs to neither"),
        ({"owner_kind": "Job", "owner_api": "batch/v2"}, "belongs to neither"),
        ({"selector": {}}, "name the instance type"),
        ({"selector": {"node.kubernetes.io/instance-type": "x9.huge"}}, "unknown instance type"),
        ({"gpus": "16"}, "asks for 16 accelerators; ml.p5.48xlarge has 8"),
        ({"gpus": "0"}, "asks for 0 accelerators"),
        ({"gpus": "2.5"}, "is not a whole number"),
        ({"count": 0}, "pod set count 0"),
        ({"count": "2"}, "pod set count '2'"),
    ],
)
def test_a_workload_hyperguard_cannot_run_is_refused_with_the_reason(
    change: dict[str, Any], reason: str
) -> None:
    with pytest.raises(HeldRefusal, match=reason):
        held_job(workload(**change), instance_type=instance_type)


def test_a_workload_of_two_pod_sets_is_refused() -> None:
    two = workload()
    two["spec"]["podSets"].append(copy.deepcopy(two["spec"]["podSets"][0]) | {"name": "b"})
    with pytest.raises(HeldRefusal, match="one pod set; this one has 2"):
        held_job(two, instance_type=instance_type)


def rules(team_has_quota: bool = True) -> SubmissionRules:
    return SubmissionRules(
        team_has_quota=team_has_quota,
        priority_classes=frozenset({"training"}),
        accelerators_per_instance=8,
    )


def record(status: JobStatus) -> JobRecord:
    job = held_job(workload(), instance_type=instance_type)
    return JobRecord(job=job.model_copy(update={"status": status}))


def plan(
    *workloads: dict[str, Any], records: dict[str, JobRecord] | None = None, quota: bool = True
) -> list[Adopt | Refuse]:
    return plan_adoption(
        workloads,
        records or {},
        instance_type=instance_type,
        rules_for=lambda job: rules(quota),
    )


def test_a_pass_adopts_a_pending_workload_once_and_leaves_the_rest() -> None:
    [adopt] = plan(workload())
    assert isinstance(adopt, Adopt) and adopt.job.job_id == "nlp-20261127093000-4f1c2a"
    # Admitted (Ready), refused, or in a queue without HyperGuard's check: nothing to do.
    assert plan(workload(state="Ready"), workload(state="Rejected"), workload(state=None)) == []
    deactivated = workload()  # Kueue put the rejected check back to Pending
    deactivated["spec"]["active"] = False
    assert plan(deactivated) == [] and HeldTracker().observe("MODIFIED", deactivated) == []
    # Recorded and waiting, or running: nothing new.
    for status in (JobStatus.PENDING, JobStatus.PREEMPTED, JobStatus.RUNNING):
        job_id = adopt.job.job_id
        assert plan(workload(), records={job_id: record(status)}) == []


def test_a_workload_held_again_after_its_job_ended_is_refused_not_run_twice() -> None:
    job_id = "nlp-20261127093000-4f1c2a"
    for status in (JobStatus.CANCELLED, JobStatus.FAILED, JobStatus.SUCCEEDED):
        [refuse] = plan(workload(), records={job_id: record(status)})
        assert refuse == Refuse(
            "hyperpod-ns-nlp",
            "job-pretrain-7b-3c9d1",
            f"job {job_id} is {status.value}: apply it again to rerun it",
        )


def test_the_submission_rules_refuse_a_held_job_as_they_refuse_a_submission() -> None:
    [refuse] = plan(workload(), quota=False)
    assert isinstance(refuse, Refuse)
    assert refuse.reason == "team: team nlp has no compute quota"
    [refused] = plan(workload(namespace="default"))
    assert isinstance(refused, Refuse) and refused.namespace == "default"


def test_the_forwarder_sends_a_held_workload_once_per_pending_spell() -> None:
    tracker = HeldTracker()
    held = workload()
    [detail] = tracker.observe("ADDED", held)
    assert detail["namespace"] == "hyperpod-ns-nlp"
    assert detail["name"] == "job-pretrain-7b-3c9d1"
    assert (detail["ownerKind"], detail["ownerName"]) == ("Job", "pretrain-7b")
    assert tracker.observe("MODIFIED", held) == []  # still pending: already sent
    assert tracker.observe("MODIFIED", workload(state="Ready")) == []  # admitted
    # Evicted (D185): Kueue puts the check back to Pending, then releases the quota, then
    # reserves it again; only then does the Workload wait on HyperGuard's check.
    evicting = with_conditions(held, Evicted="True")
    released = with_conditions(held, QuotaReserved="False", Evicted="True")
    assert tracker.observe("MODIFIED", evicting) == []
    assert tracker.observe("MODIFIED", released) == []
    assert len(tracker.observe("MODIFIED", held)) == 1  # reserved again: sent again
    assert tracker.observe("DELETED", held) == [] and not tracker.sent


def with_conditions(held: dict[str, Any], **statuses: str) -> dict[str, Any]:
    """`held` with these of its conditions' statuses (a condition it lacks is added)."""
    changed = copy.deepcopy(held)
    conditions = changed["status"]["conditions"]
    for kind, status in statuses.items():
        found = next((c for c in conditions if c["type"] == kind), None)
        if found is None:
            conditions.append({"type": kind, "status": status, "reason": "AdmissionCheck"})
        else:
            found["status"] = status
    return changed


def test_the_forwarder_counts_workloads_outside_team_namespaces_and_sends_none() -> None:
    tracker = HeldTracker()
    assert tracker.observe("ADDED", workload(namespace="research")) == []
    assert tracker.outside == {"0b8e6a52-1111-4a2b-9c3d-5e6f7a8b9c0d"}
    assert tracker.observe("ADDED", workload(state=None)) == []  # not held for HyperGuard


def event(detail: Any, detail_type: str = "Kubernetes Workload Held") -> str:
    return json.dumps(
        {
            "version": "0",
            "source": "hyperguard.node-forwarder",
            "detail-type": detail_type,
            "detail": detail,
        }
    )


def test_the_wake_ups_that_name_a_held_workload_are_read_and_the_others_ignored() -> None:
    detail = {"clusterName": "c", "namespace": "hyperpod-ns-nlp", "name": "w", "uid": "u"}
    bodies = [
        event(detail),
        event({"namespace": "hyperpod-ns-nlp"}),  # no name
        event({"namespace": "", "name": "w"}),
        event({"namespace": "n", "name": "x" * 254}),  # over a name's length
        event(detail, "Kubernetes Job Status Changed"),
        json.dumps({"reason": "job submitted", "jobId": "nlp-1"}),
        "not json",
        "[]",
    ]
    assert woken_held(bodies) == [HeldWorkload("hyperpod-ns-nlp", "w")]


def test_a_job_of_the_api_has_no_cluster_object() -> None:
    job = Job(job_id="nlp-1", team="nlp", image="i")
    assert job.source is JobSource.API and job.cluster_object is None
