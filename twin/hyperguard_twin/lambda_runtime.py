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

import atexit
import contextlib
import hashlib
import importlib.metadata
import json
import math
import os
import platform
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO

WORKER = Path(__file__).with_name("lambda_worker.py")
# Lambda gives init 10 s of its own before the first invocation's timeout applies to it.
INIT_LIMIT_S = 10.0
# Errors of the Lambda service, raised before the function runs.
SERVICE_FAULTS = {
    "throttle": ("TooManyRequestsException", 429),
    "service": ("ServiceException", 500),
}
FAULTS = (*SERVICE_FAULTS, "error", "crash")
LOG_TAIL_BYTES = 4096


class LayerBuildError(RuntimeError):
    """The layer could not be built; the message holds the command and its stderr's tail."""


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
class LayerPaths:
    package: Path  # holds hyperguard/
    deps: Path  # the layer's third-party packages
    runtime: Path  # boto3 and its dependencies: what Lambda's /var/runtime provides


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


def _run(command: list[str]) -> None:
    try:
        done = subprocess.run(command, capture_output=True, text=True, check=False)
    except OSError as exc:
        raise LayerBuildError(f"`{shlex.join(command)}` could not run: {exc}") from exc
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-20:])
        raise LayerBuildError(f"`{shlex.join(command)}` exited with {done.returncode}:\n{tail}")


def _build_once(final: Path, build: Callable[[Path], None]) -> Path:
    """`final`, built by `build` into a temporary sibling and renamed into place: concurrent
    builders never see a half-built directory, and the first to finish wins."""
    if final.is_dir():
        return final
    building = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
    try:
        build(building)
        try:
            building.rename(final)
        except OSError:
            if not final.is_dir():
                raise
    finally:
        shutil.rmtree(building, ignore_errors=True)
    return final


