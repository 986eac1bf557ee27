"""The embedded AWS emulator: moto in server mode on 127.0.0.1, in this process.

These emulator gaps are closed, in-process, and reported by `hyperguard twin status`:
- moto's own, per AWS service, patched before it serves (hyperguard_twin.moto_gaps);
- moto enforces no IAM: a call signed with a stack role's credentials (a function's, the
  forwarder's) is authorized against the role's policies before moto serves it
  (hyperguard_twin.iam).

Tests aim DynamoDB's errors at chosen calls here (hyperguard_twin.dynamodb_faults).
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import re
import socket
import threading
import warnings
from collections import Counter
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs

from werkzeug.serving import ThreadedWSGIServer, WSGIRequestHandler

from hyperguard_twin import dynamodb
from hyperguard_twin.dynamodb_faults import DynamoDbFaults
from hyperguard_twin.iam.authorizations import peek_body
from hyperguard_twin.iam.enforcement import IamEnforcement
from hyperguard_twin.moto_gaps import awslambda, cloudformation, events, stepfunctions
from hyperguard_twin.moto_gaps.awslambda import Invoker
from hyperguard_twin.moto_gaps.performance import (
    answer_handler_methods_by_name,
    cache_backend_lookup,
    install_jsonpath_cache,
    parse_each_state_machine_once,
    parse_json_templates_as_json,
)

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Any]


_CREDENTIAL = re.compile(r"Credential=([^/]+)/[^/]+/[^/]+/([^/]+)/")


ONE_AT_A_TIME = ("dynamodb", "ec2")
"""The services whose moto backends are not safe to call from two threads at once, though AWS
serves their requests concurrently:
- DynamoDB applies each request to an item atomically; moto does not (an UpdateItem of a new
  key stores the bare key, then sets the attributes in place, and a Scan in another thread
  can read the item in between).
- EC2's RunInstances takes each instance's private IP from its subnet's generator, and two at
  once failed one of them with `ValueError: generator already executing`, an error 500 to
  Karpenter's launch (`bench/plane_burst.py`, 1,000 NodeClaims, on moto's own server,
  2026-12-03; D213)."""


def api_call(environ: dict[str, Any]) -> tuple[str, str]:
    """(access key id, "service:Operation") of a SigV4-signed request: the operation from
    X-Amz-Target (JSON protocols) or the Action parameter (query protocols), else the HTTP
    method (REST protocols such as S3's). The body is read and put back for moto."""
    found = _CREDENTIAL.search(environ.get("HTTP_AUTHORIZATION", ""))
    key, service = found.groups() if found else ("anonymous", "unknown")
    target = environ.get("HTTP_X_AMZ_TARGET", "")
    operation = target.rsplit(".", 1)[-1] if target else ""
    if not operation:
        query = parse_qs(environ.get("QUERY_STRING", ""))
        operation = query.get("Action", [""])[0]
    if not operation and environ.get("CONTENT_TYPE", "").startswith(
        "application/x-www-form-urlencoded"
    ):
        body = peek_body(environ)
        operation = parse_qs(body.decode(errors="replace")).get("Action", [""])[0]
    return key, f"{service}:{operation or environ.get('REQUEST_METHOD', '?')}"


def quiet_moto() -> None:
    """moto's warnings and logs, down to its errors."""
    warnings.filterwarnings("ignore", message="Tried to parse", category=UserWarning)
    logging.getLogger("moto").setLevel(logging.ERROR)
    # The Step Functions interpreter logs every failed state with a dump of its own
    # objects; the execution's history (`executions show`, `incidents show`) says it
    # readably, as on AWS.
    logging.getLogger("moto.stepfunctions.parser").setLevel(logging.CRITICAL)


class QuietRequestHandler(WSGIRequestHandler):
    """werkzeug's request handler, quiet, and keeping a connection open for the client's
    next request (HTTP/1.1 keep-alive), as AWS's endpoints do. werkzeug closes every
    connection because http.server cannot tell where an unread request body ends; this
    handler reads each body whole before the app runs, so the next request starts where
    this one ended. A chunked request body still closes its connection. Without it every
    AWS call was a new connection and a new server thread (about 80 a second on a busy
    twin), which cost a call about 40 % more CPU, the client's and the server's together
    (`bench/emulator_calls.py`).
    An idle kept connection closes after `timeout` seconds."""

    server: KeepAliveServer
    timeout = 120
    _keep_alive = False

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        return None

    def log_error(self, format: str, *args: Any) -> None:
        # http.server says "Request timed out" when no next request came on a kept
        # connection within `timeout`: the idle close above, not an error (CI logs had many).
        if not format.startswith("Request timed out"):
            super().log_error(format, *args)

    def setup(self) -> None:
        super().setup()
        # werkzeug writes a response's headers and body apart: without this, Nagle's
        # algorithm holds the body for the client's delayed ACK (40 ms a call, kept alive).
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.server.connections.add(self.connection)

    def finish(self) -> None:
        self.server.connections.discard(self.connection)
        super().finish()

    def run_wsgi(self) -> None:
        connection = self.rfile
        try:
            super().run_wsgi()
        finally:
            self.rfile = connection

    def make_environ(self) -> dict[str, Any]:
        environ = super().make_environ()
        chunked = environ.get("HTTP_TRANSFER_ENCODING", "").lower() == "chunked"
        self._keep_alive = not chunked and self.request_version == "HTTP/1.1"
        if self._keep_alive:
            length = int(environ.get("CONTENT_LENGTH") or 0)
            environ["wsgi.input"] = io.BytesIO(self.rfile.read(length) if length > 0 else b"")
            # werkzeug discards whatever the connection holds after its response, which
            # would be the client's next request: it finds nothing to discard here.
            self.rfile = io.BytesIO()
        return environ

    def send_header(self, keyword: str, value: str) -> None:
        if self._keep_alive and keyword.lower() == "connection" and value.lower() == "close":
            return
        super().send_header(keyword, value)


class KeepAliveServer(ThreadedWSGIServer):
    """A thread a connection, each kept open between requests (`QuietRequestHandler`)."""

    def __init__(self, host: str, port: int, app: WSGIApp) -> None:
        super().__init__(host, port, app, QuietRequestHandler)
        self.connections: set[socket.socket] = set()

    def stop(self) -> None:
        """Stop serving, and end the connections kept open for clients' next requests
        (their handler threads wait on them): a stopped server answers nothing more."""
        self.shutdown()
        self.server_close()
        for connection in list(self.connections):
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)


