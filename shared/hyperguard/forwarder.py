"""The in-cluster node forwarder: watches the cluster's Nodes and puts a "Kubernetes Node
Condition Changed" event on HyperGuard's bus (the contract in docs/events.md,
hyperguard.events.kubernetes) whenever a node condition's status changes. It also watches
Kueue's Workloads and puts a "Kubernetes Workload Held" event on the bus when one in a team's
namespace waits on HyperGuard's admission check: a job the team applied itself, which the
next pass records and admits (D170); Workloads outside every team's namespace are counted.
And it watches HyperGuard's runs (batch Jobs and HyperPodPyTorchJobs labelled
`hyperguard.io/job-id`) and puts a "Kubernetes Job Status Changed" event on the bus when one
ends, once per run: the pass it wakes frees the run's quota within seconds rather than at the
next minute's tick (D182). A kind the cluster does not serve (HyperPodPyTorchJob on a burst
cluster without the training operator) is looked for again every `NOT_SERVED_S`.
Plain EKS sends no node-health events to EventBridge: without it the EKS node monitoring
agent's and node-problem-detector's conditions never reach HyperGuard.

Deduplicated: a condition is forwarded when its status differs from the one last forwarded
for that node; a condition seen for the first time (a node at start or after a re-list, a
new node, a condition an agent adds later) is forwarded only when it is a problem. Batched:
PutEvents takes at most 10 entries. With backoff: entries PutEvents failed (throttled,
internal errors) are retried with exponential backoff up to `MAX_ATTEMPTS`, and then counted
as dropped; a broken watch is resumed from the last resourceVersion after a backoff, and re-
listed when the server no longer has that version (410).

Runs as a Deployment (deploy/kubernetes/hyperguard-forwarder.yaml): `python -m
hyperguard.forwarder`, configured by HYPERGUARD_CLUSTER_NAME and HYPERGUARD_EVENT_BUS_NAME;
credentials for PutEvents from EKS Pod Identity or IRSA, in-cluster Kubernetes credentials.

For Prometheus (HYPERGUARD_METRICS_PORT, default 9102; 0 turns it off): /metrics with the
events it sent, dropped and retried, its watch restarts, and `hyperguard_node_problem`, 1
per node and condition that is a problem as HyperGuard classifies it, read at each scrape
from what the forwarder has seen (prometheus-client, the image's only addition to the
layer's dependencies). The service's own metrics stay in CloudWatch.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from hyperguard.events.kubernetes import (
    FORWARDER_SOURCE,
    JOB_STATUS_CHANGED,
    NODE_CONDITION_CHANGED,
    WORKLOAD_HELD,
)

BATCH_SIZE = 10
"""PutEvents' limit on entries per call."""
MAX_ATTEMPTS = 5
BACKOFF_S = 0.5
MAX_BACKOFF_S = 30.0
WATCH_TIMEOUT_S = 300
REASON_MAX = 1000
"""The most characters of a condition's reason or message forwarded (a custom resource's
condition reason has no length limit of Kubernetes's)."""
NOT_SERVED_S = 300.0
"""How long a watch of a kind the API server does not serve (404) waits before it asks again."""
METRICS_PORT = 9102
Obj = dict[str, Any]
_log = logging.getLogger(__name__)


def _is_problem(condition_type: str, status: str) -> bool:
    # As hyperguard.events.kubernetes classifies them: "*Ready" is healthy only when True,
    # problem conditions (node-problem-detector's) are problems when True.
    return status != "True" if condition_type.endswith("Ready") else status == "True"


