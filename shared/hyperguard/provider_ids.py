"""Kubernetes providerIDs of AWS nodes, parsed exactly (pure: imported by event parsers).

A node's spec.providerID comes in two forms, each parsed exactly; anything else is not
guessed at (docs/decisions.md, "providerID forms"):
- EKS (the AWS cloud provider, Karpenter's nodes): `aws:///<zone>/<instance id>`;
- HyperPod EKS: `aws:///<zone>/sagemaker/cluster/hyperpod-<cluster id>-<instance id>`, the
  form aws/amazon-vpc-cni-k8s's HyperPod tests document and live clusters show; its zone
  segment is seen as a zone name (us-west-2b) or a zone id (use1-az4).
Instance ids follow SageMaker's ClusterNodeId pattern (botocore), `i-` and 8 or 17 hex
digits. Real cluster ids are 12 of [a-z0-9] (botocore's ClusterArn pattern), as the twin's
are; any lowercase DNS label is accepted because nothing is looked up by it.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import NamedTuple

_ZONE = r"(?P<zone>[a-z]{2,4}[0-9]*(?:-[a-z0-9]+)+)"
_INSTANCE = r"(?P<instance>i-[0-9a-f]{8}(?:[0-9a-f]{9})?)"
_EKS_PROVIDER_ID = re.compile(rf"aws:///{_ZONE}/{_INSTANCE}")
_HYPERPOD_PROVIDER_ID = re.compile(
    rf"aws:///{_ZONE}/sagemaker/cluster/hyperpod-(?P<cluster>[a-z0-9]+(?:-[a-z0-9]+)*)-{_INSTANCE}"
)


class ProviderIdForm(StrEnum):
    EKS = "eks"
    HYPERPOD = "hyperpod"


class ProviderId(NamedTuple):
    form: ProviderIdForm
    zone: str
    instance_id: str
    cluster_id: str | None
    """The HyperPod cluster id (the last segment of its ARN); None on the EKS form."""


def parse_provider_id(provider_id: str) -> ProviderId | None:
    """The parts of a providerID of either known form; None for any other string."""
    if match := _EKS_PROVIDER_ID.fullmatch(provider_id):
        return ProviderId(ProviderIdForm.EKS, match["zone"], match["instance"], None)
    if match := _HYPERPOD_PROVIDER_ID.fullmatch(provider_id):
        return ProviderId(
            ProviderIdForm.HYPERPOD, match["zone"], match["instance"], match["cluster"]
        )
    return None


def eks_provider_id(zone: str, instance_id: str) -> str:
    return f"aws:///{zone}/{instance_id}"


def hyperpod_provider_id(zone: str, cluster_id: str, instance_id: str) -> str:
    return f"aws:///{zone}/sagemaker/cluster/hyperpod-{cluster_id}-{instance_id}"
