"""IAM as AWS enforces it, for the stack's roles. A request signed with credentials the twin
handed to a function (its execution role's) or to the forwarder (ForwarderRole's) is
authenticated and authorized before moto serves it: moto finds the STS session behind the
access key and checks the SigV4 signature and the session token (`moto.iam.access_control`),
and the role's inline and managed policies are read from the emulator's IAM at that moment,
so a policy changed through the IAM API applies to the next call. A refused call gets the
service's own answer (DynamoDB's AccessDeniedException, S3's AccessDenied, EC2's
UnauthorizedOperation, SNS's AuthorizationError, ...) and never reaches moto. Everyone else
(the twin's set-up and simulated cloud, tests, the CLI) keeps moto's default: no IAM.

moto's own access control (`INITIAL_NO_AUTH_ACTION_COUNT`) is not used: it compares every
policy's Resource with "*" except for S3, SQS, IAM and STS (so each of the template's
table-, cluster- or bus-scoped grants is refused), names a transaction's action
`TransactWriteItems` where IAM checks each item's own action, evaluates StringEquals only
and lets a condition whose key the request lacks pass, answers JSON services in XML, and
refuses the root credentials the twin deploys with. Here the twin says what AWS authorizes
a request against (`authorizations`: actions, resource ARNs and condition keys, per the
Service Authorization Reference) and evaluates the policies as IAM's policy evaluation logic
does for identity-based policies in one account (`decide`).

What cannot be judged is let through and counted (`IamEnforcement.unjudged`): an operation
whose resources the twin does not derive, a task token no running execution holds, a
condition operator or key the twin does not evaluate, a policy variable.
"""

from __future__ import annotations

import functools
import io
import json
import re
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import parse_qs, urlsplit
from xml.sax.saxutils import escape

from werkzeug.datastructures import EnvironHeaders

from hyperguard_twin.ids import hyperpod_cluster_arn

Decision = Literal["allowed", "implicit deny", "explicit deny"]
Answer = tuple[int, list[tuple[str, str]], bytes]
"""An HTTP answer: status, headers, body."""


class CannotJudge(Exception):
    """The twin cannot tell what AWS would decide for this request; the reason."""


@dataclass(frozen=True)
class Authorization:
    """One thing a request needs of IAM: `action` on `resource` ("*" where the action has no
    resource type), with the request's values of condition keys (`context`, keys in lower
    case). A key in `complete` (or under a prefix there ending in "/") that `context` lacks
    is absent from the request; any other key the twin cannot tell."""

    action: str
    resource: str
    context: Mapping[str, str] = field(default_factory=dict)
    complete: tuple[str, ...] = ()

    def knows(self, key: str) -> bool:
        return any(key == k or (k.endswith("/") and key.startswith(k)) for k in self.complete)


# ------------------------------------------------------------------ what a request needs


def peek_body(environ: dict[str, Any]) -> bytes:
    """The request's body, read and put back for moto (which reads it again)."""
    body: bytes = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
    environ["wsgi.input"] = io.BytesIO(body)
    return body


@dataclass(frozen=True)
class _Request:
    environ: dict[str, Any]
    operation: str
    region: str
    account: str

    def arn(self, service: str, resource: str) -> str:
        return f"arn:aws:{service}:{self.region}:{self.account}:{resource}"

    @functools.cached_property
    def params(self) -> dict[str, Any]:
        """A JSON protocol's body, or a query protocol's form (each name's first value)."""
        body = peek_body(self.environ)
        if self.environ.get("HTTP_X_AMZ_TARGET"):
            try:
                parsed = json.loads(body or b"{}")
            except ValueError:
                return {}
            return parsed if isinstance(parsed, dict) else {}
        form = parse_qs(body.decode(errors="replace"), keep_blank_values=True)
        return {name: values[0] for name, values in form.items()}


_TRANSACT_ACTIONS = {
    "Put": "PutItem",
    "Update": "UpdateItem",
    "Delete": "DeleteItem",
    "ConditionCheck": "ConditionCheckItem",
    "Get": "GetItem",
}


