"""The twin's stand-in for an EKS cluster's Kubernetes API server: the REST API over HTTPS
on 127.0.0.1, backed by an ObjectStore, so that lightkube (and the service's adapter on it)
runs unchanged against it.

Emulated: the resource URL layout (/api/v1, /apis/<group>/<version>, namespaced and
cluster-scoped paths, cluster-wide lists of namespaced resources), list / get / create /
patch (merge and strategic-merge, the latter applied as merge) / update / delete with
DeleteOptions, the status and pods/eviction subresources, label and field selectors, Status
error bodies, bearer-token authentication, /version and minimal discovery (/api, /apis). As
on a real cluster, a create through the API drops `.status` where there is a status
subresource; the twin's controllers, writing to the store directly, set it.
Every write is admitted against the resource's structural schema (hyperguard.twin.kube.
schema: the vendored upstream CRDs, the built-in kinds' schemas): unknown fields pruned with
a `Warning` header (fieldValidation=Warn, kube-apiserver's default), refused with 400 under
fieldValidation=Strict, kept silently under Ignore; defaults applied; 422 Invalid with the
fields in details.causes. Watches (`watch=1` or `watch=true` on any list URL) stream watch
events from the resourceVersion asked for (hyperguard.twin.kube.watch).

Not emulated: pagination (limit and continue are ignored: a list returns everything), dry
runs (400), deletecollection, RBAC authorization, admission webhooks and plugins other than
NamespaceLifecycle, server-side apply, JSON patch, protobuf, table output.
"""

from __future__ import annotations

import base64
import collections
import contextlib
import io
import itertools
import json
import logging
import socket
import ssl
import tempfile
import threading
from collections.abc import Callable
from typing import Any

from werkzeug.serving import BaseWSGIServer, WSGIRequestHandler, make_server
from werkzeug.wrappers import Request, Response

from hyperguard.twin.kube import schema
from hyperguard.twin.kube.auth import Authenticator
from hyperguard.twin.kube.store import (
    PODS,
    RESOURCES,
    Admission,
    KubeError,
    Obj,
    ObjectStore,
    ResourceType,
    resource_for,
)
from hyperguard.twin.kube.tls import generate_certificates
from hyperguard.twin.kube.watch import DEFAULT_TIMEOUT_S, WatchHub, WatchRequest

GIT_VERSION = "v1.31.0-eks-twin"
PATCH_TYPES = {
    "application/merge-patch+json": "merge",
    "application/strategic-merge-patch+json": "strategic",
}
FIELD_VALIDATION = ("Ignore", "Warn", "Strict")
EVICTIONS = ResourceType("policy", "v1", "Eviction", "evictions", True, status_subresource=False)
_log = logging.getLogger(__name__)


# kube-apiserver refuses a request body over 3 MiB (k8s.io/apiserver pkg/server/config.go,
# NewConfig: MaxRequestBodyBytes, twice etcd's 1.5 MiB request limit) with 413.
MAX_REQUEST_BODY_BYTES = 3 * 1024 * 1024
IDLE_CONNECTION_S = 60.0
"""An idle kept-alive connection is closed after this (its thread ends)."""