@dataclass(slots=True)
class ConditionTracker:
    """The status last forwarded per node and condition type: decides which conditions of a
    node seen in a watch event are news."""

    sent: dict[str, dict[str, str]] = field(default_factory=dict)

    def observe(self, event: str, node: Mapping[str, Any]) -> list[Obj]:
        """The `detail`s to forward for this watch event of `node`."""
        meta = node.get("metadata") or {}
        name = str(meta.get("name") or "")
        if not name:
            return []
        if event == "DELETED":
            self.sent.pop(name, None)
            return []
        known = self.sent.setdefault(name, {})
        details: list[Obj] = []
        for condition in (node.get("status") or {}).get("conditions") or []:
            kind, status = condition.get("type"), condition.get("status")
            if not kind or status not in ("True", "False", "Unknown") or known.get(kind) == status:
                continue
            first_sight = kind not in known
            known[kind] = status
            # A condition seen for the first time (a new node's, or one its kubelet or an agent
            # adds later) is news only when it is a problem: "healthy" clears nothing.
            if first_sight and not _is_problem(kind, status):
                continue
            details.append(_detail(node, condition))
        return details


def _detail(node: Mapping[str, Any], condition: Mapping[str, Any]) -> Obj:
    detail: Obj = {
        "nodeName": node["metadata"]["name"],
        "conditionType": condition["type"],
        "status": condition["status"],
        "reason": (condition.get("reason") or "")[:REASON_MAX],
        "message": (condition.get("message") or "")[:REASON_MAX],
        "observedTime": condition.get("lastTransitionTime")
        or condition.get("lastHeartbeatTime")
        or _now(),
    }
    provider_id = (node.get("spec") or {}).get("providerID")
    if provider_id:
        detail["providerId"] = provider_id
    return detail


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def entries(
    details: Iterable[Obj], *, cluster: str, bus: str, kind: str = NODE_CONDITION_CHANGED
) -> list[Obj]:
    """PutEvents entries of the forwarder contract (detail-type `kind`)."""
    return [
        {
            "Source": FORWARDER_SOURCE,
            "DetailType": kind,
            "Detail": json.dumps({"clusterName": cluster, **detail}),
            "EventBusName": bus,
        }
        for detail in details
    ]


@dataclass(slots=True)
class EventSender:
    """PutEvents in batches of ten, retrying the entries that failed with backoff."""

    events: Any
    sleep: Callable[[float], None] = time.sleep
    sent: int = 0
    dropped: int = 0
    retried: int = 0

    def put(self, batch: list[Obj]) -> None:
        for start in range(0, len(batch), BATCH_SIZE):
            self._put_batch(batch[start : start + BATCH_SIZE])

    def _put_batch(self, pending: list[Obj]) -> None:
        for attempt in range(MAX_ATTEMPTS):
            if attempt:
                self.retried += len(pending)
                self.sleep(min(BACKOFF_S * 2 ** (attempt - 1), MAX_BACKOFF_S))
            try:
                results = self.events.put_events(Entries=pending).get("Entries") or []
            except Exception as error:  # throttling, network: the whole batch again
                _log.warning("PutEvents failed (attempt %d): %s", attempt + 1, error)
                continue
            failed = [e for e, r in zip(pending, results, strict=False) if r.get("ErrorCode")]
            self.sent += len(pending) - len(failed)
            pending = failed
            if not pending:
                return
        self.dropped += len(pending)
        _log.error("dropped %d events after %d attempts", len(pending), MAX_ATTEMPTS)


