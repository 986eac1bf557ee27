"""IAM at the emulator's edge: a stack role's request authenticated by moto, authorized by
its role's policies as they are now, and refused in the service's own protocol."""

from __future__ import annotations

import functools
import json
import threading
import uuid
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from xml.sax.saxutils import escape

from werkzeug.datastructures import EnvironHeaders

from hyperguard_twin.iam.authorizations import authorizations, peek_body
from hyperguard_twin.iam.policy import Authorization, CannotJudge, Decision, decide

Answer = tuple[int, list[tuple[str, str]], bytes]
"""An HTTP answer: status, headers, body."""


@functools.lru_cache(maxsize=256)
def _parsed(text: str) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(text)
    return document


def _document(policy: Any) -> Mapping[str, Any]:
    """A policy as moto's IAM stores it (an inline document, or a managed policy's default
    version) as JSON."""
    if isinstance(policy, Mapping):
        return policy
    if not isinstance(policy, str):
        policy = next(v.document for v in policy.versions if v.is_default)
    return policy if isinstance(policy, Mapping) else _parsed(policy)


def _refusal(environ: dict[str, Any], service: str, code: str, message: str) -> Answer:
    """The service's error answer in its own protocol, as its SDK parses it."""
    request_id = str(uuid.uuid4())
    if service == "s3":
        body = f"<Error><Code>{code}</Code><Message>{escape(message)}</Message></Error>"
        return 403, [("Content-Type", "application/xml")], body.encode()
    if environ.get("HTTP_X_AMZ_TARGET"):
        payload = json.dumps({"__type": code, "message": message}).encode()
        return 400, [("Content-Type", "application/x-amz-json-1.0")], payload
    if service == "ec2":
        body = (
            f"<Response><Errors><Error><Code>{code}</Code><Message>{escape(message)}</Message>"
            f"</Error></Errors><RequestID>{request_id}</RequestID></Response>"
        )
        return 403, [("Content-Type", "text/xml")], body.encode()
    if environ.get("CONTENT_TYPE", "").startswith("application/x-www-form-urlencoded"):
        body = (
            f"<ErrorResponse><Error><Type>Sender</Type><Code>{code}</Code>"
            f"<Message>{escape(message)}</Message></Error>"
            f"<RequestId>{request_id}</RequestId></ErrorResponse>"
        )
        return 403, [("Content-Type", "text/xml")], body.encode()
    headers = [("Content-Type", "application/json"), ("x-amzn-ErrorType", code)]
    return 403, headers, json.dumps({"message": message}).encode()


_DENIED_CODES = {
    "s3": "AccessDenied",
    "ec2": "UnauthorizedOperation",
    "sns": "AuthorizationError",
    "sqs": "AccessDenied",  # as its SDK maps SQS's JSON answer (x-amzn-query-error)
    "sts": "AccessDenied",
}
_UNAUTHENTICATED_CODES = {  # moto's query-protocol codes → a JSON protocol's
    "InvalidClientTokenId": "UnrecognizedClientException",
    "SignatureDoesNotMatch": "InvalidSignatureException",
}


def _credential_scope(environ: dict[str, Any]) -> tuple[str, str]:
    """(region, service) of a SigV4 Authorization header."""
    scope = environ.get("HTTP_AUTHORIZATION", "").partition("Credential=")[2].split("/")
    return (scope[2], scope[3]) if len(scope) > 3 else ("us-east-1", "")


@dataclass
class _Principal:
    role_arn: str
    who: str


