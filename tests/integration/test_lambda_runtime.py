"""The twin's Lambda execution environments, with toy handlers and a toy layer."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from hyperguard_twin.lambda_layer import LayerBuildError, LayerPaths, stage_layer
from hyperguard_twin.lambda_runtime import FunctionSpec, LambdaRuntime, LambdaServiceError

REGION, ACCOUNT = "eu-west-1", "123456789012"
CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "AKIATWIN",
    "AWS_SECRET_ACCESS_KEY": "secret",
    "AWS_SESSION_TOKEN": "token",
}
HANDLER = """
import importlib, logging, os, sys, time
from pathlib import Path

import toydep  # from the layer's deps dir

print("init of", os.environ["AWS_LAMBDA_FUNCTION_NAME"])


def handler(event, context):
    action = event.get("action")
    print("hello from the handler")
    logging.getLogger().warning("a warning")
    if action == "environ":
        return dict(os.environ)
    if action == "sys_path":
        return sys.path[:4]
    if action == "raise":
        raise ValueError("boom")
    if action == "set":
        return {1, 2}
    if action == "import":
        found = {}
        for name in event["names"]:
            try:
                importlib.import_module(name)
                found[name] = True
            except ImportError:
                found[name] = False
        return found
    if action == "context":
        return {
            "function_name": context.function_name,
            "function_version": context.function_version,
            "invoked_function_arn": context.invoked_function_arn,
            "memory_limit_in_mb": context.memory_limit_in_mb,
            "aws_request_id": context.aws_request_id,
            "log_group_name": context.log_group_name,
            "log_stream_name": context.log_stream_name,
            "identity": context.identity,
            "client_context": context.client_context,
            "remaining_ms": context.get_remaining_time_in_millis(),
        }
    if action == "wait":  # holds the environment until the test releases it
        gate = Path(event["dir"])
        (gate / f"running-{os.getpid()}").touch()
        while not (gate / "release").exists():
            time.sleep(0.01)
    return {"pid": os.getpid(), "dep": toydep.VALUE}
"""


def wait_for(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met before the deadline"
        time.sleep(0.01)


def stat_fields(stat: Path) -> list[str]:
    """A /proc/<pid>/stat's fields after the command name: the state, then the parent's pid."""
    return stat.read_text().rsplit(")", 1)[1].split()


def worker_children() -> list[tuple[int, str]]:
    """(pid, state) of this process's children that run the worker bootstrap, and of its
    zombie children (which show no command line: what they ran is gone with their memory)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat_fields(stat)
            cmdline = (stat.parent / "cmdline").read_bytes()
        except OSError:
            continue
        if int(fields[1]) == os.getpid() and (fields[0] == "Z" or b"lambda_worker.py" in cmdline):
            found.append((int(stat.parent.name), fields[0]))
    return found


@pytest.fixture
def layer(tmp_path: Path) -> LayerPaths:
    paths = LayerPaths(tmp_path / "package", tmp_path / "deps", tmp_path / "runtime")
    for path in (paths.package, paths.deps, paths.runtime):
        path.mkdir()
    (paths.deps / "toydep.py").write_text("VALUE = 42\n")
    return paths


@pytest.fixture
def code(tmp_path: Path) -> Path:
    code_dir = tmp_path / "code"
    code_dir.mkdir()
    (code_dir / "app.py").write_text(HANDLER)
    return code_dir


@pytest.fixture
def logs() -> list[tuple[str, str]]:
    return []


@pytest.fixture
def runtime(layer: LayerPaths, logs: list[tuple[str, str]]) -> Iterator[LambdaRuntime]:
    before = set(worker_children())  # another test's, in this process
    lambdas = LambdaRuntime(
        layer,
        region=REGION,
        account=ACCOUNT,
        max_concurrency=2,
        extra_env={"AWS_ENDPOINT_URL": "http://127.0.0.1:4566"},
        credentials=lambda spec: CREDENTIALS,
        output_sink=lambda name, text: logs.append((name, text)),
    )
    yield lambdas
    lambdas.stop()
    # every worker killed and reaped: none left running, and no zombie
    assert [child for child in worker_children() if child not in before] == []


def spec(code: Path, **overrides: Any) -> FunctionSpec:
    fields: dict[str, Any] = {
        "name": "toy-fn",
        "logical_id": "ToyFunction",
        "code_dir": code,
        "handler": "app.handler",
        "environment": {"TABLE": "toy-table", "EMPTY": ""},
        "timeout_s": 5.0,
        "memory_mb": 256,
    }
    return FunctionSpec(**(fields | overrides))


