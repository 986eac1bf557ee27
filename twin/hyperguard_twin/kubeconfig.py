"""Kubeconfigs that authenticate to the twin's cluster as one of the stack's functions does
(`hyperguard twin kubeconfig --as`): RBAC answers them as it answers the function."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import yaml

from hyperguard_twin.config import REGION
from hyperguard_twin.deploy import Deployment
from hyperguard_twin.plane.kubeconfig import kubeconfig_document
from hyperguard_twin.plane.plane import ControlPlane


def function_kubeconfig(
    logical_id: str,
    *,
    deployment: Deployment,
    plane: ControlPlane,
    cluster: str,
    client: Callable[[str], Any],
    aws_endpoint: str,
) -> str:
    """An EKS token signed with the function's execution role's credentials (valid 15
    minutes, as EKS's), which kube-apiserver maps through the function's access entry to its
    Kubernetes group."""
    import boto3

    from hyperguard.cluster.eks_token import generate_eks_token

    function = deployment.functions.get(logical_id)
    if function is None:
        known = ", ".join(sorted(deployment.functions))
        raise LookupError(f"no function {logical_id} in the stack (one of: {known})")
    role = client("lambda").get_function_configuration(FunctionName=function["name"])["Role"]
    credentials = client("sts").assume_role(RoleArn=role, RoleSessionName=logical_id[:64])[
        "Credentials"
    ]
    sts = boto3.client(
        "sts",
        endpoint_url=aws_endpoint,
        region_name=REGION,
        aws_access_key_id=credentials["AccessKeyId"],
        aws_secret_access_key=credentials["SecretAccessKey"],
        aws_session_token=credentials["SessionToken"],
    )
    token = generate_eks_token(cluster, sts)
    server = {"server": plane.endpoint, "certificate-authority-data": plane.ca_data}
    config = kubeconfig_document(cluster, server, logical_id, {"token": token}, logical_id)
    return str(yaml.safe_dump(config, sort_keys=False))