@dataclass(slots=True)
class HeldTracker:
    """The Workloads held on HyperGuard's admission check that were forwarded while their
    check is Pending (by uid), and those seen outside any team's namespace (counted, left
    alone): decides which Workload watch events are news (D170)."""

    sent: set[str] = field(default_factory=set)
    outside: set[str] = field(default_factory=set)

    def observe(self, event: str, workload: Mapping[str, Any]) -> list[Obj]:
        """The `detail`s to forward for this watch event of `workload`: one the first time
        its check is seen Pending (again after an admission or an eviction)."""
        from hyperguard.cluster.held import owner_of, team_of, waiting
        from hyperguard.cluster.kueue import ADMISSION_CHECK

        meta = workload.get("metadata") or {}
        uid, namespace = str(meta.get("uid") or ""), str(meta.get("namespace") or "")
        if not uid:
            return []
        if event == "DELETED":
            self.sent.discard(uid)
            self.outside.discard(uid)
            return []
        if team_of(namespace) is None:
            self.outside.add(uid)
            return []
        if not waiting(workload, ADMISSION_CHECK):
            self.sent.discard(uid)
            return []
        if uid in self.sent:
            return []
        self.sent.add(uid)
        owner = owner_of(workload) or {}
        return [
            {
                "namespace": namespace,
                "name": str(meta.get("name") or ""),
                "uid": uid,
                "ownerKind": str(owner.get("kind") or ""),
                "ownerName": str(owner.get("name") or ""),
                "observedTime": _now(),
            }
        ]


@dataclass(slots=True)
class RunTracker:
    """The runs of HyperGuard's whose end was forwarded (by uid): decides which watch events
    of a run are news: its end (`hyperguard.cluster.workloads.run_status`: succeeded, failed
    or lost), once (D182). A run is forgotten when it is deleted; `ended` counts the ends
    forwarded."""

    sent: set[str] = field(default_factory=set)
    ended: int = 0

    def observe(self, event: str, run: Mapping[str, Any]) -> list[Obj]:
        """The `detail`s to forward for this watch event of `run` (a batch Job or a
        HyperPodPyTorchJob, with its `kind`)."""
        from hyperguard.cluster.workloads import run_status
        from hyperguard.models.cluster import RunPhase

        meta = run.get("metadata") or {}
        uid = str(meta.get("uid") or "")
        if not uid:
            return []
        if event == "DELETED":
            self.sent.discard(uid)
            return []
        status = run_status(dict(run))
        ended = (RunPhase.SUCCEEDED, RunPhase.FAILED, RunPhase.LOST)
        if status is None or status.phase not in ended or uid in self.sent:
            return []
        self.sent.add(uid)
        self.ended += 1
        return [
            {
                "namespace": status.namespace,
                "kind": str(run.get("kind") or ""),
                "name": status.name,
                "jobId": status.job_id,
                "run": status.run,
                "phase": status.phase.value,
                "reason": status.reason[:REASON_MAX],
                "observedTime": _now(),
            }
        ]


@dataclass(slots=True)
class Watcher:
    """Watch one kind through `kube` (a lightkube Client) and forward what its tracker finds
    new through `sender`. `run` returns when `stop` is set (checked between watch events and
    at least every `watch_timeout_s`)."""

    kube: Any
    sender: EventSender
    cluster: str
    bus: str
    watch_timeout_s: int = WATCH_TIMEOUT_S
    sleep: Callable[[float], None] = time.sleep
    resource_version: str | None = None
    watch_restarts: int = 0

    def run(self, stop: threading.Event) -> None:
        failures, unserved = 0, False
        while not stop.is_set():
            try:
                for event, obj in self._watch():
                    failures, unserved = 0, False
                    self.forward(event, obj)
                    if stop.is_set():
                        return
            except Exception as error:
                code = getattr(getattr(error, "status", None), "code", None)
                if code == 404:  # a custom resource this cluster does not serve (yet)
                    if not unserved:
                        _log.info(
                            "%s: not served; asked again every %.0f s", self.what, NOT_SERVED_S
                        )
                    unserved, self.resource_version = True, None
                    stop.wait(NOT_SERVED_S)
                    continue
                failures += 1
                self.watch_restarts += 1
                if code == 410:
                    self.resource_version = None  # too old: list again (the tracker dedupes)
                _log.warning("%s watch broke (%d in a row): %s", self.what, failures, error)
                stop.wait(min(BACKOFF_S * 2 ** (failures - 1), MAX_BACKOFF_S))

    @property
    def what(self) -> str:
        """The watched resource, for logs."""
        return str(getattr(self.resource(), "__name__", self.kind))

    def forward(self, event: str, obj: Obj) -> None:
        version = (obj.get("metadata") or {}).get("resourceVersion")
        if version:
            self.resource_version = version
        details = self.news(event, obj)
        if details:
            self.sender.put(entries(details, cluster=self.cluster, bus=self.bus, kind=self.kind))

    @property
    def kind(self) -> str:
        """The detail-type of the events it forwards."""
        raise NotImplementedError

    def news(self, event: str, obj: Obj) -> list[Obj]:
        raise NotImplementedError

    def resource(self) -> Any:
        raise NotImplementedError

    def labels(self) -> dict[str, Any] | None:
        """The label selector of the watch (None: every object)."""
        return None

    def _watch(self) -> Iterator[tuple[str, Obj]]:
        from lightkube.core.resource import NamespacedResource

        resource = self.resource()
        # A namespaced kind is watched in every namespace; a cluster-wide one has none.
        where = {"namespace": "*"} if issubclass(resource, NamespacedResource) else {}
        stream = self.kube.watch(
            resource,
            labels=self.labels(),
            resource_version=self.resource_version,
            server_timeout=self.watch_timeout_s,
            **where,
        )
        for event, obj in stream:
            yield event, obj.to_dict()