def call(runtime: LambdaRuntime, event: dict[str, Any], name: str = "toy-fn") -> Any:
    payload, errored, _ = runtime.invoke(name, event)
    assert not errored, payload
    return json.loads(payload)


def test_returns_the_handlers_value_through_a_layer_module(
    runtime: LambdaRuntime, code: Path
) -> None:
    runtime.register(spec(code))
    result = call(runtime, {})
    assert result["dep"] == 42
    assert result["pid"] != os.getpid()
    # a name, an ARN and an event given as JSON text all reach the same function
    arn = f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:toy-fn"
    payload, errored, _ = runtime.invoke(arn, json.dumps({"action": "context"}))
    assert not errored
    assert json.loads(payload)["invoked_function_arn"] == arn


def test_a_raised_exception_is_a_function_error_logged_as_lambda_does(
    runtime: LambdaRuntime, code: Path, logs: list[tuple[str, str]]
) -> None:
    runtime.register(spec(code))
    payload, errored, tail = runtime.invoke("toy-fn", {"action": "raise"})
    assert errored
    error = json.loads(payload)
    assert error["errorType"] == "ValueError"
    assert error["errorMessage"] == "boom"
    assert any('raise ValueError("boom")' in frame for frame in error["stackTrace"])
    assert "[ERROR] ValueError: boom\nTraceback (most recent call last):" in tail
    assert runtime.errors["ToyFunction"] == 1
    assert runtime.invocations["ToyFunction"] == 1


def test_prints_and_logs_reach_the_sink_between_start_and_report(
    runtime: LambdaRuntime, code: Path, logs: list[tuple[str, str]]
) -> None:
    runtime.register(spec(code))
    call(runtime, {})
    [(name, text)] = logs
    assert name == "toy-fn"
    lines = text.splitlines()
    assert lines[0] == "init of toy-fn"  # init output comes before START
    start = next(i for i, line in enumerate(lines) if line.startswith("START RequestId: "))
    request_id = lines[start].split()[2]
    assert lines[start] == f"START RequestId: {request_id} Version: $LATEST"
    assert lines[start + 1] == "hello from the handler"
    assert re.fullmatch(rf"\[WARNING\]\t\S+Z\t{request_id}\ta warning", lines[start + 2]), lines[
        start + 2
    ]
    assert lines[start + 3] == f"END RequestId: {request_id}"
    assert re.fullmatch(
        rf"REPORT RequestId: {request_id}\tDuration: \d+\.\d\d ms\tBilled Duration: \d+ ms\t"
        r"Memory Size: 256 MB\tMax Memory Used: \d+ MB\tInit Duration: \d+\.\d\d ms",
        lines[start + 4],
    ), lines[start + 4]


def test_the_environment_is_exactly_the_functions_plus_lambdas_own(
    runtime: LambdaRuntime, code: Path, layer: LayerPaths
) -> None:
    runtime.register(spec(code))
    environ = call(runtime, {"action": "environ"})
    assert re.fullmatch(
        r"Root=1-[0-9a-f]{8}-[0-9a-f]{24};Parent=[0-9a-f]{16};Sampled=0",
        environ.pop("_X_AMZN_TRACE_ID"),
    )
    assert re.fullmatch(
        r"\d{4}/\d\d/\d\d/\[\$LATEST\][0-9a-f]{32}", environ.pop("AWS_LAMBDA_LOG_STREAM_NAME")
    )
    # Python's own locale coercion (PEP 538) adds this where en_US.UTF-8 is not installed.
    assert environ.pop("LC_CTYPE", "C.UTF-8") == "C.UTF-8"
    assert environ == {
        "TABLE": "toy-table",
        "EMPTY": "",
        "AWS_LAMBDA_FUNCTION_NAME": "toy-fn",
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "256",
        "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
        "AWS_LAMBDA_LOG_GROUP_NAME": "/aws/lambda/toy-fn",
        "AWS_REGION": REGION,
        "AWS_DEFAULT_REGION": REGION,
        "AWS_EXECUTION_ENV": "AWS_Lambda_python3.13",
        "LAMBDA_TASK_ROOT": str(code),
        "LAMBDA_RUNTIME_DIR": str(layer.runtime),
        "_HANDLER": "app.handler",
        "TZ": ":UTC",
        "LANG": "en_US.UTF-8",
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "AWS_XRAY_CONTEXT_MISSING": "LOG_ERROR",
        "AWS_XRAY_DAEMON_ADDRESS": "127.0.0.1:2000",
        **CREDENTIALS,
        "AWS_ENDPOINT_URL": "http://127.0.0.1:4566",
    }


