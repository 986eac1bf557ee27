"""What the in-cluster forwarder takes for news in a node's conditions."""

from __future__ import annotations

from typing import Any

from hyperguard.forwarder import ConditionTracker


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
