"""What the operator installs in the cluster after `sam deploy`, as deploy/kubernetes says:
HyperGuard's RBAC, and its forwarder with the ForwarderRole's credentials."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hyperguard_twin import forwarder_pod
from hyperguard_twin.config import REGION
from hyperguard_twin.deploy import Deployment
from hyperguard_twin.emulator import Emulator
from hyperguard_twin.plane.plane import ControlPlane


def apply_cluster_rbac(plane: ControlPlane, root: Path) -> None:
    """As the install guide says: `kubectl apply -f deploy/kubernetes/hyperguard-rbac.yaml`
    (server-side here)."""
    plane.client().apply_file(root / "deploy" / "kubernetes" / "hyperguard-rbac.yaml")


def start_forwarder(
    plane: ControlPlane,
    root: Path,
    *,
    cluster: str,
    deployment: Deployment,
    client: Callable[[str], Any],
    emulator: Emulator,
    metrics_port: int,
) -> subprocess.Popen[bytes]:
    """HyperGuard's in-cluster forwarder, as deploy/kubernetes installs it, with the
    ForwarderRole's credentials (EKS Pod Identity's, on AWS), serving /metrics on
    `metrics_port`."""
    role = client("iam").get_role(RoleName=deployment.resources["ForwarderRole"]["physical_id"])[
        "Role"
    ]["Arn"]
    credentials = client("sts").assume_role(RoleArn=role, RoleSessionName="hyperguard-forwarder")[
        "Credentials"
    ]
    emulator.iam.enforce(credentials["AccessKeyId"], role, "ForwarderRole")
    return forwarder_pod.start(
        plane,
        root,
        cluster=cluster,
        bus=deployment.outputs["EventBusName"],
        aws_env={
            "AWS_ACCESS_KEY_ID": credentials["AccessKeyId"],
            "AWS_SECRET_ACCESS_KEY": credentials["SecretAccessKey"],
            "AWS_SESSION_TOKEN": credentials["SessionToken"],
            "AWS_REGION": REGION,
            "AWS_DEFAULT_REGION": REGION,
            "AWS_ENDPOINT_URL": emulator.endpoint,
        },
        log=plane.workdir / "logs" / "hyperguard-forwarder.log",
        metrics_port=metrics_port,
    )
