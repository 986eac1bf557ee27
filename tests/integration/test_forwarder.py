"""The in-cluster node forwarder against the twin's Kubernetes API server: it reads Node
changes through a real watch and puts the forwarder contract's events, once per status
change, in batches PutEvents accepts, retrying what failed."""

from __future__ import annotations

import json
import queue
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from hyperguard.twin.kube import NODES, ObjectStore
from lightkube import Client
from tests.integration.kube_client import client_of

from hyperguard.events.kubernetes import classify_node_condition
from hyperguard.forwarder import BATCH_SIZE, EventSender, NodeForwarder

PROVIDER_ID = "aws:///us-west-2b/sagemaker/cluster/hyperpod-abc123xyz0-i-0123456789abcdef0"


class RecordingEvents:
    """An EventBridge client that records PutEvents calls; the first `fail_entries` entries
    it is sent fail as throttled, as PutEvents reports per entry."""

    def __init__(self, fail_entries: int = 0) -> None:
        self.calls: queue.Queue[list[dict[str, Any]]] = queue.Queue()
        self.fail_entries = fail_entries

    def put_events(self, Entries: list[dict[str, Any]]) -> dict[str, Any]:
        assert 1 <= len(Entries) <= BATCH_SIZE
        self.calls.put(Entries)
        results = []
        for _ in Entries:
            if self.fail_entries > 0:
                self.fail_entries -= 1
                results.append({"ErrorCode": "ThrottlingException", "ErrorMessage": "slow down"})
            else:
                results.append({"EventId": "e"})
        failed = sum(1 for r in results if "ErrorCode" in r)
        return {"FailedEntryCount": failed, "Entries": results}

    def details(self, timeout: float = 10) -> list[dict[str, Any]]:
        return [json.loads(entry["Detail"]) for entry in self.calls.get(timeout=timeout)]


def node(conditions: dict[str, str]) -> dict[str, Any]:
    return {
        "metadata": {"name": "node-a"},
        "spec": {"providerID": PROVIDER_ID},
        "status": {
            "conditions": [
                {
                    "type": kind,
                    "status": status,
                    "reason": f"{kind}Is{status}",
                    "lastTransitionTime": "2026-03-01T12:00:00Z",
                }
                for kind, status in conditions.items()
            ]
        },
    }


@pytest.fixture
def cluster() -> Iterator[tuple[ObjectStore, Client]]:
    store = ObjectStore()
    with client_of(store, "forwarder") as (_server, client):
        yield store, client


def forwarding(
    client: Client, events: RecordingEvents, delays: list[float]
) -> tuple[NodeForwarder, threading.Event, threading.Thread]:
    forwarder = NodeForwarder(
        kube=client,
        sender=EventSender(events, sleep=delays.append),
        cluster="training-eks",
        bus="hyperguard",
        watch_timeout_s=5,
    )
    stop = threading.Event()
    thread = threading.Thread(target=forwarder.run, args=(stop,), daemon=True)
    thread.start()
    return forwarder, stop, thread


def test_condition_changes_are_forwarded_once_each(
    cluster: tuple[ObjectStore, Client],
) -> None:
    store, client = cluster
    store.create(NODES, node({"Ready": "True", "AcceleratedHardwareReady": "True"}))
    events = RecordingEvents()
    forwarder, stop, thread = forwarding(client, events, [])
    degraded = node({"Ready": "True", "AcceleratedHardwareReady": "False"})
    store.patch(NODES, "node-a", {"status": degraded["status"]}, subresource="status")
    [detail] = events.details()
    assert detail == {
        "clusterName": "training-eks",
        "nodeName": "node-a",
        "providerId": PROVIDER_ID,
        "conditionType": "AcceleratedHardwareReady",
        "status": "False",
        "reason": "AcceleratedHardwareReadyIsFalse",
        "message": "",
        "observedTime": "2026-03-01T12:00:00Z",
    }
    # The event is one HyperGuard's ingestion classifies: HyperPod's providerID form parsed.
    envelope = {
        "version": "0",
        "id": "1",
        "detail-type": "Kubernetes Node Condition Changed",
        "source": "hyperguard.node-forwarder",
        "account": "123456789012",
        "time": "2026-03-01T12:00:00Z",
        "region": "us-west-2",
        "resources": [],
        "detail": detail,
    }
    [signal] = classify_node_condition(envelope)
    assert signal.instance_id == "i-0123456789abcdef0"
    # A change that leaves every status as it was (a label) forwards nothing; the recovery
    # back to True does.
    store.patch(NODES, "node-a", {"metadata": {"labels": {"touched": "yes"}}})
    recovered = node({"Ready": "True", "AcceleratedHardwareReady": "True"})
    store.patch(NODES, "node-a", {"status": recovered["status"]}, subresource="status")
    [cleared] = events.details()
    assert (cleared["conditionType"], cleared["status"]) == ("AcceleratedHardwareReady", "True")
    stop.set()
    store.patch(NODES, "node-a", {"metadata": {"labels": {"touched": "again"}}})
    thread.join(timeout=10)
    assert not thread.is_alive()
    assert events.calls.empty()
    assert forwarder.sender.sent == 2


def test_a_node_first_seen_forwards_only_its_problems(
    cluster: tuple[ObjectStore, Client],
) -> None:
    store, client = cluster
    events = RecordingEvents()
    _, stop, thread = forwarding(client, events, [])
    store.create(NODES, node({"Ready": "True", "KernelDeadlock": "True", "StorageReady": "False"}))
    forwarded = {(d["conditionType"], d["status"]) for d in events.details()}
    assert forwarded == {("KernelDeadlock", "True"), ("StorageReady", "False")}
    stop.set()
    store.delete(NODES, "node-a")
    thread.join(timeout=10)


def test_failed_entries_are_retried_with_backoff_in_batches_of_ten() -> None:
    events = RecordingEvents(fail_entries=3)
    delays: list[float] = []
    sender = EventSender(events, sleep=delays.append)
    batch = [{"Detail": json.dumps({"n": n})} for n in range(12)]
    sender.put(batch)
    sizes = []
    while not events.calls.empty():
        sizes.append(len(events.calls.get()))
    assert sizes == [10, 3, 2]
    assert delays == [0.5]
    assert (sender.sent, sender.dropped) == (12, 0)


def test_entries_that_keep_failing_are_dropped_and_counted() -> None:
    events = RecordingEvents(fail_entries=100)
    delays: list[float] = []
    sender = EventSender(events, sleep=delays.append)
    sender.put([{"Detail": "{}"}])
    assert delays == [0.5, 1.0, 2.0, 4.0]
    assert (sender.sent, sender.dropped) == (0, 1)
