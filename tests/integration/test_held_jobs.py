"""A batch Job a team applies itself to its namespace (as `kubectl apply` would), on the twin's
upstream control plane (kube-apiserver, Kueue, the Job controller, kube-scheduler, KWOK):
Kueue holds it suspended on HyperGuard's admission check; a pass that a forwarder's event names
records it as a job of the team, counts it against the team's quota, admits it (Kueue then
starts the team's own object) or leaves it waiting, and preempts it back to its queue; one
HyperGuard cannot run is refused, and Kueue deactivates it (D170). Moto tables, manual clock.
Each test fails against a Kueue that starts what the team applied on its own."""

from __future__ import annotations

from typing import Any

import pytest
from tests.conftest import Stack
from tests.deadlines import loaded
from tests.integration.api_harness import Api
from tests.integration.cluster_harness import LOCAL_QUEUES, P5, ClusterApis
from tests.integration.conftest import MakeCluster
from tests.integration.scheduler_harness import scheduler

from hyperguard.cluster.gateway import ClusterError
from hyperguard.cluster.held import reserved, waiting
from hyperguard.cluster.kueue import ADMISSION_CHECK, cluster_queue
from hyperguard.cluster.workloads import JOB_ID_LABEL, RUN_LABEL, local_queue, team_namespace
from hyperguard.forwarder import HeldTracker
from hyperguard.governance.service import SchedulerService
from hyperguard.models.cluster import HeldWorkload
from hyperguard_twin.plane.kube import (
    HYPERPOD_PYTORCH_JOBS,
    JOBS,
    PODS,
    WORKLOADS,
    resource,
    wait_for,
)

TEAM = "solo"
NS = team_namespace(TEAM)
CLUSTER_QUEUES = resource("kueue.x-k8s.io/v1beta2", "clusterqueues", namespaced=False)


LOW_AND_HIGH = {"PriorityClasses": [{"Name": "low", "Weight": 1}, {"Name": "high", "Weight": 9}]}


def setup(stack: Stack, apis: ClusterApis, gpus: int = 16) -> tuple[Api, SchedulerService]:
    """Team solo with a quota of `gpus`, priority classes low and high, and a first pass,
    which ensures the team's objects: the namespace and the queue a team applies to, held on
    HyperGuard's check, and the classes' WorkloadPriorityClasses."""
    api = Api(stack)
    api.quota(TEAM, gpus, strategy="DontLend", borrow=None)
    assert api.call("PUT", "/scheduler-config", LOW_AND_HIGH).status == 200
    service = scheduler(stack, apis)
    service.run_pass()

    def active() -> bool:
        queue = apis.kube.get(CLUSTER_QUEUES, cluster_queue(TEAM)) or {}
        conditions = (queue.get("status") or {}).get("conditions") or []
        return any(c["type"] == "Active" and c["status"] == "True" for c in conditions)

    wait_for(active, loaded(60), "the team's ClusterQueue to be active (HyperGuard's check Active)")
    return api, service


def apply(
    apis: ClusterApis,
    name: str,
    *,
    gpus: int = 8,
    priority: str | None = None,
    backoff_limit: int = 0,
) -> None:
    """A batch Job as a team member writes it: the team's LocalQueue, an instance type."""
    labels = {"kueue.x-k8s.io/queue-name": local_queue(TEAM)}
    if priority is not None:
        labels["kueue.x-k8s.io/priority-class"] = f"{priority}-priority"
    apis.kube.create(
        JOBS,
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": name, "namespace": NS, "labels": labels},
            "spec": {
                "parallelism": 1,
                "completions": 1,
                "backoffLimit": backoff_limit,
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "nodeSelector": {"node.kubernetes.io/instance-type": P5},
                        "containers": [
                            {
                                "name": "train",
                                "image": "team/train:1",
                                "command": ["python", "train.py"],
                                "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                            }
                        ],
                    }
                },
            },
        },
        NS,
    )


def workload_of(apis: ClusterApis, name: str) -> dict[str, Any] | None:
    for workload in apis.kube.list_objects(WORKLOADS, NS):
        if any(o["name"] == name for o in workload["metadata"].get("ownerReferences") or []):
            return workload
    return None


def check(apis: ClusterApis, name: str) -> str | None:
    for state in ((workload_of(apis, name) or {}).get("status") or {}).get("admissionChecks") or []:
        if state["name"] == ADMISSION_CHECK:
            return str(state["state"])
    return None


