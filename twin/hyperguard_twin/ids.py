"""The identifiers AWS would give the twin's resources, derived so that every part of the
twin agrees on them."""

from __future__ import annotations

import hashlib

_ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyz"


def hyperpod_cluster_id(name: str) -> str:
    """The id SageMaker gives the HyperPod cluster named `name`: 12 of [a-z0-9], as botocore's
    ClusterArn pattern requires (`cluster/[a-z0-9]{12}`), and as it appears in the cluster's
    ARN and in its nodes' providerIDs. SageMaker draws it at random; the twin derives it from
    the name, so that every part of the twin (and its tests) agree on it."""
    digest = int.from_bytes(hashlib.sha256(name.encode()).digest()[:10], "big")
    return "".join(_ALPHABET[(digest >> (6 * i)) % 36] for i in range(12))


def hyperpod_cluster_arn(name: str, region: str, account: str) -> str:
    return f"arn:aws:sagemaker:{region}:{account}:cluster/{hyperpod_cluster_id(name)}"
