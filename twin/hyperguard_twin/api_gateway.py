"""API Gateway REST (v1) in front of the API function, for the local twin (what
`sam local start-api` does): a WSGI app that turns each HTTP request into the Lambda proxy
event API Gateway would send, calls `invoke(event)`, and writes the proxy response.

Routes come from the OpenAPI paths (docs/openapi.json), so `resource` and `pathParameters`
are what API Gateway would fill in; a path that matches no route gets API Gateway's own
403 "Missing Authentication Token".

Identity: on AWS the IAM authorizer verifies the SigV4 signature and puts the signer in
`requestContext.identity`. The twin does not check signatures; the caller names itself in
the twin-only header `X-HyperGuard-Principal: <IAM ARN>` (default: the twin's admin
role). The header is removed from the event, so the handler only ever sees the identity
where API Gateway puts it.
"""

from __future__ import annotations

import base64
import math
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from werkzeug.wrappers import Request, Response

PRINCIPAL_HEADER = "X-HyperGuard-Principal"
DEFAULT_PRINCIPAL = "arn:aws:iam::123456789012:role/hyperguard-admin"
DEFAULT_PORT = 3000

Invoke = Callable[[dict[str, Any]], dict[str, Any]]


@dataclass(frozen=True, slots=True)
class _Route:
    resource: str
    pattern: re.Pattern[str]
    statics: int


def _route(resource: str) -> _Route:
    regex = "".join(
        f"(?P<{part[1:-1]}>[^/]+)" if part.startswith("{") else re.escape(part)
        for part in re.split(r"(\{[^}]+\})", resource)
    )
    statics = sum(1 for segment in resource.split("/") if segment and "{" not in segment)
    # \Z, not $: `$` also matches before a trailing newline, and API Gateway has no route
    # for `/jobs%0A`.
    return _Route(resource, re.compile(f"^{regex}\\Z"), statics)


