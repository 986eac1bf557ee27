"""The twin's EKS token authenticator: a TokenReview webhook kube-apiserver calls for every
bearer token it does not know (--authentication-token-webhook-config-file), as EKS's
authenticator runs beside its API servers.

The mapping of a token to a Kubernetes identity is the caller's (`authenticate`); the twin
maps EKS tokens as EKS does, through its access entries (`hyperguard_twin.aws`). This module only
speaks the authentication.k8s.io/v1 TokenReview protocol over TLS.
"""

from __future__ import annotations

import json
import logging
import ssl
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from hyperguard_twin.plane.pki import KeyPair

MAX_BODY = 64 * 1024
_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Identity:
    """The user a token stands for, as a TokenReview's status.user says it."""

    username: str
    groups: tuple[str, ...] = ()
    uid: str = ""
    extra: dict[str, list[str]] = field(default_factory=dict)

    def as_user(self) -> dict[str, Any]:
        user: dict[str, Any] = {"username": self.username, "groups": list(self.groups)}
        if self.uid:
            user["uid"] = self.uid
        if self.extra:
            user["extra"] = self.extra
        return user


def review(body: bytes, authenticate: Callable[[str], Identity | None]) -> dict[str, Any]:
    """The TokenReview answer to a TokenReview request body."""
    try:
        request = json.loads(body)
        token = str(request["spec"]["token"])
    except (ValueError, KeyError, TypeError):
        return _answer(None, "malformed TokenReview")
    try:
        identity = authenticate(token)
    except Exception as error:  # an authenticator failure is a refusal, never a 500
        _log.warning("token authentication failed: %s", error)
        return _answer(None, "the token could not be verified")
    return _answer(identity, None if identity else "the token is not valid for this cluster")


def _answer(identity: Identity | None, error: str | None) -> dict[str, Any]:
    status: dict[str, Any] = {"authenticated": identity is not None}
    if identity is not None:
        status["user"] = identity.as_user()
    if error:
        status["error"] = error
    return {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "status": status}


class TokenReviewServer:
    def __init__(
        self, host: str, serving: KeyPair, authenticate: Callable[[str], Identity | None]
    ) -> None:
        authenticate_ = authenticate

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if length > MAX_BODY:
                    self.send_error(413)
                    return
                answer = json.dumps(review(self.rfile.read(length), authenticate_)).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: Any) -> None:
                _log.debug(format, *args)

        self._server = ThreadingHTTPServer((host, 0), Handler)
        self._server.daemon_threads = True
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(serving.cert), str(serving.key))
        self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        self.url = f"https://{host}:{self._server.server_address[1]}/authenticate"
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="token-authenticator", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