def held(apis: ClusterApis, tracker: HeldTracker, name: str) -> list[HeldWorkload]:
    """Once Kueue holds the team's Job on HyperGuard's check (its quota reserved, the check
    Pending): what the forwarder sends for it, as the pass's wake-up names it."""
    wait_for(lambda: waits(apis, name), loaded(60), f"Kueue to hold {name}")
    workload = workload_of(apis, name)
    assert workload is not None
    return [HeldWorkload(d["namespace"], d["name"]) for d in tracker.observe("ADDED", workload)]


def waits(apis: ClusterApis, name: str) -> bool:
    return waiting(workload_of(apis, name) or {}, ADMISSION_CHECK)


def suspended(apis: ClusterApis, name: str) -> bool:
    job = apis.kube.get(JOBS, name, NS)
    assert job is not None
    return bool(job["spec"].get("suspend"))


def running_pods(apis: ClusterApis, name: str) -> list[dict[str, Any]]:
    return [
        p
        for p in apis.kube.list_objects(PODS, NS, label_selector=f"job-name={name}")
        if (p.get("status") or {}).get("phase") == "Running"
        and not p["metadata"].get("deletionTimestamp")
    ]


def test_an_applied_job_waits_on_the_quota_and_runs_once_hyperguard_admits_it(
    stack: Stack, make_cluster: MakeCluster
) -> None:
    apis = make_cluster(hyperpod_nodes=2)
    api, service = setup(stack, apis)
    first = api.submit(TEAM, 8, replicas=2).body["job_id"]  # the team's whole quota
    assert service.run_pass().admitted == [first]

    tracker = HeldTracker()
    apply(apis, "pretrain")
    named = held(apis, tracker, "pretrain")
    result = service.run_pass(held=named)
    [job_id] = result.adopted
    assert result.admitted == []
    view = api.call("GET", f"/jobs/{job_id}").body
    assert (view["source"], view["team"], view["status"]) == ("cluster", TEAM, "Pending")
    assert view["cluster_object"]["kind"] == "Job" and view["cluster_object"]["name"] == "pretrain"
    assert (view["instance_type"], view["replicas"], view["accelerators_per_replica"]) == (
        P5,
        1,
        8,
    )
    apis.settle()
    assert check(apis, "pretrain") == "Pending" and suspended(apis, "pretrain")
    assert running_pods(apis, "pretrain") == []
    # A second event for it (the forwarder restarted) records nothing twice.
    assert service.run_pass(held=named).adopted == []

    assert api.call("DELETE", f"/jobs/{first}").status == 200
    # The cancelled job's pods stopped and its quota given back, then the held job admitted
    # (in the same pass, or the next once the stop is seen).
    assert [*service.run_pass().admitted, *service.run_pass().admitted] == [job_id]
    wait_for(lambda: not suspended(apis, "pretrain"), loaded(60), "Kueue to start the team's Job")
    assert check(apis, "pretrain") == "Ready"
    wait_for(lambda: running_pods(apis, "pretrain"), loaded(60), "the team's pod to run")
    [pod] = running_pods(apis, "pretrain")
    # Kueue's pod set update: the pods carry the job's labels, so placement and logs find them.
    assert pod["metadata"]["labels"][JOB_ID_LABEL] == view["job_id"].lower()
    assert pod["metadata"]["labels"][RUN_LABEL] == "0"
    apis.settle()
    service.run_pass()
    running = api.call("GET", f"/jobs/{job_id}").body
    assert running["status"] == "Running"
    [node] = running["nodes"]  # where kube-scheduler placed it, as the pass found it
    assert apis.gateway.kubernetes.node_name(node) == pod["spec"]["nodeName"]


def test_an_applied_job_is_preempted_back_to_its_queue_and_not_deleted(
    stack: Stack, make_cluster: MakeCluster
) -> None:
    apis = make_cluster(hyperpod_nodes=2)
    api, service = setup(stack, apis, gpus=8)
    tracker = HeldTracker()
    apply(apis, "sweep", priority="low")
    named = held(apis, tracker, "sweep")
    result = service.run_pass(held=named)
    [job_id] = result.adopted
    assert result.admitted == [job_id]
    wait_for(lambda: running_pods(apis, "sweep"), loaded(60), "the team's pod to run")
    assert tracker.observe("MODIFIED", workload_of(apis, "sweep") or {}) == []  # admitted

    urgent = api.submit(TEAM, 8, priority_class="high").body["job_id"]
    result = service.run_pass()
    assert result.preempted == [job_id] and result.admitted == [urgent]
    # Evicted through the check: Kueue suspends the team's Job, takes its pod and holds it
    # again; the Job itself stays, no longer labelled as a run.
    wait_for(lambda: suspended(apis, "sweep"), loaded(60), "Kueue to suspend the team's Job")
    wait_for(
        lambda: waits(apis, "sweep"), loaded(60), "the check back to Pending, the quota reserved"
    )
    wait_for(lambda: not running_pods(apis, "sweep"), loaded(60), "the team's pod to go")
    job = apis.kube.get(JOBS, "sweep", NS)
    assert job is not None and RUN_LABEL not in job["metadata"]["labels"]
    preempted = api.call("GET", f"/jobs/{job_id}").body
    assert preempted["status"] in ("Preempted", "Pending")
    # Held again: the forwarder sends it again, and the pass knows the job already.
    assert tracker.observe("MODIFIED", workload_of(apis, "sweep") or {})
    assert service.run_pass(held=named).adopted == []


