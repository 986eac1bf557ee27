"""Bursts of callers meet API Gateway's stage throttling (429 with Retry-After) before the
function, which reserves no concurrency (D85), so what the stage admits never meets Lambda's
throttling (a 5xx through the proxy integration); behind it, the function holds each
principal and team to its own rate (D147); the OpenAPI document says so on every
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


def test_each_caller_is_limited_by_the_function_on_a_table_of_its_own() -> None:
    """The per-caller limits are parameters the function reads, counted in RateLimitTable
    (TTL on `expires_at`), which the API's role may only update; the stage stays above one
    team's limit, so a team's flood is refused per caller, not by the stage."""
    spec = template()
    parameters = spec["Parameters"]
    for name in ("ApiPrincipalRateLimit", "ApiTeamRateLimit"):
        assert parameters[name]["Type"] == "Number" and parameters[name]["MinValue"] >= 1
    assert (
        parameters["ApiPrincipalRateLimit"]["Default"]
        <= parameters["ApiTeamRateLimit"]["Default"]
        < parameters["ApiThrottleRateLimit"]["Default"]
    )
    function = spec["Resources"]["ApiFunction"]["Properties"]
    variables = function["Environment"]["Variables"]
    assert variables["RATE_LIMIT_TABLE"] == {"Ref": "RateLimitTable"}
    assert variables["API_PRINCIPAL_RATE_LIMIT"] == {"Ref": "ApiPrincipalRateLimit"}
    assert variables["API_TEAM_RATE_LIMIT"] == {"Ref": "ApiTeamRateLimit"}
    table = spec["Resources"]["RateLimitTable"]["Properties"]
    assert table["KeySchema"] == [{"AttributeName": "pk", "KeyType": "HASH"}]
    assert table["TimeToLiveSpecification"] == {"AttributeName": "expires_at", "Enabled": True}
    grants = [
        statement
        for policy in function["Policies"]
        for statement in policy.get("Statement", [])
        if "RateLimitTable" in json.dumps(statement["Resource"])
    ]
    assert [g["Action"] for g in grants] == ["dynamodb:UpdateItem"]
    for name, resource in spec["Resources"].items():
        if name != "ApiFunction" and resource["Type"] == "AWS::Serverless::Function":
            assert "RateLimitTable" not in json.dumps(resource["Properties"]), name


def test_the_429_documents_both_answers() -> None:
    """API Gateway's `{"message"}` from the stage, or the function's error body naming the
    caller's limit."""
    document = json.loads(openapi_json())
    throttled = document["paths"]["/jobs"]["post"]["responses"]["429"]
    schemas = throttled["content"]["application/json"]["schema"]["anyOf"]
    assert {s["$ref"].rsplit("/", 1)[-1] for s in schemas} == {"ThrottledBody", "RateLimitedBody"}
    limited = document["components"]["schemas"]["RateLimitedBody"]
    assert limited["properties"]["limit"]["enum"] == ["principal", "team"]
