"""The twin's HTTP servers (the AWS emulator, the API's stage) keep a connection open for the
client's next request, as AWS's endpoints do, and never read a next request as this one's
body. A tiny WSGI app on a real socket stands in for moto."""

from __future__ import annotations

import http.client
import json
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from hyperguard_twin.emulator import KeepAliveServer, QuietRequestHandler


def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
    """Answers where the request came from; reads its body only when asked to, and streams
    its answer (no Content-Length) when asked to."""
    query = environ.get("QUERY_STRING", "")
    body = environ["wsgi.input"].read() if "read" in query else b""
    answer = json.dumps(
        {"port": environ["REMOTE_PORT"], "body": body.decode(), "path": environ["PATH_INFO"]}
    ).encode()
    if "stream" in query:
        start_response("200 OK", [("Content-Type", "application/json")])
        return iter([answer[:5], answer[5:]])
    start_response(
        "200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(answer)))]
    )
    return [answer]


@pytest.fixture
def server() -> Iterator[KeepAliveServer]:
    served = KeepAliveServer("127.0.0.1", 0, app)
    thread = threading.Thread(target=served.serve_forever, daemon=True)
    thread.start()
    yield served
    served.stop()


def ask(
    connection: http.client.HTTPConnection, path: str, body: bytes = b"", **headers: str
) -> tuple[http.client.HTTPResponse, dict[str, Any]]:
    connection.request("POST", path, body=body, headers=headers)
    response = connection.getresponse()
    return response, json.loads(response.read())


def test_one_connection_serves_request_after_request(server: KeepAliveServer) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", server.server_port, timeout=10)
    first, answer = ask(connection, "/a?read", b'{"Action": "one"}')
    assert first.getheader("Connection") is None
    assert answer["body"] == '{"Action": "one"}'
    # A body the app never reads is not taken for the next request, nor is the next
    # request taken for what is left of this one.
    _, unread = ask(connection, "/b", b"x" * 70_000)
    _, streamed = ask(connection, "/c?stream&read", b"three")
    assert (unread["path"], streamed["path"], streamed["body"]) == ("/b", "/c", "three")
    assert answer["port"] == unread["port"] == streamed["port"]  # the same connection


def test_a_chunked_request_closes_its_connection(server: KeepAliveServer) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", server.server_port, timeout=10)
    connection.request("POST", "/?read", body=iter([b"ab", b"cd"]), encode_chunked=True)
    response = connection.getresponse()
    assert json.loads(response.read())["body"] == "abcd"
    assert response.getheader("Connection") == "close"


def test_a_stopped_server_ends_the_connections_it_kept(server: KeepAliveServer) -> None:
    client = socket.create_connection(("127.0.0.1", server.server_port), timeout=10)
    client.sendall(b"GET /kept HTTP/1.1\r\nHost: twin\r\n\r\n")
    answered = b""
    while b"/kept" not in answered:
        answered += client.recv(4096)
    server.stop()
    assert client.recv(4096) == b""  # the server's end is closed, not left waiting


def test_an_idle_kept_connection_closes_quietly(
    server: KeepAliveServer, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """No next request within the handler's `timeout`: the connection closes, and werkzeug's
    log says no "Request timed out" (CI logs had hundreds); other errors it still says."""
    monkeypatch.setattr(QuietRequestHandler, "timeout", 0.2)
    client = socket.create_connection(("127.0.0.1", server.server_port), timeout=10)
    client.sendall(b"GET /kept HTTP/1.1\r\nHost: twin\r\n\r\n")
    answered = b""
    while b"/kept" not in answered:
        answered += client.recv(4096)
    while client.recv(4096):  # until the server closes it
        pass
    client.close()
    bad = socket.create_connection(("127.0.0.1", server.server_port), timeout=10)
    bad.sendall(b"NOT-HTTP\r\n\r\n")
    while bad.recv(4096):
        pass
    bad.close()
    server.stop()
    said = caplog.text
    assert "Request timed out" not in said
    assert "Bad request syntax ('NOT-HTTP')" in said
