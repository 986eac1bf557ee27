"""The HyperGuard REST API: one powertools resolver with validation, built by `create_app`
from one router per resource (hyperguard.api.routes).

Every route authenticates the caller (hyperguard.api.auth), validates its input before it
touches anything (pydantic through `enable_validation`, then the semantic checks of the
route or of the job lifecycle), and only then writes. Errors are raised as typed errors and
mapped in hyperguard.api.errors.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from collections.abc import Mapping
from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayRestResolver, content_types
from aws_lambda_powertools.utilities.typing import LambdaContext

from hyperguard.api.auth import Caller, resolve_caller
from hyperguard.api.deps import ApiDependencies
from hyperguard.api.errors import InvalidRequestError, register_error_handlers
from hyperguard.api.rate_limits import CallerRateLimiter
from hyperguard.api.routes import incidents, jobs, plan, policy, progress, teams, views

TITLE = "HyperGuard API"
VERSION = "1.0.0"
MAX_BODY = 65_536
"""Bytes a request body may have: far above any valid body (a job's command is capped at
16 KB), far below what makes an item, a pass or a log line fail."""


MAX_NUMBER_CHARS = 64
"""Characters a JSON number may have before Python parses it: far above the largest value any
field accepts (a step, 10**15, has 16 digits), so an out-of-range number is still refused by
its field's range with the field named; far below the 4,300 digits past which Python refuses
to turn a string into an int (sys.get_int_max_str_digits), which answered 500."""


MIN_MAGNITUDE = 1e-130
"""The smallest magnitude a non-zero number in a body may have: DynamoDB's smallest number.
A smaller one passed every field's `ge=0` and then failed the write with decimal.Underflow,
which answered 500; no field means anything by such a number."""

MAX_DEPTH = 32
"""Levels of arrays and objects a body may nest: far above the deepest valid body (a quota's
AbsoluteBorrowLimits' AcceleratorPartition, 6), far below the depth at which parsing runs out
of recursion (about 1,000), which answered 500 before the caller was even authenticated."""


def _number_in_range(literal: str) -> None:
    if len(literal) > MAX_NUMBER_CHARS:
        raise InvalidRequestError(
            f"a number in the body has more than {MAX_NUMBER_CHARS} characters", "body"
        )


def _bounded_int(literal: str) -> int:
    _number_in_range(literal)
    return int(literal)


def _bounded_float(literal: str) -> float:
    _number_in_range(literal)
    value = float(literal)
    if not math.isfinite(value):
        raise InvalidRequestError("a number in the body is out of range", "body")
    if value and abs(value) < MIN_MAGNITUDE:
        raise InvalidRequestError(
            f"a number in the body is nearer zero than {MIN_MAGNITUDE:g} (send 0 instead)", "body"
        )
    return value


def _no_constant(name: str) -> Any:
    raise InvalidRequestError(f"{name} is not a JSON number", "body")


def _too_deep() -> InvalidRequestError:
    return InvalidRequestError(
        f"the body nests arrays and objects more than {MAX_DEPTH} levels deep", "body"
    )


def _nested_deeper(value: Any, limit: int) -> bool:
    """Whether `value` nests arrays and objects more than `limit` levels deep (level by level,
    without recursion)."""
    level = [value]
    for _ in range(limit):
        level = [
            child
            for node in level
            if isinstance(node, list | dict)
            for child in (node.values() if isinstance(node, dict) else node)
        ]
    return any(isinstance(node, list | dict) for node in level)


def load_body(text: str) -> Any:
    """A request body as JSON (RFC 8259): every number bounded in characters before Python
    parses it and in magnitude to what DynamoDB stores, NaN and Infinity refused (JSON has no
    such values), nesting bounded to MAX_DEPTH."""
    try:
        value = json.loads(
            text, parse_int=_bounded_int, parse_float=_bounded_float, parse_constant=_no_constant
        )
    except RecursionError:
        raise _too_deep() from None
    if _nested_deeper(value, MAX_DEPTH):
        raise _too_deep()
    return value


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def path_problem(event: Mapping[str, Any]) -> tuple[int, str, str] | None:
    """Why a request's path is refused before any route matches it: a path parameter that is
    blank or holds a control character (422, naming it). The resolver's routes end in `$`,
    which matches before a trailing newline: `GET /jobs/%0A` was served as `GET /jobs`."""
    for name, value in (event.get("pathParameters") or {}).items():
        text = str(value)
        if not text.strip() or _CONTROL.search(text):
            return 422, f"{name} must be printable text, not blank", name
    return None


def body_problem(event: Mapping[str, Any]) -> tuple[int, str, str] | None:
    """Why a request's body is refused before any route parses it: sent as something other
    than JSON (415), too large (413) or not UTF-8 text (400); and the field at fault."""
    raw = event.get("body") or ""
    if not isinstance(raw, str):
        return 400, "the request body is not UTF-8 text", "body"
    headers = {str(k).lower(): str(v) for k, v in (event.get("headers") or {}).items()}
    media = headers.get("content-type", "").split(";")[0].strip().lower()
    if raw and media and media != content_types.APPLICATION_JSON:
        return (
            415,
            f"send the body as {content_types.APPLICATION_JSON}, not {media}",
            "Content-Type",
        )
    if event.get("isBase64Encoded"):
        try:
            data = base64.b64decode(raw, validate=True)
            data.decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return 400, "the request body is not UTF-8 text", "body"
        size = len(data)
    else:
        size = len(raw.encode("utf-8", "surrogatepass"))
    if size > MAX_BODY:
        return 413, f"the request body is over {MAX_BODY} bytes", "body"
    return None


def _principal(event: Mapping[str, Any]) -> str | None:
    """The IAM ARN API Gateway's authorizer put in the event (None without one)."""
    identity = (event.get("requestContext") or {}).get("identity") or {}
    principal = identity.get("userArn")
    return str(principal) if principal else None


def _refusal(
    status: int, body: Mapping[str, Any], headers: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """A proxy response answered before any route runs."""
    single = {"Content-Type": content_types.APPLICATION_JSON, **(headers or {})}
    return {
        "statusCode": status,
        "headers": single,
        "multiValueHeaders": {name: [value] for name, value in single.items()},
        "body": json.dumps(body),
        "isBase64Encoded": False,
    }


class HyperGuardResolver(APIGatewayRestResolver):
    """The REST resolver, counting every request against its caller's rate limits first (so
    a flood of bad requests counts too), then refusing paths and bodies no route should parse
    before validation runs."""

    limiter: CallerRateLimiter | None = None

    def resolve(self, event: Mapping[str, Any], context: LambdaContext) -> dict[str, Any]:
        refusal = self.limiter.check(_principal(event)) if self.limiter is not None else None
        if refusal is not None:
            return _refusal(
                429,
                {"error": refusal.message, "field": None, "limit": refusal.limit},
                {"Retry-After": str(refusal.retry_after_s)},
            )
        problem = path_problem(event) or body_problem(event)
        if problem is None:
            return super().resolve(event, context)
        status, message, field = problem
        return _refusal(status, {"error": message, "field": field})


def create_app(deps: ApiDependencies) -> APIGatewayRestResolver:
    app = HyperGuardResolver(enable_validation=True, json_body_deserializer=load_body)
    if deps.rate_limits is not None:
        app.limiter = CallerRateLimiter(
            deps.rate_limits,
            deps.teams,
            deps.admin_principals,
            clock=lambda: deps.clock().timestamp(),
        )
    register_error_handlers(app)

    def caller() -> Caller:
        identity = app.current_event.request_context.identity
        return resolve_caller(identity.user_arn, deps.teams, deps.admin_principals)

    for module in (jobs, progress, teams, policy, views, incidents, plan):
        app.include_router(module.routes(deps, caller))
    return app


def offline_dependencies(**overrides: Any) -> ApiDependencies:
    """Dependencies on stores that are never called (nothing connects until a request needs
    it): for the committed spec, and for routes that read no state (POST /plan)."""
    from hyperguard.api.nodes import UnavailableNodeActions
    from hyperguard.catalogue import StaticCatalogue
    from hyperguard.messaging import NoWakeup
    from hyperguard.store import IncidentStore, JobStore, NodeStore, TeamStore
    from hyperguard.store.policy import BurstPolicyStore, RepairPolicyStore

    values: dict[str, Any] = {
        "jobs": JobStore("-"),
        "teams": TeamStore("-"),
        "incidents": IncidentStore("-", "-"),
        "nodes": NodeStore("-"),
        "node_actions": UnavailableNodeActions(),
        "wakeup": NoWakeup(),
        "catalogue": StaticCatalogue({}),
        "policies": RepairPolicyStore("-"),
        "burst_policies": BurstPolicyStore("-"),
    }
    return ApiDependencies(**(values | overrides))


def openapi_json(app: APIGatewayRestResolver | None = None) -> str:
    """The spec committed as docs/openapi.json (`python -m hyperguard.api > docs/openapi.json`).
    Without an app, one is built on offline_dependencies()."""
    if app is None:
        app = create_app(offline_dependencies())
    return str(
        app.get_openapi_json_schema(
            title=TITLE,
            version=VERSION,
            description="Jobs, team quotas, scheduler policy, node repair and burst policies, "
            "views, "
            "incidents, node actions and the reliability planner. Callers sign requests "
            "with SigV4 (API Gateway IAM authorization).",
        )
    )
