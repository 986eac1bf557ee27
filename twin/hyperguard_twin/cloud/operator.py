"""The HyperPod training operator (an EKS add-on with no open-source original): a small
controller against the real API server that turns a HyperPodPyTorchJob into pods.

As HyperPod task governance runs it, the operator is one of Kueue's external frameworks
(`HyperPodPyTorchJob.v1.sagemaker.amazonaws.com`): a job created with `runPolicy.suspend`
gets a Kueue Workload (owned by the job, its pod set the job's replicas); once Kueue admits
the Workload the operator unsuspends the job, records Kueue's pod set information in
`status.podSetInfos` and creates one pod per replica (`<job>-<replica spec>-<index>`, labelled
`HPJob: <job>`); when the job ends it marks its Workload Finished so that Kueue frees its
quota; an evicted Workload suspends the job and takes its pods. The status follows the public
status model (the HyperPod CLI's HyperPodPytorchJobStatus): conditions Created, PodsRunning,
Running, Completed and Failed, `restartCount`, `restartStatus`, `startTime`,
`completionTime`, and `latestFaultyPodInstanceList` naming a fault's instances.

A pod that fails (its process exited non-zero, or it was evicted) on a node that is not
healthy is a fault: a job that opted into HyperPod auto-resume (`jobMaxRetryCount` above
0) waits for its nodes (a replaced node counts as its replacement) and restarts from its
checkpoint, `restartCount` + 1; an elastic job waits for them for its
`faultyScaleDownTimeoutInSeconds`, then restarts at the largest size its elasticPolicy
allows on the healthy ones; any other job fails with the faulty instances named. A pod that
fails on a healthy node fails the job. A change of the replica spec's size (HyperGuard's
resize) restarts the job at the new size on the pods' new nodes.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from hyperguard.cluster.workloads import HPJOB_POD_LABEL, JOB_ID_LABEL, PRIORITY_LABEL, QUEUE_LABEL
from hyperguard.models.jobs import ElasticPolicy
from hyperguard_twin.cloud.core import Instance, World
from hyperguard_twin.plane.kube import (
    HYPERPOD_PYTORCH_JOBS,
    NODES,
    PODS,
    PRIORITY_CLASSES,
    WORKLOADS,
    KubeApiError,
    KubeClient,
)

FAULTY_SCALE_DOWN = "faulty_scale_down"
CONTROLLER_UID_LABEL = "batch.kubernetes.io/controller-uid"
WORKLOAD_FINISHED = "Finished"


@dataclass
class Tracked:
    """What the operator knows of one job."""

    name: str
    namespace: str
    uid: str
    generation: int = 0
    admitted: bool = False
    size: int = 0
    """The replica count its pods were made for."""
    restarts: int = 0
    waiting: set[str] = field(default_factory=set)
    """The nodes of a fault the job waits to come back (auto-resume, elastic)."""
    finished: bool = False
    started_at: str | None = None
    workload: bool = False
    """Whether its Workload exists (it waits for its WorkloadPriorityClass)."""
    taken: set[str] = field(default_factory=set)
    """The uids of pods the operator deleted itself: their going is no fault."""


def _retry_policy(job: Mapping[str, Any]) -> tuple[int, dict[str, Any] | None]:
    """The job's runPolicy.jobMaxRetryCount and its elasticPolicy (None: not elastic)."""
    spec = job.get("spec") or {}
    retries = int((spec.get("runPolicy") or {}).get("jobMaxRetryCount") or 0)
    return retries, spec.get("elasticPolicy")


def _conditions(*pairs: tuple[str, bool, str, str], at: str) -> list[dict[str, str]]:
    return [
        {
            "type": kind,
            "status": "True" if ok else "False",
            "reason": reason,
            "message": message,
            "lastTransitionTime": at,
        }
        for kind, ok, reason, message in pairs
    ]


def workload_name(job: str, uid: str) -> str:
    """Kueue's naming of a job's Workload: `<kind>-<name>-<5 hex of the uid>`, cut to 63."""
    digest = hashlib.sha256(uid.encode()).hexdigest()[:5]
    return f"hyperpodpytorchjob-{job}"[:57].rstrip("-") + f"-{digest}"


