"""The embedded AWS emulator: moto in server mode on 127.0.0.1, in this process.

These emulator gaps are closed here, in-process, and reported by `hyperguard twin status`:
- moto runs Lambda code only in Docker: `LambdaFunction._invoke_lambda` is routed to the
  twin's Lambda runtime (worker processes; so Step Functions' lambda:invoke tasks run the
  real handlers), and an error of the Lambda service there (a throttle) is the Invoke API's
  error, as on AWS;
- moto's CloudFormation ignores `DefinitionSubstitutions` and registers state machines in a
  backend that does not execute them: the twin substitutes and registers them with moto's
  executing Step Functions interpreter instead;
- moto's EventBridge drops `account` from the events it delivers to targets: restored;
- moto's Step Functions sends no "Step Functions Execution Status Change" events: the twin
  puts them on the default bus, in AWS's shape, when a Standard execution ends;
- moto enforces no IAM: a call signed with a stack role's credentials (a function's, the
  forwarder's) is authorized against the role's policies before moto serves it
  (hyperguard_twin.iam).
"""

from __future__ import annotations

import functools
import json
import logging
import os
import re
import ssl
import threading
import urllib.request
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

from werkzeug.serving import BaseWSGIServer, WSGIRequestHandler, make_server

from hyperguard_twin import dynamodb
from hyperguard_twin.iam.authorizations import peek_body
from hyperguard_twin.iam.enforcement import IamEnforcement

logger = logging.getLogger(__name__)

Invoker = Callable[[str, Any], tuple[str, bool, str]]
WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Any]

_invoker: Invoker | None = None


def _patch_lambda_invoke() -> None:
    from moto.awslambda.models import LambdaFunction
    from moto.core.exceptions import JsonRESTError

    from hyperguard_twin.lambda_runtime import LambdaServiceError

    def invoke_in_worker(self: Any, event: Any = None) -> tuple[str, bool, str]:
        if _invoker is None:
            raise RuntimeError("no Lambda runtime is installed")
        try:
            return _invoker(self.function_name, event)
        except LambdaServiceError as exc:
            error = JsonRESTError(exc.code, exc.message)
            error.code = exc.status
            raise error from exc

    LambdaFunction._invoke_lambda = invoke_in_worker  # type: ignore[method-assign]


def _patch_backend_lookup() -> None:
    """moto's server finds a request's backend by listing its own package folder and testing
    each entry with isdir, on every request (twice): about 150 stat calls, some 15 ms of CPU
    a call, most of what the twin's AWS calls cost. The folder does not change while the
    process runs, so it is listed once."""
    from moto import backends

    if not hasattr(backends.list_of_moto_modules, "cache_info"):
        listed = tuple(backends.list_of_moto_modules())
        backends.list_of_moto_modules = functools.cache(lambda: listed)


_jsonpath_cached = False


def install_jsonpath_cache() -> None:
    """moto parses every JSONPath again on each use (an EventBridge input transformer, a
    state's InputPath, ResultPath, OutputPath), and jsonpath-ng builds a new yacc parser for
    each parse: a fifth of an idle twin's CPU. Parsed paths are immutable values; the same
    path text is parsed once, in this process."""
    global _jsonpath_cached
    if _jsonpath_cached:  # every test's stack asks; the first one installs
        return
    _jsonpath_cached = True
    import jsonpath_ng.ext
    from jsonpath_ng import parser as plain
    from jsonpath_ng.ext import parser as extended
    from moto.stepfunctions.parser.asl.component.common.path import result_path
    from moto.stepfunctions.parser.asl.utils import json_path

    parse_ext = functools.lru_cache(maxsize=4096)(extended.parse)
    parse_plain = functools.lru_cache(maxsize=4096)(plain.parse)
    jsonpath_ng.ext.parse = parse_ext  # type: ignore[attr-defined]  # moto.events imports it per call
    json_path.parse = parse_ext  # type: ignore[attr-defined]
    result_path.parse = parse_plain  # type: ignore[attr-defined]


def _patch_event_envelope() -> None:
    """moto's default EventBridge target input leaves out `account`; AWS always sends it."""
    from moto.events.utils import EventTemplateParser

    template = EventTemplateParser.DEFAULT_EVENT_INPUT_TEMPLATE
    if '"account"' not in template:
        EventTemplateParser.DEFAULT_EVENT_INPUT_TEMPLATE = template.replace(
            '"version": "0",', '"version": "0", "account": "<account>",'
        )