def test_the_context_object(runtime: LambdaRuntime, code: Path) -> None:
    runtime.register(spec(code))
    context = call(runtime, {"action": "context"})
    assert re.fullmatch(r"[0-9a-f-]{36}", context.pop("aws_request_id"))
    assert re.fullmatch(r"\d{4}/\d\d/\d\d/\[\$LATEST\][0-9a-f]{32}", context.pop("log_stream_name"))
    assert 0 < context.pop("remaining_ms") <= 5000
    assert context == {
        "function_name": "toy-fn",
        "function_version": "$LATEST",
        "invoked_function_arn": f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:toy-fn",
        "memory_limit_in_mb": 256,
        "log_group_name": "/aws/lambda/toy-fn",
        "identity": None,
        "client_context": None,
    }


def test_only_the_code_the_layer_and_the_runtime_are_importable(
    runtime: LambdaRuntime, code: Path, layer: LayerPaths
) -> None:
    import moto  # noqa: F401  (present in the twin's own environment)
    import pytest  # noqa: F401

    runtime.register(spec(code))
    names = ["moto", "pytest", "aws_xray_sdk", "toydep", "json"]
    found = call(runtime, {"action": "import", "names": names})
    assert found == {
        "moto": False,
        "pytest": False,
        "aws_xray_sdk": False,
        "toydep": True,
        "json": True,
    }
    paths = [str(code), str(layer.package), str(layer.deps), str(layer.runtime)]
    assert call(runtime, {"action": "sys_path"}) == paths


def test_a_warm_environment_is_reused(
    runtime: LambdaRuntime, code: Path, logs: list[tuple[str, str]]
) -> None:
    runtime.register(spec(code))
    first, second = call(runtime, {}), call(runtime, {})
    assert first["pid"] == second["pid"]
    assert runtime.cold_starts["ToyFunction"] == 1
    assert len(runtime.init_ms["ToyFunction"]) == 1
    assert len(runtime.duration_ms["ToyFunction"]) == 2
    assert runtime.cpu_s["ToyFunction"] > 0
    assert "Init Duration" in logs[0][1]
    assert "Init Duration" not in logs[1][1]
    assert "init of" not in logs[1][1]


def test_a_new_configuration_gets_new_environments(runtime: LambdaRuntime, code: Path) -> None:
    runtime.register(spec(code))
    first = call(runtime, {})
    runtime.register(spec(code, environment={"TABLE": "other-table"}))
    assert call(runtime, {"action": "environ"})["TABLE"] == "other-table"
    assert call(runtime, {})["pid"] != first["pid"]
    assert runtime.cold_starts["ToyFunction"] == 2


def invoke_in_thread(
    runtime: LambdaRuntime, event: dict[str, Any]
) -> tuple[threading.Thread, list[Any]]:
    results: list[Any] = []
    thread = threading.Thread(target=lambda: results.append(call(runtime, event)))
    thread.start()
    return thread, results


def test_concurrent_invocations_run_in_separate_environments_at_once(
    runtime: LambdaRuntime, code: Path, tmp_path: Path
) -> None:
    runtime.register(spec(code))
    event = {"action": "wait", "dir": str(tmp_path)}
    calls = [invoke_in_thread(runtime, event) for _ in range(2)]
    # both handlers are running at the same time before either may finish
    wait_for(lambda: len(list(tmp_path.glob("running-*"))) == 2)
    (tmp_path / "release").touch()
    for thread, _ in calls:
        thread.join(10)
    pids = {results[0]["pid"] for _, results in calls}
    assert len(pids) == 2
    assert runtime.cold_starts["ToyFunction"] == 2


def test_beyond_the_twins_cap_an_invocation_waits_for_a_free_environment(
    runtime: LambdaRuntime, code: Path, tmp_path: Path
) -> None:
    runtime.register(spec(code))  # the runtime's cap is 2 workers
    event = {"action": "wait", "dir": str(tmp_path)}
    calls = [invoke_in_thread(runtime, event) for _ in range(3)]
    wait_for(lambda: len(list(tmp_path.glob("running-*"))) == 2)
    assert sum(thread.is_alive() for thread, _ in calls) == 3
    (tmp_path / "release").touch()
    for thread, _ in calls:
        thread.join(10)
    assert all(results for _, results in calls)
    assert runtime.cold_starts["ToyFunction"] == 2
    assert runtime.throttles["ToyFunction"] == 0


