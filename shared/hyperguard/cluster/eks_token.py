"""EKS bearer tokens, built the way aws-iam-authenticator builds them.

A token is "k8s-aws-v1." + base64url (no padding) of a presigned STS GetCallerIdentity URL
whose signature covers the header `x-k8s-aws-id: <cluster name>`. The API server replays the
URL against STS to learn the caller's IAM identity, then maps it through the cluster's access
entries. No kubectl and no authenticator binary are needed, only STS credentials.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Callable
from typing import Any

from hyperguard.aws import client

TOKEN_PREFIX = "k8s-aws-v1."
CLUSTER_ID_HEADER = "x-k8s-aws-id"
PRESIGN_EXPIRES_S = 60
# EKS accepts a token for 15 minutes after signing; aws-iam-authenticator reports 14 minutes
# as its expiry and we refresh a minute before that.
TOKEN_LIFETIME_S = 14 * 60
REFRESH_MARGIN_S = 60


def generate_eks_token(cluster_name: str, sts_client: Any) -> str:
    """Sign GetCallerIdentity for `cluster_name` with the credentials of `sts_client`."""

    def add_cluster_header(request: Any, **_: Any) -> None:
        request.headers[CLUSTER_ID_HEADER] = cluster_name

    event = "before-sign.sts.GetCallerIdentity"
    sts_client.meta.events.register(event, add_cluster_header)
    try:
        url: str = sts_client.generate_presigned_url(
            "get_caller_identity",
            Params={},
            ExpiresIn=PRESIGN_EXPIRES_S,
            HttpMethod="GET",
        )
    finally:
        sts_client.meta.events.unregister(event, add_cluster_header)
    encoded = base64.urlsafe_b64encode(url.encode()).decode().rstrip("=")
    return TOKEN_PREFIX + encoded


class EksTokenSource:
    """Hands out a cached token for one cluster and signs a new one before it expires."""

    def __init__(
        self,
        cluster_name: str,
        *,
        sts_client: Any | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.cluster_name = cluster_name
        self._sts_client = sts_client
        self._clock = clock
        self._token: str | None = None
        self._signed_at = 0.0

    def token(self) -> str:
        now = self._clock()
        if self._token is None or now - self._signed_at >= TOKEN_LIFETIME_S - REFRESH_MARGIN_S:
            sts = self._sts_client or client("sts")
            self._token = generate_eks_token(self.cluster_name, sts)
            self._signed_at = now
        return self._token