def _epoch_ms(value: Any) -> int | None:
    return int(value.timestamp() * 1000) if value is not None else None


def status_change_event(execution: Any) -> dict[str, Any]:
    """The PutEvents entry Step Functions sends when a Standard execution ends (the detail
    fields of AWS's "Step Functions Execution Status Change")."""
    status = getattr(execution.exec_status, "value", execution.exec_status)
    output = execution.output
    detail = {
        "executionArn": execution.exec_arn,
        "stateMachineArn": execution.state_machine.arn,
        "name": execution.name,
        "status": status,
        "startDate": _epoch_ms(execution.start_date),
        "stopDate": _epoch_ms(execution.stop_date),
        "input": execution.execution_input,
        "output": json.dumps(output) if output is not None and status == "SUCCEEDED" else None,
        "inputDetails": {"included": True},
        "outputDetails": {"included": True} if status == "SUCCEEDED" else None,
    }
    return {
        "Source": "aws.states",
        "DetailType": "Step Functions Execution Status Change",
        "Detail": json.dumps(detail),
        "Resources": [execution.exec_arn],
        "EventBusName": "default",
    }


def _patch_execution_events() -> None:
    from moto.events.models import events_backends
    from moto.stepfunctions.parser.backend.execution import BaseExecutionWorkerCommunication

    original = BaseExecutionWorkerCommunication._reflect_execution_status
    if getattr(original, "emits_events", False):
        return

    def reflect_and_emit(self: Any) -> None:
        original(self)  # type: ignore[no-untyped-call]
        execution = self.execution
        backend = events_backends[execution.account_id][execution.region_name]
        backend.put_events([status_change_event(execution)])

    reflect_and_emit.emits_events = True  # type: ignore[attr-defined]
    BaseExecutionWorkerCommunication._reflect_execution_status = reflect_and_emit  # type: ignore[method-assign]


def _patch_task_failure_cause() -> None:
    """moto's SendTaskFailure drops `cause`; Step Functions passes it on to the Catch
    (`$.error.Cause`), where an operator's veto reason travels."""
    from moto.core.responses import EmptyResult
    from moto.stepfunctions.responses import StepFunctionResponse

    original = StepFunctionResponse.send_task_failure
    if getattr(original, "keeps_cause", False):
        return

    def send_task_failure(self: Any) -> Any:
        self.stepfunction_backend.send_task_failure(
            self._get_param("taskToken"),
            error=self._get_param("error"),
            cause=self._get_param("cause"),
        )
        return EmptyResult()

    send_task_failure.keeps_cause = True  # type: ignore[attr-defined]
    StepFunctionResponse.send_task_failure = send_task_failure  # type: ignore[method-assign]


def _patch_api_destinations() -> None:
    """moto calls an API destination without the event or the connection's credentials. As
    EventBridge does, the twin posts the transformed event (the target's InputTransformer)
    with the connection's API key header, off the caller's thread; an answer that is not
    2xx, or no answer, sends the event to the target's dead-letter queue (EventBridge would
    first retry 429 and 5xx answers for up to the target's MaximumEventAgeInSeconds)."""
    import copy

    from moto.events.models import Rule, events_backends
    from moto.events.utils import EventTemplateParser
    from moto.sqs.models import sqs_backends

    original = Rule.send_to_targets
    if getattr(original, "posts_events", False):
        return

    def send_to_targets(self: Any, event: Any, transform_input: bool = True) -> None:
        calls = [t for t in self.targets if ":api-destination/" in t["Arn"]]
        if calls and self.event_pattern.matches_event(event):
            for target in calls:
                threading.Thread(
                    target=_post_to_destination,
                    args=(self, target, copy.deepcopy(event)),
                    daemon=True,
                    name="api-destination",
                ).start()
        rest = copy.copy(self)
        rest.targets = [t for t in self.targets if t not in calls]
        original(rest, event, transform_input)

    def _post_to_destination(rule: Any, target: dict[str, Any], event: Any) -> None:
        backend = events_backends[rule.account_id][rule.region_name]
        destination = backend.destinations[target["Arn"].split("/")[1]]
        connection = backend.connections[destination.connection_arn.split("/")[1]]
        headers = {"Content-Type": "application/json"}
        key = (connection.auth_parameters or {}).get("ApiKeyAuthParameters") or {}
        if key:
            headers[key["ApiKeyName"]] = key["ApiKeyValue"]
        transformer = target.get("InputTransformer") or {}
        try:
            body = EventTemplateParser.parse(
                input_template=transformer.get("InputTemplate", ""),
                input_paths_map=transformer.get("InputPathsMap", {}),
                event=event,
            )
            request = urllib.request.Request(
                destination.invocation_endpoint,
                data=json.dumps(body).encode(),
                headers=headers,
                method=destination.http_method,
            )
            # A context per post: the trust store as it is now (OpenSSL's defaults, and
            # SSL_CERT_FILE where set), not the one urllib's shared opener captured.
            with urllib.request.urlopen(request, timeout=5, context=ssl.create_default_context()):
                return
        except (OSError, ValueError) as error:
            dead_letter = (target.get("DeadLetterConfig") or {}).get("Arn")
            if dead_letter:
                queue = dead_letter.rsplit(":", 1)[1]
                sqs_backends[rule.account_id][rule.region_name].send_message(
                    queue, json.dumps(event, default=str)
                )
            logger.warning("api destination %s failed: %s", destination.name, error)

    send_to_targets.posts_events = True  # type: ignore[attr-defined]
    Rule.send_to_targets = send_to_targets  # type: ignore[method-assign,assignment]


