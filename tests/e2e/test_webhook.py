"""The webhook on the twin. With `WebhookUrl` set, as `sam deploy --parameter-overrides`
sets it, the stack's EventBridge API destination posts IncidentOpened, IncidentEscalated
and IncidentResolved to an HTTPS endpoint: the body is the template's `WebhookTemplate`
filled from the event, and the connection's key header comes with it."""

from __future__ import annotations

import json
import os
import ssl
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest
from tests.deadlines import loaded
from tests.e2e.conftest import running_twin
from tests.e2e.test_recovery import Service

from hyperguard.models import IncidentStatus
from hyperguard_twin.plane.pki import ClusterPki
from hyperguard_twin.runtime import Twin

pytestmark = pytest.mark.e2e

SECRET = "s3cret-for-the-webhook"


@dataclass
class Hook:
    url: str
    posts: list[tuple[dict[str, str], Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def texts(self) -> list[str]:
        with self.lock:
            return [str(body.get("text")) for _, body in self.posts if isinstance(body, dict)]

    def wait_for(self, fragment: str, timeout_s: float = 60) -> dict[str, str]:
        """The headers (names in lower case) of the first post whose text has `fragment`."""
        deadline = time.monotonic() + loaded(timeout_s)
        while time.monotonic() < deadline:
            with self.lock:
                for headers, body in self.posts:
                    if isinstance(body, dict) and fragment in str(body.get("text")):
                        return headers
            time.sleep(0.2)
        raise AssertionError(
            f"no post with {fragment!r} within {loaded(timeout_s)}s: {self.texts()}"
        )


@pytest.fixture(scope="module")
def hook(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hook]:
    """An HTTPS endpoint (a certificate of a CA the process trusts through SSL_CERT_FILE,
    as a public endpoint's is trusted by EventBridge) that records what it is posted."""
    directory = Path(tmp_path_factory.mktemp("hook"))
    pki = ClusterPki(directory)
    serving = pki.serving("hook", "127.0.0.1", "localhost")
    cert, key = serving.cert, serving.key
    received = Hook(url="")

    class Recorder(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            with received.lock:
                headers = {k.lower(): v for k, v in self.headers.items()}
                received.posts.append((headers, json.loads(body or b"null")))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            return None

    server = HTTPServer(("127.0.0.1", 0), Recorder)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    received.url = f"https://127.0.0.1:{server.server_port}/hooks/hyperguard"
    saved = os.environ.get("SSL_CERT_FILE")
    os.environ["SSL_CERT_FILE"] = str(pki.ca)
    try:
        yield received
    finally:
        if saved is None:
            os.environ.pop("SSL_CERT_FILE", None)
        else:
            os.environ["SSL_CERT_FILE"] = saved
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def twin(hook: Hook) -> Iterator[Twin]:
    parameters = {"WebhookUrl": hook.url, "WebhookAuthValue": SECRET}
    with running_twin(stack_parameters=parameters) as running:
        yield running


def test_the_stack_creates_the_webhooks_connection_destination_and_rule(twin: Twin) -> None:
    assert twin.deployment is not None
    created = {r["type"] for r in twin.deployment.resources.values()}
    assert {"AWS::Events::Connection", "AWS::Events::ApiDestination"} <= created
    events = twin.client("events")
    (destination,) = events.list_api_destinations()["ApiDestinations"]
    assert destination["InvocationEndpoint"] == twin.config.stack_parameters["WebhookUrl"]
    assert destination["HttpMethod"] == "POST"


def test_an_incident_is_posted_when_it_opens_and_when_it_is_resolved(
    twin: Twin, hook: Hook
) -> None:
    service = Service(twin)
    faulty = service.nodes_of("mistral-7b-sft")[0]
    twin.fault(faulty, "gpu")
    incident = service.incident_for(faulty)
    headers = hook.wait_for(f"HyperGuard IncidentOpened: incident {incident.incident_id}")
    assert headers.get("x-hyperguard-webhook") == SECRET
    assert headers.get("content-type") == "application/json"
    hook.wait_for(f"HyperGuard IncidentResolved: incident {incident.incident_id}")
    opened = next(t for t in hook.texts() if t.startswith("HyperGuard IncidentOpened"))
    # The fault is reported by HyperPod's health agent and, as a node condition (XID 48), by
    # the in-cluster forwarder: the incident opens as whichever came first, and both ask for
    # a reboot.
    assert opened in {
        f"HyperGuard IncidentOpened: incident {incident.incident_id} on {faulty} in "
        f"{twin.config.cluster_name} ({kind})"
        for kind in ("hyperpod_node_health, reboot", "node_condition, reboot")
    }


def test_an_escalation_is_posted_too(twin: Twin, hook: Hook) -> None:
    service = Service(twin)
    faulty = service.nodes_of("vit-h14-pretrain")[0]
    service.operator.veto_node(faulty, "hold for the vendor")
    twin.fault(faulty, "persistent")
    incident = service.incident_for(faulty)
    service.wait_for_status(incident.incident_id, IncidentStatus.AWAITING_APPROVAL)
    service.operator.veto(incident.incident_id, "ops@example.com", "vendor takes it")
    hook.wait_for(f"HyperGuard IncidentEscalated: incident {incident.incident_id}")
    service.operator.veto_node(faulty, None)
