"""Kueue on the twin's cluster, through the service's own gateway and the twin's Kubernetes
API server: a run stays suspended, with Kueue's condition on its Workload, until the Kueue
objects it names exist and its ClusterQueue has room; the objects HyperGuard ensures
(hyperguard.cluster.kueue) are what it needs. Each test fails against a cluster that starts
every run it is given or accepts objects in a namespace that does not exist."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from tests.conftest import Stack
from tests.deadlines import loaded
from tests.integration.cluster_harness import (
    CLUSTER_QUEUES,
    LOCAL_QUEUES,
    P5,
    ROLE_BINDINGS,
    ClusterApis,
    cluster_apis,
)

from hyperguard.cluster.gateway import ClusterError
from hyperguard.cluster.kueue import (
    MANAGED_BY_LABEL,
    EnsureOutcome,
    cluster_queue,
    runs_cluster_queue,
    shared_objects,
    team_objects,
)
from hyperguard.cluster.workloads import RUNS_QUEUE, local_queue, team_namespace
from hyperguard.models import Job
from hyperguard.models.governance import PriorityClass
from hyperguard_twin.plane.kube import (
    HYPERPOD_PYTORCH_JOBS,
    NAMESPACES,
    PRIORITY_CLASSES,
    WORKLOADS,
    KubeClient,
    wait_for,
)

TEAM = "ml"
NS = team_namespace(TEAM)
TRAINING = [PriorityClass(name="training", weight=50)]


@pytest.fixture
def apis(stack: Stack) -> Iterator[ClusterApis]:
    with cluster_apis(hyperpod_nodes=2, burst_nodes=1) as running:
        without_namespace(running.kube, NS)
        yield running


def without_namespace(kube: KubeClient, name: str) -> None:
    """The team's namespace gone, as on a cluster HyperGuard never dispatched to: an earlier
    test on this control plane may have left it (the harness keeps teams' namespaces)."""
    kube.delete(NAMESPACES, name)
    wait_for(lambda: kube.get(NAMESPACES, name) is None, loaded(60), f"namespace {name} to go")


def job(apis: ClusterApis, job_id: str, *, priority_class: str | None = "training") -> Job:
    return Job(
        job_id=job_id,
        team=TEAM,
        priority_class=priority_class,
        instance_type=P5,
        replicas=1,
        accelerators_per_replica=8,
        image="hyperguard/trainer:test",
        submitted_at=apis.clock.now(),
    )


def dispatch(apis: ClusterApis, run: Job, node: int = 0) -> None:
    assert apis.gateway.dispatch(run, [apis.hyperpod[node]])
    apis.settle()


def workload_of(apis: ClusterApis, name: str) -> dict[str, Any] | None:
    found = [
        w
        for w in apis.kube.list_objects(WORKLOADS, NS)
        if any(o["name"] == name for o in w["metadata"].get("ownerReferences") or [])
    ]
    return found[0] if found else None


def quota_reserved(apis: ClusterApis, name: str) -> tuple[str, str, str]:
    """Kueue's QuotaReserved condition on the run's Workload, once Kueue has decided (it acts
    in wall time, after the operator made the Workload)."""

    def decided() -> dict[str, str] | None:
        workload = workload_of(apis, name) or {}
        conditions = (workload.get("status") or {}).get("conditions") or []
        return next((c for c in conditions if c["type"] == "QuotaReserved"), None)

    condition = wait_for(decided, loaded(60), f"Kueue to decide on the Workload of {name}")
    return condition["status"], condition["reason"], condition["message"]


def run_suspended(apis: ClusterApis, name: str) -> bool:
    run = apis.kube.get(HYPERPOD_PYTORCH_JOBS, name, NS)
    assert run is not None
    return bool(run["spec"]["runPolicy"]["suspend"])


def started(apis: ClusterApis, job_id: str) -> bool:
    run = apis.cluster.runs().get(job_id)
    return run is not None and run.state in ("running", "waiting")


def ensure(apis: ClusterApis, classes: list[PriorityClass] = TRAINING) -> dict[str, str]:
    outcome = apis.gateway.ensure_queues([*shared_objects(classes), *team_objects(TEAM)])
    apis.settle()
    return outcome


def test_a_dry_run_before_the_teams_namespace_exists_says_so(apis: ClusterApis) -> None:
    [unready] = apis.gateway.dry_run(job(apis, "a"), ["hyperpod"])
    assert unready.refused is not None
    assert f"not sent: namespace {NS} does not exist yet" in unready.refused
    assert "before the team's first run" in unready.refused
    ensure(apis)
    [ready] = apis.gateway.dry_run(job(apis, "a"), ["hyperpod"])
    assert ready.refused is None
    assert apis.kube.list_objects(HYPERPOD_PYTORCH_JOBS) == []  # a dry run creates nothing


def test_a_run_in_a_namespace_that_does_not_exist_is_refused(apis: ClusterApis) -> None:
    # Before kube-apiserver's namespace check, RBAC's: HyperGuard may write in a team's
    # namespace only through the RoleBinding it ensures there with the namespace.
    with pytest.raises(ClusterError, match=r'forbidden: .+ in the namespace "hyperpod-ns-ml"'):
        apis.gateway.dispatch(job(apis, "a"), [apis.hyperpod[0]])
    assert apis.kube.list_objects(HYPERPOD_PYTORCH_JOBS) == [] and not started(apis, "a")


def test_a_run_waits_for_its_local_queue_and_starts_once_hyperguard_ensured_it(
    apis: ClusterApis,
) -> None:
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}
    apis.kube.create(NAMESPACES, namespace)  # an admin's, not HyperGuard's
    wanted = [*shared_objects(TRAINING), *team_objects(TEAM)]
    before = apis.gateway.ensure_queues([o for o in wanted if o["kind"] != "LocalQueue"])
    assert before[f"Namespace/{NS}"] == EnsureOutcome.FOREIGN  # created above, left alone
    dispatch(apis, job(apis, "a"))
    assert quota_reserved(apis, "a") == (
        "False",
        "Inadmissible",
        f"LocalQueue {RUNS_QUEUE} doesn't exist",
    )
    assert run_suspended(apis, "a") and not started(apis, "a")

    outcomes = ensure(apis)
    assert outcomes[f"Namespace/{NS}"] == EnsureOutcome.FOREIGN
    assert outcomes[f"LocalQueue/{RUNS_QUEUE}"] == EnsureOutcome.CREATED
    assert outcomes[f"LocalQueue/{local_queue(TEAM)}"] == EnsureOutcome.CREATED
    wait_for(lambda: started(apis, "a"), loaded(60), "run a to start once its LocalQueue exists")
    # HyperGuard's runs go through the queue without its admission check (D170).
    assert quota_reserved(apis, "a") == (
        "True",
        "QuotaReserved",
        f"Quota reserved in ClusterQueue {runs_cluster_queue(TEAM)}",
    )
    assert not run_suspended(apis, "a")