def _patch_role_inline_policies() -> None:
    """moto's CloudFormation keeps an AWS::IAM::Role's inline policies as the template's
    objects, which GetRolePolicy then answers as Python's repr of them; IAM keeps and answers
    JSON. They are stored as JSON."""
    from moto.iam.models import Role

    original = Role.put_policy
    if getattr(original, "stores_json", False):
        return

    def put_policy(self: Any, policy_name: str, policy_json: Any) -> None:
        document = policy_json if isinstance(policy_json, str) else json.dumps(policy_json)
        original(self, policy_name, document)

    put_policy.stores_json = True  # type: ignore[attr-defined]
    Role.put_policy = put_policy  # type: ignore[method-assign]


_CREDENTIAL = re.compile(r"Credential=([^/]+)/[^/]+/[^/]+/([^/]+)/")


def api_call(environ: dict[str, Any]) -> tuple[str, str]:
    """(access key id, "service:Operation") of a SigV4-signed request: the operation from
    X-Amz-Target (JSON protocols) or the Action parameter (query protocols), else the HTTP
    method (REST protocols such as S3's). The body is read and put back for moto."""
    found = _CREDENTIAL.search(environ.get("HTTP_AUTHORIZATION", ""))
    key, service = found.groups() if found else ("anonymous", "unknown")
    target = environ.get("HTTP_X_AMZ_TARGET", "")
    operation = target.rsplit(".", 1)[-1] if target else ""
    if not operation:
        query = parse_qs(environ.get("QUERY_STRING", ""))
        operation = query.get("Action", [""])[0]
    if not operation and environ.get("CONTENT_TYPE", "").startswith(
        "application/x-www-form-urlencoded"
    ):
        body = peek_body(environ)
        operation = parse_qs(body.decode(errors="replace")).get("Action", [""])[0]
    return key, f"{service}:{operation or environ.get('REQUEST_METHOD', '?')}"


FaultMatch = Callable[[str, dict[str, Any]], bool]
"""Whether an injected fault applies to a request: (caller's access key id, JSON body)."""

_DYNAMODB = "com.amazonaws.dynamodb.v20120810#"
# DynamoDB's answers to the faults the twin injects: (HTTP status, `__type`, message), as
# the DynamoDB API reference's "Common Errors" and each operation's "Errors" give them.
DYNAMODB_FAULTS: dict[str, tuple[int, str, str]] = {
    "ProvisionedThroughputExceededException": (
        400,
        f"{_DYNAMODB}ProvisionedThroughputExceededException",
        "The level of configured provisioned throughput for the table was exceeded. "
        "Consider increasing your provisioning level with the UpdateTable API.",
    ),
    "ThrottlingException": (
        400,
        "com.amazon.coral.availability#ThrottlingException",
        "Rate of requests exceeds the allowed throughput.",
    ),
    "RequestLimitExceeded": (
        400,
        f"{_DYNAMODB}RequestLimitExceeded",
        "Throughput exceeds the current throughput limit for your account.",
    ),
    "ConditionalCheckFailedException": (
        400,
        f"{_DYNAMODB}ConditionalCheckFailedException",
        "The conditional request failed",
    ),
    "InternalServerError": (500, f"{_DYNAMODB}InternalServerError", "Internal server error"),
}
_TRANSACTIONS = ("dynamodb:TransactWriteItems", "dynamodb:TransactGetItems")


