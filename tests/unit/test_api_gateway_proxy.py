"""The twin's API Gateway stand-in builds REST (v1) proxy events and writes responses."""

from __future__ import annotations

import json
from typing import Any

from werkzeug.test import Client

from hyperguard_twin.api_gateway import DEFAULT_PRINCIPAL, ApiGatewayProxy, proxy_response

RESOURCES = ["/jobs", "/jobs/{jobId}", "/jobs/{jobId}/checkpoints", "/views/teams"]


def _proxy(seen: list[dict[str, Any]]) -> ApiGatewayProxy:
    def invoke(event: dict[str, Any]) -> dict[str, Any]:
        seen.append(event)
        return {
            "statusCode": 201,
            "body": json.dumps({"ok": True}),
            "multiValueHeaders": {"Content-Type": ["application/json"], "X-A": ["1", "2"]},
            "isBase64Encoded": False,
        }

    return ApiGatewayProxy(invoke, RESOURCES)


def test_a_request_becomes_the_event_api_gateway_sends() -> None:
    seen: list[dict[str, Any]] = []
    client = Client(_proxy(seen))
    principal = "arn:aws:sts::111122223333:assumed-role/nlp/alice"
    reply = client.post(
        "/jobs/j-1/checkpoints?x=1&x=2&y=3",
        data=b'{"step": 1}',
        headers={"X-HyperGuard-Principal": principal, "Idempotency-Key": "k"},
    )
    assert reply.status_code == 201 and reply.json == {"ok": True}
    assert reply.headers.getlist("X-A") == ["1", "2"]
    event = seen[0]
    assert event["resource"] == "/jobs/{jobId}/checkpoints"
    assert event["path"] == "/jobs/j-1/checkpoints"
    assert event["httpMethod"] == "POST"
    assert event["pathParameters"] == {"jobId": "j-1"}
    assert event["queryStringParameters"] == {"x": "2", "y": "3"}
    assert event["multiValueQueryStringParameters"] == {"x": ["1", "2"], "y": ["3"]}
    assert event["headers"]["Idempotency-Key"] == "k"
    assert "X-HyperGuard-Principal" not in event["headers"]
    assert event["body"] == '{"step": 1}' and event["isBase64Encoded"] is False
    identity = event["requestContext"]["identity"]
    assert identity["userArn"] == principal and identity["accountId"] == "111122223333"
    assert event["requestContext"]["resourcePath"] == "/jobs/{jobId}/checkpoints"


def test_the_default_principal_is_the_twin_admin_and_literal_routes_win() -> None:
    seen: list[dict[str, Any]] = []
    client = Client(_proxy(seen))
    client.get("/views/teams")
    event = seen[0]
    assert event["requestContext"]["identity"]["userArn"] == DEFAULT_PRINCIPAL
    assert event["resource"] == "/views/teams" and event["pathParameters"] is None
    assert event["queryStringParameters"] is None and event["body"] is None


def test_an_unknown_route_gets_api_gateways_403_without_invoking() -> None:
    seen: list[dict[str, Any]] = []
    reply = Client(_proxy(seen)).get("/nope")
    assert reply.status_code == 403 and reply.json == {"message": "Missing Authentication Token"}
    assert seen == []


def test_binary_bodies_travel_base64_and_malformed_results_are_502() -> None:
    seen: list[dict[str, Any]] = []
    Client(_proxy(seen)).post("/jobs", data=b"\xff\xfe")
    assert seen[0]["isBase64Encoded"] is True and seen[0]["body"] == "//4="
    assert proxy_response({"body": "x"}).status_code == 502


def test_a_trailing_newline_is_no_route_and_a_newline_parameter_is_passed_on() -> None:
    seen: list[dict[str, Any]] = []
    client = Client(_proxy(seen))
    assert client.get("/jobs%0A").status_code == 403  # not the /jobs resource
    assert seen == []
    client.get("/jobs/%0A")
    assert seen[0]["resource"] == "/jobs/{jobId}"
    assert seen[0]["pathParameters"] == {"jobId": "\n"}