def test_a_held_job_stopped_for_a_restart_is_admitted_again_once_kueue_reserves_it(
    stack: Stack, make_cluster: MakeCluster
) -> None:
    """Recovery restarts a team's Job by evicting it back to its queue and admitting it again
    (D170). Between the two, Kueue suspends the Job, releases its quota and reserves it
    again; a Ready set before that reservation can be reset by Kueue's scheduler, and the Job
    then stays suspended for good (CI, 2026-11-29). The team's LocalQueue is held here, so
    that the evicted Workload stays unreserved: the admission waits, and so does the
    forwarder, until Kueue reserves it again (D185)."""
    apis = make_cluster(hyperpod_nodes=2)
    api, service = setup(stack, apis, gpus=8)
    tracker = HeldTracker()
    apply(apis, "sweep")
    [job_id] = service.run_pass(held=held(apis, tracker, "sweep")).admitted
    wait_for(lambda: running_pods(apis, "sweep"), loaded(60), "the team's pod to run")
    record = api.jobs.record(job_id)
    assert record is not None
    again = record.job.model_copy(update={"run": record.job.run + 1})
    apis.kube.patch(LOCAL_QUEUES, local_queue(TEAM), {"spec": {"stopPolicy": "Hold"}}, NS)

    assert apis.gateway.stop_job(job_id, before_run=again.run)

    def evicted() -> bool:
        workload = workload_of(apis, "sweep") or {}
        return suspended(apis, "sweep") and not reserved(workload)

    wait_for(evicted, loaded(60), "Kueue to suspend the Job and release its quota")
    assert check(apis, "sweep") == "Pending"
    with pytest.raises(ClusterError, match="does not wait on HyperGuard's check yet"):
        apis.gateway.dispatch(again, [])
    assert check(apis, "sweep") == "Pending"  # nothing set for Kueue to reset
    assert tracker.observe("MODIFIED", workload_of(apis, "sweep") or {}) == []

    apis.kube.patch(LOCAL_QUEUES, local_queue(TEAM), {"spec": {"stopPolicy": "None"}}, NS)
    wait_for(lambda: waits(apis, "sweep"), loaded(60), "Kueue to reserve the quota again")
    assert tracker.observe("MODIFIED", workload_of(apis, "sweep") or {})  # a pass is woken
    assert apis.gateway.dispatch(again, []) is True
    wait_for(
        lambda: not suspended(apis, "sweep"), loaded(60), "Kueue to start the team's Job again"
    )
    [pod] = wait_for(lambda: running_pods(apis, "sweep"), loaded(60), "the team's pod to run again")
    assert pod["metadata"]["labels"][RUN_LABEL] == str(again.run)


def test_a_pod_the_job_controller_replaces_after_a_fault_is_recorded_as_a_restart(
    stack: Stack, make_cluster: MakeCluster
) -> None:
    """A GPU fault kills the pod of a team's Job that tolerates failures (backoffLimit 2); the
    Job controller makes another, after its back-off, wherever kube-scheduler binds it. This
    can happen before any incident protects the job (on AWS as on the twin: the health event
    takes its own path), so the pass that finds it records it as it is: on the new pod's node,
    and restarted by the cluster, with why (D179). Before, the record only moved, named
    HyperPod's auto-resume, and counted no restart."""
    apis = make_cluster(hyperpod_nodes=3)
    api, service = setup(stack, apis, gpus=8)
    apply(apis, "sweep", backoff_limit=2)
    [job_id] = service.run_pass(held=held(apis, HeldTracker(), "sweep")).admitted
    wait_for(lambda: running_pods(apis, "sweep"), loaded(60), "the team's pod to run")
    [first] = running_pods(apis, "sweep")
    apis.settle()
    service.run_pass()
    [node] = api.call("GET", f"/jobs/{job_id}").body["nodes"]

    apis.cluster.inject_fault(node, "persistent")

    def replaced() -> dict[str, Any] | None:
        """The Job controller's new pod, running (its back-off is 10 wall seconds)."""
        pods = running_pods(apis, "sweep")
        return pods[0] if pods and pods[0]["metadata"]["uid"] != first["metadata"]["uid"] else None

    second = wait_for(replaced, loaded(60), "the Job controller to replace the failed pod")
    apis.settle()
    assert service.run_pass().operator_restarts == [job_id]
    view = api.call("GET", f"/jobs/{job_id}").body
    assert view["status"] == "Running"
    [now_on] = view["nodes"]
    assert apis.gateway.kubernetes.node_name(now_on) == second["spec"]["nodeName"]
    [noted] = [h for h in view["history"] if h["event"] == "operator_restarted"]
    assert noted["reason"].startswith("1 more pod(s) of the team's Job failed in run 0 (1 in all)")
    if now_on != node:  # bound elsewhere: the move says who placed it
        *_, moved = [h["reason"] for h in view["history"] if h["event"] == "relocated"]
        assert f"not on {node} as recorded (kube-scheduler placed the team's own Job)" in moved
    # The same count again is no news.
    assert service.run_pass().operator_restarts == []


