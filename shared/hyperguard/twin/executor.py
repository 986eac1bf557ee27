"""Runs Lambda handlers in this process, the way the Lambda service would run them.

One sandbox per function: its module is imported once, with the function's environment
(so settings read at init see exactly what template.yaml gives that function), and its
invocations run one at a time, as in a single Lambda execution environment.
"""

from __future__ import annotations

import importlib.util
import json
import os
import threading
import time
import traceback
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from hyperguard.twin.telemetry import capture_output


class FunctionNotDeployedError(LookupError):
    pass


class InjectedFault(Exception):
    """A function error the twin was told to produce (fault-injection tests)."""


def _status_error(code: str, status: int) -> Exception:
    """An error of the Lambda *service* (the Invoke API), not of the function: callers such
    as Step Functions see it as `Lambda.<code>`, as on AWS."""
    from moto.core.exceptions import JsonRESTError

    error = JsonRESTError(code, f"{code} (injected by the twin)")
    error.code = status
    return error


FAULTS = {
    "throttle": lambda: _status_error("TooManyRequestsException", 429),
    "service": lambda: _status_error("ServiceException", 500),
}


@dataclass(frozen=True)
class FunctionSpec:
    name: str
    logical_id: str
    code_dir: Path
    handler: str
    environment: dict[str, str] = field(default_factory=dict)
    timeout_s: int = 30
    memory_mb: int = 512


class LambdaContext:
    """The attributes of the real context object that handlers and powertools read."""

    def __init__(self, spec: FunctionSpec, region: str, account: str) -> None:
        self.function_name = spec.name
        self.function_version = "$LATEST"
        self.memory_limit_in_mb = spec.memory_mb
        self.invoked_function_arn = f"arn:aws:lambda:{region}:{account}:function:{spec.name}"
        self.aws_request_id = str(uuid.uuid4())
        self.log_group_name = f"/aws/lambda/{spec.name}"
        self.log_stream_name = "twin"
        self._timeout_s = spec.timeout_s

    def get_remaining_time_in_millis(self) -> int:
        return self._timeout_s * 1000


_env_lock = threading.Lock()


class InProcessExecutor:
    def __init__(
        self,
        region: str = "us-east-1",
        account: str = "123456789012",
        output_sink: Callable[[str, str], None] | None = None,
    ) -> None:
        self.region = region
        self.account = account
        self.output_sink = output_sink
        self.functions: dict[str, FunctionSpec] = {}
        self._handlers: dict[str, Any] = {}
        self._locks: dict[str, threading.Lock] = {}
        self.invocations: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()
        self.cpu_s: defaultdict[str, float] = defaultdict(float)  # handler CPU time, per function
        self._faults: dict[str, list[str]] = {}

    def inject(self, logical_id: str, fault: str, count: int = 1) -> None:
        """The function's next `count` invocations fail: `throttle` and `service` as the
        Lambda service would (429 / 500), `error` as the function itself would."""
        if fault not in (*FAULTS, "error"):
            raise ValueError(f"unknown fault {fault!r}")
        self._faults.setdefault(logical_id, []).extend([fault] * count)

    def register(self, spec: FunctionSpec) -> None:
        self.functions[spec.name] = spec
        self._locks[spec.name] = threading.Lock()

    def _load(self, spec: FunctionSpec) -> Any:
        module_name, _, attr = spec.handler.rpartition(".")
        path = spec.code_dir / (module_name.replace(".", "/") + ".py")
        with _env_lock:
            saved = {k: os.environ.get(k) for k in spec.environment}
            os.environ.update(spec.environment)
            os.environ["AWS_LAMBDA_FUNCTION_NAME"] = spec.name
            try:
                import_name = f"hyperguard_twin_fn_{spec.logical_id}"
                module_spec = importlib.util.spec_from_file_location(import_name, path)
                if module_spec is None or module_spec.loader is None:
                    raise FunctionNotDeployedError(f"no handler module at {path}")
                module: ModuleType = importlib.util.module_from_spec(module_spec)
                module_spec.loader.exec_module(module)
            finally:
                for k, v in saved.items():
                    if v is None:
                        os.environ.pop(k, None)
                    else:
                        os.environ[k] = v
        return getattr(module, attr)

    def invoke(self, function_name: str, event: Any) -> tuple[str, bool, str]:
        """(payload JSON, errored, log tail) — the shape moto's Lambda backend expects."""
        name = function_name.rpartition(":function:")[2].split(":")[0] or function_name
        spec = self.functions.get(name)
        if spec is None:
            raise FunctionNotDeployedError(f"function {name} is not deployed on the twin")
        if isinstance(event, str | bytes):
            event = json.loads(event or "{}")
        pending = self._faults.get(spec.logical_id)
        fault = pending.pop(0) if pending else None
        if fault in FAULTS:
            raise FAULTS[fault]()
        with self._locks[name], capture_output(spec.logical_id) as output:
            self.invocations[spec.logical_id] += 1
            started = time.thread_time()
            try:
                if fault == "error":
                    raise InjectedFault(f"{spec.logical_id}: injected function error")
                handler = self._handlers.get(name)
                if handler is None:
                    handler = self._handlers[name] = self._load(spec)
                result = handler(event, LambdaContext(spec, self.region, self.account))
                payload, errored = json.dumps(result, default=str), False
            except Exception as exc:
                self.errors[spec.logical_id] += 1
                tb = traceback.format_exception(exc)
                print("".join(tb))
                payload, errored = (
                    json.dumps(
                        {
                            "errorMessage": str(exc),
                            "errorType": type(exc).__name__,
                            "stackTrace": [line.rstrip() for line in tb[-6:]],
                        }
                    ),
                    True,
                )
        self.cpu_s[spec.logical_id] += time.thread_time() - started
        logs = output.getvalue()
        if self.output_sink is not None:
            self.output_sink(name, logs)
        return payload, errored, logs[-4096:]
