"""What the HyperPod training operator knows of each HyperPodPyTorchJob (`Tracked`), and how it
writes the job's status. The status follows the public status model (the HyperPod CLI's
HyperPodPytorchJobStatus): conditions Created, PodsRunning, Running, Completed and Failed,
`restartCount`, `restartStatus`, `startTime`, `completionTime`, and
`latestFaultyPodInstanceList` naming a fault's instances.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hyperguard_twin.plane.kube import HYPERPOD_PYTORCH_JOBS, KubeApiError, KubeClient


@dataclass
class Tracked:
    """What the operator knows of one job."""

    name: str
    namespace: str
    uid: str
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


def conditions(*pairs: tuple[str, bool, str, str], at: str) -> list[dict[str, str]]:
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


def write_status(kube: KubeClient, tracked: Tracked, status: dict[str, Any]) -> None:
    try:
        kube.patch(
            HYPERPOD_PYTORCH_JOBS,
            tracked.name,
            {"status": status},
            tracked.namespace,
            subresource="status",
        )
    except KubeApiError as error:
        if error.code != 404:
            raise


def replica_spec(job: Mapping[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = ((job.get("spec") or {}).get("replicaSpecs") or [{}])[0]
    return spec


def replicas(job: Mapping[str, Any]) -> int:
    return int(replica_spec(job).get("replicas") or 1)


def owner_reference(job: Mapping[str, Any]) -> dict[str, Any]:
    meta = job.get("metadata") or {}
    return {
        "apiVersion": "sagemaker.amazonaws.com/v1",
        "kind": "HyperPodPyTorchJob",
        "name": meta.get("name"),
        "uid": meta.get("uid"),
        "controller": True,
        "blockOwnerDeletion": True,
    }
