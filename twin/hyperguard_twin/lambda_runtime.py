"""The twin's Lambda execution environments: every function runs in worker processes of its own.

Emulated as the Lambda python3.13 runtime does it:
- sys.path holds the function's code, the layer (the hyperguard package and
  shared/requirements.txt, built by the Makefile recipe `sam build` uses) and boto3 with its
  dependencies (the runtime's own) and nothing else: a dependency missing from the layer fails
  at init with Runtime.ImportModuleError, however much the twin's own venv holds;
- the environment is exactly the function's variables plus what Lambda sets (the role's
  credentials included);
- one invocation at a time per environment, warm reuse, timed cold starts; reserved
  concurrency throttles (429); the timeout kills the environment (Sandbox.Timedout); a runtime
  that dies fails the invocation it held as Runtime.ExitError and, dead busy or idle (killed
  from outside), is replaced: no later invocation is handed to it;
- START/END/REPORT lines around the function's output; errors logged as the runtime logs them.

Not emulated: the memory limit (Max Memory Used is reported, never enforced), /tmp isolation
and size, the read-only file system, freezing idle environments (a function's threads keep
running between invocations), recycling environments after hours, SnapStart, provisioned
concurrency, extensions, payload size limits, the Runtime API (the worker speaks a private
protocol), arm64 (the layer is built for this machine), asynchronous invocation. Bytecode is
cached in the staged layer, where Lambda's read-only /opt cannot cache a layer built with
--no-compile: init durations here lack that compile time.
"""

from __future__ import annotations

import json
import math
import secrets
import sys
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hyperguard_twin.lambda_layer import LayerPaths
from hyperguard_twin.lambda_pool import Pool, Worker

# Lambda gives init 10 s of its own before the first invocation's timeout applies to it.
INIT_LIMIT_S = 10.0
# Errors of the Lambda service, raised before the function runs.
SERVICE_FAULTS = {
    "throttle": ("TooManyRequestsException", 429),
    "service": ("ServiceException", 500),
}
FAULTS = (*SERVICE_FAULTS, "error", "crash")
LOG_TAIL_BYTES = 4096


class FunctionNotDeployedError(LookupError):
    pass


