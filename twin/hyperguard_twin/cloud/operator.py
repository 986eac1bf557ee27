"""The HyperPod training operator (an EKS add-on with no open-source original): a small
controller against the real API server that turns a HyperPodPyTorchJob into pods.

A job created with `runPolicy.suspend` gets a Kueue Workload (`operator_kueue`); once Kueue
admits the Workload the operator unsuspends the job, records Kueue's pod set information in
`status.podSetInfos` and creates its pods (`operator_pods`); an evicted Workload suspends the
job and takes its pods. What the pods' ends mean for the job (completion, a fault, auto-resume,
an elastic scale-down) is its restart policy's (`operator_restarts`); the job's status follows
the public status model (`operator_jobs`). A change of the replica spec's size (HyperGuard's
resize) is first signalled to the ranks (`on_resize`: they checkpoint and exit), then the job
restarts at the new size on the pods' new nodes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from hyperguard.cluster.workloads import HPJOB_POD_LABEL
from hyperguard_twin.cloud.core import Instance, World
from hyperguard_twin.cloud.operator_jobs import Tracked, conditions, replicas, write_status
from hyperguard_twin.cloud.operator_kueue import Workloads, admission, owning_job, pod_set_infos
from hyperguard_twin.cloud.operator_pods import CONTROLLER_UID_LABEL, JobPods
from hyperguard_twin.cloud.operator_restarts import RestartPolicy
from hyperguard_twin.plane.kube import (
    HYPERPOD_PYTORCH_JOBS,
    PODS,
    PRIORITY_CLASSES,
    WORKLOADS,
    KubeClient,
    start_watches,
)


class TrainingOperator:
    def __init__(self, world: World) -> None:
        self.world = world
        self.jobs: dict[str, Tracked] = {}
        self.workloads = Workloads(world.kube)
        self.pods = JobPods(world)
        self.restarts = RestartPolicy(world, self.jobs, self.pods, self.workloads)
        self.on_resize: list[Callable[[str, int, datetime], None]] = []
        """Told (job uid, new size, when) of a scaling event before the pods restart: the
        operator signals the ranks first (elasticPolicy gracefulShutdownTimeoutInSeconds)."""

    @property
    def kube(self) -> KubeClient:
        return self.world.kube

    def watch(self, kube: KubeClient, stop: threading.Event) -> list[threading.Thread]:
        return start_watches(
            kube,
            "operator",
            [
                (HYPERPOD_PYTORCH_JOBS, self.on_job, None),
                (WORKLOADS, self.on_workload, None),
                (PODS, self.on_pod, HPJOB_POD_LABEL),
                (PRIORITY_CLASSES, self.on_priority_class, None),
            ],
            stop,
        )

    def node_replaced(self, old: Instance, new: Instance) -> None:
        self.restarts.node_replaced(old, new)

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
                tracked.workload = self.workloads.ensure(obj)
                created = conditions(("Created", True, "Created", ""), at=self.world.stamp(now))
                write_status(self.kube, tracked, {"conditions": created})
            if tracked.finished or not tracked.admitted:
                return
            size = replicas(obj)
            if tracked.size and size != tracked.size:
                for resized in self.on_resize:
                    resized(uid, size, now)
                self.restarts.restart(tracked, obj, now)

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
                    tracked.workload = self.workloads.ensure(job)

    # ------------------------------------------------------------------ Kueue

    def on_workload(self, event: str, workload: dict[str, Any]) -> None:
        self.world.touch()
        owner = owning_job(workload)
        if owner is None or event == "DELETED":
            return
        with self.world.settled() as now:
            tracked = self.jobs.get(owner)
            if tracked is None or tracked.finished:
                return
            admitted, evicted = admission(workload)
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
        self.kube.patch(
            HYPERPOD_PYTORCH_JOBS,
            tracked.name,
            {"spec": {"runPolicy": {"suspend": False}}},
            tracked.namespace,
        )
        at = self.world.stamp(now)
        tracked.started_at = tracked.started_at or at
        write_status(
            self.kube,
            tracked,
            {
                "startTime": tracked.started_at,
                "podSetInfos": pod_set_infos(workload),
                "restartCount": tracked.restarts,
            },
        )
        self.pods.create(tracked, job, now)

    def _suspend(self, tracked: Tracked, now: datetime) -> None:
        self.kube.patch(
            HYPERPOD_PYTORCH_JOBS,
            tracked.name,
            {"spec": {"runPolicy": {"suspend": True}}},
            tracked.namespace,
        )
        self.pods.delete(tracked)
        at = self.world.stamp(now)
        suspended = conditions(("Running", False, "Suspended", "the Workload was evicted"), at=at)
        write_status(self.kube, tracked, {"conditions": suspended})

    # ------------------------------------------------------------------ pods

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
                self.restarts.pods_changed(tracked, pod if gone else None, now)