def _dynamodb(request: _Request) -> list[Authorization]:
    """Every operation on a table or index is authorized on its ARN; a transaction needs each
    item's own action, a batch the batch's action on each table."""
    params = request.params

    def table(name: str) -> str:
        return name if name.startswith("arn:") else request.arn("dynamodb", f"table/{name}")

    if request.operation in ("TransactWriteItems", "TransactGetItems"):
        return [
            Authorization(f"dynamodb:{_TRANSACT_ACTIONS[kind]}", table(spec["TableName"]))
            for item in params.get("TransactItems", [])
            for kind, spec in item.items()
        ]
    action = f"dynamodb:{request.operation}"
    if "RequestItems" in params:
        return [Authorization(action, table(name)) for name in params["RequestItems"]]
    if "TableName" not in params:
        return [Authorization(action, "*")]
    resource = table(params["TableName"])
    if params.get("IndexName"):
        resource += f"/index/{params['IndexName']}"
    return [Authorization(action, resource)]


_LIST_PARAMETERS = {
    "list-type",
    "prefix",
    "delimiter",
    "continuation-token",
    "max-keys",
    "start-after",
    "marker",
    "encoding-type",
    "fetch-owner",
}
_OBJECT_ACTIONS = {
    "GET": "GetObject",
    "HEAD": "GetObject",
    "PUT": "PutObject",
    "DELETE": "DeleteObject",
}


def _s3(request: _Request) -> list[Authorization]:
    """Path-style requests (the twin's endpoint is an address): listing a bucket (HeadBucket
    included) needs s3:ListBucket on it; reading, writing or deleting an object the object
    action on the object's ARN. Any other bucket or object operation is not judged."""
    environ = request.environ
    bucket, _, key = environ.get("PATH_INFO", "").removeprefix("/").partition("/")
    method = environ.get("REQUEST_METHOD", "GET")
    query = set(parse_qs(environ.get("QUERY_STRING", ""), keep_blank_values=True))
    if bucket and not key and method in ("GET", "HEAD") and query <= _LIST_PARAMETERS:
        return [Authorization("s3:ListBucket", f"arn:aws:s3:::{bucket}")]
    if bucket and key and method in _OBJECT_ACTIONS and not query:
        return [Authorization(f"s3:{_OBJECT_ACTIONS[method]}", f"arn:aws:s3:::{bucket}/{key}")]
    raise CannotJudge(f"S3 {method} {environ.get('PATH_INFO')}?{environ.get('QUERY_STRING')}")


def _sqs(request: _Request) -> list[Authorization]:
    """A queue's operations on its ARN (the URL's account and name); a batch needs the
    single operation's action."""
    params = request.params
    action = f"sqs:{request.operation.removesuffix('Batch')}"
    if "QueueUrl" in params:
        owner, _, name = urlsplit(params["QueueUrl"]).path.strip("/").partition("/")
        return [Authorization(action, f"arn:aws:sqs:{request.region}:{owner}:{name}")]
    if "QueueName" in params:
        owner = params.get("QueueOwnerAWSAccountId") or request.account
        return [
            Authorization(action, f"arn:aws:sqs:{request.region}:{owner}:{params['QueueName']}")
        ]
    return [Authorization(action, "*")]


def _sns(request: _Request) -> list[Authorization]:
    topic = request.params.get("TopicArn") or request.params.get("TargetArn")
    if not topic:
        raise CannotJudge(f"SNS {request.operation} without a topic")
    return [Authorization(f"sns:{request.operation.removesuffix('Batch')}", topic)]


def _events(request: _Request) -> list[Authorization]:
    """PutEvents: each entry on its bus, with its `events:source` and `events:detail-type`."""
    if request.operation != "PutEvents":
        raise CannotJudge(f"EventBridge {request.operation}")
    needs = []
    for entry in request.params.get("Entries", []):
        bus = entry.get("EventBusName") or "default"
        resource = bus if bus.startswith("arn:") else request.arn("events", f"event-bus/{bus}")
        context = {
            "events:source": entry.get("Source", ""),
            "events:detail-type": entry.get("DetailType", ""),
        }
        needs.append(Authorization("events:PutEvents", resource, context, tuple(context)))
    return needs


def _waiting_state_machine(token: str, region: str, account: str) -> str | None:
    """The state machine whose running execution holds the task token."""
    from moto.stepfunctions.parser.models import stepfunctions_parser_backends

    for machine in list(stepfunctions_parser_backends[account][region].state_machines):
        for execution in list(machine.executions):
            worker = getattr(execution, "exec_worker", None)
            if worker is not None and worker.env.callback_pool_manager.get(token) is not None:
                return str(machine.arn)
    return None