class TrainingOperator:
    def __init__(self, world: World) -> None:
        self.world = world
        self.jobs: dict[str, Tracked] = {}
        world.handle(FAULTY_SCALE_DOWN, self._faulty_scale_down)
        world.after_each(self._resume_waiting)

    @property
    def kube(self) -> KubeClient:
        return self.world.kube

    def watch(self, kube: KubeClient, stop: threading.Event) -> list[threading.Thread]:
        threads = []
        for rt, handler, selector in (
            (HYPERPOD_PYTORCH_JOBS, self.on_job, None),
            (WORKLOADS, self.on_workload, None),
            (PODS, self.on_pod, HPJOB_POD_LABEL),
            (PRIORITY_CLASSES, self.on_priority_class, None),
        ):
            thread = threading.Thread(
                target=kube.watch,
                args=(rt, handler, stop),
                kwargs={"label_selector": selector} if selector else {},
                name=f"operator-{rt.plural}",
                daemon=True,
            )
            thread.start()
            threads.append(thread)
        return threads

    # ------------------------------------------------------------------ the job

    def on_job(self, event: str, obj: dict[str, Any]) -> None:
        self.world.touch()
        meta = obj.get("metadata") or {}
        uid = str(meta.get("uid"))
        with self.world.settled() as now:
            if event == "DELETED":
                self.jobs.pop(uid, None)  # the garbage collector takes its pods and Workload
                return
            tracked = self.jobs.get(uid)
            if tracked is None:
                tracked = self.jobs[uid] = Tracked(str(meta["name"]), str(meta["namespace"]), uid)
                tracked.workload = self._ensure_workload(obj)
                self._status(
                    tracked,
                    {
                        "conditions": _conditions(
                            (
                                "Created",
                                True,
                                "Created",
                                "",
                            ),
                            at=self.world.stamp(now),
                        )
                    },
                )
            if tracked.finished or not tracked.admitted:
                return
            size = _replicas(obj)
            if tracked.size and size != tracked.size:
                self._restart(tracked, obj, now, resized=True)

    def on_priority_class(self, event: str, _priority_class: dict[str, Any]) -> None:
        """A WorkloadPriorityClass came: the jobs that waited for one get their Workload (as
        Kueue's job reconciler retries a job whose class it could not find)."""
        self.world.touch()
        if event == "DELETED":
            return
        with self.world.settled():
            for tracked in self.jobs.values():
                if tracked.workload:
                    continue
                job = self.kube.get(HYPERPOD_PYTORCH_JOBS, tracked.name, tracked.namespace)
                if job is not None:
                    tracked.workload = self._ensure_workload(job)

    def _ensure_workload(self, job: Mapping[str, Any]) -> bool:
        """The job's Kueue Workload, as the operator's Kueue integration makes it; False
        while it cannot be made yet."""
        meta, spec = job.get("metadata") or {}, job.get("spec") or {}
        labels = meta.get("labels") or {}
        replica = (spec.get("replicaSpecs") or [{}])[0]
        workload: dict[str, Any] = {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Workload",
            "metadata": {
                "name": workload_name(str(meta["name"]), str(meta["uid"])),
                "namespace": meta["namespace"],
                "labels": {JOB_ID_LABEL: labels.get(JOB_ID_LABEL, "")},
                "ownerReferences": [_owner(job)],
            },
            "spec": {
                "queueName": labels.get(QUEUE_LABEL, ""),
                "podSets": [
                    {
                        "name": replica.get("name", "pods"),
                        "count": int(replica.get("replicas") or 1)
                        + int(replica.get("spares") or 0),
                        "template": replica.get("template") or {},
                    }
                ],
            },
        }
        if priority := labels.get(PRIORITY_LABEL):
            # As Kueue's job frameworks do: the class's value with the reference (Kueue
            # refuses a reference without it); a job whose class is missing waits for it.
            found = self.kube.get(PRIORITY_CLASSES, priority)
            if found is None:
                return False
            workload["spec"]["priorityClassRef"] = {
                "group": "kueue.x-k8s.io",
                "kind": "WorkloadPriorityClass",
                "name": priority,
            }
            workload["spec"]["priority"] = int(found.get("value") or 0)
        try:
            self.kube.create(WORKLOADS, workload, str(meta["namespace"]))
        except KubeApiError as error:
            if error.code != 409:
                raise
        return True

    # ------------------------------------------------------------------ Kueue

    def on_workload(self, event: str, workload: dict[str, Any]) -> None:
        self.world.touch()
        owner = next(
            (
                o
                for o in (workload.get("metadata") or {}).get("ownerReferences") or []
                if o.get("kind") == "HyperPodPyTorchJob"
            ),
            None,
        )
        if owner is None or event == "DELETED":
            return
        with self.world.settled() as now:
            tracked = self.jobs.get(str(owner.get("uid")))
            if tracked is None or tracked.finished:
                return
            conditions = {
                c.get("type"): c for c in (workload.get("status") or {}).get("conditions") or []
            }
            admitted = (conditions.get("Admitted") or {}).get("status") == "True"
            evicted = (conditions.get("Evicted") or {}).get("status") == "True"
            job = self.kube.get(HYPERPOD_PYTORCH_JOBS, tracked.name, tracked.namespace)
            if job is None:
                return
            if admitted and not tracked.admitted:
                tracked.admitted = True
                self._start(tracked, job, workload, now)
            elif (evicted or not admitted) and tracked.admitted:
                tracked.admitted = False
                self._suspend(tracked, now)

    def _start(
        self, tracked: Tracked, job: Mapping[str, Any], workload: Mapping[str, Any], now: datetime
    ) -> None:
        infos = []
        for assignment in ((workload.get("status") or {}).get("admission") or {}).get(
            "podSetAssignments"
        ) or []:
            infos.append(
                {
                    "nodeSelector": {},
                    "labels": {},
                    "annotations": {},
                    "name": assignment.get("name"),
                }
            )
        self.kube.patch(
            HYPERPOD_PYTORCH_JOBS,
            tracked.name,
            {"spec": {"runPolicy": {"suspend": False}}},
            tracked.namespace,
        )
        at = self.world.stamp(now)
        tracked.started_at = tracked.started_at or at
        self._status(
            tracked,
            {
                "startTime": tracked.started_at,
                "podSetInfos": [{k: v for k, v in i.items() if k != "name"} for i in infos],
                "restartCount": tracked.restarts,
            },
        )
        self._create_pods(tracked, job, now)

    def _suspend(self, tracked: Tracked, now: datetime) -> None:
        self.kube.patch(
            HYPERPOD_PYTORCH_JOBS,
            tracked.name,
            {"spec": {"runPolicy": {"suspend": True}}},
            tracked.namespace,
        )
        self._delete_pods(tracked)
        at = self.world.stamp(now)
        self._status(
            tracked,
            {
                "conditions": _conditions(
                    ("Running", False, "Suspended", "the Workload was evicted"), at=at
                )
            },
        )

    # ------------------------------------------------------------------ pods

    def _create_pods(self, tracked: Tracked, job: Mapping[str, Any], now: datetime) -> None:
        replica = ((job.get("spec") or {}).get("replicaSpecs") or [{}])[0]
        template = replica.get("template") or {}
        size = _replicas(job)
        tracked.size = size
        for index in range(size):
            meta = template.get("metadata") or {}
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"{tracked.name}-{replica.get('name', 'pods')}-{index}",
                    "namespace": tracked.namespace,
                    "labels": {
                        **(meta.get("labels") or {}),
                        HPJOB_POD_LABEL: tracked.name,
                        CONTROLLER_UID_LABEL: tracked.uid,
                    },
                    "annotations": dict(meta.get("annotations") or {}),
                    "ownerReferences": [_owner(job)],
                },
                "spec": {**(template.get("spec") or {}), "restartPolicy": "Never"},
            }
            try:
                self.kube.create(PODS, pod, tracked.namespace)
            except KubeApiError as error:
                if error.code != 409:
                    raise
        at = self.world.stamp(now)
        self._status(
            tracked,
            {
                "conditions": _conditions(
                    ("Created", True, "Created", ""),
                    ("PodsRunning", True, "PodsRunning", ""),
                    ("Running", True, "Running", ""),
                    at=at,
                ),
                "restartCount": tracked.restarts,
                "elasticScalingStatus": {
                    "targetReplicas": {replica.get("name", "pods"): size},
                    "lastScalingTime": at,
                },
            },
        )

    def _delete_pods(self, tracked: Tracked) -> None:
        for pod in self.kube.list_objects(
            PODS, tracked.namespace, label_selector=f"{HPJOB_POD_LABEL}={tracked.name}"
        ):
            tracked.taken.add(str(pod["metadata"].get("uid")))
            self.kube.delete(PODS, pod["metadata"]["name"], tracked.namespace, grace_period_s=0)

    def on_pod(self, event: str, pod: dict[str, Any]) -> None:
        self.world.touch()
        meta, status = pod.get("metadata") or {}, pod.get("status") or {}
        uid = (meta.get("labels") or {}).get(CONTROLLER_UID_LABEL)
        with self.world.settled() as now:
            tracked = self.jobs.get(str(uid))
            if tracked is None:
                return
            if str(meta.get("uid")) in tracked.taken:
                # A pod it took to restart the job (a resize): its replacement follows.
                if event == "DELETED":
                    tracked.taken.discard(str(meta.get("uid")))
                return
            if not tracked.finished and tracked.admitted:
                gone = event == "DELETED" and status.get("phase") != "Succeeded"
                self._pods_changed(tracked, pod if gone else None, now)

    def _pods_changed(
        self, tracked: Tracked, deleted: dict[str, Any] | None, now: datetime
    ) -> None:
        """The job's pods as they are now: all Succeeded ends it, a failed or deleted one
        (`deleted`) is a fault or the job's own failure."""
        pods = self.kube.list_objects(
            PODS, tracked.namespace, label_selector=f"{HPJOB_POD_LABEL}={tracked.name}"
        )
        phases = [(p.get("status") or {}).get("phase") for p in pods]
        if len(pods) >= tracked.size and pods and all(phase == "Succeeded" for phase in phases):
            self._finish(tracked, now, succeeded=True, reason="Completed", message="")
            return
        failed = [p for p in pods if (p.get("status") or {}).get("phase") == "Failed"]
        if not failed and deleted is not None:
            failed = [deleted]
        if failed:
            self._fault(tracked, failed, now)

    def _fault(self, tracked: Tracked, failed: list[dict[str, Any]], now: datetime) -> None:
        """A pod of the job failed or was taken: a node fault or the job's own failure."""
        job = self.kube.get(HYPERPOD_PYTORCH_JOBS, tracked.name, tracked.namespace)
        if job is None or tracked.waiting:
            return
        nodes = [str((p.get("spec") or {}).get("nodeName") or "") for p in failed]
        faulty = [self.world.by_node(n) for n in nodes]
        node_fault = any(i is None or not self.world.healthy(i) for i in faulty)
        retries, elastic = _retry_policy(job)
        if node_fault and (retries > tracked.restarts or elastic):
            out_of_retries = retries <= tracked.restarts
            self._wait_for_nodes(tracked, nodes, now, elastic if out_of_retries else None)
            return
        names = [str(p["metadata"]["name"]) for p in failed]
        if not node_fault:
            message = f"pod {tracked.namespace}/{names[0]} failed"
            self._finish(tracked, now, succeeded=False, reason="PodFailed", message=message)
            return
        self._finish(
            tracked,
            now,
            succeeded=False,
            reason="NodeFault",
            message=f"Found unhealthy node {', '.join(n for n in nodes if n)}",
            faulty={
                "restartType": "JLR",
                "faultyInstanceIdList": [i.instance_id for i in faulty if i is not None],
                "faultyPodList": names,
                "faultyRankList": [],
            },
        )

    def _wait_for_nodes(
        self, tracked: Tracked, nodes: list[str], now: datetime, elastic: Mapping[str, Any] | None
    ) -> None:
        """Auto-resume: the job's pods go and it waits for its nodes (`_resume_waiting`); an
        elastic job with no retries left waits only its faultyScaleDownTimeoutInSeconds."""
        self._delete_pods(tracked)
        tracked.waiting = {n for n in nodes if n}
        message = f"Found unhealthy node {', '.join(sorted(tracked.waiting))}"
        at = self.world.stamp(now)
        self._status(
            tracked, {"conditions": _conditions(("Running", False, "NodeFault", message), at=at)}
        )
        if elastic:
            timeout = float(elastic.get("faultyScaleDownTimeoutInSeconds") or 0)
            self.world.schedule(now, timeout, FAULTY_SCALE_DOWN, tracked.uid)

    def _resume_waiting(self, now: datetime) -> None:
        """Auto-resume: a job waiting for its nodes restarts once they (or their
        replacements) are up and schedulable."""
        for tracked in list(self.jobs.values()):
            if not tracked.waiting or tracked.finished:
                continue
            if all(self._back(node) for node in tracked.waiting):
                job = self.kube.get(HYPERPOD_PYTORCH_JOBS, tracked.name, tracked.namespace)
                if job is not None:
                    self._restart(tracked, job, now)

    def _back(self, node: str) -> bool:
        """The node is up, healthy and takes pods again (uncordoned)."""
        instance = self.world.by_node(node)
        if instance is None or not instance.registered or not self.world.healthy(instance):
            return False
        found = self.kube.get(NODES, node) or {}
        return not (found.get("spec") or {}).get("unschedulable")

    def _restart(
        self, tracked: Tracked, job: Mapping[str, Any], now: datetime, *, resized: bool = False
    ) -> None:
        tracked.waiting = set()
        tracked.restarts += 1
        self._delete_pods(tracked)
        status: dict[str, Any] = {
            "restartCount": tracked.restarts,
            "restartStatus": {
                "currentEvalPeriod": 0,
                "fullJobRestartCount": tracked.restarts,
                "restartCount": tracked.restarts,
            },
        }
        self._status(tracked, status)
        self._create_pods(tracked, job, now)

    def _faulty_scale_down(self, uid: str, at: datetime) -> None:
        """The operator gave up waiting for the faulty nodes: the job restarts at the largest
        size its elasticPolicy allows on its healthy nodes, or fails below its minimum."""
        tracked = self.jobs.get(uid)
        if tracked is None or not tracked.waiting or tracked.finished:
            return
        job = self.kube.get(HYPERPOD_PYTORCH_JOBS, tracked.name, tracked.namespace)
        if job is None:
            return
        policy = ElasticPolicy.model_validate((job.get("spec") or {}).get("elasticPolicy") or {})
        healthy = tracked.size - len(tracked.waiting)
        size = policy.at_most(healthy)
        if not size:
            self._finish(
                tracked,
                at,
                succeeded=False,
                reason="NodeFault",
                message="no allowed size left on healthy nodes",
            )
            return
        replica = ((job.get("spec") or {}).get("replicaSpecs") or [{}])[0]
        scaled = {
            **dict(job),
            "spec": {**(job.get("spec") or {}), "replicaSpecs": [{**replica, "replicas": size}]},
        }
        self._restart(tracked, scaled, at)
        self._status(
            tracked,
            {
                "elasticScalingStatus": {
                    "targetReplicas": {replica.get("name", "pods"): size},
                    "isFaultyPodScaleDown": True,
                    "lastScalingTime": self.world.stamp(at),
                }
            },
        )

    def _finish(
        self,
        tracked: Tracked,
        now: datetime,
        *,
        succeeded: bool,
        reason: str,
        message: str,
        faulty: dict[str, Any] | None = None,
    ) -> None:
        tracked.finished = True
        at = self.world.stamp(now)
        kind = "Completed" if succeeded else "Failed"
        status: dict[str, Any] = {
            "completionTime": at,
            "conditions": _conditions(
                ("Running", False, reason, message), (kind, True, reason, message), at=at
            ),
        }
        if faulty is not None:
            status["latestFaultyPodInstanceList"] = faulty
        self._status(tracked, status)
        if not succeeded:
            self._delete_pods(tracked)
        name = workload_name(tracked.name, tracked.uid)
        workload = self.kube.get(WORKLOADS, name, tracked.namespace)
        if workload is not None:
            finished = _conditions(
                (
                    WORKLOAD_FINISHED,
                    True,
                    "Succeeded" if succeeded else "Failed",
                    message or reason,
                ),
                at=at,
            )
            self.kube.patch(
                WORKLOADS,
                name,
                {"status": {"conditions": finished}},
                tracked.namespace,
                subresource="status",
            )

    def _status(self, tracked: Tracked, status: dict[str, Any]) -> None:
        try:
            self.kube.patch(
                HYPERPOD_PYTORCH_JOBS,
                tracked.name,
                {"status": status},
                tracked.namespace,
                subresource="status",
            )
        except KubeApiError as error:
            if error.code != 404:
                raise

    def node_replaced(self, old: Instance, new: Instance) -> None:
        """A job waiting for a replaced node waits for its replacement instead."""
        for tracked in self.jobs.values():
            if old.node_name in tracked.waiting:
                tracked.waiting = (tracked.waiting - {old.node_name}) | {new.node_name}


def _owner(job: Mapping[str, Any]) -> dict[str, Any]:
    meta = job.get("metadata") or {}
    return {
        "apiVersion": "sagemaker.amazonaws.com/v1",
        "kind": "HyperPodPyTorchJob",
        "name": meta.get("name"),
        "uid": meta.get("uid"),
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _replicas(job: Mapping[str, Any]) -> int:
    specs = (job.get("spec") or {}).get("replicaSpecs") or [{}]
    return int(specs[0].get("replicas") or 1)
