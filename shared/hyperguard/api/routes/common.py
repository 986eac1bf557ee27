"""What every router shares: typed path/query parameters and the JSON response."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal

from aws_lambda_powertools.event_handler import Response, content_types
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Path, Query
from aws_lambda_powertools.event_handler.openapi.types import OpenAPIResponse
from pydantic import BaseModel, Field

from hyperguard.api.auth import Caller
from hyperguard.api.deps import ApiDependencies
from hyperguard.api.errors import NotFoundError
from hyperguard.models.governance import TEAM_NAME_PATTERN
from hyperguard.models.records import JobRecord

JSON = content_types.APPLICATION_JSON
CallerOf = Callable[[], Caller]
"""Authenticates the current request's caller."""

TeamName = Annotated[str, Path(pattern=TEAM_NAME_PATTERN, min_length=1, max_length=63)]
JobId = Annotated[str, Path(min_length=1, max_length=128)]
Limit = Annotated[int, Query(ge=1, le=100)]
NextToken = Annotated[str | None, Query(max_length=2048)]


def visible_job(deps: ApiDependencies, job_id: str, who: Caller) -> JobRecord:
    """The job, if the caller may see it; otherwise the same 404 as a missing job."""
    record = deps.jobs.record(job_id)
    if record is None or not who.may_see_team(record.job.team):
        raise NotFoundError(f"no job {job_id}", "jobId")
    return record


def ok(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response[Any]:
    return Response(
        status_code=status,
        content_type=content_types.APPLICATION_JSON,
        body=body,
        headers=headers,
    )


def no_content() -> Response[None]:
    return Response(status_code=204, body=None)


def new_router() -> Router:
    return Router()  # type: ignore[no-untyped-call]  # powertools leaves __init__ untyped


class ErrorDetail(BaseModel):
    field: str
    message: str


class ErrorBody(BaseModel):
    """Every error the API answers with (hyperguard.api.errors)."""

    error: str = Field(description="what is wrong, in words")
    field: str | None = Field(description="the request field at fault, if one is")
    details: list[ErrorDetail] | None = Field(
        default=None, description="validation errors: one entry per invalid field"
    )


class ThrottledBody(BaseModel):
    """API Gateway's own answer when the stage's throttling refuses a request (the function
    never runs)."""

    message: str = Field(description='"Too Many Requests"')


class RateLimitedBody(ErrorBody):
    """The function's answer when the caller is over its own rate limit (before any route
    runs)."""

    limit: Literal["principal", "team"] = Field(
        description="the limit the request was over: the principal's (ApiPrincipalRateLimit) "
        "or its team's (ApiTeamRateLimit; admins without a team, and principals mapped to no "
        "team, count as one team each)"
    )


THROTTLED: OpenAPIResponse = {
    "description": "Throttled before anything was done: by the caller's own rate limit "
    "(template parameters ApiPrincipalRateLimit, ApiTeamRateLimit; the body says which), or "
    "by the API stage's rate and burst limits for all callers together (ApiThrottleRateLimit, "
    "ApiThrottleBurstLimit; API Gateway's body). Retry after `Retry-After` seconds, with "
    "backoff",
    "headers": {
        "Retry-After": {
            "description": "seconds to wait before retrying",
            "schema": {"type": "integer", "minimum": 1},
        }
    },
    "content": {JSON: {"model": RateLimitedBody | ThrottledBody}},
}

_ERRORS: dict[int, str] = {
    400: "The body is not JSON or not UTF-8, or a token was not issued by this API",
    403: "The caller is not mapped to a team, not an admin, or acts for another team",
    404: "No such resource (another team's job reads as missing)",
    409: "The resource changed or is in a state that refuses this (the message says which)",
    413: "The request body is over 64 KiB",
    415: "The body is not sent as application/json",
    422: "A field fails validation (`field` names it; `details` lists every one)",
    501: "Node actions, or the cluster, are not wired in this deployment",
    502: "The cluster's API server could not be reached, or failed (the message says how)",
}


def responses(
    success: int,
    model: Any | None,
    *errors: int,
    description: str = "Success",
    also: dict[int, str] | None = None,
) -> dict[int, OpenAPIResponse]:
    """The OpenAPI responses of a route: its success (with `model`'s schema; `also`: other
    success codes with the same body) and every error status it can answer with, each with
    the error body. 403 and 422 apply to every route, and 429 (THROTTLED)."""
    documented: dict[int, OpenAPIResponse] = {}
    for code, text in {success: description, **(also or {})}.items():
        documented[code] = (
            {"description": text, "content": {JSON: {"model": model}}}
            if model is not None
            else {"description": text, "content": {}}  # no body (else the return type's)
        )
    if 413 in errors:  # the routes with a body
        errors = (*errors, 415)
    for code in sorted({403, 422, *errors}):
        documented[code] = {"description": _ERRORS[code], "content": {JSON: {"model": ErrorBody}}}
    documented[429] = THROTTLED
    return documented
