"""Bursts of callers meet API Gateway's stage throttling (429 with Retry-After) before the
function, which reserves no concurrency (D85), so what the stage admits never meets Lambda's
throttling (a 5xx through the proxy integration); the OpenAPI document says so on every
operation."""

from __future__ import annotations

import json

from tests.conftest import template

from hyperguard.api import openapi_json


def test_the_stage_throttles_before_the_function_and_nothing_throttles_behind_it() -> None:
    spec = template()
    parameters = spec["Parameters"]
    for name in ("ApiThrottleRateLimit", "ApiThrottleBurstLimit"):
        assert parameters[name]["Type"] == "Number" and parameters[name]["MinValue"] >= 1
    api = spec["Resources"]["HyperGuardApi"]["Properties"]
    [settings] = api["MethodSettings"]
    assert (settings["ResourcePath"], settings["HttpMethod"]) == ("/*", "*")
    assert settings["ThrottlingRateLimit"] == {"Ref": "ApiThrottleRateLimit"}
    assert settings["ThrottlingBurstLimit"] == {"Ref": "ApiThrottleBurstLimit"}
    throttled = api["GatewayResponses"]["THROTTLED"]["ResponseParameters"]["Headers"]
    assert int(throttled["Retry-After"].strip("'")) >= 1
    # A reservation would have to cover burst + rate x the calls' duration, which no
    # parameter knows: anything less turns an admitted call into a 5xx.
    assert "ReservedConcurrentExecutions" not in spec["Resources"]["ApiFunction"]["Properties"]
    # while the functions that recover nodes keep theirs, so an API burst cannot starve them
    for name in ("IngestHealthFunction", "RecoveryFunction"):
        assert spec["Resources"][name]["Properties"]["ReservedConcurrentExecutions"] >= 10


def test_every_operation_documents_the_429_with_retry_after() -> None:
    paths = json.loads(openapi_json())["paths"]
    operations = [op for path in paths.values() for op in path.values()]
    assert operations
    for operation in operations:
        throttled = operation["responses"]["429"]
        assert "Retry-After" in throttled["headers"], operation["operationId"]