def test_reserved_concurrency_throttles_at_once(
    runtime: LambdaRuntime, code: Path, tmp_path: Path
) -> None:
    runtime.register(spec(code, reserved_concurrency=1))
    thread, results = invoke_in_thread(runtime, {"action": "wait", "dir": str(tmp_path)})
    wait_for(lambda: any(tmp_path.glob("running-*")))
    with pytest.raises(LambdaServiceError) as throttled:
        runtime.invoke("toy-fn", {})
    assert (throttled.value.code, throttled.value.status) == ("TooManyRequestsException", 429)
    assert runtime.throttles["ToyFunction"] == 1
    (tmp_path / "release").touch()
    thread.join(10)
    assert results


def test_a_timeout_kills_the_environment(
    runtime: LambdaRuntime, code: Path, tmp_path: Path, logs: list[tuple[str, str]]
) -> None:
    runtime.register(spec(code, timeout_s=0.5))
    first = call(runtime, {})
    payload, errored, tail = runtime.invoke("toy-fn", {"action": "wait", "dir": str(tmp_path)})
    assert errored
    error = json.loads(payload)
    assert error["errorType"] == "Sandbox.Timedout"
    assert re.fullmatch(
        r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z [0-9a-f-]{36} Task timed out after 0\.50 seconds",
        error["errorMessage"],
    )
    assert error["errorMessage"] in tail
    assert "hello from the handler" in tail  # output before the kill is kept
    second = call(runtime, {})
    assert second["pid"] != first["pid"]
    assert runtime.cold_starts["ToyFunction"] == 2


def test_a_crash_is_a_runtime_exit_error_and_the_next_call_recovers(
    runtime: LambdaRuntime, code: Path
) -> None:
    runtime.register(spec(code))
    first = call(runtime, {})
    runtime.inject("ToyFunction", "crash")
    payload, errored, tail = runtime.invoke("toy-fn", {})
    assert errored
    error = json.loads(payload)
    assert error["errorType"] == "Runtime.ExitError"
    assert error["errorMessage"] in tail
    assert re.fullmatch(
        r"RequestId: [0-9a-f-]{36} Error: Runtime exited with error: signal: killed",
        error["errorMessage"],
    )
    second = call(runtime, {})
    assert second["pid"] != first["pid"]
    assert runtime.cold_starts["ToyFunction"] == 2


def killed(pid: int) -> bool:
    """Whether the worker `pid` has died: a zombie its parent has not reaped yet, or reaped.
    Its state says so, not its command line: a killed process lets go of its memory, and with
    it the command line /proc shows, while it is still exiting, before its parent can reap
    it (a full run of 2026-12-01 handed an invocation to a worker in that window)."""
    try:
        fields = stat_fields(Path(f"/proc/{pid}/stat"))
    except OSError:
        return True  # reaped
    return fields[0] in ("Z", "X") or int(fields[1]) != os.getpid()  # or the pid is reused


def test_a_killed_environment_fails_its_invocation_and_is_replaced(
    runtime: LambdaRuntime, code: Path, tmp_path: Path
) -> None:
    """A worker killed from outside, as an OOM kill or a test's chaos would: the invocation
    it held fails as Lambda reports a crashed runtime, and later invocations get a new
    environment, never the dead one, whether it died busy or idle."""
    runtime.register(spec(code))
    replies: list[tuple[str, bool, str]] = []
    event = {"action": "wait", "dir": str(tmp_path)}
    held = threading.Thread(target=lambda: replies.append(runtime.invoke("toy-fn", event)))
    held.start()
    wait_for(lambda: any(tmp_path.glob("running-*")))
    busy = int(next(tmp_path.glob("running-*")).name.removeprefix("running-"))
    os.kill(busy, signal.SIGKILL)
    held.join(10)
    payload, errored, tail = replies[0]
    error = json.loads(payload)
    assert errored and error["errorType"] == "Runtime.ExitError"
    assert re.fullmatch(
        r"RequestId: [0-9a-f-]{36} Error: Runtime exited with error: signal: killed",
        error["errorMessage"],
    )
    assert error["errorMessage"] in tail
    idle = call(runtime, {})["pid"]
    assert idle != busy
    os.kill(idle, signal.SIGKILL)
    wait_for(lambda: killed(idle))
    fresh = call(runtime, {})["pid"]
    assert fresh not in (busy, idle)
    assert call(runtime, {})["pid"] == fresh  # the new environment is the warm one now
    assert runtime.errors["ToyFunction"] == 1
    assert runtime.cold_starts["ToyFunction"] == 3


