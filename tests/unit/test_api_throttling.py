"""Bursts of callers meet API Gateway's stage throttling (429 with Retry-After) before the
function, whose reserved concurrency covers a full burst, so none meets Lambda's throttling
(a 5xx through the proxy integration); the OpenAPI document says so on every operation."""

from __future__ import annotations

import json

from tests.conftest import template

from hyperguard.api import openapi_json


def test_the_stage_throttles_before_the_function_and_the_function_covers_a_burst() -> None:
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
    function = spec["Resources"]["ApiFunction"]["Properties"]
    assert function["ReservedConcurrentExecutions"] == {"Ref": "ApiThrottleBurstLimit"}


def test_every_operation_documents_the_429_with_retry_after() -> None:
    paths = json.loads(openapi_json())["paths"]
    operations = [op for path in paths.values() for op in path.values()]
    assert operations
    for operation in operations:
        throttled = operation["responses"]["429"]
        assert "Retry-After" in throttled["headers"], operation["operationId"]