_BY_STATE_MACHINE = {"StartExecution", "StartSyncExecution", "ListExecutions"}
_BY_EXECUTION = {"DescribeExecution", "StopExecution", "GetExecutionHistory", "RedriveExecution"}


def _states(request: _Request) -> list[Authorization]:
    """A state machine's operations on its ARN, an execution's on the execution's; a task
    token's answer on the state machine waiting for it."""
    params, operation = request.params, request.operation
    action = f"states:{operation}"
    if operation in _BY_STATE_MACHINE:
        return [Authorization(action, params.get("stateMachineArn", ""))]
    if operation in _BY_EXECUTION:
        return [Authorization(action, params.get("executionArn", ""))]
    if operation in ("SendTaskSuccess", "SendTaskFailure", "SendTaskHeartbeat"):
        machine = _waiting_state_machine(
            params.get("taskToken", ""), request.region, request.account
        )
        if machine is None:
            raise CannotJudge("a task token no running execution holds")
        return [Authorization(action, machine)]
    raise CannotJudge(f"Step Functions {operation}")


def _sagemaker(request: _Request) -> list[Authorization]:
    """HyperPod's operations on the cluster's ARN (named or given)."""
    cluster = request.params.get("ClusterName")
    if not cluster:
        raise CannotJudge(f"SageMaker {request.operation}")
    if not cluster.startswith("arn:"):
        cluster = hyperpod_cluster_arn(cluster, request.region, request.account)
    return [Authorization(f"sagemaker:{request.operation}", cluster)]


def _eks(request: _Request) -> list[Authorization]:
    """DescribeCluster and ListNodegroups on the cluster's ARN; DescribeNodegroup on the node
    group's (`nodegroup/<cluster>/<name>/<uuid>`, as the emulator made it)."""
    path = request.environ.get("PATH_INFO", "").strip("/").split("/")
    get = request.operation == "GET" and path[0] == "clusters"
    if get and len(path) == 2:
        return [Authorization("eks:DescribeCluster", request.arn("eks", f"cluster/{path[1]}"))]
    if get and len(path) == 3 and path[2] == "node-groups":
        return [Authorization("eks:ListNodegroups", request.arn("eks", f"cluster/{path[1]}"))]
    if get and len(path) == 4 and path[2] == "node-groups":
        from moto.eks.models import eks_backends

        cluster = eks_backends[request.account][request.region].clusters.get(path[1])
        group = cluster.nodegroups.get(path[3]) if cluster is not None else None
        if group is not None:
            return [Authorization("eks:DescribeNodegroup", group.arn)]
    raise CannotJudge(f"EKS {request.operation} /{'/'.join(path)}")


_INSTANCE_ACTIONS = {"RebootInstances", "StartInstances", "StopInstances", "TerminateInstances"}
_RESOURCE_TAG = "aws:resourcetag/"


def _ec2(request: _Request) -> list[Authorization]:
    """EC2's Describe actions take no resource; an instance's actions are authorized on each
    instance, with its tags as `aws:ResourceTag/<key>`."""
    from moto.ec2.models import ec2_backends

    operation = request.operation
    if operation.startswith("Describe"):
        return [Authorization(f"ec2:{operation}", "*")]
    if operation not in _INSTANCE_ACTIONS:
        raise CannotJudge(f"EC2 {operation}")
    tags = ec2_backends[request.account][request.region].tags
    ids = [v for k, v in request.params.items() if k.startswith("InstanceId.")]
    return [
        Authorization(
            f"ec2:{operation}",
            request.arn("ec2", f"instance/{instance}"),
            {f"{_RESOURCE_TAG}{k.lower()}": v for k, v in tags.get(instance, {}).items()},
            (_RESOURCE_TAG,),
        )
        for instance in ids
    ]


def _sts(request: _Request) -> list[Authorization]:
    if request.operation == "GetCallerIdentity":
        return []  # needs no permission, and no explicit deny refuses it
    raise CannotJudge(f"STS {request.operation}")


_SERVICES: dict[str, Callable[[_Request], list[Authorization]]] = {
    "dynamodb": _dynamodb,
    "s3": _s3,
    "sqs": _sqs,
    "sns": _sns,
    "events": _events,
    "states": _states,
    "sagemaker": _sagemaker,
    "eks": _eks,
    "ec2": _ec2,
    "sts": _sts,
}