class _Handler(WSGIRequestHandler):
    """One client connection, kept open between requests as kube-apiserver keeps it (HTTP/1.1
    keep-alive; lightkube's pool reuses it). werkzeug's development handler closes every
    connection after its response and then waits up to 10 ms to drain it, because
    http.server cannot tell where an unread body ends: each of the service's calls would pay
    a TLS handshake and that wait (14 ms a call here, 4 of them CPU). This handler reads the
    whole body (Content-Length, at most MAX_REQUEST_BODY_BYTES) before the application runs,
    so the next request starts where this one ended."""

    timeout = IDLE_CONNECTION_S

    def log(self, type: str, message: str, *args: Any) -> None:
        # Request lines would drown the twin's own output; keep them for debugging only.
        _log.debug(message, *args)

    def setup(self) -> None:
        super().setup()
        # Go's net package sets TCP_NODELAY on every connection; without it a response's
        # body waits for the ACK of its headers (Nagle against delayed ACK: 40 ms a call).
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        connections = getattr(self.server, "connections", None)
        if connections is not None:
            connections.add(self.connection)

    def finish(self) -> None:
        connections = getattr(self.server, "connections", None)
        if connections is not None:
            connections.discard(self.connection)
        super().finish()

    def run_wsgi(self) -> None:
        length = self.headers.get("Content-Length", "0").strip() or "0"
        if self.headers.get("Transfer-Encoding") or not length.isdigit():
            # Not sent by kube clients; without a length the body's end is unknown.
            self.close_connection = True
            message = "a request body needs a Content-Length"
            self._respond_plain(411, _status(411, "BadRequest", message))
            return
        if int(length) > MAX_REQUEST_BODY_BYTES:
            self.close_connection = True  # its body is left unread
            message = f"Request entity too large: limit is {MAX_REQUEST_BODY_BYTES}"
            self._respond_plain(413, _status(413, "RequestEntityTooLarge", message))
            return
        body = self.rfile.read(int(length))
        environ = self.make_environ()
        environ["wsgi.input"] = io.BytesIO(body)
        started: list[Any] = []
        written: list[bytes] = []  # WSGI's legacy write(), sent before the result

        def start_response(
            status: str, headers: list[tuple[str, str]], *_: Any
        ) -> Callable[[bytes], object]:
            started[:] = [status, headers]
            return written.append

        result = self.server.app(environ, start_response)
        try:
            status, headers = started
            code, _, reason = status.partition(" ")
            self.send_response(int(code), reason)
            names = set()
            for name, value in headers:
                self.send_header(name, value)
                names.add(name.lower())
            chunked = "content-length" not in names and int(code) not in (204, 304)
            if chunked:  # a watch's stream
                self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for data in itertools.chain(written, result):
                if data:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data) if chunked else data)
                    self.wfile.flush()
            if chunked:
                self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (ConnectionError, TimeoutError, ssl.SSLError):
            self.close_connection = True  # the client went away, e.g. mid-watch
        finally:
            close = getattr(result, "close", None)
            if close is not None:
                close()

    def _respond_plain(self, code: int, body: Obj) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)


def _json(code: int, body: Any) -> Response:
    # lightkube turns an error into ApiError only when Content-Type is exactly this.
    return Response(json.dumps(body), status=code, content_type="application/json")


def _status(
    code: int,
    reason: str | None = None,
    message: str | None = None,
    details: dict[str, Any] | None = None,
) -> Obj:
    status: Obj = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success" if code < 400 else "Failure",
        "code": code,
    }
    if message:
        status["message"] = message
    if reason:
        status["reason"] = reason
    if details:
        status["details"] = details
    return status


def _admission(
    request: Request, rt: ResourceType, sub: str | None, warnings: list[str]
) -> Admission:
    """The schema admission of this request's write, as its fieldValidation asks."""
    level = request.args.get("fieldValidation") or "Warn"
    if level not in FIELD_VALIDATION:
        message = f"fieldValidation parameter unsupported value: {level!r}"
        raise KubeError(400, "BadRequest", message)
    noted = warnings if level == "Warn" else None
    return lambda obj: schema.admit(
        rt, obj, subresource=sub, strict=level == "Strict", warnings=noted
    )


def _warned(response: Response, warnings: list[str]) -> Response:
    """kube-apiserver's warnings: one `Warning: 299 - "<text>"` header each (RFC 7234)."""
    for warning in warnings:
        response.headers.add("Warning", f"299 - {json.dumps(warning)}")
    return response


def _no_route() -> KubeError:
    return KubeError(404, "NotFound", "the server could not find the requested resource")


def _body(request: Request, *, required: bool = True) -> Any:
    data = request.get_data()
    if not data and not required:
        return {}
    try:
        return json.loads(data)
    except ValueError as error:
        raise KubeError(400, "BadRequest", f"the request body is not valid JSON: {error}") from None


def _object(request: Request) -> Obj:
    body = _body(request)
    if not isinstance(body, dict):
        raise KubeError(400, "BadRequest", "the request body must be a JSON object")
    return body


