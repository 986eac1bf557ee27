"""What the simulated training containers print, where a kubelet keeps it: one log file per
pod in the CRI log format (`<RFC 3339 time> stdout F <line>`, as containerd writes
/var/log/pods), served by KWOK's kubelet API through a KWOK `Logs` object per pod
(kwok.x-k8s.io/v1alpha1, owned by the pod, so that the garbage collector deletes it with
the pod). `kubectl logs`, and HyperGuard's GET /jobs/{jobId}/logs, read them through
kube-apiserver's pods/log, as on a real cluster.
"""

from __future__ import annotations

import threading
from datetime import datetime
from pathlib import Path
from typing import Any

from hyperguard_twin.plane.kube import KubeApiError, KubeClient, resource

LOGS = resource("kwok.x-k8s.io/v1alpha1", "logs")


def cri_line(at: datetime, line: str) -> str:
    """One line as containerd writes it: its time (UTC, nanoseconds), the stream, F (a full
    line), the text."""
    stamp = at.strftime("%Y-%m-%dT%H:%M:%S.%f") + "000Z"
    return f"{stamp} stdout F {line}\n"


class ContainerLogs:
    """Each pod's log file and the Logs object that makes KWOK serve it. `directory` None:
    no logs are kept (a cluster with no kubelet API)."""

    def __init__(self, kube: KubeClient, directory: Path | None) -> None:
        self.kube = kube
        self.directory = directory
        self._files: dict[tuple[str, str], tuple[str, Path]] = {}
        """The current pod of each name (its uid) and its log file."""
        self._lock = threading.Lock()

    def open(self, pod: dict[str, Any]) -> None:
        """The pod's log file, and its Logs object (once per pod: a pod made again under the
        same name, as the training operator does on a restart, gets a new file, as the
        kubelet keeps one folder per pod uid)."""
        if self.directory is None:
            return
        meta = pod.get("metadata") or {}
        namespace, name, uid = (
            str(meta.get("namespace")),
            str(meta.get("name")),
            str(meta.get("uid")),
        )
        path = self.directory / f"{namespace}_{name}_{uid}.log"
        with self._lock:
            if self._files.get((namespace, name), ("", path))[0] == uid:
                return
            self._files[(namespace, name)] = (uid, path)
        self.directory.mkdir(parents=True, exist_ok=True)
        path.touch()
        owner = [{"apiVersion": "v1", "kind": "Pod", "name": name, "uid": uid}]
        spec = {"logs": [{"logsFile": str(path)}]}
        logs = {
            "apiVersion": "kwok.x-k8s.io/v1alpha1",
            "kind": "Logs",
            "metadata": {"name": name, "namespace": namespace, "ownerReferences": owner},
            "spec": spec,
        }
        try:
            self.kube.create(LOGS, logs, namespace)
        except KubeApiError as error:
            if error.code == 409:  # the last pod of that name's, not collected yet
                self.kube.patch(
                    LOGS, name, {"metadata": {"ownerReferences": owner}, "spec": spec}, namespace
                )
            elif error.code != 404:  # 404: the pod's namespace is already gone
                raise

    def write(self, namespace: str, pod: str, at: datetime, *lines: str) -> None:
        found = self._files.get((namespace, pod))
        if found is None:
            return
        with found[1].open("a") as out:
            out.writelines(cri_line(at, line) for line in lines)