def authorizations(
    environ: dict[str, Any], call: str, region: str, account: str
) -> list[Authorization]:
    """What AWS authorizes the request `call` ("dynamodb:UpdateItem", as the emulator names
    it) against; CannotJudge where the twin does not know."""
    service, operation = call.split(":", 1)
    derive = _SERVICES.get(service)
    if derive is None:
        raise CannotJudge(f"the twin derives no {service} authorizations")
    try:
        return derive(_Request(environ, operation, region, account))
    except (KeyError, TypeError, AttributeError, ValueError) as error:  # moto refuses it
        raise CannotJudge(f"a request the twin cannot read ({error!r})") from error


# ------------------------------------------------------------------ the evaluation


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


@functools.lru_cache(maxsize=1024)
def _wildcard(pattern: str, ignore_case: bool) -> re.Pattern[str]:
    """IAM's wildcards: `*` any run of characters, `?` one character."""
    if "${" in pattern:
        raise CannotJudge(f"policy variable in {pattern!r}")
    text = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.compile(text, re.IGNORECASE if ignore_case else 0)


def _like(pattern: str, value: str, ignore_case: bool = False) -> bool:
    return _wildcard(pattern, ignore_case).fullmatch(value) is not None


_OPERATORS: dict[str, Callable[[str, str], bool]] = {
    "StringEquals": lambda wanted, got: got == wanted,
    "StringEqualsIgnoreCase": lambda wanted, got: got.lower() == wanted.lower(),
    "StringLike": _like,
    "ArnEquals": lambda wanted, got: got == wanted,
    "ArnLike": _like,
    "Bool": lambda wanted, got: got.lower() == wanted.lower(),
}
_NEGATED = {
    "StringNotEquals": "StringEquals",
    "StringNotEqualsIgnoreCase": "StringEqualsIgnoreCase",
    "StringNotLike": "StringLike",
    "ArnNotEquals": "ArnEquals",
    "ArnNotLike": "ArnLike",
}


def _condition_holds(operator: str, key: str, wanted: Any, need: Authorization) -> bool:
    """One condition key of a statement. A key the request lacks makes a matching operator
    false and a negated one true (IAM's condition operators), `...IfExists` true."""
    base = operator.removesuffix("IfExists")
    key = key.lower()
    present = key in need.context
    if not present and not need.knows(key):
        raise CannotJudge(f"condition key {key}")
    values = [str(v) for v in _as_list(wanted)]
    if base == "Null":
        return (not present) == (values[0].lower() == "true")
    test = _OPERATORS.get(_NEGATED.get(base, base))
    if test is None:  # ForAnyValue:/ForAllValues:, numeric, date, IP address, binary
        raise CannotJudge(f"condition operator {operator}")
    if not present:
        return base in _NEGATED or operator.endswith("IfExists")
    matched = any(test(value, need.context[key]) for value in values)
    return not matched if base in _NEGATED else matched


def _names(statement: Mapping[str, Any], element: str, value: str, ignore_case: bool) -> bool:
    if element in statement:
        return any(_like(p, value, ignore_case) for p in _as_list(statement[element]))
    if f"Not{element}" in statement:
        return not any(_like(p, value, ignore_case) for p in _as_list(statement[f"Not{element}"]))
    return False


def _applies(statement: Mapping[str, Any], need: Authorization) -> bool:
    return (
        _names(statement, "Action", need.action, ignore_case=True)
        and _names(statement, "Resource", need.resource, ignore_case=False)
        and all(
            _condition_holds(operator, key, wanted, need)
            for operator, block in statement.get("Condition", {}).items()
            for key, wanted in block.items()
        )
    )


def decide(documents: Iterable[Mapping[str, Any]], need: Authorization) -> Decision:
    """IAM's answer for one identity's policies: an applying Deny wins, else an applying Allow
    allows, else the request is implicitly denied."""
    allowed = False
    for document in documents:
        for statement in _as_list(document.get("Statement", [])):
            if _applies(statement, need):
                if statement.get("Effect") == "Deny":
                    return "explicit deny"
                allowed = True
    return "allowed" if allowed else "implicit deny"


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


# ------------------------------------------------------------------ the answers


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
