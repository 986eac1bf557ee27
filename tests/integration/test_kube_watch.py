"""Watches on the twin's Kubernetes API server, read with lightkube's watch client as the
in-cluster forwarder reads them: events from a resourceVersion, selectors on both sides of a
change, the initial state without a version, 410 for a version the server no longer keeps,
and timeoutSeconds."""

from __future__ import annotations

import base64
import queue
import ssl
import threading
from collections.abc import Iterator
from itertools import islice
from typing import Any

import httpx2
import pytest
from lightkube import ApiError, Client
from lightkube.resources.core_v1 import Node, Pod
from tests.integration.kube_client import client_of

from hyperguard.twin.kube import NAMESPACES, NODES, PODS, KubeApiServer, ObjectStore
from hyperguard.twin.kube.watch import HISTORY

NS = "team-a"


@pytest.fixture
def served() -> Iterator[tuple[KubeApiServer, Client]]:
    store = ObjectStore()
    if store.find(NAMESPACES, NS) is None:
        store.create(NAMESPACES, {"metadata": {"name": NS}})
    with client_of(store, "tester") as served_client:
        yield served_client


def node(name: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels}, "spec": {}}


def pod(name: str, node_name: str) -> dict[str, Any]:
    spec = {"nodeName": node_name, "containers": [{"name": "main", "image": "busybox"}]}
    return {"metadata": {"name": name}, "spec": spec}


def seen(events: Iterator[tuple[str, Any]], count: int) -> list[tuple[str, str]]:
    return [(kind, obj.metadata.name) for kind, obj in islice(events, count)]


def test_a_watch_replays_changes_after_its_resource_version(
    served: tuple[KubeApiServer, Client],
) -> None:
    server, client = served
    store = server.store
    store.create(NODES, node("node-a"))
    since = store.current_resource_version
    store.create(NODES, node("node-b"))
    store.patch(NODES, "node-a", {"spec": {"unschedulable": True}})
    store.delete(NODES, "node-b")
    events = client.watch(Node, resource_version=since)
    assert seen(events, 3) == [("ADDED", "node-b"), ("MODIFIED", "node-a"), ("DELETED", "node-b")]


def test_a_watch_without_a_version_starts_with_what_exists(
    served: tuple[KubeApiServer, Client],
) -> None:
    server, client = served
    server.store.create(NODES, node("node-a"))
    server.store.create(NODES, node("node-b"))
    assert seen(client.watch(Node), 2) == [("ADDED", "node-a"), ("ADDED", "node-b")]


def test_a_watch_delivers_changes_as_they_happen(served: tuple[KubeApiServer, Client]) -> None:
    server, client = served
    since = server.store.current_resource_version
    received: queue.Queue[tuple[str, str | None, bool]] = queue.Queue()

    def read() -> None:
        for kind, obj in client.watch(Node, resource_version=since):
            name = obj.metadata.name if obj.metadata else None
            received.put((kind, name, bool(obj.spec and obj.spec.unschedulable)))
            if kind == "MODIFIED":
                return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    server.store.create(NODES, node("node-a"))
    assert received.get(timeout=10) == ("ADDED", "node-a", False)
    client.patch(Node, "node-a", {"spec": {"unschedulable": True}})
    assert received.get(timeout=10) == ("MODIFIED", "node-a", True)
    reader.join(timeout=10)


def test_selectors_apply_to_both_sides_of_a_change(served: tuple[KubeApiServer, Client]) -> None:
    server, client = served
    store = server.store
    since = store.current_resource_version
    store.create(NODES, node("node-a", pool="gpu"))
    store.create(NODES, node("node-b", pool="cpu"))
    store.patch(NODES, "node-a", {"metadata": {"labels": {"pool": "cpu"}}})
    store.patch(NODES, "node-b", {"metadata": {"labels": {"pool": "gpu"}}})
    events = client.watch(Node, resource_version=since, labels={"pool": "gpu"})
    assert seen(events, 3) == [("ADDED", "node-a"), ("DELETED", "node-a"), ("ADDED", "node-b")]


def test_a_field_selector_and_a_namespace_narrow_a_pod_watch(
    served: tuple[KubeApiServer, Client],
) -> None:
    server, client = served
    store = server.store
    since = store.current_resource_version
    store.create(PODS, pod("p1", "node-a"), NS)
    store.create(PODS, pod("p2", "node-b"), NS)
    store.create(PODS, pod("p3", "node-a"), "default")
    store.create(PODS, pod("p4", "node-a"), NS)
    events = client.watch(
        Pod, namespace=NS, resource_version=since, fields={"spec.nodeName": "node-a"}
    )
    assert seen(events, 2) == [("ADDED", "p1"), ("ADDED", "p4")]


def test_a_version_older_than_the_server_keeps_is_410_gone(
    served: tuple[KubeApiServer, Client],
) -> None:
    server, client = served
    store = server.store
    since = store.current_resource_version
    store.create(NODES, node("node-a"))
    for count in range(HISTORY):
        store.patch(NODES, "node-a", {"metadata": {"labels": {"n": str(count)}}})
    with pytest.raises(ApiError) as gone:
        next(iter(client.watch(Node, resource_version=since)))
    assert gone.value.status.code == 410
    assert gone.value.status.reason == "Expired"
    assert "too old resource version" in (gone.value.status.message or "")


def test_a_watch_ends_after_its_timeout(served: tuple[KubeApiServer, Client]) -> None:
    server, _ = served
    server.store.create(NODES, node("node-a"))
    ca = base64.b64decode(server.ca_data).decode()
    with httpx2.Client(
        base_url=server.endpoint,
        verify=ssl.create_default_context(cadata=ca),
        headers={"Authorization": "Bearer t"},
        trust_env=False,
        timeout=30,
    ) as http:
        params = {"watch": "1", "timeoutSeconds": "1", "labelSelector": "absent"}
        with http.stream("GET", "/api/v1/nodes", params=params) as response:
            assert response.status_code == 200
            assert list(response.iter_lines()) == []
    assert server.stats["watch nodes"] == 1
