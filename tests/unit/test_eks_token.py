"""EKS token: signed offline with static fake credentials, decoded and inspected."""

from __future__ import annotations

import base64
from typing import Any
from urllib.parse import parse_qs, urlsplit

import botocore.session
import pytest

from hyperguard.cluster.eks_token import (
    PRESIGN_EXPIRES_S,
    TOKEN_PREFIX,
    EksTokenSource,
    generate_eks_token,
)


@pytest.fixture
def sts_client() -> Any:
    session = botocore.session.Session()
    session.set_credentials("AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY")
    return session.create_client("sts", region_name="us-west-2")


def decode(token: str) -> str:
    assert token.startswith(TOKEN_PREFIX)
    body = token.removeprefix(TOKEN_PREFIX)
    assert "=" not in body
    return base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)).decode()


def test_token_is_a_presigned_get_caller_identity_url_bound_to_the_cluster(sts_client: Any) -> None:
    url = urlsplit(decode(generate_eks_token("gpu-cluster", sts_client)))
    query = parse_qs(url.query)

    assert url.scheme == "https"
    assert url.hostname == "sts.us-west-2.amazonaws.com"
    assert query["Action"] == ["GetCallerIdentity"]
    assert query["Version"] == ["2011-06-15"]
    assert query["X-Amz-Expires"] == [str(PRESIGN_EXPIRES_S)] == ["60"]
    assert query["X-Amz-Algorithm"] == ["AWS4-HMAC-SHA256"]
    assert query["X-Amz-Credential"][0].startswith("AKIAIOSFODNN7EXAMPLE/")
    assert "x-k8s-aws-id" in query["X-Amz-SignedHeaders"][0].split(";")
    assert query["X-Amz-Signature"]


def test_signing_hook_does_not_leak_into_other_calls(sts_client: Any) -> None:
    generate_eks_token("gpu-cluster", sts_client)
    url = sts_client.generate_presigned_url("get_caller_identity", Params={}, ExpiresIn=60)
    signed = parse_qs(urlsplit(url).query)["X-Amz-SignedHeaders"][0].split(";")
    assert "x-k8s-aws-id" not in signed


def test_different_clusters_get_different_signatures(sts_client: Any) -> None:
    assert generate_eks_token("a", sts_client) != generate_eks_token("b", sts_client)


def test_token_source_caches_then_refreshes_before_expiry(sts_client: Any) -> None:
    now = [1000.0]
    source = EksTokenSource("gpu-cluster", sts_client=sts_client, clock=lambda: now[0])
    first = source.token()
    now[0] += 12 * 60
    assert source.token() is first
    now[0] += 60
    assert source.token() is not first
