"""Schemathesis's coverage phase against the API in this process: for every operation of the
committed OpenAPI document, the boundary values and the near-misses it derives from the
document (each bound, each missing required field, each wrong type) as an admin, through the
same API Gateway proxy and resolver the deployed function runs: no 5xx, every status code
and body as the document says. The deployed path's bounded fuzzing, as an admin and as a
team member, is tests/e2e/test_api_schema.py's; the cases here are thousands, at a few
milliseconds each in this process and about 25 ms each through the twin."""

from __future__ import annotations

from typing import Any

import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.config import SchemathesisConfig
from tests.conftest import ROOT
from tests.e2e.test_api_schema import CHECKS
from tests.integration.api_harness import ADMIN, Api

COVERAGE_ONLY = {"phases": {"enabled": False, "coverage": {"enabled": True}}}
# The prerequisites check asks the cluster, which this process has none of (a 503 here);
# the deployed path answers it in the e2e tier.
schema = schemathesis.openapi.from_path(
    ROOT / "docs" / "openapi.json", config=SchemathesisConfig.from_dict(COVERAGE_ONLY)
).exclude(path="/cluster/prerequisites")


@schema.parametrize()
@settings(deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
def test_every_boundary_the_document_names_is_answered_as_it_says(
    case: schemathesis.Case[Any], api: Api
) -> None:
    case.call_and_validate(app=api.proxy, headers={"X-HyperGuard-Principal": ADMIN}, checks=CHECKS)
