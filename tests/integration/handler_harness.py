"""A function's handler module loaded as Lambda loads it (its own module, its settings read
from the environment at import), its context, and SQS records as the event source mapping
delivers them."""

from __future__ import annotations

import importlib.util
import uuid
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
from tests.conftest import REGION, ROOT


def load_handler(function: str, env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """`functions/<function>/app.py`, imported afresh with `env` set."""
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    spec = importlib.util.spec_from_file_location(
        f"{function}_app_{uuid.uuid4().hex}", ROOT / "functions" / function / "app.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def context(function: str) -> Any:
    return SimpleNamespace(
        function_name=function,
        memory_limit_in_mb=512,
        invoked_function_arn=f"arn:aws:lambda:{REGION}:123456789012:function:{function}",
        aws_request_id=str(uuid.uuid4()),
    )


def sqs_record(body: str, queue: str) -> dict[str, Any]:
    return {
        "messageId": str(uuid.uuid4()),
        "receiptHandle": "rh",
        "body": body,
        "attributes": {"ApproximateReceiveCount": "1"},
        "messageAttributes": {},
        "md5OfBody": "",
        "eventSource": "aws:sqs",
        "eventSourceARN": f"arn:aws:sqs:{REGION}:123456789012:{queue}",
        "awsRegion": REGION,
    }
