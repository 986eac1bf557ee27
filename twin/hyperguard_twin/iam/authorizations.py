"""What AWS authorizes a request against, per service (the Service Authorization
Reference): actions, resource ARNs and condition keys."""

from __future__ import annotations

import functools
import io
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit

from hyperguard_twin.iam.policy import Authorization, CannotJudge
from hyperguard_twin.ids import hyperpod_cluster_arn


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
