"""Every error the API answers with, and the one place that maps errors to HTTP.

A response body is always `{"error": <message>, "field": <field or null>}` (validation
errors add `details`, one entry per invalid field). Handlers raise these types (or the
store's typed errors listed in `_MAPPED`); nothing matches on message text.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response, content_types
from aws_lambda_powertools.event_handler.openapi.exceptions import (
    RequestUnsupportedContentType,
    RequestValidationError,
)

from hyperguard.catalogue import UnknownInstanceTypeError
from hyperguard.cluster.gateway import ClusterError, NodeNotFoundError
from hyperguard.observability import logger
from hyperguard.recovery.operator import OperatorActionError
from hyperguard.store.jobs import IdempotencyKeyReusedError, InvalidCursorError
from hyperguard.store.teams import QuotaNotFoundError, VersionConflictError


class ApiError(Exception):
    status = 500

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


class InvalidRequestError(ApiError):
    """Semantically invalid although well-formed (the pydantic checks passed)."""

    status = 422


class MalformedRequestError(ApiError):
    status = 400


class UnauthenticatedError(ApiError):
    status = 403


class ForbiddenError(ApiError):
    status = 403


class NotFoundError(ApiError):
    status = 404


class ConflictError(ApiError):
    status = 409


class NodeActionRejectedError(ConflictError):
    """The node action cannot be taken now (e.g. no open incident to approve); what the
    recovery side refuses comes as `OperatorActionError`, mapped to the same 409."""


class NodeActionsUnavailableError(ApiError):
    status = 501


def error_response(status: int, message: str, field: str | None, **extra: Any) -> Response[Any]:
    return Response(
        status_code=status,
        content_type=content_types.APPLICATION_JSON,
        body={"error": message, "field": field, **extra},
    )


def _field(loc: Sequence[Any]) -> str:
    """`("body", "ComputeQuotaConfig", "ComputeQuotaResources", 0, "InstanceType")` →
    `ComputeQuotaConfig.ComputeQuotaResources[0].InstanceType`."""
    text = ""
    for part in loc[1:]:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text or str(loc[0])


def _mapped(exc: Exception) -> tuple[int, str, str | None]:
    match exc:
        case ApiError():
            return exc.status, exc.message, exc.field
        case VersionConflictError():
            return 409, f"stale TargetVersion: {exc}", "TargetVersion"
        case QuotaNotFoundError():
            return 404, f"team {exc} has no compute quota", "team"
        case IdempotencyKeyReusedError():
            return 422, str(exc), "Idempotency-Key"
        case InvalidCursorError():
            return 400, "next_token is not a token this API issued", "next_token"
        case UnknownInstanceTypeError():
            return 422, f"unknown instance type {exc}", "InstanceType"
        case NodeNotFoundError():
            return 404, str(exc), "nodeId"
        case OperatorActionError():
            return 409, str(exc), None
        case ClusterError():
            return 502, f"the cluster refused: {exc}", None
    return 500, "internal error", None


_MAPPED = (
    ApiError,
    VersionConflictError,
    QuotaNotFoundError,
    IdempotencyKeyReusedError,
    InvalidCursorError,
    UnknownInstanceTypeError,
    ClusterError,
    OperatorActionError,
)


def register_error_handlers(app: APIGatewayRestResolver) -> None:
    def invalid(exc: RequestValidationError) -> Response[Any]:
        errors = list(exc.errors())
        if any(e.get("type") == "json_invalid" for e in errors):
            return error_response(400, "the request body is not valid JSON", "body")
        details = [
            {"field": _field(e.get("loc", ("body",))), "message": str(e.get("msg", ""))}
            for e in errors
        ]
        first = details[0]
        return error_response(
            422, f"{first['field']}: {first['message']}", first["field"], details=details
        )

    def unsupported(exc: RequestUnsupportedContentType) -> Response[Any]:
        return error_response(415, "send the body as application/json", "Content-Type")

    def known(exc: Exception) -> Response[Any]:
        status, message, field = _mapped(exc)
        return error_response(status, message, field)

    def unexpected(exc: Exception) -> Response[Any]:
        logger.exception("unhandled API error")
        return error_response(500, "internal error", None)

    def no_route(exc: Exception) -> Response[Any]:
        event = app.current_event
        return error_response(404, f"no route {event.http_method} {event.path}", None)

    app.exception_handler(RequestValidationError)(invalid)
    app.exception_handler(RequestUnsupportedContentType)(unsupported)
    app.exception_handler(list(_MAPPED))(known)
    app.exception_handler(Exception)(unexpected)
    app.not_found(no_route)
