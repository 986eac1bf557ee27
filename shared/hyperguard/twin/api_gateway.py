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
import re
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
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
    return _Route(resource, re.compile(f"^{regex}$"), statics)


class ApiGatewayProxy:
    def __init__(
        self,
        invoke: Invoke,
        resources: Iterable[str],
        *,
        stage: str = "local",
        default_principal: str = DEFAULT_PRINCIPAL,
    ) -> None:
        self.invoke = invoke
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
