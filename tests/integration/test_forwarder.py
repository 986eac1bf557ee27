"""The in-cluster node forwarder against the upstream kube-apiserver (the harness's shared
plane): it reads Node changes through a real watch and puts the forwarder contract's events,
once per status change, in batches PutEvents accepts, retrying what failed; and the ends of
HyperGuard's runs, once each. The test's nodes
carry no KWOK annotation, so no kubelet touches their conditions but the test."""

from __future__ import annotations

import json
import queue
import threading
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from lightkube import Client, KubeConfig
from prometheus_client.parser import text_string_to_metric_families
from tests.integration.cluster_harness import clean_cluster, shared_plane

from hyperguard.cluster.workloads import JOB_ID_ANNOTATION, JOB_ID_LABEL, RUN_LABEL
from hyperguard.events.kubernetes import JOB_STATUS_CHANGED, classify_node_condition
from hyperguard.forwarder import (
    BATCH_SIZE,
    EventSender,
    NodeForwarder,
    RunForwarder,
    serve_metrics,
)
from hyperguard_twin.plane.kube import HYPERPOD_PYTORCH_JOBS, NAMESPACES, NODES, KubeClient
from hyperguard_twin.plane.processes import free_port

PROVIDER_ID = "aws:///us-west-2b/sagemaker/cluster/hyperpod-abc123xyz0-i-0123456789abcdef0"
RUNS_NAMESPACE = "hyperpod-ns-forwarded"
"""A team's namespace (the shared plane's cleaning empties those)."""
GPU = "nvidia.com/gpu"


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


def node(name: str, conditions: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name},
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


class Cluster:
    """The shared plane, cleaned, with one node name for this test: `kube` writes as the
    twin's controllers do, `client` is what the forwarder reads with (lightkube)."""

    def __init__(self, kube: KubeClient, client: Client) -> None:
        self.kube = kube
        self.client = client
        self.name = f"node-{uuid.uuid4().hex[:8]}"

    def set_status(self, conditions: dict[str, str]) -> None:
        status = node(self.name, conditions)["status"]
        self.kube.patch(NODES, self.name, {"status": status}, subresource="status")


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    plane = shared_plane().plane
    kube = plane.client()
    clean_cluster(kube)
    identity = plane.pki.client("forwarder-test", "forwarder-test", "system:masters")
    config = KubeConfig.from_file(plane.kubeconfig("forwarder-test", identity=identity))
    with Client(config=config, trust_env=False) as client:
        ready = Cluster(kube, client)
        yield ready
    if kube.get(NODES, ready.name) is not None:
        kube.delete(NODES, ready.name)


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