@dataclass
class _PendingFault:
    call: str
    error_code: str
    remaining: int
    match: FaultMatch | None


def _request_body(environ: dict[str, Any]) -> dict[str, Any]:
    """The request's JSON body (empty if it has none), put back for moto."""
    try:
        parsed = json.loads(peek_body(environ) or b"{}")
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def dynamodb_error(call: str, error_code: str, request: dict[str, Any]) -> tuple[int, Any]:
    """DynamoDB's (status, body) for `error_code`. A transaction never answers with a
    ConditionalCheckFailedException: its first conditional item fails it, and the answer
    is a TransactionCanceledException with one cancellation reason per item."""
    status, kind, message = DYNAMODB_FAULTS[error_code]
    if call not in _TRANSACTIONS or error_code != "ConditionalCheckFailedException":
        return status, {"__type": kind, "message": message}
    reasons: list[dict[str, str]] = []
    for item in request.get("TransactItems", []):
        spec: dict[str, Any] = next(iter(item.values()), {}) if isinstance(item, dict) else {}
        conditional = "ConditionCheck" in item or "ConditionExpression" in spec
        if conditional and not any(r["Code"] != "None" for r in reasons):
            reasons.append({"Code": "ConditionalCheckFailed", "Message": message})
        else:
            reasons.append({"Code": "None"})
    codes = ", ".join(r["Code"] for r in reasons)
    return 400, {
        "__type": f"{_DYNAMODB}TransactionCanceledException",
        "Message": f"Transaction cancelled, please refer cancellation reasons for specific "
        f"reasons [{codes}]",
        "CancellationReasons": reasons,
    }


class QuietRequestHandler(WSGIRequestHandler):
    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        return None


def substitute(definition: str, substitutions: dict[str, Any]) -> str:
    """Apply DefinitionSubstitutions the way Step Functions does: `${Name}` → value."""
    for name, value in substitutions.items():
        definition = definition.replace("${" + name + "}", str(value))
    return definition


def _patch_state_machine_resource() -> None:
    from moto.stepfunctions.models import StateMachine
    from moto.stepfunctions.responses import get_backend

    def create(
        cls: Any,
        /,
        resource_name: str,
        cloudformation_json: Any,
        account_id: str,
        region_name: str,
        **_: Any,
    ) -> Any:
        props = cloudformation_json["Properties"]
        definition = substitute(
            props.get("DefinitionString", ""), props.get("DefinitionSubstitutions") or {}
        )
        json.loads(definition)  # an unresolved or broken definition fails the stack, loudly
        return get_backend(account_id, region_name).create_state_machine(
            name=props.get("StateMachineName", resource_name),
            definition=definition,
            roleArn=props.get("RoleArn", ""),
            tags=[{"key": t["Key"], "value": t["Value"]} for t in props.get("Tags", [])],
        )

    StateMachine.create_from_cloudformation_json = classmethod(create)  # type: ignore[method-assign, assignment]


def detach_inline_sqs_triggers() -> int:
    """Stop moto from invoking functions inline on SendMessage; the twin's poller delivers."""
    from moto.sqs.models import sqs_backends

    detached = 0
    backend: Any
    for _account, _region, backend in sqs_backends.iter_backends():
        for queue in backend.queues.values():
            detached += len(queue.lambda_event_source_mappings)
            queue.lambda_event_source_mappings.clear()
    return detached


