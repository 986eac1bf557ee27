"""The CLI's API client backs off when the API is throttled: API Gateway's 429 (honouring
its Retry-After) on any call, and Lambda's throttling surfaced as 502/503/504 only on calls
that repeat harmlessly; everything else is reported at once. Against a stub API on
127.0.0.1."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from hyperguard.cli.api import ATTEMPTS, ServiceApi
from hyperguard.cli.output import CliError


class StubApi(ThreadingHTTPServer):
    """Answers each request with the next (status, headers) of `script`, then 200."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Answer)
        self.script: list[tuple[int, dict[str, str]]] = []
        self.seen: list[str] = []


class Answer(BaseHTTPRequestHandler):
    server: StubApi

    def _answer(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.server.seen.append(self.command)
        status, headers = self.server.script.pop(0) if self.server.script else (200, {})
        body = json.dumps({"message": "Too Many Requests"} if status >= 400 else {"ok": 1})
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body.encode())

    do_GET = do_POST = do_PUT = do_DELETE = _answer

    def log_message(self, format: str, *args: Any) -> None:
        pass


class Twin:
    is_twin = True

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint

    def twin_get(self, what: str) -> dict[str, str]:
        return {"api_endpoint": self.endpoint}


@pytest.fixture
def stub() -> Iterator[StubApi]:
    server = StubApi()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def client(stub: StubApi, waits: list[float]) -> ServiceApi:
    host, port = stub.server_address[:2]
    return ServiceApi(Twin(f"http://{host!s}:{port}"), sleep=waits.append)


def test_a_throttled_call_waits_retry_after_and_succeeds(stub: StubApi) -> None:
    waits: list[float] = []
    stub.script = [(429, {"Retry-After": "2"}), (429, {"Retry-After": "1"})]
    assert client(stub, waits).call("POST", "/jobs", {"image": "x"}) == {"ok": 1}
    assert stub.seen == ["POST"] * 3
    assert len(waits) == 2 and waits[0] >= 2 and waits[1] >= 1


def test_lambda_throttling_is_retried_only_where_a_repeat_is_harmless(stub: StubApi) -> None:
    waits: list[float] = []
    api = client(stub, waits)
    stub.script = [(502, {})]
    assert api.call("GET", "/jobs") == {"ok": 1}
    stub.script = [(502, {})]
    with pytest.raises(CliError, match="502"):
        api.call("POST", "/jobs", {"image": "x"})  # it may have been applied
    stub.script = [(503, {})]
    assert api.call("POST", "/jobs", {"image": "x"}, **{"Idempotency-Key": "k"}) == {"ok": 1}
    stub.script = [(422, {})]
    with pytest.raises(CliError, match="422"):
        api.call("PUT", "/policies/burst", {})
    assert len(waits) == 2


def test_a_call_throttled_every_time_gives_up_after_the_last_attempt(stub: StubApi) -> None:
    waits: list[float] = []
    stub.script = [(429, {})] * ATTEMPTS
    with pytest.raises(CliError, match="429"):
        client(stub, waits).call("GET", "/views/teams")
    assert len(stub.seen) == ATTEMPTS and len(waits) == ATTEMPTS - 1