@dataclass(slots=True)
class NodeForwarder(Watcher):
    """Nodes' condition changes (ConditionTracker)."""

    tracker: ConditionTracker = field(default_factory=ConditionTracker)

    @property
    def kind(self) -> str:
        return NODE_CONDITION_CHANGED

    def news(self, event: str, obj: Obj) -> list[Obj]:
        return self.tracker.observe(event, obj)

    def resource(self) -> Any:
        from lightkube.resources.core_v1 import Node  # imported when a watch starts

        return Node


@dataclass(slots=True)
class WorkloadForwarder(Watcher):
    """Kueue Workloads held on HyperGuard's admission check (HeldTracker, D170)."""

    tracker: HeldTracker = field(default_factory=HeldTracker)

    @property
    def kind(self) -> str:
        return WORKLOAD_HELD

    def news(self, event: str, obj: Obj) -> list[Obj]:
        return self.tracker.observe(event, obj)

    def resource(self) -> Any:
        from hyperguard.cluster.kubernetes import Workload

        return Workload


@dataclass(slots=True)
class RunForwarder(Watcher):
    """The ends of HyperGuard's runs of one kind (RunTracker, D182): `batch` Jobs, or
    HyperPodPyTorchJobs."""

    batch: bool = True
    tracker: RunTracker = field(default_factory=RunTracker)

    @property
    def kind(self) -> str:
        return JOB_STATUS_CHANGED

    def news(self, event: str, obj: Obj) -> list[Obj]:
        obj.setdefault("kind", "Job" if self.batch else "HyperPodPyTorchJob")
        return self.tracker.observe(event, obj)

    def resource(self) -> Any:
        if self.batch:
            from lightkube.resources.batch_v1 import Job

            return Job
        from hyperguard.cluster.kubernetes import HyperPodJob

        return HyperPodJob

    def labels(self) -> dict[str, Any]:
        from lightkube import operators

        from hyperguard.cluster.workloads import JOB_ID_LABEL

        return {JOB_ID_LABEL: operators.exists()}


def problems(tracker: ConditionTracker) -> list[tuple[str, str]]:
    """(node, condition) of each condition whose last status seen is a problem."""
    return sorted(
        (node, kind)
        for node, known in list(tracker.sent.items())
        for kind, status in list(known.items())
        if _is_problem(kind, status)
    )


