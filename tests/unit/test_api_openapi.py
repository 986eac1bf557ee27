"""docs/openapi.json is generated from the resolver and kept in sync."""

from __future__ import annotations

import json

from tests.conftest import ROOT

from hyperguard.api import openapi_json

ROUTES = {
    "/jobs": {"get", "post"},
    "/jobs/{jobId}": {"get", "delete"},
    "/jobs/{jobId}/checkpoints": {"post"},
    "/teams/{team}/compute-quota": {"put", "get", "delete"},
    "/teams": {"get"},
    "/scheduler-config": {"put", "get"},
    "/views/teams": {"get"},
    "/views/priority-classes": {"get"},
    "/views/cluster": {"get"},
    "/incidents": {"get"},
    "/incidents/{incidentId}": {"get"},
    "/nodes/{nodeId}/actions": {"post"},
}


def test_the_committed_spec_is_what_the_resolver_generates() -> None:
    committed = json.loads((ROOT / "docs" / "openapi.json").read_text())
    assert committed == json.loads(openapi_json()), (
        "regenerate: .venv/bin/python -m hyperguard.api > docs/openapi.json"
    )


def test_every_route_others_rely_on_is_in_the_spec() -> None:
    paths = json.loads(openapi_json())["paths"]
    for path, methods in ROUTES.items():
        assert methods <= set(paths[path]), path


def test_request_bodies_are_documented_with_their_constraints() -> None:
    spec = json.loads(openapi_json())
    schemas = spec["components"]["schemas"]
    assert schemas["JobSubmission"]["properties"]["replicas"]["minimum"] == 1
    assert set(schemas["ComputeQuotaRequest"]["properties"]) >= {
        "Name",
        "ClusterArn",
        "ComputeQuotaConfig",
        "ComputeQuotaTarget",
        "ActivationState",
        "TargetVersion",
    }
    header = spec["paths"]["/jobs"]["post"]["parameters"][0]
    assert (header["name"].lower(), header["in"]) == ("idempotency-key", "header")
