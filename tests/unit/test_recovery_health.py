"""What CheckHealth concludes after a reboot, deep health checks included (a fake cluster
that answers a scripted sequence of node states: fakes over mocks)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from hyperguard.cluster.conventions import DEEP_HEALTH_CHECK_LABEL
from hyperguard.models import Incident, Node, NodeStatus, Repair, wait_timestamp
from hyperguard.policies.repair import DeepHealthCheck, NodeRepairConfig
from hyperguard.recovery.state import Recovery
from hyperguard.recovery.steps import RecoverySteps

INSTANCE = "i-0123456789abcdef0"


def scripted(status: NodeStatus, healthy: bool, check: str | None = None, **extra: Any) -> Node:
    """The node as node_status answers it: `check`, its deep health check label."""
    return Node(
        instance_id=INSTANCE,
        cluster="c",
        pool="workers",
        platform="hyperpod",
        instance_type="ml.p5.48xlarge",
        status=status,
        healthy=healthy,
        labels={DEEP_HEALTH_CHECK_LABEL: check} if check else {},
        **extra,
    )


class ScriptedCluster:
    """node_status answers the scripted states in turn; the last one repeats."""

    def __init__(self, *states: tuple[NodeStatus, bool, str | None] | Node) -> None:
        self.states = list(states)
        self.checks: list[list[str]] = []

    def node_status(self, instance_id: str) -> Node:
        state = self.states.pop(0) if len(self.states) > 1 else self.states[0]
        return state if isinstance(state, Node) else scripted(*state)

    def start_deep_health_check(self, instance_ids: list[str], checks: list[str]) -> bool:
        self.checks.append(checks)
        return True


class StoredPolicy:
    def __init__(self, policy: NodeRepairConfig) -> None:
        self.policy = policy

    def get(self) -> NodeRepairConfig:
        return self.policy


def steps(cluster: ScriptedCluster, policy: NodeRepairConfig) -> RecoverySteps:
    unused: Any = None
    return RecoverySteps(
        incidents=unused,
        nodes=unused,
        jobs=unused,
        policies=StoredPolicy(policy),  # type: ignore[arg-type]
        checkpoints=unused,
        gateway=cluster,  # type: ignore[arg-type]
        publisher=unused,
        escalator=unused,
    )


INCIDENT = Incident(
    incident_id="x",
    instance_id=INSTANCE,
    cluster="c",
    kind="hyperpod_node_health",
    severity="fatal",
    repair=Repair.REBOOT,
    reason="gpu",
    opened_at=datetime(2026, 1, 1, tzinfo=UTC),
    first_signal_at=datetime(2026, 1, 1, tzinfo=UTC),
)
RUNNING = (NodeStatus.RUNNING, True, None)
REBOOTING = (NodeStatus.PENDING, False, None)


def polls(cluster: ScriptedCluster, policy: NodeRepairConfig, n: int) -> list[str | None]:
    runner = steps(cluster, policy)
    r = Recovery()
    verdicts: list[str | None] = []
    for _ in range(n):
        verdicts.append(runner._rebooted_health(INCIDENT, r))
    return verdicts


def test_without_deep_checks_a_node_back_and_healthy_returns_to_service() -> None:
    assert polls(ScriptedCluster(REBOOTING, RUNNING), NodeRepairConfig(), 2) == [None, "healthy"]


def test_a_node_back_from_a_reboot_still_faulty_is_replaced() -> None:
    cluster = ScriptedCluster(REBOOTING, (NodeStatus.FAILURE, False, None))
    assert polls(cluster, NodeRepairConfig(), 2) == [None, "escalate_replace"]


def test_a_node_back_from_a_reboot_whose_kubelet_is_not_yet_ready_is_waited_for() -> None:
    booting = scripted(NodeStatus.RUNNING, False, booting=True)
    cluster = ScriptedCluster(REBOOTING, booting, booting, RUNNING)
    assert polls(cluster, NodeRepairConfig(), 4) == [None, None, None, "healthy"]


def test_with_deep_checks_only_a_pass_after_the_start_returns_the_node() -> None:
    policy = NodeRepairConfig(deep_health_checks=[DeepHealthCheck.INSTANCE_STRESS])
    cluster = ScriptedCluster(
        REBOOTING,
        (NodeStatus.RUNNING, True, "Passed"),  # an earlier check's result: starts a new one
        (NodeStatus.RUNNING, True, "Passed"),  # still the old label: not yet
        (NodeStatus.DEEP_HEALTH_CHECK_IN_PROGRESS, False, "InProgress"),
        (NodeStatus.RUNNING, True, "Passed"),
    )
    assert polls(cluster, policy, 5) == [None, None, None, None, "healthy"]
    assert cluster.checks == [["InstanceStress"]]


def test_a_failed_deep_check_replaces_the_node() -> None:
    policy = NodeRepairConfig(deep_health_checks=[DeepHealthCheck.INSTANCE_STRESS])
    cluster = ScriptedCluster(
        RUNNING,
        (NodeStatus.DEEP_HEALTH_CHECK_IN_PROGRESS, False, "InProgress"),
        (NodeStatus.FAILURE, False, "Failed"),
    )
    assert polls(cluster, policy, 3) == [None, None, "escalate_replace"]


@pytest.mark.parametrize(
    ("when", "expected"),
    [
        (datetime(2026, 3, 1, 12, 0, 5, tzinfo=UTC), "2026-03-01T12:00:05Z"),
        # never early: a fraction rounds up
        (datetime(2026, 3, 1, 12, 0, 5, 1, tzinfo=UTC), "2026-03-01T12:00:06Z"),
        # an offset becomes Z (Step Functions fails on +00:00 with no Catch possible)
        (
            datetime(2026, 3, 1, 16, 0, 5, tzinfo=timezone(timedelta(hours=2))),
            "2026-03-01T14:00:05Z",
        ),
    ],
)
def test_wait_timestamps_are_rfc3339_with_z(when: datetime, expected: str) -> None:
    assert wait_timestamp(when) == expected