class ForwarderCollector:
    """The forwarder's Prometheus metrics, read from its state at each scrape. `held`: its
    Workload watch, when it runs one; `runs`: its watches of HyperGuard's runs."""

    def __init__(
        self,
        forwarder: NodeForwarder,
        held: WorkloadForwarder | None = None,
        runs: Sequence[RunForwarder] = (),
    ) -> None:
        self.forwarder = forwarder
        self.held = held
        self.runs = runs

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        sender = self.forwarder.sender
        watchers = [self.forwarder, *([self.held] if self.held else []), *self.runs]
        restarts = sum(w.watch_restarts for w in watchers)
        for name, text, value in (
            (
                "hyperguard_forwarder_events_sent",
                "events PutEvents took (node conditions, held Workloads, ended runs)",
                sender.sent,
            ),
            (
                "hyperguard_forwarder_events_dropped",
                "events dropped after every retry",
                sender.dropped,
            ),
            (
                "hyperguard_forwarder_events_retried",
                "entries sent again after a failure",
                sender.retried,
            ),
            (
                "hyperguard_forwarder_watch_restarts",
                "watches that broke and resumed",
                restarts,
            ),
        ):
            yield CounterMetricFamily(name, text, value=value)
        if self.runs:
            yield CounterMetricFamily(
                "hyperguard_forwarder_runs_ended",
                "ends of HyperGuard's runs forwarded (each wakes a scheduling pass)",
                value=sum(w.tracker.ended for w in self.runs),
            )
        gauge = GaugeMetricFamily(
            "hyperguard_node_problem",
            "1 while the node's condition is a problem, as HyperGuard classifies it "
            "(a *Ready condition not True, another condition True)",
            labels=["node", "condition"],
        )
        for node, kind in problems(self.forwarder.tracker):
            gauge.add_metric([node, kind], 1)
        yield gauge
        if self.held is not None:
            yield GaugeMetricFamily(
                "hyperguard_ungoverned_workloads",
                "Kueue Workloads outside every team's namespace (hyperpod-ns-<team>), which "
                "HyperGuard leaves alone",
                value=len(self.held.tracker.outside),
            )


def serve_metrics(
    forwarder: NodeForwarder,
    port: int,
    address: str = "0.0.0.0",
    held: WorkloadForwarder | None = None,
    runs: Sequence[RunForwarder] = (),
) -> tuple[Any, threading.Thread]:
    """/metrics on `port` (prometheus-client's server, in a daemon thread): the server (its
    `shutdown()` stops it) and its thread."""
    from prometheus_client import CollectorRegistry, start_http_server

    registry = CollectorRegistry(auto_describe=False)
    registry.register(ForwarderCollector(forwarder, held, runs))
    return start_http_server(port, addr=address, registry=registry)


def main() -> None:  # pragma: no cover - the container's entry point
    import boto3
    from lightkube import Client

    from hyperguard.cluster.kubernetes import warm_decoders

    logging.basicConfig(level=logging.INFO)
    warm_decoders()  # the watch threads decode with one client (D170)
    kube, sender = Client(), EventSender(boto3.client("events"))
    cluster, bus = os.environ["HYPERGUARD_CLUSTER_NAME"], os.environ["HYPERGUARD_EVENT_BUS_NAME"]
    forwarder = NodeForwarder(kube=kube, sender=sender, cluster=cluster, bus=bus)
    held = WorkloadForwarder(kube=kube, sender=sender, cluster=cluster, bus=bus)
    runs = [
        RunForwarder(kube=kube, sender=sender, cluster=cluster, bus=bus, batch=batch)
        for batch in (True, False)
    ]
    port = int(os.environ.get("HYPERGUARD_METRICS_PORT", METRICS_PORT))
    if port:
        address = os.environ.get("HYPERGUARD_METRICS_ADDRESS", "0.0.0.0")
        serve_metrics(forwarder, port, address, held, runs)
    stop = threading.Event()
    for name, watcher in (("workloads", held), ("jobs", runs[0]), ("hyperpodjobs", runs[1])):
        threading.Thread(target=watcher.run, args=(stop,), name=name, daemon=True).start()
    forwarder.run(stop)


if __name__ == "__main__":  # pragma: no cover
    main()