class LambdaServiceError(Exception):
    """An error of the Lambda *service* (the Invoke API), not of the function: callers such
    as Step Functions see it as `Lambda.<code>`, as on AWS."""

    def __init__(self, code: str, status: int, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.status = status
        self.message = message


@dataclass(frozen=True)
class FunctionSpec:
    name: str
    logical_id: str
    code_dir: Path
    handler: str
    environment: dict[str, str]
    timeout_s: float
    memory_mb: int
    reserved_concurrency: int | None = None
    role_arn: str = ""


@dataclass
class _Attempt:
    request_id: str
    payload: str = ""
    errored: bool = True
    keep: bool = False
    prelude: str = ""  # output of a cold start's init, before START
    output: str = ""
    init_ms: float | None = None
    duration_ms: float = 0.0
    cpu_s: float = 0.0


def _lines(text: str) -> str:
    return text if not text or text.endswith("\n") else text + "\n"


def _trace_id() -> str:
    root = f"1-{int(time.time()):08x}-{secrets.token_hex(12)}"
    return f"Root={root};Parent={secrets.token_hex(8)};Sampled=0"


class LambdaRuntime:
    """Runs registered functions in worker processes; `invoke` is what moto's Lambda calls."""

    def __init__(
        self,
        layer: LayerPaths,
        *,
        region: str,
        account: str,
        python: str = sys.executable,
        max_concurrency: int = 4,
        extra_env: Mapping[str, str] | None = None,
        credentials: Callable[[FunctionSpec], Mapping[str, str]] | None = None,
        output_sink: Callable[[str, str], None] | None = None,
    ) -> None:
        self.layer = layer
        self.region = region
        self.account = account
        self.python = python
        self.max_concurrency = max_concurrency
        self.extra_env = dict(extra_env or {})
        self.credentials = credentials
        self.output_sink = output_sink
        self.functions: dict[str, FunctionSpec] = {}
        self.invocations: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()
        self.cold_starts: Counter[str] = Counter()
        self.throttles: Counter[str] = Counter()
        self.init_ms: defaultdict[str, list[float]] = defaultdict(list)
        self.cpu_s: defaultdict[str, float] = defaultdict(float)  # worker CPU in invocations
        self.duration_ms: defaultdict[str, list[float]] = defaultdict(list)
        self._pools: dict[str, Pool] = {}
        self._faults: dict[str, list[str]] = {}
        self._lock = threading.Lock()

    def register(self, spec: FunctionSpec) -> None:
        """Deploys `spec`. As on Lambda, environments of an earlier configuration finish
        their invocations and take no more."""
        with self._lock:
            self.functions[spec.name] = spec
            old = self._pools.pop(spec.name, None)
        if old is not None:
            old.retire()

    def inject(self, logical_id: str, fault: str, count: int = 1) -> None:
        """The function's next `count` invocations fail: `throttle` and `service` as the
        Lambda service would (429 / 500), `error` as the function itself would, `crash` as
        a runtime killed in the middle of the invocation."""
        if fault not in FAULTS:
            raise ValueError(f"unknown fault {fault!r}")
        with self._lock:
            self._faults.setdefault(logical_id, []).extend([fault] * count)

    def stop(self) -> None:
        """Kills and reaps every worker."""
        with self._lock:
            pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            for worker in pool.retire():  # its invocation sees the worker die, then closes it
                worker.kill()

    def invoke(self, function_name: str, event: Any) -> tuple[str, bool, str]:
        """(payload JSON, errored, log tail) — the shape moto's Lambda backend expects."""
        name = function_name.rpartition(":function:")[2].split(":")[0] or function_name
        spec = self.functions.get(name)
        if spec is None:
            raise FunctionNotDeployedError(f"function {name} is not deployed on the twin")
        if isinstance(event, str | bytes):
            event = json.loads(event or "{}")
        arn = f"arn:aws:lambda:{self.region}:{self.account}:function:{function_name}"
        request: dict[str, Any] = {
            "request_id": str(uuid.uuid4()),
            "event": json.dumps(event),  # an event that is not JSON fails before a fault is used
            "arn": function_name if function_name.startswith("arn:") else arn,
            "trace_id": _trace_id(),
            "fault": self._next_fault(spec.logical_id),
        }
        fault = request["fault"]
        pool = self._pool(spec)
        try:
            if fault in SERVICE_FAULTS:
                raise LambdaServiceError(*SERVICE_FAULTS[fault], "injected by the twin")
            acquired = pool.acquire(lambda: self._start(spec))
            if acquired is None:  # its reserved concurrency is all in use
                raise LambdaServiceError("TooManyRequestsException", 429, "Rate Exceeded.")
        except LambdaServiceError as exc:
            if exc.status == 429:
                with self._lock:
                    self.throttles[spec.logical_id] += 1
            raise
        worker, cold = acquired
        attempt = _Attempt(request["request_id"])
        try:
            self._attempt(spec, worker, cold, request, attempt)
        finally:
            pool.release(worker, attempt.keep)
        log = self._log(spec, worker, attempt)
        with self._lock:
            self.invocations[spec.logical_id] += 1
            self.errors[spec.logical_id] += attempt.errored
            self.cpu_s[spec.logical_id] += attempt.cpu_s
            self.duration_ms[spec.logical_id].append(attempt.duration_ms)
            if attempt.init_ms is not None:
                self.cold_starts[spec.logical_id] += 1
                self.init_ms[spec.logical_id].append(attempt.init_ms)
        if self.output_sink is not None:
            self.output_sink(name, log)
        tail = log.encode()[-LOG_TAIL_BYTES:].decode(errors="ignore")
        return attempt.payload, attempt.errored, tail

    def _next_fault(self, logical_id: str) -> str | None:
        with self._lock:
            pending = self._faults.get(logical_id)
            return pending.pop(0) if pending else None

    def _pool(self, spec: FunctionSpec) -> Pool:
        with self._lock:
            pool = self._pools.get(spec.name)
            if pool is None:
                reserved = spec.reserved_concurrency
                # Reserved concurrency is Lambda's limit, so Lambda throttles; the twin's own
                # cap is a resource limit of this machine, so callers wait for a worker.
                pool = self._pools[spec.name] = Pool(
                    cap=self.max_concurrency if reserved is None else reserved,
                    throttle_when_full=reserved is not None,
                )
            return pool

    def _environment(self, spec: FunctionSpec) -> dict[str, str]:
        """A worker's whole environment: nothing of this process's own leaks into it."""
        stream = f"{time.strftime('%Y/%m/%d', time.gmtime())}/[$LATEST]{uuid.uuid4().hex}"
        env = {
            **spec.environment,
            "AWS_LAMBDA_FUNCTION_NAME": spec.name,
            "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(spec.memory_mb),
            "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
            "AWS_LAMBDA_LOG_GROUP_NAME": f"/aws/lambda/{spec.name}",
            "AWS_LAMBDA_LOG_STREAM_NAME": stream,
            "AWS_REGION": self.region,
            "AWS_DEFAULT_REGION": self.region,
            "AWS_EXECUTION_ENV": "AWS_Lambda_python3.13",
            "LAMBDA_TASK_ROOT": str(spec.code_dir),
            "LAMBDA_RUNTIME_DIR": str(self.layer.runtime),
            "_HANDLER": spec.handler,
            "TZ": ":UTC",
            "LANG": "en_US.UTF-8",
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "AWS_XRAY_CONTEXT_MISSING": "LOG_ERROR",
            "AWS_XRAY_DAEMON_ADDRESS": "127.0.0.1:2000",
        }
        if self.credentials is not None:
            env.update(self.credentials(spec))
        env.update(self.extra_env)
        return env

    def _start(self, spec: FunctionSpec) -> Worker:
        # Lambda's order: the function's code, then the layer, then the runtime's boto3.
        layer = self.layer
        paths = [spec.code_dir, layer.package, layer.deps, layer.runtime]
        args = [spec.handler, *map(str, paths)]
        return Worker(self.python, args, self._environment(spec), spec.code_dir)

    def _attempt(
        self,
        spec: FunctionSpec,
        worker: Worker,
        cold: bool,
        request: dict[str, Any],
        attempt: _Attempt,
    ) -> None:
        if cold:
            ready, expired = worker.call(None, INIT_LIMIT_S + spec.timeout_s)
            attempt.init_ms = (time.perf_counter() - worker.started) * 1000
            attempt.prelude = worker.drain()
            if ready is None:
                self._lost(spec, worker, attempt, expired)
                return
            if ready["error"] is not None:  # Lambda retries the init in a new environment
                attempt.payload = ready["error"]
                return
        sent = time.perf_counter()
        request["deadline_ms"] = (time.time() + spec.timeout_s) * 1000
        reply, expired = worker.call(request, spec.timeout_s)
        attempt.output = worker.drain()
        if reply is None:
            attempt.duration_ms = (time.perf_counter() - sent) * 1000
            self._lost(spec, worker, attempt, expired)
            return
        attempt.payload, attempt.errored, attempt.keep = reply["payload"], reply["errored"], True
        attempt.duration_ms, attempt.cpu_s = reply["duration_ms"], reply["cpu_s"]

    def _lost(self, spec: FunctionSpec, worker: Worker, attempt: _Attempt, expired: bool) -> None:
        """The worker gave no answer: it timed out or its process died."""
        if expired:
            now = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
            message = (
                f"{now} {attempt.request_id} Task timed out after {spec.timeout_s:.2f} seconds"
            )
            error = {"errorType": "Sandbox.Timedout", "errorMessage": message}
            attempt.output = _lines(attempt.output) + message + "\n"
        else:
            message = f"RequestId: {attempt.request_id} Error: {worker.exit_reason()}"
            error = {"errorType": "Runtime.ExitError", "errorMessage": message}
            attempt.output = _lines(attempt.output) + f"{message}\nRuntime.ExitError\n"
        attempt.payload = json.dumps(error)

    def _log(self, spec: FunctionSpec, worker: Worker, attempt: _Attempt) -> str:
        """The invocation's log text: Lambda's own lines around the function's output."""
        rid = attempt.request_id
        # Since August 2025 Lambda bills the init phase too.
        billed = math.ceil(attempt.duration_ms + (attempt.init_ms or 0.0))
        report = (
            f"REPORT RequestId: {rid}\tDuration: {attempt.duration_ms:.2f} ms\t"
            f"Billed Duration: {billed} ms\tMemory Size: {spec.memory_mb} MB\t"
            f"Max Memory Used: {worker.max_memory_mb} MB"
        )
        if attempt.init_ms is not None:
            report += f"\tInit Duration: {attempt.init_ms:.2f} ms"
        return (
            f"{_lines(attempt.prelude)}START RequestId: {rid} Version: $LATEST\n"
            f"{_lines(attempt.output)}END RequestId: {rid}\n{report}\n"
        )