class KubeApiServer:
    """A Kubernetes API server on `host`:`port` (0: any free port); the object is also the
    WSGI application. `stats` counts requests as "<verb> <resource>[/<subresource>]",
    `calls_by_user` the same per authenticated user."""

    def __init__(
        self,
        store: ObjectStore,
        *,
        authenticator: Authenticator,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.store = store
        self.authenticator = authenticator
        self.host = host
        self.port = port
        self.stats: collections.Counter[str] = collections.Counter()
        self.calls_by_user: collections.Counter[tuple[str, str]] = collections.Counter()
        self._server: BaseWSGIServer | None = None
        self._thread: threading.Thread | None = None
        self._ca_pem: bytes | None = None
        self.watches = WatchHub(store)

    def start(self) -> None:
        if self._server is not None:
            raise RuntimeError("the Kubernetes API server is already running")
        # The server loads its certificate and key at once; the files need not outlive it.
        with tempfile.TemporaryDirectory(prefix="hyperguard-kube-") as directory:
            ca_pem, cert, key = generate_certificates(directory)
            server = make_server(
                self.host,
                self.port,
                self,
                threaded=True,
                request_handler=_Handler,
                ssl_context=(str(cert), str(key)),
            )
        server.connections = set()  # type: ignore[attr-defined]  # open ones, closed by stop()
        self._ca_pem, self._server = ca_pem, server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.1}, name="kube-api", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        if self._server is None:
            return
        self.watches.close()
        self._server.shutdown()
        self._server.server_close()
        for connection in list(self._server.connections):  # type: ignore[attr-defined]
            # A kept-alive client's thread waits on it: end it, as a stopped server does.
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join()
        self._server = self._thread = None

    def __enter__(self) -> KubeApiServer:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    @property
    def endpoint(self) -> str:
        if self._server is None:
            raise RuntimeError("the Kubernetes API server is not running")
        return f"https://{self.host}:{self._server.server_port}"

    @property
    def ca_data(self) -> str:
        """Base64 of the CA's PEM, as EKS DescribeCluster's certificateAuthority.data."""
        if self._ca_pem is None:
            raise RuntimeError("the Kubernetes API server has not been started")
        return base64.b64encode(self._ca_pem).decode()

    # WSGI

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        return self._respond(Request(environ))(environ, start_response)

    def _respond(self, request: Request) -> Response:
        try:
            if request.path == "/version":
                return _json(200, {"major": "1", "minor": "31", "gitVersion": GIT_VERSION})
            user = self._authenticate(request)
            with self.store.lock:
                return self._dispatch(request, user)
        except KubeError as error:
            status = _status(error.code, error.reason, error.message, error.details)
            return _json(error.code, status)
        except Exception as error:
            _log.exception("kube API %s %s failed", request.method, request.path)
            return _json(500, _status(500, "InternalError", f"internal error: {error}"))

    def _authenticate(self, request: Request) -> str:
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        user = self.authenticator.authenticate(token.strip()) if scheme == "Bearer" else None
        if user is None:
            raise KubeError(401, "Unauthorized", "Unauthorized")
        return user

    def _dispatch(self, request: Request, user: str) -> Response:
        parts = [p for p in request.path.split("/") if p]
        if parts in (["api"], ["apis"]):
            return _json(200, self._discovery(parts))
        if parts[:2] == ["api", "v1"] and len(parts) > 2:
            group, version, rest = "", "v1", parts[2:]
        elif parts[:1] == ["apis"] and len(parts) > 3:
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise _no_route()
        namespace = None
        if rest[0] == "namespaces" and len(rest) >= 3:
            candidate = RESOURCES.get(f"{rest[2]}.{group}" if group else rest[2])
            if candidate is not None and candidate.namespaced:
                namespace, rest = rest[1], rest[2:]
        if len(rest) > 3:
            raise _no_route()
        rt = resource_for(group, version, rest[0])
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if rt.namespaced and namespace is None and (name is not None or request.method != "GET"):
            raise _no_route()
        args = request.args
        if "dryRun" in args:
            raise KubeError(400, "BadRequest", "dryRun is not supported by the twin's API server")
        verb = self._verb(request.method, rt, name, sub, watch=args.get("watch") in ("true", "1"))
        call = f"{verb} {rt.plural}" + (f"/{sub}" if sub else "")
        self.stats[call] += 1
        self.calls_by_user[(user, call)] += 1
        if verb == "watch":
            return self._watch(request, rt, namespace)
        return self._perform(verb, request, rt, namespace, name, sub, user)

    @staticmethod
    def _verb(
        method: str, rt: ResourceType, name: str | None, sub: str | None, *, watch: bool
    ) -> str:
        if name is None:
            verbs = {"GET": "watch" if watch else "list", "POST": "create"}
        elif sub is None:
            verbs = {"GET": "get", "PATCH": "patch", "PUT": "update", "DELETE": "delete"}
        elif sub == "status" and rt.status_subresource:
            verbs = {"GET": "get", "PATCH": "patch", "PUT": "update"}
        elif sub == "eviction" and rt == PODS:
            verbs = {"POST": "create"}
        else:
            raise _no_route()
        if method not in verbs:
            message = f"the server does not allow this method on the requested resource: {method}"
            raise KubeError(405, "MethodNotAllowed", message)
        return verbs[method]

    def _perform(
        self,
        verb: str,
        request: Request,
        rt: ResourceType,
        namespace: str | None,
        name: str | None,
        sub: str | None,
        user: str,
    ) -> Response:
        store, args = self.store, request.args
        warnings: list[str] = []
        admit = _admission(request, rt, sub, warnings)
        if verb == "list":
            with store.lock:  # serialised as stored, at one resourceVersion, not copied first
                items = store.list(
                    rt,
                    namespace,
                    args.get("labelSelector"),
                    args.get("fieldSelector"),
                    copies=False,
                )
                return _json(
                    200,
                    {
                        "apiVersion": rt.api_version,
                        "kind": f"{rt.kind}List",
                        "metadata": {"resourceVersion": store.current_resource_version},
                        "items": items,
                    },
                )
        if verb == "create" and sub == "eviction":
            assert name is not None and namespace is not None
            eviction = schema.admit(EVICTIONS, _object(request), warnings=warnings)
            if (eviction.get("metadata") or {}).get("name") not in (None, name):
                raise KubeError(400, "BadRequest", "name in URL does not match name in Eviction")
            store.evict(namespace, name, user=user)
            return _warned(_json(201, _status(201)), warnings)
        if verb == "create":
            obj = _object(request)
            for field, expected in (("apiVersion", rt.api_version), ("kind", rt.kind)):
                if obj.get(field) not in (None, expected):
                    message = f"{field} {obj[field]!r} does not match {expected!r} of the URL"
                    raise KubeError(400, "BadRequest", message)
            if rt.status_subresource:
                # As Kubernetes: status is the controllers' to write, not the creator's.
                obj.pop("status", None)
            created = store.create(rt, obj, namespace, user=user, admit=admit)
            return _warned(_json(201, created), warnings)
        assert name is not None
        if verb == "get":
            return _json(200, store.get(rt, name, namespace))
        if verb == "patch":
            patch_type = PATCH_TYPES.get(request.mimetype, request.mimetype)
            patched = store.patch(
                rt,
                name,
                _body(request),
                namespace,
                patch_type=patch_type,
                subresource=sub,
                user=user,
                admit=admit,
            )
            return _warned(_json(200, patched), warnings)
        if verb == "update":
            obj = _object(request)
            if (obj.get("metadata") or {}).get("name") != name:
                raise KubeError(400, "BadRequest", "the name of the object does not match the URL")
            replaced = store.replace(
                rt, name, obj, namespace, subresource=sub, user=user, admit=admit
            )
            return _warned(_json(200, replaced), warnings)
        options = _body(request, required=False)
        if not isinstance(options, dict):
            raise KubeError(400, "BadRequest", "DeleteOptions must be a JSON object")
        propagation = args.get("propagationPolicy") or options.get("propagationPolicy")
        if propagation is None and options.get("orphanDependents") is not None:
            propagation = "Orphan" if options["orphanDependents"] else "Background"
        grace = args.get("gracePeriodSeconds", options.get("gracePeriodSeconds"))
        try:
            grace_period_s = None if grace is None else int(grace)
        except (TypeError, ValueError):
            raise KubeError(400, "BadRequest", "gracePeriodSeconds must be an integer") from None
        deleted = store.delete(
            rt, name, namespace, grace_period_s=grace_period_s, propagation=propagation, user=user
        )
        return _json(200, deleted)

    def _watch(self, request: Request, rt: ResourceType, namespace: str | None) -> Response:
        args = request.args
        try:
            # 0 or none: the server's own request timeout, as kube-apiserver.
            timeout_s = float(args.get("timeoutSeconds") or 0) or DEFAULT_TIMEOUT_S
        except ValueError:
            raise KubeError(400, "BadRequest", "timeoutSeconds must be an integer") from None
        watch = WatchRequest(
            rt=rt,
            namespace=namespace,
            resource_version=args.get("resourceVersion"),
            label_selector=args.get("labelSelector"),
            field_selector=args.get("fieldSelector"),
            timeout_s=timeout_s,
            bookmarks=args.get("allowWatchBookmarks") in ("true", "1"),
        )
        # Streamed after the store's lock is released; the first events are taken under it.
        return Response(self.watches.open(watch), status=200, content_type="application/json")

    @staticmethod
    def _discovery(parts: list[str]) -> Obj:
        if parts == ["api"]:
            return {"kind": "APIVersions", "apiVersion": "v1", "versions": ["v1"]}
        versions = sorted({(rt.group, rt.api_version) for rt in RESOURCES.values() if rt.group})
        groups = [
            {
                "name": group,
                "versions": [{"groupVersion": api_version, "version": api_version.split("/")[1]}],
                "preferredVersion": {
                    "groupVersion": api_version,
                    "version": api_version.split("/")[1],
                },
            }
            for group, api_version in versions
        ]
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}