def test_injected_faults(runtime: LambdaRuntime, code: Path) -> None:
    runtime.register(spec(code))
    runtime.inject("ToyFunction", "throttle")
    runtime.inject("ToyFunction", "service")
    runtime.inject("ToyFunction", "error")
    for code_, status in (("TooManyRequestsException", 429), ("ServiceException", 500)):
        with pytest.raises(LambdaServiceError) as raised:
            runtime.invoke("toy-fn", {})
        assert (raised.value.code, raised.value.status) == (code_, status)
    payload, errored, _ = runtime.invoke("toy-fn", {})
    assert errored
    assert json.loads(payload)["errorType"] == "InjectedFault"
    assert call(runtime, {})["dep"] == 42
    assert runtime.throttles["ToyFunction"] == 1
    with pytest.raises(ValueError):
        runtime.inject("ToyFunction", "meteor")


def test_an_import_error_fails_init_and_every_cold_start_retries_it(
    runtime: LambdaRuntime, code: Path, logs: list[tuple[str, str]]
) -> None:
    # aws_xray_sdk is in the twin's venv, not in this toy layer
    (code / "app.py").write_text(
        "import aws_xray_sdk\n\ndef handler(event, context):\n    return 1\n"
    )
    runtime.register(spec(code))
    for attempt in (1, 2):
        payload, errored, tail = runtime.invoke("toy-fn", {})
        assert errored
        error = json.loads(payload)
        assert error["errorType"] == "Runtime.ImportModuleError"
        assert (
            error["errorMessage"] == "Unable to import module 'app': No module named 'aws_xray_sdk'"
        )
        assert tail.startswith("[ERROR] Runtime.ImportModuleError: Unable to import module 'app'")
        assert runtime.cold_starts["ToyFunction"] == attempt


def test_a_result_that_is_not_json_is_a_marshal_error(runtime: LambdaRuntime, code: Path) -> None:
    runtime.register(spec(code))
    payload, errored, _ = runtime.invoke("toy-fn", {"action": "set"})
    assert errored
    error = json.loads(payload)
    assert error["errorType"] == "Runtime.MarshalError"
    assert error["errorMessage"] == (
        "Unable to marshal response: Object of type set is not JSON serializable"
    )
    assert call(runtime, {})["dep"] == 42  # the environment stays warm


def test_workers_exit_when_their_parent_dies(layer: LayerPaths, code: Path) -> None:
    script = textwrap.dedent(
        """
        import json, os, sys
        from pathlib import Path
        from hyperguard_twin.lambda_layer import LayerPaths
        from hyperguard_twin.lambda_runtime import FunctionSpec, LambdaRuntime
        *layer, code = map(Path, sys.argv[1:])
        runtime = LambdaRuntime(LayerPaths(*layer), region="us-east-1", account="123456789012")
        runtime.register(FunctionSpec("toy-fn", "Toy", code, "app.handler", {}, 5, 128))
        print(json.loads(runtime.invoke("toy-fn", {})[0])["pid"], flush=True)
        os._exit(0)  # no stop(): the parent just dies
        """
    )
    shared = Path(__file__).resolve().parents[2] / "shared"
    paths = [str(p) for p in (layer.package, layer.deps, layer.runtime, code)]
    done = subprocess.run(
        [sys.executable, "-c", script, *paths],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(shared)},
    )
    pid = int(done.stdout.strip())

    def gone() -> bool:
        try:
            return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in "ZX"
        except OSError:
            return True

    wait_for(gone)


def test_a_failing_layer_build_says_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Started by `make -j2`, as `make test` starts the tests: the recipe's error comes first all
    # the same, with no word of a jobserver the nested make cannot reach.
    monkeypatch.setenv("MAKEFLAGS", " -j2 --jobserver-auth=3,4")
    monkeypatch.setenv("MAKELEVEL", "1")
    shared = tmp_path / "root" / "shared"
    shared.mkdir(parents=True)
    (shared / "requirements.txt").write_text("no-such-package\n")
    (shared / "Makefile").write_text("layer-deps:\n\t@echo 'no wheel for you' >&2; exit 3\n")
    with pytest.raises(LayerBuildError, match=r"layer-deps.*exited with 2:\n.*no wheel for you"):
        stage_layer(tmp_path / "root", tmp_path / "cache")
    assert not list((tmp_path / "cache").iterdir())  # no half-built layer is left behind