def test_a_run_waits_without_a_workload_until_its_priority_class_exists(
    apis: ClusterApis,
) -> None:
    ensure(apis, classes=[])
    dispatch(apis, job(apis, "a"))
    assert workload_of(apis, "a") is None  # Kueue cannot build it: no priority
    assert run_suspended(apis, "a") and not started(apis, "a")

    assert ensure(apis)["WorkloadPriorityClass/training-priority"] == EnsureOutcome.CREATED
    workload = workload_of(apis, "a")
    assert workload is not None and workload["spec"]["priority"] == 50
    wait_for(lambda: started(apis, "a"), loaded(60), "run a to start once its Workload exists")


@pytest.mark.parametrize("freed_by", ["stop", "finish"])
def test_a_run_over_its_cluster_queues_quota_waits_until_quota_is_freed(
    apis: ClusterApis, freed_by: str
) -> None:
    ensure(apis)
    # An operator's ClusterQueue with room for one 8-GPU run, in place of HyperGuard's: it
    # covers what a run asks for besides the GPUs (its memory and EFA interfaces, D156).
    quotas = {"nvidia.com/gpu": 8, "memory": "4Ei", "vpc.amazonaws.com/efa": 64}
    apis.kube.patch(
        CLUSTER_QUEUES,
        runs_cluster_queue(TEAM),
        {
            "metadata": {"labels": {MANAGED_BY_LABEL: "operator"}},
            "spec": {
                "resourceGroups": [
                    {
                        "coveredResources": list(quotas),
                        "flavors": [
                            {
                                "name": "hyperguard",
                                "resources": [
                                    {"name": name, "nominalQuota": quota}
                                    for name, quota in quotas.items()
                                ],
                            }
                        ],
                    }
                ]
            },
        },
    )
    dispatch(apis, job(apis, "a").model_copy(update={"max_steps": 2}), node=0)
    wait_for(lambda: started(apis, "a"), loaded(60), "run a to start")
    dispatch(apis, job(apis, "b"), node=1)
    assert quota_reserved(apis, "b") == (
        "False",
        "Pending",
        "couldn't assign flavors to pod set pods: insufficient unused quota for "
        "nvidia.com/gpu in flavor hyperguard, 8 more needed",
    )
    assert not started(apis, "b")
    assert ensure(apis)[f"ClusterQueue/{runs_cluster_queue(TEAM)}"] == EnsureOutcome.FOREIGN

    if freed_by == "stop":  # the run and its Workload are deleted
        assert apis.gateway.stop_job("a")
        apis.settle()
    else:  # the run completes: its Workload is Finished and gives the quota back
        apis.advance(60 + 30 * 3)
        assert apis.cluster.runs()["a"].state == "succeeded"
    # Kueue admits it in its own time (wall time): once the quota is back in its cache.
    wait_for(lambda: started(apis, "b"), loaded(60), "run b to start once the quota was freed")
    assert quota_reserved(apis, "b")[0] == "True"


def test_ensuring_twice_changes_nothing_and_a_changed_class_is_updated(
    apis: ClusterApis,
) -> None:
    first = ensure(apis)
    assert set(first.values()) == {EnsureOutcome.CREATED}
    bindings = {b["metadata"]["name"]: b for b in apis.kube.list_objects(ROLE_BINDINGS, NS)}
    assert {n: b["roleRef"]["name"] for n, b in bindings.items()} == {
        "hyperguard-scheduler": "hyperguard-scheduler-in-team",
        "hyperguard-recovery": "hyperguard-recovery-in-team",
        "hyperguard-api": "hyperguard-api-in-team",
    }
    queue = apis.kube.get(LOCAL_QUEUES, local_queue(TEAM), NS)
    assert queue is not None
    assert queue["spec"]["clusterQueue"] == cluster_queue(TEAM)  # the CRD defaults the rest
    runs = apis.kube.get(LOCAL_QUEUES, RUNS_QUEUE, NS)
    assert runs is not None and runs["spec"]["clusterQueue"] == runs_cluster_queue(TEAM)
    assert set(ensure(apis).values()) == {EnsureOutcome.UNCHANGED}

    heavier = [PriorityClass(name="training", weight=80)]
    again = ensure(apis, heavier)
    assert again["WorkloadPriorityClass/training-priority"] == EnsureOutcome.UPDATED
    heavy = apis.kube.get(PRIORITY_CLASSES, "training-priority")
    assert heavy is not None and heavy["value"] == 80
    assert {k for k, v in again.items() if v != EnsureOutcome.UNCHANGED} == {
        "WorkloadPriorityClass/training-priority"
    }