class IamEnforcement:
    """The stack's roles' credentials, and what was decided for them."""

    def __init__(self) -> None:
        self._principals: dict[str, _Principal] = {}
        self._lock = threading.Lock()
        self.denied: Counter[tuple[str, str, str]] = Counter()
        """Refused calls: (who, action, resource)."""
        self.unauthenticated: Counter[tuple[str, str, str]] = Counter()
        """Calls refused before any policy was read: (who, "service:Operation", error code)."""
        self.unjudged: Counter[tuple[str, str, str]] = Counter()
        """Calls let through undecided: (who, "service:Operation", why)."""
        self.judged: Counter[str] = Counter()
        """Calls decided, by who made them."""

    def enforce(self, access_key_id: str, role_arn: str, who: str) -> None:
        """Authorize every call signed with `access_key_id` (a session of `role_arn`)."""
        with self._lock:
            self._principals[access_key_id] = _Principal(role_arn, who)

    def summary(self) -> dict[str, Any]:
        """What was decided, for `hyperguard twin status`: calls judged per caller, and each
        refusal and undecided call with its count."""
        return {
            "judged": dict(self.judged),
            "denied": [[*key, n] for key, n in self.denied.items()],
            "unauthenticated": [[*key, n] for key, n in self.unauthenticated.items()],
            "unjudged": [[*key, n] for key, n in self.unjudged.items()],
        }

    def judge(self, environ: dict[str, Any], access_key_id: str, call: str) -> Answer | None:
        """The refusal AWS would answer the request with, or None to let moto serve it."""
        principal = self._principals.get(access_key_id)
        if principal is None:
            return None
        region, service = _credential_scope(environ)
        account = principal.role_arn.split(":")[4]
        try:
            needs = authorizations(environ, call, region, account)
            if not needs:
                return None
            caller = _authenticate(environ, account, service, call, access_key_id)
            documents = [_document(p) for p in caller.collect_policies()]
            decisions = [(need, decide(documents, need)) for need in needs]
        except CannotJudge as why:
            self.unjudged[(principal.who, call, str(why))] += 1
            return None
        except Unauthenticated as refused:
            self.unauthenticated[(principal.who, call, refused.code)] += 1
            return _refusal(environ, service, refused.code, str(refused))
        self.judged[principal.who] += 1
        for need, decision in decisions:
            if decision != "allowed":
                self.denied[(principal.who, need.action, need.resource)] += 1
                code = _DENIED_CODES.get(service, "AccessDeniedException")
                return _refusal(environ, service, code, _denial(caller.arn, need, decision))
        return None


def _denial(caller: str, need: Authorization, decision: Decision) -> str:
    """IAM's message for a refused call."""
    why = (
        "with an explicit deny in an identity-based policy"
        if decision == "explicit deny"
        else f"because no identity-based policy allows the {need.action} action"
    )
    action, resource = need.action, need.resource
    return f"User: {caller} is not authorized to perform: {action} on resource: {resource} {why}"


class Unauthenticated(Exception):
    """A request whose signature or session token moto does not accept; the service's code."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def _authenticate(
    environ: dict[str, Any], account: str, service: str, call: str, access_key_id: str
) -> Any:
    """moto's session of the access key, once moto has checked the session token and the
    signature (`moto.iam.access_control`)."""
    from moto.core.exceptions import ServiceException
    from moto.iam.access_control import IAMRequest, S3IAMRequest, create_access_key
    from werkzeug.exceptions import HTTPException

    headers: Any = EnvironHeaders(environ)
    path = environ.get("RAW_URI", "/")  # as sent: what was signed
    if "?" not in path and environ.get("QUERY_STRING"):  # a test's environ has it apart
        path += "?" + environ["QUERY_STRING"]
    checker = S3IAMRequest if service == "s3" else IAMRequest
    try:
        checker(
            account_id=account,
            method=environ.get("REQUEST_METHOD", "GET"),
            path=path,
            data={},
            body=peek_body(environ),
            headers=headers,
            action=call.partition(":")[2],
        ).check_signature()
        return create_access_key(account, "aws", access_key_id, headers)
    except (HTTPException, ServiceException) as error:  # moto's, for S3 and for the rest
        code = getattr(error, "error_type", None) or str(error.code)
        if environ.get("HTTP_X_AMZ_TARGET"):
            code = _UNAUTHENTICATED_CODES.get(code, code)
        raise Unauthenticated(code, str(getattr(error, "message", error))) from error
