"""The in-cluster install (deploy/kubernetes: `kubectl apply -k`, and the burst path's example
NodePool and EC2NodeClass) is what the real API server accepts: every object is applied
server-side with dryRun=All, as `kubectl apply --server-side --dry-run=server` does, against
kube-apiserver with Karpenter's AWS CRDs installed, so an unknown field, a wrong apiVersion
or a value a CRD's schema refuses fails here, not on a platform team's first day."""

from __future__ import annotations

from typing import Any

import yaml
from tests.conftest import ROOT
from tests.integration.cluster_harness import shared_plane

from hyperguard_twin.plane.kube import APPLY, NAMESPACES, KubeApiError

DEPLOY = ROOT / "deploy" / "kubernetes"


def _documents(path: Any) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def test_the_install_and_the_burst_example_are_accepted_by_the_real_api_server() -> None:
    kube = shared_plane().plane.client()
    kustomization = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    assert set(kustomization) == {"apiVersion", "kind", "resources"}  # no transformers to mimic
    documents = [d for name in kustomization["resources"] for d in _documents(DEPLOY / name)]
    documents += _documents(DEPLOY / "examples" / "burst-nodepool.yaml")
    kinds = {d["kind"] for d in documents}
    assert {"ClusterRole", "Role", "Deployment", "NodePool", "EC2NodeClass"} <= kinds
    # A namespaced object's dry run needs its namespace: the install's own are made for real.
    made = [
        d["metadata"]["name"]
        for d in documents
        if d["kind"] == "Namespace" and kube.get(NAMESPACES, d["metadata"]["name"]) is None
    ]
    refused: list[str] = []
    try:
        for name in made:
            kube.create(NAMESPACES, {"metadata": {"name": name}})
        for document in documents:
            rt = kube.resource_of(document["apiVersion"], document["kind"])
            meta = document["metadata"]
            try:
                kube.request(
                    "PATCH",
                    rt.path(meta.get("namespace"), meta["name"]),
                    document,
                    content_type=APPLY,
                    params={"fieldManager": "kubectl", "force": "true", "dryRun": "All"},
                )
            except KubeApiError as error:
                refused.append(f"{document['kind']} {meta['name']}: {error}")
    finally:
        for name in made:
            kube.delete(NAMESPACES, name)
    assert refused == []