class Emulator:
    """moto's server app behind a thread-per-request WSGI server, plus the twin's own routes."""

    def __init__(self, host: str = "127.0.0.1", port: int = 4566) -> None:
        self.host = host
        self.port = port
        self._server: KeepAliveServer | None = None
        self._thread: threading.Thread | None = None
        self.routes: dict[str, Callable[[dict[str, Any]], tuple[int, Any]]] = {}
        self.calls: Counter[tuple[str, str]] = Counter()
        """AWS API calls served: (caller's access key id, "service:Operation")."""
        self.iam = IamEnforcement()
        """IAM for the stack's roles' credentials (hyperguard_twin.iam); everyone else is let be."""
        self.faults = DynamoDbFaults()
        """DynamoDB errors answered in moto's place, as tests aim them."""
        self._one_at_a_time = {service: threading.Lock() for service in ONE_AT_A_TIME}
        """A lock for each service in `ONE_AT_A_TIME`: its requests are served one after
        another."""
        self._clients: dict[tuple[str, str, str], Any] = {}
        self._clients_lock = threading.Lock()

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.port}"

    def client(self, service: str, region: str) -> Any:
        """A client of `service` here, made once a service, region and endpoint: a twin's
        start asked for about twenty, and each new one cost botocore 30 ms of CPU (D202).
        botocore's clients are thread-safe."""
        import boto3

        key = (service, region, self.endpoint)
        with self._clients_lock:
            if key not in self._clients:
                self._clients[key] = boto3.client(
                    service, endpoint_url=self.endpoint, region_name=region
                )
            return self._clients[key]

    def start(self, invoker: Invoker) -> None:
        """Serve on `port` (0: a free one; `port` and `endpoint` then tell which)."""
        from moto.core.config import default_user_config
        from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app

        default_user_config["stepfunctions"] = {"execute_state_machine": True}
        cache_backend_lookup()
        answer_handler_methods_by_name()
        dynamodb.install()
        install_jsonpath_cache()
        parse_json_templates_as_json()
        parse_each_state_machine_once()
        awslambda.route_invocations(invoker)
        cloudformation.install()
        events.install()
        stepfunctions.install()
        moto_app = DomainDispatcherApplication(create_backend_app)
        self._server = KeepAliveServer(self.host, self.port, self._wrap(moto_app))
        self.port = self._server.server_port
        os.environ["MOTO_PORT"] = str(self.port)  # Step Functions calls Lambda through it
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True, name="moto")
        self._thread.start()

    def _wrap(self, moto_app: WSGIApp) -> WSGIApp:
        def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
            path = environ.get("PATH_INFO", "")
            route = self.routes.get(path)
            if route is None:
                key, call = api_call(environ)
                self.calls[(key, call)] += 1
                refused = self.iam.judge(environ, key, call)
                if refused is not None:
                    status, headers, payload = refused
                    start_response(f"{status} Error", headers)
                    return [payload]
                injected = self.faults.take(environ, key, call)
                serial = self._one_at_a_time.get(call.partition(":")[0])
                if injected is None and serial is not None:
                    with serial:
                        return moto_app(environ, start_response)
                if injected is None:
                    return moto_app(environ, start_response)
                status, body = injected
                content_type = "application/x-amz-json-1.0"
            else:
                try:
                    status, body = route(environ)
                except Exception as exc:  # reported to the caller, never kills the server
                    status, body = 500, {"error": f"{type(exc).__name__}: {exc}"}
                content_type = "application/json"
            payload = json.dumps(body, default=str).encode()
            start_response(
                f"{status} {'OK' if status < 400 else 'Error'}",
                [("Content-Type", content_type), ("Content-Length", str(len(payload)))],
            )
            return [payload]

        return app

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None
