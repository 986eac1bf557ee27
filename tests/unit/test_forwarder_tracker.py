"""What the in-cluster forwarder takes for news: a node's conditions, a run's end."""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

from hyperguard.cluster.workloads import JOB_ID_ANNOTATION, JOB_ID_LABEL, RUN_LABEL
from hyperguard.forwarder import (
    NOT_SERVED_S,
    REASON_MAX,
    ConditionTracker,
    EventSender,
    RunForwarder,
    RunTracker,
)


def node(**conditions: str) -> dict[str, Any]:
    return {
        "metadata": {"name": "ip-10-0-0-1.ec2.internal"},
        "spec": {"providerID": "aws:///us-east-1a/i-0123456789abcdef0"},
        "status": {"conditions": [{"type": k, "status": v} for k, v in conditions.items()]},
    }


def test_a_condition_seen_first_healthy_is_no_news_and_its_changes_are() -> None:
    tracker = ConditionTracker()
    # A new node registers without Ready; its kubelet adds Ready=True a moment later.
    assert tracker.observe("ADDED", node(KernelReady="True")) == []
    assert tracker.observe("MODIFIED", node(KernelReady="True", Ready="True")) == []
    changed = tracker.observe("MODIFIED", node(KernelReady="False", Ready="False"))
    assert [(d["conditionType"], d["status"]) for d in changed] == [
        ("KernelReady", "False"),
        ("Ready", "False"),
    ]
    cleared = tracker.observe("MODIFIED", node(KernelReady="True", Ready="False"))
    assert [(d["conditionType"], d["status"]) for d in cleared] == [("KernelReady", "True")]


def test_a_condition_first_seen_as_a_problem_is_news() -> None:
    tracker = ConditionTracker()
    assert tracker.observe("ADDED", node(Ready="True")) == []
    (problem,) = tracker.observe("MODIFIED", node(Ready="True", AcceleratedHardwareReady="False"))
    assert (problem["conditionType"], problem["status"]) == ("AcceleratedHardwareReady", "False")


def run(kind: str, *conditions: tuple[str, str], uid: str = "u-1", **status: Any) -> dict[str, Any]:
    """A run of HyperGuard's as the API server returns it: labelled and annotated as
    `hyperguard.cluster.workloads` makes it, with these (type, reason) conditions True."""
    return {
        "apiVersion": "batch/v1" if kind == "Job" else "sagemaker.amazonaws.com/v1",
        "kind": kind,
        "metadata": {
            "name": "job-a1b2-3",
            "namespace": "hyperpod-ns-nlp",
            "uid": uid,
            "labels": {JOB_ID_LABEL: "job-a1b2", RUN_LABEL: "3"},
            "annotations": {JOB_ID_ANNOTATION: "a1b2"},
        },
        "spec": {"parallelism": 2},
        "status": {
            **status,
            "conditions": [
                {
                    "type": t,
                    "status": "True",
                    "reason": r,
                    "lastTransitionTime": "2026-11-28T10:00:00Z",
                }
                for t, r in conditions
            ],
        },
    }


def test_a_runs_end_is_news_once_with_how_it_ended() -> None:
    tracker = RunTracker()
    assert tracker.observe("ADDED", run("Job")) == []
    assert tracker.observe("MODIFIED", run("Job", active=2)) == []
    (ended,) = tracker.observe("MODIFIED", run("Job", ("Failed", "PodFailurePolicy")))
    assert {k: v for k, v in ended.items() if k != "observedTime"} == {
        "namespace": "hyperpod-ns-nlp",
        "kind": "Job",
        "name": "job-a1b2-3",
        "jobId": "a1b2",
        "run": 3,
        "phase": "lost",
        "reason": "PodFailurePolicy",
    }
    # A watch that resumes or re-lists shows the same end again: not news.
    assert tracker.observe("MODIFIED", run("Job", ("Failed", "PodFailurePolicy"))) == []
    assert tracker.observe("DELETED", run("Job", ("Failed", "PodFailurePolicy"))) == []
    # Once deleted it is forgotten: a run of that uid seen ended again is news again.
    assert len(tracker.observe("ADDED", run("Job", ("Failed", "PodFailurePolicy")))) == 1
    assert tracker.ended == 2


def test_each_kind_ends_by_its_own_conditions_and_foreign_objects_are_no_news() -> None:
    tracker = RunTracker()
    (done,) = tracker.observe("MODIFIED", run("HyperPodPyTorchJob", ("Completed", "Done")))
    assert (done["kind"], done["phase"]) == ("HyperPodPyTorchJob", "succeeded")
    # A HyperPodPyTorchJob's condition `Complete` is not its end (a batch Job's is).
    assert (
        tracker.observe("MODIFIED", run("HyperPodPyTorchJob", ("Complete", "x"), uid="u-2")) == []
    )
    (failed,) = tracker.observe(
        "MODIFIED", run("Job", ("Failed", "BackoffLimitExceeded"), uid="u-3")
    )
    assert failed["phase"] == "failed"
    # A custom resource's condition reason has no length limit; what is forwarded has one.
    (long,) = tracker.observe(
        "MODIFIED", run("HyperPodPyTorchJob", ("Failed", "x" * 5000), uid="u-5")
    )
    assert long["reason"] == "x" * REASON_MAX
    foreign = run("Job", ("Complete", "Done"), uid="u-4")
    del foreign["metadata"]["annotations"]
    assert tracker.observe("MODIFIED", foreign) == []
    no_uid = run("Job", ("Complete", "Done"), uid="")
    assert tracker.observe("MODIFIED", no_uid) == []


class NotServed(Exception):
    """What lightkube raises for a 404: an ApiError whose `status.code` is 404."""

    status = SimpleNamespace(code=404)


class Unserving:
    """A cluster that does not serve the kind: every watch is refused with 404."""

    def __init__(self) -> None:
        self.watches = 0

    def watch(self, *_args: Any, **_kwargs: Any) -> Any:
        self.watches += 1
        raise NotServed


class CountedStop(threading.Event):
    """A stop that records each wait and is set at the `last` one."""

    def __init__(self, last: int) -> None:
        super().__init__()
        self.last = last
        self.waits: list[float | None] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.waits.append(timeout)
        if len(self.waits) == self.last:
            self.set()
        return self.is_set()


def test_a_kind_the_cluster_does_not_serve_is_asked_for_again_slowly_and_not_counted() -> None:
    stop, kube = CountedStop(3), Unserving()
    watcher = RunForwarder(kube=kube, sender=EventSender(None), cluster="c", bus="b", batch=False)
    watcher.run(stop)
    assert (kube.watches, stop.waits) == (3, [NOT_SERVED_S] * 3)
    assert watcher.watch_restarts == 0