def test_a_job_hyperguard_cannot_run_is_refused_and_kueue_deactivates_it(
    stack: Stack, make_cluster: MakeCluster
) -> None:
    apis = make_cluster(hyperpod_nodes=2)
    _, service = setup(stack, apis)
    apply(apis, "too-big", gpus=16)  # more GPUs than a p5 has
    named = held(apis, HeldTracker(), "too-big")
    result = service.run_pass(held=named)
    assert result.adopted == [] and result.refused_held == [f"{NS}/{named[0].name}"]

    def deactivated() -> dict[str, Any] | None:
        """The Workload once Kueue deactivated it, saying why."""
        workload = workload_of(apis, "too-big") or {}
        conditions = (workload.get("status") or {}).get("conditions") or []
        evicted: dict[str, Any] = next((c for c in conditions if c["type"] == "Evicted"), {})
        done = workload["spec"].get("active") is False and evicted.get("status") == "True"
        return workload if done else None

    workload = wait_for(deactivated, loaded(60), "Kueue to deactivate the Workload")
    [evicted] = [c for c in workload["status"]["conditions"] if c["type"] == "Evicted"]
    assert evicted["reason"] == "DeactivatedDueToAdmissionCheck"
    assert "a pod asks for 16 accelerators; ml.p5.48xlarge has 8" in evicted["message"]
    assert suspended(apis, "too-big")
    # Deactivated, it waits for nobody: the forwarder sends nothing, a pass does nothing.
    assert HeldTracker().observe("MODIFIED", workload) == []
    assert service.run_pass(held=named).refused_held == []


def test_a_hyperpod_pytorch_job_applied_as_the_hyperpod_cli_does_is_held_and_admitted(
    stack: Stack, make_cluster: MakeCluster
) -> None:
    """The HyperPod training operator makes the Workload of a suspended HyperPodPyTorchJob
    (Kueue's external framework, as HyperPod task governance registers it); HyperGuard's
    admission is what unsuspends it."""
    apis = make_cluster(hyperpod_nodes=2)
    api, service = setup(stack, apis)
    apis.kube.create(
        HYPERPOD_PYTORCH_JOBS,
        {
            "apiVersion": "sagemaker.amazonaws.com/v1",
            "kind": "HyperPodPyTorchJob",
            "metadata": {
                "name": "finetune",
                "namespace": NS,
                "labels": {"kueue.x-k8s.io/queue-name": local_queue(TEAM)},
            },
            "spec": {
                "nprocPerNode": "8",
                "runPolicy": {"cleanPodPolicy": "All", "suspend": True},
                "replicaSpecs": [
                    {
                        "name": "pods",
                        "replicas": 2,
                        "template": {
                            "spec": {
                                "nodeSelector": {"node.kubernetes.io/instance-type": P5},
                                "containers": [
                                    {
                                        "name": "pytorch",
                                        "image": "team/finetune:1",
                                        "resources": {"limits": {"nvidia.com/gpu": "8"}},
                                    }
                                ],
                            }
                        },
                    }
                ],
            },
        },
        NS,
    )
    named = held(apis, HeldTracker(), "finetune")
    result = service.run_pass(held=named)
    [job_id] = result.adopted
    assert result.admitted == [job_id]
    view = api.call("GET", f"/jobs/{job_id}").body
    assert view["cluster_object"]["kind"] == "HyperPodPyTorchJob"
    assert (view["replicas"], view["accelerators_per_replica"]) == (2, 8)

    def unsuspended() -> bool:
        run = apis.kube.get(HYPERPOD_PYTORCH_JOBS, "finetune", NS) or {}
        return (run.get("spec") or {}).get("runPolicy", {}).get("suspend") is False

    wait_for(unsuspended, loaded(60), "the operator to start the team's HyperPodPyTorchJob")