def test_condition_changes_are_forwarded_once_each(cluster: Cluster) -> None:
    cluster.kube.create(
        NODES, node(cluster.name, {"Ready": "True", "AcceleratedHardwareReady": "True"})
    )
    events = RecordingEvents()
    forwarder, stop, thread = forwarding(cluster.client, events, [])
    cluster.set_status({"Ready": "True", "AcceleratedHardwareReady": "False"})
    [detail] = events.details()
    assert detail == {
        "clusterName": "training-eks",
        "nodeName": cluster.name,
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
    cluster.kube.patch(NODES, cluster.name, {"metadata": {"labels": {"touched": "yes"}}})
    cluster.set_status({"Ready": "True", "AcceleratedHardwareReady": "True"})
    [cleared] = events.details()
    assert (cleared["conditionType"], cleared["status"]) == ("AcceleratedHardwareReady", "True")
    stop.set()
    cluster.kube.patch(NODES, cluster.name, {"metadata": {"labels": {"touched": "again"}}})
    thread.join(timeout=10)
    assert not thread.is_alive()
    assert events.calls.empty()
    assert forwarder.sender.sent == 2


def test_a_node_first_seen_forwards_only_its_problems(cluster: Cluster) -> None:
    events = RecordingEvents()
    _, stop, thread = forwarding(cluster.client, events, [])
    problems = {"Ready": "True", "KernelDeadlock": "True", "StorageReady": "False"}
    cluster.kube.create(NODES, node(cluster.name, problems))
    forwarded = {(d["conditionType"], d["status"]) for d in events.details()}
    assert forwarded == {("KernelDeadlock", "True"), ("StorageReady", "False")}
    stop.set()
    cluster.kube.delete(NODES, cluster.name)
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


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """/metrics as Prometheus parses it: (sample name, labels) → value."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_metrics_for_prometheus_count_events_and_show_each_nodes_problems(
    cluster: Cluster,
) -> None:
    cluster.kube.create(NODES, node(cluster.name, {"Ready": "True", "KernelDeadlock": "False"}))
    events = RecordingEvents(fail_entries=1)
    delays: list[float] = []
    forwarder, stop, thread = forwarding(cluster.client, events, delays)
    port = free_port()
    server, _ = serve_metrics(forwarder, port, "127.0.0.1")
    try:
        cluster.set_status({"Ready": "True", "KernelDeadlock": "True"})
        events.details()  # the throttled try
        events.details()  # and its retry
        metrics = scrape(port)
        problem = (
            "hyperguard_node_problem",
            (("condition", "KernelDeadlock"), ("node", cluster.name)),
        )
        assert metrics[problem] == 1
        assert metrics[("hyperguard_forwarder_events_sent_total", ())] == 1
        assert metrics[("hyperguard_forwarder_events_retried_total", ())] == 1
        assert metrics[("hyperguard_forwarder_events_dropped_total", ())] == 0
        # Healthy again: the series is gone, as a Prometheus alert on it expects.
        cluster.set_status({"Ready": "True", "KernelDeadlock": "False"})
        events.details()
        assert problem not in scrape(port)
    finally:
        stop.set()
        server.shutdown()
        cluster.kube.patch(NODES, cluster.name, {"metadata": {"labels": {"touched": "end"}}})
        thread.join(timeout=10)


def hyperpod_run(name: str, *, ours: bool) -> dict[str, Any]:
    """A HyperPodPyTorchJob as the API server stores it (the upstream CRD's schema): one of
    HyperGuard's runs (labelled, annotated), or a team's own that HyperGuard never ran."""
    meta: dict[str, Any] = {"name": name, "namespace": RUNS_NAMESPACE}
    if ours:
        meta["labels"] = {JOB_ID_LABEL: "job-a1b2", RUN_LABEL: "2"}
        meta["annotations"] = {JOB_ID_ANNOTATION: "a1b2"}
    container = {"name": "pytorch", "image": "llama:1", "resources": {"limits": {GPU: "8"}}}
    return {
        "apiVersion": "sagemaker.amazonaws.com/v1",
        "kind": "HyperPodPyTorchJob",
        "metadata": meta,
        "spec": {
            "nprocPerNode": "8",
            "runPolicy": {"cleanPodPolicy": "All", "suspend": True},
            "replicaSpecs": [
                {"name": "pods", "replicas": 1, "template": {"spec": {"containers": [container]}}}
            ],
        },
    }


def test_the_end_of_each_of_hyperguards_runs_is_forwarded_once(cluster: Cluster) -> None:
    """A run's end, read through a real watch of HyperPodPyTorchJobs selected by HyperGuard's
    label: once, whatever else changes on the object; a team's own object is no news."""
    if cluster.kube.get(NAMESPACES, RUNS_NAMESPACE) is None:
        cluster.kube.create(NAMESPACES, {"metadata": {"name": RUNS_NAMESPACE}})
    events = RecordingEvents()
    watcher = RunForwarder(
        kube=cluster.client,
        sender=EventSender(events),
        cluster="training-eks",
        bus="hyperguard",
        watch_timeout_s=5,
        batch=False,
    )
    stop = threading.Event()
    thread = threading.Thread(target=watcher.run, args=(stop,), daemon=True)
    thread.start()
    nodes = NodeForwarder(kube=cluster.client, sender=watcher.sender, cluster="c", bus="b")
    port = free_port()
    server, _ = serve_metrics(nodes, port, "127.0.0.1", runs=[watcher])

    def status(name: str, *conditions: str) -> None:
        stamp = "2026-11-28T10:00:00Z"
        listed = [
            {"type": c, "status": "True", "reason": c, "lastTransitionTime": stamp}
            for c in conditions
        ]
        body = {"status": {"conditions": listed}}
        cluster.kube.patch(HYPERPOD_PYTORCH_JOBS, name, body, RUNS_NAMESPACE, subresource="status")

    try:
        for name, ours in (("job-a1b2-2", True), ("team-own", False)):
            cluster.kube.create(
                HYPERPOD_PYTORCH_JOBS, hyperpod_run(name, ours=ours), RUNS_NAMESPACE
            )
        status("team-own", "Completed")
        status("job-a1b2-2", "Running")
        status("job-a1b2-2", "Completed")
        # One PutEvents entry, as JobStatusRule matches it (the forwarder's source and type).
        [entry] = events.calls.get(timeout=10)
        assert (entry["Source"], entry["DetailType"], entry["EventBusName"]) == (
            "hyperguard.node-forwarder",
            JOB_STATUS_CHANGED,
            "hyperguard",
        )
        detail = json.loads(entry["Detail"])
        assert {k: v for k, v in detail.items() if k != "observedTime"} == {
            "clusterName": "training-eks",
            "namespace": RUNS_NAMESPACE,
            "kind": "HyperPodPyTorchJob",
            "name": "job-a1b2-2",
            "jobId": "a1b2",
            "run": 2,
            "phase": "succeeded",
            "reason": "Completed",
        }
        patch = {"metadata": {"labels": {"touched": "yes"}}}
        cluster.kube.patch(HYPERPOD_PYTORCH_JOBS, "job-a1b2-2", patch, RUNS_NAMESPACE)
        assert scrape(port)[("hyperguard_forwarder_runs_ended_total", ())] == 1
    finally:
        stop.set()
        server.shutdown()
        for name in ("job-a1b2-2", "team-own"):
            cluster.kube.delete(HYPERPOD_PYTORCH_JOBS, name, RUNS_NAMESPACE)
        thread.join(timeout=10)
    assert not thread.is_alive()
    assert events.calls.empty()
    assert watcher.sender.sent == 1
