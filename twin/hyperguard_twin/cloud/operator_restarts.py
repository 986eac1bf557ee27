"""What the HyperPod training operator does when a job's pods end: all of them Succeeded, the
job completes. A pod that fails (its process exited non-zero, or it was evicted) on a node
that is not healthy is a fault: a job that opted into HyperPod auto-resume (`jobMaxRetryCount`
above 0) waits for its nodes (a replaced node counts as its replacement) and restarts from its
checkpoint, `restartCount` + 1; an elastic job waits for them for its
`faultyScaleDownTimeoutInSeconds`, then restarts at the largest size its elasticPolicy allows
on the healthy ones; any other job fails with the faulty instances named. A pod that fails on
a healthy node restarts the job in place while `jobMaxRetryCount` is above its restarts, and
then fails it.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from hyperguard.models.jobs import ElasticPolicy
from hyperguard_twin.cloud.core import Instance, World
from hyperguard_twin.cloud.operator_jobs import Tracked, conditions, replica_spec, write_status
from hyperguard_twin.cloud.operator_kueue import Workloads
from hyperguard_twin.cloud.operator_pods import JobPods
from hyperguard_twin.plane.kube import HYPERPOD_PYTORCH_JOBS, NODES

FAULTY_SCALE_DOWN = "faulty_scale_down"


def _retry_policy(job: Mapping[str, Any]) -> tuple[int, dict[str, Any] | None]:
    """The job's runPolicy.jobMaxRetryCount and its elasticPolicy (None: not elastic)."""
    spec = job.get("spec") or {}
    retries = int((spec.get("runPolicy") or {}).get("jobMaxRetryCount") or 0)
    return retries, spec.get("elasticPolicy")


class RestartPolicy:
    def __init__(
        self, world: World, jobs: dict[str, Tracked], pods: JobPods, workloads: Workloads
    ) -> None:
        self.world = world
        self.kube = world.kube
        self.jobs = jobs
        self.pods = pods
        self.workloads = workloads
        world.handle(FAULTY_SCALE_DOWN, self._faulty_scale_down)
        world.after_each(self._resume_waiting)

    def pods_changed(self, tracked: Tracked, deleted: dict[str, Any] | None, now: datetime) -> None:
        """The job's pods as they are now: all Succeeded ends it, a failed or deleted one
        (`deleted`) is a fault or the job's own failure."""
        pods = self.pods.of(tracked)
        phases = [(p.get("status") or {}).get("phase") for p in pods]
        if len(pods) >= tracked.size and pods and all(phase == "Succeeded" for phase in phases):
            self.finish(tracked, now, succeeded=True, reason="Completed", message="")
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
            self._failed_by_itself(tracked, job, retries, names[0], now)
            return
        self.finish(
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

    def _failed_by_itself(
        self, tracked: Tracked, job: Mapping[str, Any], retries: int, pod: str, now: datetime
    ) -> None:
        """The training failed on a healthy node (a crash, or a hang log monitoring found):
        every pod restarts in place while retries are left, then the job fails."""
        if retries > tracked.restarts:
            self.restart(tracked, job, now)
            return
        message = f"pod {tracked.namespace}/{pod} failed"
        self.finish(tracked, now, succeeded=False, reason="PodFailed", message=message)

    def _wait_for_nodes(
        self, tracked: Tracked, nodes: list[str], now: datetime, elastic: Mapping[str, Any] | None
    ) -> None:
        """Auto-resume: the job's pods go and it waits for its nodes (`_resume_waiting`); an
        elastic job with no retries left waits only its faultyScaleDownTimeoutInSeconds."""
        self.pods.delete(tracked)
        tracked.waiting = {n for n in nodes if n}
        message = f"Found unhealthy node {', '.join(sorted(tracked.waiting))}"
        at = self.world.stamp(now)
        write_status(
            self.kube,
            tracked,
            {"conditions": conditions(("Running", False, "NodeFault", message), at=at)},
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
                    self.restart(tracked, job, now)

    def _back(self, node: str) -> bool:
        """The node is up, healthy and takes pods again (uncordoned)."""
        instance = self.world.by_node(node)
        if instance is None or not instance.registered or not self.world.healthy(instance):
            return False
        found = self.kube.get(NODES, node) or {}
        return not (found.get("spec") or {}).get("unschedulable")

    def node_replaced(self, old: Instance, new: Instance) -> None:
        """A job waiting for a replaced node waits for its replacement instead."""
        for tracked in self.jobs.values():
            if old.node_name in tracked.waiting:
                tracked.waiting = (tracked.waiting - {old.node_name}) | {new.node_name}

    def restart(self, tracked: Tracked, job: Mapping[str, Any], now: datetime) -> None:
        tracked.waiting = set()
        tracked.restarts += 1
        self.pods.delete(tracked)
        status: dict[str, Any] = {
            "restartCount": tracked.restarts,
            "restartStatus": {
                "currentEvalPeriod": 0,
                "fullJobRestartCount": tracked.restarts,
                "restartCount": tracked.restarts,
            },
        }
        write_status(self.kube, tracked, status)
        self.pods.create(tracked, job, now)

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
            self.finish(
                tracked,
                at,
                succeeded=False,
                reason="NodeFault",
                message="no allowed size left on healthy nodes",
            )
            return
        replica = replica_spec(job)
        scaled = {
            **dict(job),
            "spec": {**(job.get("spec") or {}), "replicaSpecs": [{**replica, "replicas": size}]},
        }
        self.restart(tracked, scaled, at)
        write_status(
            self.kube,
            tracked,
            {
                "elasticScalingStatus": {
                    "targetReplicas": {replica.get("name", "pods"): size},
                    "isFaultyPodScaleDown": True,
                    "lastScalingTime": self.world.stamp(at),
                }
            },
        )

    def finish(
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
            "conditions": conditions(
                ("Running", False, reason, message), (kind, True, reason, message), at=at
            ),
        }
        if faulty is not None:
            status["latestFaultyPodInstanceList"] = faulty
        write_status(self.kube, tracked, status)
        if not succeeded:
            self.pods.delete(tracked)
        self.workloads.finish(tracked, succeeded=succeeded, why=message or reason, at=at)
