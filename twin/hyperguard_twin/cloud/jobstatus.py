"""The twin's in-cluster forwarder for runs: when a batch Job or HyperPodPyTorchJob of
HyperGuard's (labelled `hyperguard.io/job-id`) reaches a terminal condition, it puts a
"Kubernetes Job Status Changed" event on HyperGuard's bus (docs/events.md, the job forwarder
contract), so that a scheduling pass frees the run's quota at once rather than at the next
minute's tick. It reads what the real Job controller (or the training operator) wrote.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from typing import Any

from hyperguard.cluster.workloads import JOB_ID_ANNOTATION, JOB_ID_LABEL
from hyperguard_twin.cloud.core import Effect, World
from hyperguard_twin.plane.kube import HYPERPOD_PYTORCH_JOBS, JOBS, KubeClient, start_watches

FORWARDER_SOURCE = "hyperguard.node-forwarder"
_TERMINAL = {"Complete": "succeeded", "Completed": "succeeded", "Failed": "failed"}


def terminal(obj: Mapping[str, Any]) -> tuple[str, str] | None:
    """(phase, reason) of a run that ended, by its deciding condition; None while it runs."""
    for condition in (obj.get("status") or {}).get("conditions") or []:
        phase = _TERMINAL.get(str(condition.get("type")))
        if phase and condition.get("status") == "True":
            return phase, str(condition.get("reason") or condition.get("type"))
    return None


class JobStatusForwarder:
    def __init__(self, world: World) -> None:
        self.world = world
        self._sent: set[str] = set()
        self._lock = threading.Lock()

    def watch(self, kube: KubeClient, stop: threading.Event) -> list[threading.Thread]:
        return start_watches(
            kube,
            "forwarder",
            [(rt, self.on_run, JOB_ID_LABEL) for rt in (JOBS, HYPERPOD_PYTORCH_JOBS)],
            stop,
        )

    def on_run(self, event: str, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        ended = terminal(obj)
        uid = str(meta.get("uid"))
        if event == "DELETED" or ended is None:
            return
        with self._lock:
            if uid in self._sent:
                return
            self._sent.add(uid)
        phase, reason = ended
        detail = {
            "clusterName": self.world.eks_cluster,
            "namespace": meta.get("namespace"),
            "kind": obj.get("kind"),
            "name": meta.get("name"),
            "jobId": (meta.get("annotations") or {}).get(JOB_ID_ANNOTATION, ""),
            "phase": phase,
            "reason": reason,
            "observedTime": self.world.stamp(self.world.clock.now()),
        }
        entry = {
            "Source": FORWARDER_SOURCE,
            "DetailType": "Kubernetes Job Status Changed",
            "Detail": json.dumps(detail),
            "Resources": [],
            "EventBusName": "service",
        }
        self.world.effects(Effect("put_event", (entry,)))
