"""What an AWS account running Karpenter on EKS already has before HyperGuard is deployed,
made through the emulator's real EC2 API and the real API server: the cluster's subnets and
security group tagged for Karpenter's discovery (`karpenter.sh/discovery: <cluster>`, as the
Karpenter getting-started guide tags them), an EKS optimized accelerated AMI, and the
EC2NodeClass the NodePools launch with (Karpenter's node class controller resolves it and
marks it Ready).
"""

from __future__ import annotations

from typing import Any

from hyperguard_twin.plane.bootstrap import FIELD_MANAGER
from hyperguard_twin.plane.kube import EC2NODECLASSES, KubeClient, wait_for

NODE_CLASS = "default"
DISCOVERY_TAG = "karpenter.sh/discovery"
AMI_NAME = "amazon-eks-node-al2023-x86_64-nvidia-1.37-v20261101"
"""An EKS optimized accelerated AL2023 AMI's name, as AWS names them (what the EC2NodeClass's
`al2023@latest` alias stands for)."""


def node_class(cluster: str) -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": {"name": NODE_CLASS},
        "spec": {
            "role": f"KarpenterNodeRole-{cluster}",
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [{"tags": {DISCOVERY_TAG: cluster}}],
            "securityGroupSelectorTerms": [{"tags": {DISCOVERY_TAG: cluster}}],
        },
    }


def install_karpenter_account(
    ec2: Any, kube: KubeClient, cluster: str, timeout_s: float = 60
) -> None:
    vpc = ec2.describe_vpcs(Filters=[{"Name": "is-default", "Values": ["true"]}])["Vpcs"][0][
        "VpcId"
    ]
    subnets = [
        s["SubnetId"]
        for s in ec2.describe_subnets(Filters=[{"Name": "vpc-id", "Values": [vpc]}])["Subnets"]
    ]
    groups = ec2.describe_security_groups(
        Filters=[{"Name": "vpc-id", "Values": [vpc]}, {"Name": "group-name", "Values": ["default"]}]
    )["SecurityGroups"]
    tag = [{"Key": DISCOVERY_TAG, "Value": cluster}]
    ec2.create_tags(Resources=[*subnets, *(g["GroupId"] for g in groups)], Tags=tag)
    if not ec2.describe_images(Filters=[{"Name": "name", "Values": [AMI_NAME]}])["Images"]:
        ec2.register_image(
            Name=AMI_NAME,
            Architecture="x86_64",
            RootDeviceName="/dev/xvda",
            VirtualizationType="hvm",
            EnaSupport=True,
            Description="EKS-optimized Kubernetes node based on Amazon Linux 2023 (nvidia)",
        )
    kube.apply(node_class(cluster), FIELD_MANAGER)

    def ready() -> bool:
        found = kube.get(EC2NODECLASSES, NODE_CLASS) or {}
        conditions = {
            c.get("type"): c.get("status")
            for c in (found.get("status") or {}).get("conditions") or []
        }
        return conditions.get("Ready") == "True"

    wait_for(ready, timeout_s, f"EC2NodeClass {NODE_CLASS} was not Ready")
