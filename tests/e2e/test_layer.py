"""The real layer: built with the Makefile's recipe, every real handler initialises with it alone.

Each function of template.yaml gets the variables the template gives it (with harmless
values) and is invoked once with an event it rejects or handles without AWS; its AWS
endpoint is a local stub that answers every call with an error, so nothing leaves this
machine. The point is init: a dependency missing from the layer, or a setting the template
does not provide, fails here as it would on Lambda.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import REGION, ROOT

from hyperguard_twin.deploy import load_template
from hyperguard_twin.lambda_layer import LayerPaths, stage_layer
from hyperguard_twin.lambda_runtime import FunctionSpec, LambdaRuntime

ACCOUNT = "123456789012"
TEMPLATE = load_template(ROOT / "template.yaml")
FUNCTIONS = sorted(
    logical_id
    for logical_id, resource in TEMPLATE["Resources"].items()
    if resource["Type"] == "AWS::Serverless::Function"
)
# Events these handlers reject, or handle without calling AWS; any other function gets {}.
EVENTS: dict[str, dict[str, Any]] = {
    "ApiFunction": {
        "resource": "/no-such-route",
        "path": "/no-such-route",
        "httpMethod": "GET",
        "headers": {},
        "multiValueHeaders": {},
        "queryStringParameters": None,
        "multiValueQueryStringParameters": None,
        "pathParameters": None,
        "stageVariables": None,
        "requestContext": {
            "accountId": ACCOUNT,
            "resourcePath": "/no-such-route",
            "httpMethod": "GET",
            "path": "/v1/no-such-route",
            "stage": "v1",
            "requestId": "e2e-request",
            "identity": {"userArn": f"arn:aws:iam::{ACCOUNT}:user/e2e", "caller": "E2E"},
        },
        "body": None,
        "isBase64Encoded": False,
    },
    "IngestHealthFunction": {"Records": []},
    "RecoveryFunction": {"step": "no-such-step", "recovery": {}},
}
# Init errors end the run in these; a handler's own errors are fine here.
RUNTIME_ERRORS = ("Runtime.", "Sandbox.")


def harmless(value: Any) -> str:
    """A stand-in for what CloudFormation would resolve `value` to."""
    if isinstance(value, str):
        return value
    if "Fn::GetAtt" in value:
        resource, attribute = value["Fn::GetAtt"]
        return (
            f"arn:aws:e2e:{REGION}:{ACCOUNT}:{resource}"
            if attribute.endswith("Arn")
            else f"e2e-{resource}"
        )
    if "Fn::Join" in value:
        separator, parts = value["Fn::Join"]
        return str(separator).join(harmless(part) for part in parts)
    ref = value["Ref"]
    if ref in TEMPLATE.get("Parameters", {}):
        return str(TEMPLATE["Parameters"][ref].get("Default", f"e2e-{ref}"))
    kind = TEMPLATE["Resources"][ref]["Type"]
    by_kind = {
        "AWS::DynamoDB::Table": f"e2e-{ref}",
        "AWS::SNS::Topic": f"arn:aws:sns:{REGION}:{ACCOUNT}:e2e-{ref}",
        "AWS::SQS::Queue": f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/e2e-{ref}",
        "AWS::Serverless::StateMachine": f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:{ref}",
    }
    assert kind in by_kind, f"no harmless value for a Ref to a {kind}"
    return by_kind[kind]


def function_spec(logical_id: str) -> FunctionSpec:
    defaults = TEMPLATE.get("Globals", {}).get("Function", {})
    props = {**defaults, **TEMPLATE["Resources"][logical_id]["Properties"]}
    variables = {
        **defaults.get("Environment", {}).get("Variables", {}),
        **props.get("Environment", {}).get("Variables", {}),
    }
    return FunctionSpec(
        name=f"e2e-{logical_id}",
        logical_id=logical_id,
        code_dir=ROOT / props["CodeUri"],
        handler=props["Handler"],
        environment={name: harmless(value) for name, value in variables.items()},
        timeout_s=float(props["Timeout"]),
        memory_mb=int(props["MemorySize"]),
        reserved_concurrency=props.get("ReservedConcurrentExecutions"),
    )


class NoAws(BaseHTTPRequestHandler):
    """Every AWS call fails at once with an error botocore does not retry."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = json.dumps(
            {"__type": "ResourceNotFoundException", "message": "no AWS in this test"}
        ).encode()
        self.send_response(400)
        self.send_header("Content-Type", "application/x-amz-json-1.0")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_PUT = do_DELETE = do_POST

    def log_message(self, format: str, *args: Any) -> None:
        return None


@pytest.fixture(scope="module")
def layer() -> LayerPaths:
    return stage_layer(ROOT, ROOT / ".twin" / "cache")


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), NoAws)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def logs() -> dict[str, str]:
    return {}


@pytest.fixture(scope="module")
def runtime(layer: LayerPaths, endpoint: str, logs: dict[str, str]) -> Iterator[LambdaRuntime]:
    lambdas = LambdaRuntime(
        layer,
        region=REGION,
        account=ACCOUNT,
        extra_env={"AWS_ENDPOINT_URL": endpoint},
        credentials=lambda spec: {"AWS_ACCESS_KEY_ID": "e2e", "AWS_SECRET_ACCESS_KEY": "e2e"},
        output_sink=lambda name, text: logs.__setitem__(name, text),
    )
    yield lambdas
    lambdas.stop()


@pytest.mark.parametrize("logical_id", FUNCTIONS)
def test_the_handler_initialises_with_the_layer_alone(
    logical_id: str,
    runtime: LambdaRuntime,
    logs: dict[str, str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    spec = function_spec(logical_id)
    runtime.register(spec)
    payload, errored, _ = runtime.invoke(spec.name, EVENTS.get(logical_id, {}))
    init_log = logs[spec.name].split("START RequestId:")[0]
    result = json.loads(payload)
    if "[ERROR]" in init_log or (errored and result["errorType"].startswith(RUNTIME_ERRORS)):
        pytest.fail(
            f"{logical_id} ({spec.code_dir.relative_to(ROOT)}/{spec.handler}) fails in the "
            f"layer-only environment: {result['errorType']}: {result['errorMessage']}\n"
            f"{logs[spec.name]}",
            pytrace=False,
        )
    [init_ms] = runtime.init_ms[logical_id]
    with capsys.disabled():
        print(f"\n{logical_id}: init {init_ms:.0f} ms (cold start, layer-only environment)")


def test_only_the_layer_and_the_runtime_are_importable(
    runtime: LambdaRuntime, tmp_path: Path
) -> None:
    (tmp_path / "probe.py").write_text(
        "import importlib\n\n"
        "def handler(event, context):\n"
        "    found = {}\n"
        "    for name in event:\n"
        "        try:\n"
        "            importlib.import_module(name)\n"
        "            found[name] = True\n"
        "        except ImportError:\n"
        "            found[name] = False\n"
        "    return found\n"
    )
    runtime.register(FunctionSpec("e2e-probe", "Probe", tmp_path, "probe.handler", {}, 30, 128))
    expected = {
        "boto3": True,  # the runtime's
        "aws_lambda_powertools": True,
        "pydantic_settings": True,
        "lightkube": True,
        "hyperguard.settings": True,
        "hyperguard_twin": False,  # operator side: not in the layer
        "hyperguard.cli": False,
        "aws_xray_sdk": True,  # the Tracer (Tracing: Active) needs it
        "moto": False,
        "pytest": False,
    }
    payload, errored, _ = runtime.invoke("e2e-probe", list(expected))
    assert not errored, payload
    assert json.loads(payload) == expected
