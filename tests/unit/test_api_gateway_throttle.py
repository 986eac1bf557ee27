"""The twin's API Gateway throttles the stage as the template sets it (a token bucket per
method and resource, 429 `{"message":"Too Many Requests"}` with the THROTTLED response's
headers) before the function is invoked."""

from __future__ import annotations

import json
from typing import Any

from tests.conftest import template
from werkzeug.test import Client

from hyperguard_twin.api_gateway import ApiGatewayProxy, StageThrottle, stage_throttle


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_bucket_holds_a_burst_and_refills_at_the_rate_per_method() -> None:
    clock = Clock()
    throttle = StageThrottle(rate=2, burst=3, clock=clock)
    assert [throttle.admit("POST", "/jobs") for _ in range(4)] == [True, True, True, False]
    assert throttle.admit("GET", "/jobs")  # another method has its own bucket
    clock.now = 0.5  # one token back at 2 per second
    assert throttle.admit("POST", "/jobs") and not throttle.admit("POST", "/jobs")
    clock.now = 100.0  # never more than the burst
    assert sum(throttle.admit("POST", "/jobs") for _ in range(10)) == 3


def test_a_throttled_request_never_reaches_the_function() -> None:
    invoked: list[dict[str, Any]] = []

    def invoke(event: dict[str, Any]) -> dict[str, Any]:
        invoked.append(event)
        return {"statusCode": 201, "body": "{}"}

    throttle = StageThrottle(rate=1, burst=2, headers={"Retry-After": "1"}, clock=Clock())
    client = Client(ApiGatewayProxy(invoke, ["/jobs"], throttle=throttle))
    answers = [client.post("/jobs", data="{}") for _ in range(3)]
    assert [a.status_code for a in answers] == [201, 201, 429]
    assert json.loads(answers[2].get_data()) == {"message": "Too Many Requests"}
    assert answers[2].headers["Retry-After"] == "1"
    assert len(invoked) == 2


def test_the_twin_throttles_as_the_template_and_its_parameters_say() -> None:
    spec = template()
    defaults = spec["Parameters"]
    throttle = stage_throttle(spec, {})
    assert throttle is not None
    assert throttle.rate == float(defaults["ApiThrottleRateLimit"]["Default"])
    assert throttle.burst == int(defaults["ApiThrottleBurstLimit"]["Default"])
    assert throttle.headers == {"Retry-After": "1"}
    overridden = stage_throttle(spec, {"ApiThrottleRateLimit": "5", "ApiThrottleBurstLimit": "7"})
    assert overridden is not None and (overridden.rate, overridden.burst) == (5.0, 7)