@dataclass
class StageThrottle:
    """API Gateway's stage throttling (MethodSettings ThrottlingRateLimit and
    ThrottlingBurstLimit on `/*` `*`): a token bucket per method and resource, holding at most
    `burst` requests and refilled at `rate` per second; a request finding it empty is
    answered 429 `{"message":"Too Many Requests"}` (the THROTTLED gateway response, with the
    template's headers) without reaching the function. API Gateway documents the algorithm as
    a token bucket ("Throttle API requests for better throughput")."""

    rate: float
    burst: int
    headers: Mapping[str, str] = field(default_factory=dict)
    clock: Callable[[], float] = time.monotonic
    _buckets: dict[tuple[str, str], tuple[float, float]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def admit(self, method: str, resource: str) -> bool:
        with self._lock:
            now = self.clock()
            tokens, since = self._buckets.get((method, resource), (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - since) * self.rate)
            admitted = tokens >= 1
            self._buckets[(method, resource)] = (tokens - 1 if admitted else tokens, now)
            return admitted

    def refusal(self) -> Response:
        response = Response(
            '{"message":"Too Many Requests"}', status=429, content_type="application/json"
        )
        for name, value in self.headers.items():
            response.headers[name] = value
        if "Retry-After" not in response.headers:
            response.headers["Retry-After"] = str(math.ceil(1 / self.rate))
        return response


def stage_throttle(
    template: Mapping[str, Any], parameters: Mapping[str, str], api: str = "HyperGuardApi"
) -> StageThrottle | None:
    """The stage throttling the template gives its REST API (its `/*` `*` MethodSettings,
    parameters resolved as CloudFormation would), with its THROTTLED gateway response's
    headers; None when it sets none."""
    properties = template["Resources"][api]["Properties"]
    settings = next(
        (m for m in properties.get("MethodSettings") or [] if m.get("ResourcePath") == "/*"),
        None,
    )
    if settings is None or "ThrottlingRateLimit" not in settings:
        return None

    def number(value: Any) -> float:
        if isinstance(value, Mapping):
            name = value["Ref"]
            return float(parameters.get(name, template["Parameters"][name]["Default"]))
        return float(value)

    throttled = (properties.get("GatewayResponses") or {}).get("THROTTLED") or {}
    headers = (throttled.get("ResponseParameters") or {}).get("Headers") or {}
    return StageThrottle(
        rate=number(settings["ThrottlingRateLimit"]),
        burst=int(number(settings["ThrottlingBurstLimit"])),
        headers={name: str(value).strip("'") for name, value in headers.items()},
    )


class ApiGatewayProxy:
    def __init__(
        self,
        invoke: Invoke,
        resources: Iterable[str],
        *,
        stage: str = "local",
        default_principal: str = DEFAULT_PRINCIPAL,
        throttle: StageThrottle | None = None,
    ) -> None:
        self.invoke = invoke
        self.throttle = throttle
        # Most literal segments first: /jobs/search would win over /jobs/{jobId}.
        self.routes = sorted((_route(r) for r in resources), key=lambda r: -r.statics)
        self.stage = stage
        self.default_principal = default_principal

    def match(self, path: str) -> tuple[str, dict[str, str]] | None:
        for route in self.routes:
            found = route.pattern.match(path)
            if found:
                return route.resource, found.groupdict()
        return None

    def event(
        self,
        method: str,
        path: str,
        *,
        headers: Iterable[tuple[str, str]] = (),
        query: Iterable[tuple[str, str]] = (),
        body: bytes = b"",
        source_ip: str = "127.0.0.1",
    ) -> dict[str, Any] | None:
        """The proxy event for a request, or None when no route matches."""
        matched = self.match(path)
        if matched is None:
            return None
        resource, params = matched
        principal = self.default_principal
        single: dict[str, str] = {}
        multi: dict[str, list[str]] = {}
        for name, value in headers:
            if name.lower() == PRINCIPAL_HEADER.lower():
                principal = value
                continue
            single[name] = value
            multi.setdefault(name, []).append(value)
        query_single: dict[str, str] = {}
        query_multi: dict[str, list[str]] = {}
        for name, value in query:
            query_single[name] = value
            query_multi.setdefault(name, []).append(value)
        try:
            text: str | None = body.decode() if body else None
            encoded = False
        except UnicodeDecodeError:
            text, encoded = base64.b64encode(body).decode(), True
        account = principal.split(":")[4] if principal.count(":") >= 5 else ""
        return {
            "resource": resource,
            "path": path,
            "httpMethod": method,
            "headers": single,
            "multiValueHeaders": multi,
            "queryStringParameters": query_single or None,
            "multiValueQueryStringParameters": query_multi or None,
            "pathParameters": params or None,
            "stageVariables": None,
            "body": text,
            "isBase64Encoded": encoded,
            "requestContext": {
                "resourcePath": resource,
                "httpMethod": method,
                "path": f"/{self.stage}{path}",
                "stage": self.stage,
                "requestId": str(uuid.uuid4()),
                "requestTimeEpoch": int(time.time() * 1000),
                "accountId": account,
                "apiId": "hyperguard-twin",
                "protocol": "HTTP/1.1",
                "identity": {
                    "userArn": principal,
                    "user": principal.rsplit("/", 1)[-1],
                    "caller": principal,
                    "accountId": account,
                    "sourceIp": source_ip,
                    "userAgent": single.get("User-Agent", ""),
                },
            },
        }

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        request = Request(environ)
        event = self.event(
            request.method,
            request.path,
            headers=list(request.headers.items()),
            query=list(request.args.items(multi=True)),
            body=request.get_data(),
            source_ip=request.remote_addr or "127.0.0.1",
        )
        if event is None:
            response = Response(
                '{"message":"Missing Authentication Token"}',
                status=403,
                content_type="application/json",
            )
        elif self.throttle is not None and not self.throttle.admit(
            request.method, str(event["resource"])
        ):
            response = self.throttle.refusal()
        else:
            response = proxy_response(self.invoke(event))
        return response(environ, start_response)


def proxy_response(result: Mapping[str, Any]) -> Response:
    """A Lambda proxy integration result as an HTTP response (a malformed one is a 502,
    as API Gateway answers)."""
    if not isinstance(result, Mapping) or "statusCode" not in result:
        return Response('{"message": "Internal server error"}', status=502)
    body = result.get("body") or ""
    payload = base64.b64decode(body) if result.get("isBase64Encoded") else str(body).encode()
    response = Response(payload, status=int(result["statusCode"]))
    response.headers.clear()
    for name, value in (result.get("headers") or {}).items():
        response.headers[name] = str(value)
    for name, values in (result.get("multiValueHeaders") or {}).items():
        response.headers.remove(name)
        for value in values:
            response.headers.add(name, str(value))
    return response
