"""The scheduler benchmark names each Kubernetes request by verb and resource as
kube-apiserver's RequestInfo does, a namespace's own subresources included."""

from __future__ import annotations

import pytest
from bench.scheduler import kube_request


@pytest.mark.parametrize(
    ("method", "path", "named"),
    [
        ("GET", "/api/v1/nodes", ("list", "nodes")),
        ("GET", "/api/v1/nodes/n-1", ("get", "nodes")),
        ("PATCH", "/api/v1/nodes/n-1/status", ("patch", "nodes/status")),
        ("GET", "/api/v1/namespaces/hyperpod-ns-a", ("get", "namespaces")),
        ("PUT", "/api/v1/namespaces/hyperpod-ns-a/finalize", ("update", "namespaces/finalize")),
        ("POST", "/api/v1/namespaces/a/pods/p/eviction", ("create", "pods/eviction")),
        (
            "GET",
            "/apis/sagemaker.amazonaws.com/v1/namespaces/a/hyperpodpytorchjobs",
            ("list", "hyperpodpytorchjobs"),
        ),
        ("DELETE", "/apis/karpenter.sh/v1/nodeclaims/c", ("delete", "nodeclaims")),
        ("DELETE", "/apis/batch/v1/namespaces/a/jobs", ("deletecollection", "jobs")),
    ],
)
def test_a_request_is_named_as_the_api_server_names_it(
    method: str, path: str, named: tuple[str, str]
) -> None:
    assert kube_request(method, path) == named


def test_a_watch_is_not_a_list() -> None:
    assert kube_request("GET", "/api/v1/nodes", watch=True) == ("watch", "nodes")
