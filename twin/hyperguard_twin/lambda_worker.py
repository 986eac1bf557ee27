"""The bootstrap of one twin Lambda execution environment; the parent side is lambda_runtime.py.

Run as `python -I -S lambda_worker.py <reply fd> <handler> <sys.path entries...>` with fd 1 and
fd 2 already pointing at the parent's capture file. It runs before any layer package is
importable, so it uses the standard library only. Protocol: one JSON line on fd <reply fd>
after init ({"error": ..., "max_memory_mb": ...}), then for each JSON request line read from
stdin one JSON reply line; the worker exits when stdin closes.
"""

from __future__ import annotations

import decimal
import importlib
import io
import json
import logging
import os
import resource
import signal
import sys
import time
import traceback
from collections.abc import Callable
from types import TracebackType
from typing import Any, TextIO

Handler = Callable[[Any, "LambdaContext"], Any]


class InjectedFault(Exception):
    """A function error the twin was told to produce (fault-injection tests)."""


class LambdaContext:
    """The attributes of the real context object that handlers and powertools read."""

    def __init__(self, request: dict[str, Any]) -> None:
        self.function_name = os.environ["AWS_LAMBDA_FUNCTION_NAME"]
        self.function_version = os.environ["AWS_LAMBDA_FUNCTION_VERSION"]
        self.invoked_function_arn: str = request["arn"]
        self.memory_limit_in_mb = int(os.environ["AWS_LAMBDA_FUNCTION_MEMORY_SIZE"])
        self.aws_request_id: str = request["request_id"]
        self.log_group_name = os.environ["AWS_LAMBDA_LOG_GROUP_NAME"]
        self.log_stream_name = os.environ["AWS_LAMBDA_LOG_STREAM_NAME"]
        self.identity = None
        self.client_context = None
        self._deadline_ms: float = request["deadline_ms"]

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int(self._deadline_ms - time.time() * 1000))


class _RequestIdFilter(logging.Filter):
    request_id = ""

    def filter(self, record: logging.LogRecord) -> bool:
        record.aws_request_id = self.request_id
        return True


class _Encoder(json.JSONEncoder):
    """Lambda's marshaller: DynamoDB's Decimals are numbers, text is not escaped to ASCII."""

    def default(self, o: Any) -> Any:
        return float(o) if isinstance(o, decimal.Decimal) else super().default(o)


def _unbuffered(fd: int) -> TextIO:
    # Lambda's runtime writes through at once: output of a function that is then killed
    # (timeout, crash) must already be in the capture file.
    raw = io.FileIO(fd, "w", closefd=False)
    return io.TextIOWrapper(raw, encoding="utf-8", errors="backslashreplace", write_through=True)


def _error(error_type: str, message: str, tb: TracebackType | None, request_id: str) -> str:
    """The error payload, logged the way Lambda's runtime logs it."""
    stack = traceback.format_list(traceback.extract_tb(tb)) if tb is not None else []
    lines = [f"[ERROR] {error_type}: {message}", "Traceback (most recent call last):"]
    print("\n".join(lines + [line for entry in stack for line in entry.splitlines()]))
    payload = {
        "errorMessage": message,
        "errorType": error_type,
        "requestId": request_id,
        "stackTrace": stack,
    }
    return json.dumps(payload)


def _past_bootstrap(exc: BaseException) -> TracebackType | None:
    """The traceback without this bootstrap's frame, which Lambda's runtime leaves out too."""
    return exc.__traceback__.tb_next if exc.__traceback__ is not None else None


def _max_memory_mb() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024


def _init(handler_name: str) -> tuple[Handler | None, str | None]:
    module_name, _, attr = handler_name.rpartition(".")
    try:
        module = importlib.import_module(module_name.replace("/", "."))
    except ImportError as exc:
        message = f"Unable to import module '{module_name}': {exc}"
        return None, _error("Runtime.ImportModuleError", message, None, "")
    except SyntaxError as exc:
        message = f"Syntax error in module '{module_name}': {exc}"
        return None, _error("Runtime.UserCodeSyntaxError", message, None, "")
    except Exception as exc:
        return None, _error(type(exc).__name__, str(exc), _past_bootstrap(exc), "")
    handler = getattr(module, attr, None)
    if handler is None:
        message = f"Handler '{attr}' missing on module '{module_name}'"
        return None, _error("Runtime.HandlerNotFound", message, None, "")
    return handler, None


def _invoke(handler: Handler, request: dict[str, Any], ids: _RequestIdFilter) -> dict[str, Any]:
    request_id: str = request["request_id"]
    ids.request_id = request_id
    os.environ["_X_AMZN_TRACE_ID"] = request["trace_id"]
    if request["fault"] == "crash":
        os.kill(os.getpid(), signal.SIGKILL)
    started, cpu = time.perf_counter(), time.process_time()
    errored = True
    try:
        if request["fault"] == "error":
            name = os.environ["AWS_LAMBDA_FUNCTION_NAME"]
            raise InjectedFault(f"{name}: injected function error")
        result = handler(json.loads(request["event"]), LambdaContext(request))
    except Exception as exc:
        payload = _error(type(exc).__name__, str(exc), _past_bootstrap(exc), request_id)
    else:
        try:
            payload, errored = _Encoder(ensure_ascii=False).encode(result), False
        except (TypeError, ValueError) as exc:
            message = f"Unable to marshal response: {exc}"
            payload = _error("Runtime.MarshalError", message, None, request_id)
    return {
        "payload": payload,
        "errored": errored,
        "duration_ms": (time.perf_counter() - started) * 1000,
        "cpu_s": time.process_time() - cpu,
        "max_memory_mb": _max_memory_mb(),
    }


def main() -> None:
    reply_fd, handler_name, *paths = sys.argv[1:]
    os.set_inheritable(int(reply_fd), False)
    replies = open(int(reply_fd), "w", encoding="utf-8")  # noqa: SIM115 (lives as long as we do)
    # Requests arrive on stdin; the function gets an empty stdin, as on Lambda.
    requests = open(os.dup(0), encoding="utf-8")  # noqa: SIM115
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    sys.stdout, sys.stderr = _unbuffered(1), _unbuffered(2)
    sys.path[:0] = paths
    ids = _RequestIdFilter()
    lambda_handler = logging.StreamHandler(sys.stdout)
    lambda_handler.setFormatter(
        logging.Formatter(
            "[%(levelname)s]\t%(asctime)s.%(msecs)03dZ\t%(aws_request_id)s\t%(message)s",
            "%Y-%m-%dT%H:%M:%S",
        )
    )
    lambda_handler.addFilter(ids)
    logging.getLogger().addHandler(lambda_handler)

    def reply(message: dict[str, Any]) -> None:
        replies.write(json.dumps(message) + "\n")
        replies.flush()

    handler, error = _init(handler_name)
    reply({"error": error, "max_memory_mb": _max_memory_mb()})
    if handler is None:
        return
    for line in requests:
        reply(_invoke(handler, json.loads(line), ids))


if __name__ == "__main__":
    main()
    # Threads the function left running must not keep a finished environment alive.
    os._exit(0)
