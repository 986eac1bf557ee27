"""The pods the HyperPod training operator makes for a job: one per replica
(`<job>-<replica spec>-<index>`, labelled `HPJob: <job>` and with the job's uid), owned by the
job and never restarted in place; and their deletion when it suspends, restarts or fails the
job (pods it took itself, whose going is no fault).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from hyperguard.cluster.workloads import HPJOB_POD_LABEL
from hyperguard_twin.cloud.core import World
from hyperguard_twin.cloud.operator_jobs import (
    Tracked,
    conditions,
    owner_reference,
    replica_spec,
    replicas,
    write_status,
)
from hyperguard_twin.plane.kube import PODS, KubeApiError

CONTROLLER_UID_LABEL = "batch.kubernetes.io/controller-uid"


class JobPods:
    def __init__(self, world: World) -> None:
        self.world = world
        self.kube = world.kube

    def of(self, tracked: Tracked) -> list[dict[str, Any]]:
        return self.kube.list_objects(
            PODS, tracked.namespace, label_selector=f"{HPJOB_POD_LABEL}={tracked.name}"
        )

    def create(self, tracked: Tracked, job: Mapping[str, Any], now: datetime) -> None:
        """A pod per replica of the job's spec, and the job's status says they run."""
        replica = replica_spec(job)
        template = replica.get("template") or {}
        size = replicas(job)
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
                    "ownerReferences": [owner_reference(job)],
                },
                "spec": {**(template.get("spec") or {}), "restartPolicy": "Never"},
            }
            try:
                self.kube.create(PODS, pod, tracked.namespace)
            except KubeApiError as error:
                if error.code != 409:
                    raise
        at = self.world.stamp(now)
        write_status(
            self.kube,
            tracked,
            {
                "conditions": conditions(
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

    def delete(self, tracked: Tracked) -> None:
        for pod in self.of(tracked):
            tracked.taken.add(str(pod["metadata"].get("uid")))
            self.kube.delete(PODS, pod["metadata"]["name"], tracked.namespace, grace_period_s=0)
