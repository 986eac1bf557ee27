"""What every router shares: typed path/query parameters and the JSON response."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from aws_lambda_powertools.event_handler import Response, content_types
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Path, Query

from hyperguard.api.auth import Caller
from hyperguard.models.governance import TEAM_NAME_PATTERN

CallerOf = Callable[[], Caller]
"""Authenticates the current request's caller."""

TeamName = Annotated[str, Path(pattern=TEAM_NAME_PATTERN, min_length=1, max_length=63)]
JobId = Annotated[str, Path(min_length=1, max_length=128)]
Limit = Annotated[int, Query(ge=1, le=100)]
NextToken = Annotated[str | None, Query(max_length=2048)]


def ok(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response[Any]:
    return Response(
        status_code=status,
        content_type=content_types.APPLICATION_JSON,
        body=body,
        headers=headers,
    )


def no_content() -> Response[None]:
    return Response(status_code=204, content_type=content_types.APPLICATION_JSON, body=None)


def new_router() -> Router:
    return Router()  # type: ignore[no-untyped-call]  # powertools leaves __init__ untyped
