"""The Kueue objects a team's runs need (hyperguard.cluster.kueue), decided without a
cluster: names, the namespace selector, the unbounded quota covering every resource a run
requests, the priority classes, and when an existing object needs a patch."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from lightkube.utils.quantity import parse_quantity

from hyperguard.cluster.kueue import (
    ADMISSION_CHECK,
    ADMISSION_CONTROLLER,
    FLAVOR,
    MANAGED_BY_LABEL,
    NAMESPACE_NAME_LABEL,
    UNBOUNDED_QUOTA,
    change_for,
    cluster_queue,
    owned_by_hyperguard,
    runs_cluster_queue,
    shared_objects,
    team_objects,
)
from hyperguard.cluster.workloads import (
    PRIORITY_LABEL,
    QUEUE_LABEL,
    RUNS_QUEUE,
    batch_job_manifest,
    hyperpod_job_manifest,
    local_queue,
)
from hyperguard.models import Job
from hyperguard.models.governance import MAX_INSTANCES, PriorityClass


def by_kind(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {o["kind"]: o for o in objects}


def by_name(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in objects}


def job(instance_type: str = "ml.p5.48xlarge", priority_class: str | None = "training") -> Job:
    return Job(
        job_id="ml-1",
        team="ml",
        priority_class=priority_class,
        instance_type=instance_type,
        replicas=2,
        accelerators_per_replica=8,
        image="trainer:1",
        submitted_at=datetime(2026, 1, 1, tzinfo=UTC),
    )


def test_a_team_gets_its_namespace_bindings_and_two_queues_in_that_order() -> None:
    """The RoleBindings come before the LocalQueues: only they let the scheduler write in the
    team's namespace (deploy/kubernetes/hyperguard-rbac.yaml). The team's own queue (HyperPod
    task governance's names, what kubectl users label jobs with) is held on HyperGuard's
    admission check; HyperGuard's runs, admitted already, go through a queue without (D170)."""
    objects = team_objects("ml")
    assert [o["kind"] for o in objects] == [
        "Namespace",
        "RoleBinding",
        "RoleBinding",
        "RoleBinding",
        "ClusterQueue",
        "LocalQueue",
        "ClusterQueue",
        "LocalQueue",
    ]
    bindings = [o for o in objects if o["kind"] == "RoleBinding"]
    assert [(b["metadata"]["namespace"], b["roleRef"]["name"]) for b in bindings] == [
        ("hyperpod-ns-ml", "hyperguard-scheduler-in-team"),
        ("hyperpod-ns-ml", "hyperguard-recovery-in-team"),
        ("hyperpod-ns-ml", "hyperguard-api-in-team"),
    ]
    named = by_name(objects)
    assert named["hyperpod-ns-ml"]["kind"] == "Namespace"
    teams, runs = named[local_queue("ml")], named[RUNS_QUEUE]
    assert teams["metadata"]["name"] == "hyperpod-ns-ml-localqueue"
    assert teams["metadata"]["namespace"] == runs["metadata"]["namespace"] == "hyperpod-ns-ml"
    assert teams["spec"] == {"clusterQueue": cluster_queue("ml")}
    assert runs["spec"] == {"clusterQueue": runs_cluster_queue("ml")}
    held, free = named[cluster_queue("ml")]["spec"], named[runs_cluster_queue("ml")]["spec"]
    assert held["admissionChecksStrategy"] == {"admissionChecks": [{"name": ADMISSION_CHECK}]}
    assert "admissionChecksStrategy" not in free
    for spec in (held, free):
        # Only the team's namespace, by the label kube-apiserver sets on every namespace.
        assert spec["namespaceSelector"] == {
            "matchLabels": {NAMESPACE_NAME_LABEL: "hyperpod-ns-ml"}
        }
        assert spec["preemption"] == {"reclaimWithinCohort": "Never", "withinClusterQueue": "Never"}
        assert "cohort" not in spec
    assert all(owned_by_hyperguard(o) for o in objects)


def test_hyperguards_admission_check_is_shared_by_every_team() -> None:
    check = by_kind(shared_objects([]))["AdmissionCheck"]
    assert check["metadata"]["name"] == ADMISSION_CHECK
    assert check["spec"] == {"controllerName": ADMISSION_CONTROLLER}


@pytest.mark.parametrize("instance_type", ["ml.p5.48xlarge", "ml.trn1.32xlarge"])
def test_the_cluster_queue_covers_what_every_run_requests(instance_type: str) -> None:
    [group] = by_name(team_objects("ml"))[runs_cluster_queue("ml")]["spec"]["resourceGroups"]
    [flavor] = group["flavors"]
    assert flavor["name"] == FLAVOR
    assert [r["name"] for r in flavor["resources"]] == group["coveredResources"]
    for manifest in (
        hyperpod_job_manifest(job(instance_type), ["n1", "n2"]),
        batch_job_manifest(job(instance_type), ["n1", "n2"]),
    ):
        spec = manifest["spec"]
        template = (spec.get("replicaSpecs") or [spec])[0]["template"]["spec"]
        for container in template["containers"]:
            assert set(container["resources"]["requests"]) <= set(group["coveredResources"])


def test_the_quota_is_above_any_teams_and_within_what_kueue_counts() -> None:
    largest_team = {  # MAX_INSTANCES of an instance with 64 accelerators, 1024 vCPU, 32 TiB
        "cpu": MAX_INSTANCES * 1024 * 1000,
        "memory": MAX_INSTANCES * 32 * 2**40,
        "nvidia.com/gpu": MAX_INSTANCES * 64,
        "aws.amazon.com/neuron": MAX_INSTANCES * 64,
        "vpc.amazonaws.com/efa": MAX_INSTANCES * 64,
        # A job's own pod template may ask for these too (D156): 32 TiB each, per instance.
        "ephemeral-storage": MAX_INSTANCES * 32 * 2**40,
        "hugepages-2Mi": MAX_INSTANCES * 32 * 2**40,
        "hugepages-1Gi": MAX_INSTANCES * 32 * 2**40,
    }
    for resource, quota in UNBOUNDED_QUOTA.items():
        # Kueue counts CPU in millicores, every other resource in units (int64 either way).
        scale = 1000 if resource == "cpu" else 1
        counted = parse_quantity(quota)
        assert counted is not None, f"{resource}: {quota} is not a quantity"
        assert largest_team[resource] < counted * scale < 2**63


def test_runs_name_the_queue_and_the_priority_class_the_objects_provide() -> None:
    manifest = hyperpod_job_manifest(job(), ["n1", "n2"])
    labels = manifest["metadata"]["labels"]
    assert labels[QUEUE_LABEL] == RUNS_QUEUE
    assert by_name(team_objects("ml"))[RUNS_QUEUE]["kind"] == "LocalQueue"
    classes = [PriorityClass(name="training", weight=50), PriorityClass(name="low", weight=0)]
    shared = shared_objects(classes)
    names = {o["metadata"]["name"]: o for o in shared if o["kind"] == "WorkloadPriorityClass"}
    assert set(names) == {"training-priority", "low-priority"}
    assert labels[PRIORITY_LABEL] in names
    assert names["training-priority"]["value"] == 50 and names["low-priority"]["value"] == 0
    assert by_kind(shared)["ResourceFlavor"]["spec"] == {}  # no node labels: runs are pinned


def test_fields_the_api_server_defaulted_are_no_difference() -> None:
    wanted = by_kind(team_objects("ml"))["LocalQueue"]
    actual = {
        "metadata": {"name": wanted["metadata"]["name"], "labels": {MANAGED_BY_LABEL: "x"}},
        "spec": {**wanted["spec"], "stopPolicy": "None"},
    }
    assert change_for(wanted, actual) is None


def test_a_changed_field_is_patched_back() -> None:
    wanted = by_kind(shared_objects([PriorityClass(name="training", weight=80)]))[
        "WorkloadPriorityClass"
    ]
    actual = {**wanted, "value": 50}
    assert change_for(wanted, actual) == {"value": 80}
    queue = by_kind(team_objects("ml"))["ClusterQueue"]
    shrunk = {**queue, "spec": {**queue["spec"], "resourceGroups": []}}
    assert change_for(queue, shrunk) == {"spec": queue["spec"]}


def test_an_object_without_hyperguards_label_is_someone_elses() -> None:
    assert not owned_by_hyperguard({"metadata": {"labels": {MANAGED_BY_LABEL: "sagemaker"}}})
    assert not owned_by_hyperguard({"metadata": {}})
    assert set(UNBOUNDED_QUOTA) >= {"nvidia.com/gpu", "aws.amazon.com/neuron"}