class Emulator:
    """moto's server app behind a thread-per-request WSGI server, plus the twin's own routes."""

    def __init__(self, host: str = "127.0.0.1", port: int = 4566) -> None:
        self.host = host
        self.port = port
        self._server: BaseWSGIServer | None = None
        self._thread: threading.Thread | None = None
        self.routes: dict[str, Callable[[dict[str, Any]], tuple[int, Any]]] = {}
        self.calls: Counter[tuple[str, str]] = Counter()
        """AWS API calls served: (caller's access key id, "service:Operation")."""
        self.iam = IamEnforcement()
        """IAM for the stack's roles' credentials (hyperguard_twin.iam); everyone else is let be."""
        self.faults: Counter[tuple[str, str]] = Counter()
        """Calls answered with an injected error: ("service:Operation", error code)."""
        self._pending: list[_PendingFault] = []
        self._faults_lock = threading.Lock()
        self._dynamodb_lock = threading.Lock()
        """DynamoDB applies each request to an item atomically; moto does not (an UpdateItem
        of a new key stores the bare key, then sets the attributes in place, and a Scan in
        another thread can read the item in between). One DynamoDB request at a time."""

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, invoker: Invoker) -> None:
        """Serve on `port` (0: a free one; `port` and `endpoint` then tell which)."""
        global _invoker
        from moto.core.config import default_user_config
        from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app

        default_user_config["stepfunctions"] = {"execute_state_machine": True}
        _invoker = invoker
        _patch_backend_lookup()
        dynamodb.install()
        install_jsonpath_cache()
        _patch_lambda_invoke()
        _patch_state_machine_resource()
        _patch_event_envelope()
        _patch_execution_events()
        _patch_task_failure_cause()
        _patch_api_destinations()
        _patch_role_inline_policies()
        moto_app = DomainDispatcherApplication(create_backend_app)
        self._server = make_server(
            self.host,
            self.port,
            self._wrap(moto_app),
            threaded=True,
            request_handler=QuietRequestHandler,
        )
        self.port = self._server.server_port
        os.environ["MOTO_PORT"] = str(self.port)  # Step Functions calls Lambda through it
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True, name="moto")
        self._thread.start()

    def inject(
        self, call: str, error_code: str, count: int = 1, match: FaultMatch | None = None
    ) -> None:
        """The next `count` calls of `call` ("dynamodb:UpdateItem") that `match` accepts
        (None: any caller, any request) are answered with DynamoDB's error `error_code`
        instead of reaching moto, as DynamoDB answers them (DYNAMODB_FAULTS). The callers'
        SDKs retry throttles and 5xx answers by themselves: each attempt takes one."""
        service = call.partition(":")[0]
        if service != "dynamodb" or error_code not in DYNAMODB_FAULTS:
            raise ValueError(
                f"the emulator injects DynamoDB errors only ({', '.join(DYNAMODB_FAULTS)}), "
                f"not {error_code!r} on {call!r}"
            )
        if count < 1:
            raise ValueError("count must be at least 1")
        with self._faults_lock:
            self._pending.append(_PendingFault(call, error_code, count, match))

    @property
    def pending_faults(self) -> int:
        """Injected answers not given yet."""
        with self._faults_lock:
            return sum(f.remaining for f in self._pending)

    def _take_fault(self, environ: dict[str, Any], key: str, call: str) -> tuple[int, Any] | None:
        with self._faults_lock:
            if not any(f.call == call for f in self._pending):
                return None
            request = _request_body(environ)
            for fault in self._pending:
                if fault.call == call and (fault.match is None or fault.match(key, request)):
                    fault.remaining -= 1
                    if not fault.remaining:
                        self._pending.remove(fault)
                    self.faults[(call, fault.error_code)] += 1
                    return dynamodb_error(call, fault.error_code, request)
        return None

    def _wrap(self, moto_app: WSGIApp) -> WSGIApp:
        def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
            path = environ.get("PATH_INFO", "")
            route = self.routes.get(path)
            if route is None:
                key, call = api_call(environ)
                self.calls[(key, call)] += 1
                refused = self.iam.judge(environ, key, call)
                if refused is not None:
                    status, headers, payload = refused
                    start_response(f"{status} Error", headers)
                    return [payload]
                injected = self._take_fault(environ, key, call)
                if injected is None and call.startswith("dynamodb:"):
                    with self._dynamodb_lock:
                        return moto_app(environ, start_response)
                if injected is None:
                    return moto_app(environ, start_response)
                status, body = injected
                content_type = "application/x-amz-json-1.0"
            else:
                try:
                    status, body = route(environ)
                except Exception as exc:  # reported to the caller, never kills the server
                    status, body = 500, {"error": f"{type(exc).__name__}: {exc}"}
                content_type = "application/json"
            payload = json.dumps(body, default=str).encode()
            start_response(
                f"{status} {'OK' if status < 400 else 'Error'}",
                [("Content-Type", content_type), ("Content-Length", str(len(payload)))],
            )
            return [payload]

        return app

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
