"""What the account holds before HyperGuard is deployed: the EKS cluster's Kubernetes (the
upstream components, authenticating callers as EKS does), the HyperPod cluster simulated on
it, Karpenter's burst pool and the jobs' checkpoint bucket."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hyperguard_twin import aws as twin_aws
from hyperguard_twin import eks_access
from hyperguard_twin.clock import ScaledClock
from hyperguard_twin.cloud.account import install_karpenter_account
from hyperguard_twin.cloud.core import AZ, Effect
from hyperguard_twin.cloud.ec2 import karpenter_instance_types
from hyperguard_twin.cluster import SimulatedCluster
from hyperguard_twin.config import (
    ACCOUNT,
    CHECKPOINT_BUCKET,
    INSTANCE_TYPE,
    REGION,
    TWIN_ENV,
    TwinConfig,
)
from hyperguard_twin.plane.authn import Identity
from hyperguard_twin.plane.components import ensure_built
from hyperguard_twin.plane.eks_token import EksTokenAuthenticator
from hyperguard_twin.plane.plane import ControlPlane
from hyperguard_twin.plane.settings import PlaneSettings, PlaneTimings


def eks_authenticator(eks_cluster: str) -> Callable[[str], Identity | None]:
    """What EKS's authenticator does with a bearer token: STS vouches for the caller,
    the cluster's access entries say who it is in Kubernetes."""
    tokens = EksTokenAuthenticator(eks_cluster)

    def authenticate(token: str) -> Identity | None:
        arn = tokens.authenticate(token)
        if arn is None:
            return None
        entries = eks_access.entries_of(ACCOUNT, REGION, eks_cluster)
        return eks_access.identity_for(arn, entries)

    return authenticate


def new_plane(config: TwinConfig, aws_endpoint: str) -> ControlPlane:
    """The cluster's Kubernetes, not started yet: the upstream components, built (or found
    in the cache), to run on 127.0.0.1. Its endpoint and CA are known before it starts."""
    built = ensure_built(config.root)
    settings = PlaneSettings(
        cluster_name=config.eks_cluster_name,
        authenticate=eks_authenticator(config.eks_cluster_name),
        aws_env={
            **TWIN_ENV,
            "AWS_ENDPOINT_URL": aws_endpoint,
            "AWS_EC2_METADATA_DISABLED": "true",
        },
        instance_types=karpenter_instance_types(AZ),
        timings=PlaneTimings.for_scale(config.time_scale),
    )
    return ControlPlane(built, settings)


def simulate_hyperpod(
    config: TwinConfig, plane: ControlPlane, effects: Callable[[Effect], None]
) -> SimulatedCluster:
    """The HyperPod cluster, simulated on the plane's Kubernetes at the twin's speed."""
    return SimulatedCluster(
        ScaledClock(config.time_scale),
        plane.client(),
        effects=effects,
        hyperpod_cluster=config.cluster_name,
        eks_cluster=config.eks_cluster_name,
        region=REGION,
        account=ACCOUNT,
        timings=config.timings,
        node_recovery=config.node_recovery,
        logs_dir=plane.logs_dir,
    )


def create_cloud_account(
    config: TwinConfig, client: Callable[[str], Any], plane: ControlPlane
) -> None:
    """The account's side that needs no running cluster: the EKS cluster, answering with the
    plane's endpoint and CA, and the jobs' checkpoint bucket."""
    client("eks").create_cluster(
        name=config.eks_cluster_name,
        roleArn=f"arn:aws:iam::{ACCOUNT}:role/eks-cluster",
        resourcesVpcConfig={"subnetIds": []},
    )
    twin_aws.point_eks_cluster(
        config.eks_cluster_name, plane.endpoint, plane.ca_data, ACCOUNT, REGION
    )
    client("s3").create_bucket(Bucket=CHECKPOINT_BUCKET)


def create_cluster_capacity(
    config: TwinConfig, client: Callable[[str], Any], plane: ControlPlane, cluster: SimulatedCluster
) -> None:
    """The HyperPod cluster's instances and Karpenter's burst pool (which HyperGuard's
    NodeClaims launch into even when it starts empty), on the running plane."""
    cluster.add_instance_group("workers", INSTANCE_TYPE, config.hyperpod_nodes)
    install_karpenter_account(client("ec2"), plane.client(), config.eks_cluster_name)
    cluster.add_nodepool("gpu-burst", "p5.48xlarge")
    on_demand = config.burst_nodes - config.burst_nodes // 2
    cluster.add_burst_nodes("gpu-burst", "p5.48xlarge", on_demand)
    cluster.add_burst_nodes("gpu-burst", "p5.48xlarge", config.burst_nodes // 2, spot=True)
