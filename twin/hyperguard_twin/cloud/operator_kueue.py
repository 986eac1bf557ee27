"""The HyperPod training operator's Kueue integration. As HyperPod task governance runs it, the
operator is one of Kueue's external frameworks (`HyperPodPyTorchJob.v1.sagemaker.amazonaws.com`):
a job gets a Kueue Workload owned by it, its pod set the job's replicas, with the priority of
its WorkloadPriorityClass; Kueue admits or evicts the Workload; when the job ends the operator
marks its Workload Finished so that Kueue frees its quota.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from hyperguard.cluster.workloads import JOB_ID_LABEL, PRIORITY_LABEL, QUEUE_LABEL
from hyperguard_twin.cloud.operator_jobs import Tracked, conditions, owner_reference, replica_spec
from hyperguard_twin.plane.kube import PRIORITY_CLASSES, WORKLOADS, KubeApiError, KubeClient

WORKLOAD_FINISHED = "Finished"


def workload_name(job: str, uid: str) -> str:
    """Kueue's naming of a job's Workload: `<kind>-<name>-<5 hex of the uid>`, cut to 63."""
    digest = hashlib.sha256(uid.encode()).hexdigest()[:5]
    return f"hyperpodpytorchjob-{job}"[:57].rstrip("-") + f"-{digest}"


def owning_job(workload: Mapping[str, Any]) -> str | None:
    """The uid of the HyperPodPyTorchJob that owns the Workload (None: not a job's)."""
    owner = next(
        (
            o
            for o in (workload.get("metadata") or {}).get("ownerReferences") or []
            if o.get("kind") == "HyperPodPyTorchJob"
        ),
        None,
    )
    return None if owner is None else str(owner.get("uid"))


def admission(workload: Mapping[str, Any]) -> tuple[bool, bool]:
    """Whether Kueue admitted the Workload, and whether it evicted it."""
    found = {c.get("type"): c for c in (workload.get("status") or {}).get("conditions") or []}
    admitted = (found.get("Admitted") or {}).get("status") == "True"
    evicted = (found.get("Evicted") or {}).get("status") == "True"
    return admitted, evicted


def pod_set_infos(workload: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Kueue's pod set information from the Workload's admission, as the job's status keeps
    it (`status.podSetInfos`)."""
    assignments = ((workload.get("status") or {}).get("admission") or {}).get(
        "podSetAssignments"
    ) or []
    return [{"nodeSelector": {}, "labels": {}, "annotations": {}} for _ in assignments]


class Workloads:
    def __init__(self, kube: KubeClient) -> None:
        self.kube = kube

    def ensure(self, job: Mapping[str, Any]) -> bool:
        """The job's Kueue Workload, as the operator's Kueue integration makes it; False
        while it cannot be made yet."""
        meta = job.get("metadata") or {}
        labels = meta.get("labels") or {}
        replica = replica_spec(job)
        workload: dict[str, Any] = {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Workload",
            "metadata": {
                "name": workload_name(str(meta["name"]), str(meta["uid"])),
                "namespace": meta["namespace"],
                "labels": {JOB_ID_LABEL: labels.get(JOB_ID_LABEL, "")},
                "ownerReferences": [owner_reference(job)],
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

    def finish(self, tracked: Tracked, *, succeeded: bool, why: str, at: str) -> None:
        """The job ended: its Workload is Finished, and Kueue frees its quota."""
        name = workload_name(tracked.name, tracked.uid)
        workload = self.kube.get(WORKLOADS, name, tracked.namespace)
        if workload is None:
            return
        finished = conditions(
            (WORKLOAD_FINISHED, True, "Succeeded" if succeeded else "Failed", why), at=at
        )
        self.kube.patch(
            WORKLOADS,
            name,
            {"status": {"conditions": finished}},
            tracked.namespace,
            subresource="status",
        )
