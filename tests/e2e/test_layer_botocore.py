"""The layer leans on the Lambda runtime's boto3 (it does not ship botocore, D66): a runtime
whose botocore lacks an operation the function calls fails the function's init loudly, with
a MissingAwsOperation metric and the error, instead of an AttributeError midway through a
workflow. The runtime here is the twin's (the installed boto3's version) with its SageMaker
model as an older botocore has it: without BatchAddClusterNodes, put first on botocore's data
path (AWS_DATA_PATH) as any botocore data directory can be. The service's code is the layer's.
"""

from __future__ import annotations

import gzip
import json
import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path

import botocore
import pytest
from tests.conftest import REGION, ROOT
from tests.e2e.test_layer import ACCOUNT, NoAws, function_spec

from hyperguard_twin.lambda_layer import stage_layer
from hyperguard_twin.lambda_runtime import LambdaRuntime

MISSING = "BatchAddClusterNodes"


def older_sagemaker_model(data_path: Path) -> None:
    """botocore's SageMaker model, as installed, less one operation."""
    installed = Path(botocore.__file__).parent / "data" / "sagemaker"
    [version] = [d.name for d in installed.iterdir() if d.is_dir()]
    model = json.loads(gzip.decompress((installed / version / "service-2.json.gz").read_bytes()))
    del model["operations"][MISSING]
    target = data_path / "sagemaker" / version
    target.mkdir(parents=True)
    (target / "service-2.json").write_text(json.dumps(model))


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[tuple[LambdaRuntime, dict[str, str]]]:
    older_sagemaker_model(tmp_path / "botocore-data")
    server = ThreadingHTTPServer(("127.0.0.1", 0), NoAws)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    logs: dict[str, str] = {}
    lambdas = LambdaRuntime(
        stage_layer(ROOT, ROOT / ".twin" / "cache"),
        region=REGION,
        account=ACCOUNT,
        extra_env={
            "AWS_ENDPOINT_URL": f"http://127.0.0.1:{server.server_address[1]}",
            "AWS_DATA_PATH": str(tmp_path / "botocore-data"),
        },
        credentials=lambda spec: {"AWS_ACCESS_KEY_ID": "e2e", "AWS_SECRET_ACCESS_KEY": "e2e"},
        output_sink=lambda name, text: logs.__setitem__(name, text),
    )
    yield lambdas, logs
    lambdas.stop()
    server.shutdown()
    server.server_close()


def test_a_runtime_without_an_operation_fails_init_with_a_metric_and_the_error(
    runtime: tuple[LambdaRuntime, dict[str, str]],
) -> None:
    lambdas, logs = runtime
    spec = function_spec("BurstFunction")
    lambdas.register(spec)
    payload, _, _ = lambdas.invoke(spec.name, {"step": "plan", "burst": {}})
    result = json.loads(payload)
    assert result["errorType"] == "MissingOperationError"
    assert MISSING in result["errorMessage"] and botocore.__version__ in result["errorMessage"]
    init_log = logs[spec.name].split("START RequestId:")[0]
    metrics = [
        json.loads(line)
        for line in init_log.splitlines()
        if line.startswith("{") and "_aws" in line
    ]
    assert any(
        m.get("MissingAwsOperation") == [1.0] and m.get("service") == "sagemaker" for m in metrics
    ), init_log
    assert "[ERROR] MissingOperationError" in init_log
    # Lambda retries a failed init in a new environment: it fails the same way, every time.
    again, _, _ = lambdas.invoke(spec.name, {"step": "plan", "burst": {}})
    assert json.loads(again)["errorType"] == "MissingOperationError"
    assert lambdas.cold_starts[spec.logical_id] == 2
