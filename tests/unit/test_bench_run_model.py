"""The scheduler benchmark's cluster side: a run ends at its virtual time, also while a pass
runs, and a pass's list of the runs answers what the cluster holds when the list is sent
(D175). The run's end is the cluster's work, never charged to the pass, and its event is the one
the product's forwarder decides (D182)."""

from __future__ import annotations

import gc
import json
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx2
from bench.scheduler import Latencies, Meter, MeteredTransport, RunModel

from hyperguard.cluster.workloads import JOB_ID_ANNOTATION, JOB_ID_LABEL, RUN_LABEL

RUNS = "/apis/sagemaker.amazonaws.com/v1/namespaces/team-a/hyperpodpytorchjobs"


@dataclass
class World:
    def stamp(self, at: datetime) -> str:
        return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Bus:
    """EventBridge's side: the PutEvents entries the forwarder's tracker decided."""

    entries: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ended(self) -> list[str]:
        assert {e["DetailType"] for e in self.entries} <= {"Kubernetes Job Status Changed"}
        return [json.loads(e["Detail"])["name"] for e in self.entries]


@dataclass
class Cluster:
    """The API server's side of the status writes, as the run model makes them."""

    log: list[str]
    busy_s: float = 0.0
    """CPU each status write burns in this process (TLS, JSON), as the real client does."""

    def patch(
        self, resource: Any, name: str, body: dict[str, Any], namespace: str, subresource: str
    ) -> dict[str, Any]:
        until = time.thread_time() + self.busy_s
        while time.thread_time() < until:
            pass
        done = "completionTime" in body["status"]
        self.log.append(f"{'end' if done else 'start'} {name}")
        stored = run_object(name, f"job-of-{name}")
        return {**stored, "status": body["status"]}


def run_object(name: str, job_id: str) -> dict[str, Any]:
    """A run as the API server answers it: HyperGuard's labels and annotation, a uid."""
    return {
        "kind": "HyperPodPyTorchJob",
        "metadata": {
            "name": name,
            "namespace": "team-a",
            "uid": f"uid-{name}",
            "labels": {JOB_ID_LABEL: job_id, RUN_LABEL: "1"},
            "annotations": {JOB_ID_ANNOTATION: job_id},
        },
    }


def model(log: list[str], busy_s: float = 0.0) -> tuple[Meter, RunModel, Bus]:
    meter, bus = Meter(Latencies()), Bus()
    runs = RunModel(
        meter,
        Cluster(log, busy_s),  # type: ignore[arg-type]
        World(),  # type: ignore[arg-type]
        bus.entries.append,
        {"job-a": 0.5, "job-b": 2.0},
    )
    return meter, runs, bus


def test_a_run_ends_when_due_and_not_before() -> None:
    log: list[str] = []
    meter, runs, bus = model(log)
    meter.t = 1.0
    runs.created(run_object("run-a", "job-a"))
    runs.created(run_object("run-b", "job-b"))
    runs.start_created()
    assert runs.end_due(1.49) == 0
    assert runs.end_due(1.51) == 1
    assert bus.ended == ["run-a"]
    assert runs.end_due(2.9) == 0
    assert runs.end_due(3.1) == 1
    assert log == ["start run-a", "start run-b", "end run-a", "end run-b"]
    assert bus.ended == ["run-a", "run-b"]


def test_a_run_created_by_the_pass_still_running_is_not_ended_before_it_started() -> None:
    log: list[str] = []
    _meter, runs, _bus = model(log)
    runs.created(run_object("run-a", "job-a"))
    assert runs.end_due(10.0) == 0
    runs.start_created()
    assert runs.end_due(10.0) == 1
    assert log == ["start run-a", "end run-a"]


