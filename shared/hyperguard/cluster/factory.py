"""The ClusterGateway a function talks to: the HyperPod-on-EKS composite, built lazily (no
client connects until the first call). Building it checks that the Lambda runtime's botocore
knows every operation the gateway calls, so that a runtime too old fails the function's init
loudly instead of a workflow midway (D67)."""

from __future__ import annotations

from hyperguard.aws import require_operations
from hyperguard.catalogue import InstanceCatalogue
from hyperguard.cluster import hyperpod
from hyperguard.cluster.hyperpod import HyperPodAdapter
from hyperguard.cluster.hyperpod_eks import HyperPodEksGateway
from hyperguard.cluster.kubernetes import KubernetesAdapter
from hyperguard.settings import Settings

REQUIRED_OPERATIONS: dict[str, tuple[str, ...]] = {
    "sagemaker": hyperpod.OPERATIONS,
    # the API server's endpoint and CA (cluster.kubernetes); EKS Auto Mode and the managed
    # node groups' nodeRepairConfig (the inventory's look at the other repairers, D148)
    "eks": ("DescribeCluster", "ListNodegroups", "DescribeNodegroup"),
    "sts": ("GetCallerIdentity",),  # presigned into the EKS token (cluster.eks_token)
}
"""EC2's RebootInstances and DescribeInstanceTypes are left out: every botocore a Lambda
runtime ships has them, and EC2's model alone takes about 175 ms of init to load."""


def gateway_for(settings: Settings, catalogue: InstanceCatalogue) -> HyperPodEksGateway:
    for service, operations in REQUIRED_OPERATIONS.items():
        require_operations(service, operations)
    return HyperPodEksGateway(
        HyperPodAdapter(settings.hyperpod_cluster_name, catalogue=catalogue),
        KubernetesAdapter(settings.eks_cluster_name),
    )
