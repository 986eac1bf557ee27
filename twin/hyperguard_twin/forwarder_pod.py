"""HyperGuard's in-cluster node forwarder, installed on the twin's cluster as
deploy/kubernetes/hyperguard-forwarder.yaml installs it, and run as its Deployment's pod
would run it: `python -m hyperguard.forwarder` (the image's entry point), with its service
account's token (TokenRequest, as the kubelet projects it) and the ForwarderRole's
credentials (as EKS Pod Identity hands them to the pod).

The twin applies the manifest's Namespace, ServiceAccount and RBAC, not its Deployment: a
pod of it would be scheduled onto one of the twin's GPU nodes (the twin's cluster has no
system node group) and count there as a running pod; the process runs on the twin's host
instead, with exactly the pod's identity and environment.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from hyperguard_twin.plane.kube import KubeClient, manifest_documents, resource
from hyperguard_twin.plane.plane import ControlPlane

MANIFEST = Path("deploy") / "kubernetes" / "hyperguard-forwarder.yaml"
SERVICE_ACCOUNTS = resource("v1", "serviceaccounts")
TOKEN_SECONDS = 86_400


def install(admin: KubeClient, root: Path) -> tuple[str, str]:
    """The manifest applied without its Deployment; (namespace, service account)."""
    account: tuple[str, str] | None = None
    for document in manifest_documents(root / MANIFEST):
        if document.get("kind") == "Deployment":
            continue
        if document["kind"] == "ServiceAccount":
            # IRSA's annotation stays out: the role comes through Pod Identity here.
            document["metadata"].pop("annotations", None)
            account = (document["metadata"]["namespace"], document["metadata"]["name"])
        admin.apply(document, "kubectl")
    if account is None:
        raise ValueError(f"{MANIFEST} defines no ServiceAccount")
    return account


def start(
    plane: ControlPlane,
    root: Path,
    *,
    cluster: str,
    bus: str,
    aws_env: dict[str, str],
    log: Path,
    metrics_port: int,
) -> subprocess.Popen[bytes]:
    admin = plane.client()
    namespace, name = install(admin, root)
    token = admin.request(
        "POST",
        SERVICE_ACCOUNTS.path(namespace, name, "token"),
        {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": TOKEN_SECONDS},
        },
    )["status"]["token"]
    kubeconfig = plane.kubeconfig("hyperguard-forwarder", token=token)
    env: dict[str, Any] = {
        "PATH": os.environ.get("PATH", ""),
        "KUBECONFIG": str(kubeconfig),
        "HYPERGUARD_CLUSTER_NAME": cluster,
        "HYPERGUARD_EVENT_BUS_NAME": bus,
        # the pod's metrics port, on the host's loopback (the process runs on the host)
        "HYPERGUARD_METRICS_PORT": str(metrics_port),
        "HYPERGUARD_METRICS_ADDRESS": "127.0.0.1",
        **aws_env,
    }
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "hyperguard.forwarder"],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