def test_a_list_of_the_runs_is_answered_after_the_runs_due_have_ended() -> None:
    log: list[str] = []
    meter, runs, _bus = model(log)
    runs.created(run_object("run-a", "job-a"))
    runs.start_created()

    def server(request: httpx2.Request) -> httpx2.Response:
        log.append(f"{request.method} {request.url.path}")
        return httpx2.Response(200, content=json.dumps({"items": []}).encode())

    transport = MeteredTransport(httpx2.MockTransport(server), meter, runs)
    transport.handle_request(httpx2.Request("GET", f"https://kube{RUNS}"))
    assert log == ["start run-a", f"GET {RUNS}"]  # not due yet at 0 s
    meter.t = 0.6
    transport.handle_request(httpx2.Request("GET", "https://kube/api/v1/nodes"))
    assert log[-1] == "GET /api/v1/nodes"  # only a list of the runs ends them
    transport.handle_request(httpx2.Request("GET", f"https://kube{RUNS}"))
    assert log[-2:] == ["end run-a", f"GET {RUNS}"]


def test_the_runs_end_is_not_charged_to_the_pass() -> None:
    log: list[str] = []
    meter, runs, _bus = model(log, busy_s=0.05)
    runs.created(run_object("run-a", "job-a"))
    runs.start_created()
    meter.start()
    before = meter.t
    runs.end_due(1.0)
    meter.stop()
    assert log[-1] == "end run-a"
    assert meter.emulator_cpu >= 0.05
    assert meter.service_cpu < 0.02
    assert meter.t - before < 0.02


def test_the_runs_due_before_anything_else_happens_end_in_order_with_their_times() -> None:
    log: list[str] = []
    _meter, runs, bus = model(log)
    runs.runtime_of.update({"job-c": 1.0, "job-d": 3.0})
    for name, job in (("run-a", "job-a"), ("run-b", "job-b"), ("run-c", "job-c")):
        runs.created(run_object(name, job))
    runs.created(run_object("run-d", "job-d"))
    runs.start_created()
    told: list[float] = []
    # run-a at 0.5, run-c at 1.0, run-b at 2.0, run-d at 3.0: a submission at 2.0 comes first
    assert runs.end_through(until=2.5, before=2.0, at_each=told.append) == 2
    assert bus.ended == ["run-a", "run-c"]
    assert [round(t, 3) for t in told] == [0.5, 1.0]
    assert runs.next_end() == 2.0 + 1e-5
    # the next one ends even past `until`: the caller found it due first
    assert runs.end_through(until=0.0, before=9.0) == 1
    assert bus.ended == ["run-a", "run-c", "run-b"]


@dataclass
class Together(Cluster):
    """A status write that returns only once another is under way beside it: one written
    at a time never gets past the first."""

    meeting: threading.Barrier = field(default_factory=lambda: threading.Barrier(2, timeout=5))

    def patch(
        self, resource: Any, name: str, body: dict[str, Any], namespace: str, subresource: str
    ) -> dict[str, Any]:
        self.meeting.wait()
        return super().patch(resource, name, body, namespace, subresource)


def test_the_status_writes_of_a_batch_are_sent_together() -> None:
    log: list[str] = []
    meter, bus = Meter(Latencies()), Bus()
    runs = RunModel(
        meter,
        Together(log),  # type: ignore[arg-type]
        World(),  # type: ignore[arg-type]
        bus.entries.append,
        {"job-a": 0.5, "job-b": 0.5},
    )
    runs.created(run_object("run-a", "job-a"))
    runs.created(run_object("run-b", "job-b"))
    runs.start_created()
    assert runs.end_due(1.0) == 2
    assert sorted(bus.ended) == ["run-a", "run-b"]
    runs.close()


def test_a_collection_in_a_pass_is_counted_on_the_side_that_ran_it() -> None:
    meter = Meter(Latencies())
    gc.callbacks.append(meter.collected)
    try:
        gc.collect()  # not measured
        assert meter.full_collections == 0
        meter.start()
        gc.collect()
        with meter.emulating():
            gc.collect()
        meter.stop()
    finally:
        gc.callbacks.remove(meter.collected)
    assert meter.full_collections == 2
    assert set(meter.gc_s) == {"service", "emulator"}
    assert meter.gc_s["service"] > 0 and meter.gc_s["emulator"] > 0