def stage_layer(root: Path, cache_dir: Path, *, python: str = sys.executable) -> LayerPaths:
    """The layer for this machine, built with shared/Makefile's recipe; dependencies and the
    runtime's boto3 are cached in `cache_dir`, the hyperguard package is copied afresh."""
    shared = root / "shared"
    cache_dir.mkdir(parents=True, exist_ok=True)
    version = subprocess.run(
        [python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    # The requirements and the recipe decide what the layer holds.
    recipe = (shared / "requirements.txt").read_bytes() + (shared / "Makefile").read_bytes()
    key = hashlib.sha256(recipe + f"\0{version}\0{platform.machine()}".encode()).hexdigest()[:16]
    make = ["make", "-C", str(shared)]
    deps = _build_once(
        cache_dir / f"layer-deps-{key}",
        lambda d: _run(
            [*make, "layer-deps", f"ARTIFACTS_DIR={d}", "LAYER_PLATFORM=", f"PYTHON={python}"]
        ),
    )
    # The runtime's boto3 and botocore as this machine has them, both pinned: boto3 alone
    # admits any later botocore of its minor version, which the registry may serve by now.
    pins = [f"{name}=={importlib.metadata.version(name)}" for name in ("boto3", "botocore")]
    pip = [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    runtime = _build_once(
        cache_dir / f"runtime-{'-'.join(pins).replace('==', '-')}-{version}",
        lambda d: _run([*pip, "--target", str(d), *pins]),
    )
    package = Path(tempfile.mkdtemp(prefix="layer-package-", dir=cache_dir))
    atexit.register(shutil.rmtree, package, True)
    _run([*make, "layer-package", f"ARTIFACTS_DIR={package}", f"PYTHON={python}"])
    return LayerPaths(package=package / "python", deps=deps / "python", runtime=runtime)


class _Worker:
    """One execution environment: a worker process, the file its fd 1 and 2 write to, and
    the pipe its replies come back on."""

    def __init__(self, python: str, args: list[str], env: dict[str, str], cwd: Path) -> None:
        self.started = time.perf_counter()
        self.output = tempfile.TemporaryFile()  # noqa: SIM115 (closed by close())
        self.max_memory_mb = 0
        replies, reply_fd = os.pipe()
        try:
            self.proc = subprocess.Popen(
                [python, "-I", "-S", str(WORKER), str(reply_fd), *args],
                stdin=subprocess.PIPE,
                stdout=self.output,
                stderr=self.output,
                env=env,
                cwd=cwd,
                pass_fds=(reply_fd,),
            )
        except BaseException:
            os.close(replies)
            self.output.close()
            raise
        finally:
            os.close(reply_fd)
        self.replies: BinaryIO = os.fdopen(replies, "rb")

    def call(self, request: dict[str, Any] | None, timeout_s: float) -> tuple[Any, bool]:
        """The worker's next reply (to `request`, if given), or None if the worker died or
        was killed at the deadline (then the flag is set)."""
        expired = threading.Event()

        def expire() -> None:
            expired.set()
            self.proc.kill()

        timer = threading.Timer(timeout_s, expire)
        timer.start()
        try:
            if request is not None and self.proc.stdin is not None:
                self.proc.stdin.write(json.dumps(request).encode() + b"\n")
                self.proc.stdin.flush()
            line = self.replies.readline()
        except BrokenPipeError:
            line = b""
        finally:
            timer.cancel()
        if expired.is_set() or not line:
            return None, expired.is_set()
        reply = json.loads(line)
        self.max_memory_mb = reply["max_memory_mb"]
        return reply, False

    def drain(self) -> str:
        """What the worker wrote since the last drain. The worker's fd 1 and 2 share this
        file's offset, so rewinding here makes the worker write from the start again."""
        fd = self.output.fileno()
        text = os.pread(fd, os.fstat(fd).st_size, 0).decode(errors="replace")
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        return text

    def exit_reason(self) -> str:
        code = self.proc.wait()
        if code == 0:
            return "Runtime exited without providing a reason"
        if code < 0:
            name = signal.strsignal(-code) or f"signal {-code}"
            return f"Runtime exited with error: signal: {name.lower()}"
        return f"Runtime exited with error: exit status {code}"

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()

    def close(self) -> None:
        self.kill()
        if self.proc.stdin is not None:
            with contextlib.suppress(BrokenPipeError):  # a request the worker never read
                self.proc.stdin.close()
        self.replies.close()
        self.output.close()


@dataclass(eq=False)
class _Pool:
    """A function's execution environments, at most `cap` of them."""

    cap: int
    throttle_when_full: bool
    idle: list[_Worker] = field(default_factory=list)
    busy: set[_Worker] = field(default_factory=set)
    size: int = 0  # idle, busy and starting
    closed: bool = False
    cond: threading.Condition = field(default_factory=threading.Condition)

    def acquire(self, start: Callable[[], _Worker]) -> tuple[_Worker, bool]:
        """A warm worker, or a new one (then the flag is set: a cold start). An idle worker
        whose process died (killed from outside) is replaced, as Lambda replaces a dead
        execution environment: no invocation is handed to it."""
        dead: list[_Worker] = []
        try:
            with self.cond:
                while not self._warm(dead) and self.size >= self.cap:
                    if self.throttle_when_full:
                        raise LambdaServiceError("TooManyRequestsException", 429, "Rate Exceeded.")
                    self.cond.wait()
                if self.idle:
                    worker = self.idle.pop()  # the most recently used, as Lambda tends to pick
                    self.busy.add(worker)
                    return worker, False
                self.size += 1
        finally:
            for worker in dead:
                worker.close()
        try:
            worker = start()
        except BaseException:
            with self.cond:
                self.size -= 1
                self.cond.notify()
            raise
        with self.cond:
            self.busy.add(worker)
        return worker, True

    def _warm(self, dead: list[_Worker]) -> bool:
        """Whether a live worker is idle; dead idle ones move to `dead` and leave the count.
        Called with the lock held."""
        while self.idle and not self.idle[-1].alive():
            dead.append(self.idle.pop())
            self.size -= 1
        return bool(self.idle)

    def release(self, worker: _Worker, keep: bool) -> None:
        with self.cond:
            self.busy.discard(worker)
            keep = keep and not self.closed
            if keep:
                self.idle.append(worker)
            else:
                self.size -= 1
            self.cond.notify()
        if not keep:
            worker.close()

    def retire(self) -> list[_Worker]:
        """Takes no more invocations: closes the idle workers and returns the busy ones,
        which are closed when their invocations end."""
        with self.cond:
            self.closed = True
            idle, self.idle = self.idle, []
            self.size -= len(idle)
            busy = list(self.busy)
        for worker in idle:
            worker.close()
        return busy


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
        self._pools: dict[str, _Pool] = {}
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
            worker, cold = pool.acquire(lambda: self._start(spec))
        except LambdaServiceError as exc:
            if exc.status == 429:
                with self._lock:
                    self.throttles[spec.logical_id] += 1
            raise
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

    def _pool(self, spec: FunctionSpec) -> _Pool:
        with self._lock:
            pool = self._pools.get(spec.name)
            if pool is None:
                reserved = spec.reserved_concurrency
                # Reserved concurrency is Lambda's limit, so Lambda throttles; the twin's own
                # cap is a resource limit of this machine, so callers wait for a worker.
                pool = self._pools[spec.name] = _Pool(
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

    def _start(self, spec: FunctionSpec) -> _Worker:
        # Lambda's order: the function's code, then the layer, then the runtime's boto3.
        layer = self.layer
        paths = [spec.code_dir, layer.package, layer.deps, layer.runtime]
        args = [spec.handler, *map(str, paths)]
        return _Worker(self.python, args, self._environment(spec), spec.code_dir)

    def _attempt(
        self,
        spec: FunctionSpec,
        worker: _Worker,
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

    def _lost(self, spec: FunctionSpec, worker: _Worker, attempt: _Attempt, expired: bool) -> None:
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

    def _log(self, spec: FunctionSpec, worker: _Worker, attempt: _Attempt) -> str:
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
