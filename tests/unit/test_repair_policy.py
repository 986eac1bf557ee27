"""The repair policy: EKS nodeRepairConfig shape, waits from first seen, the reboot ladder."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from hyperguard.models import Incident, Node, Repair
from hyperguard.policies.repair import NodeRepairConfig
from hyperguard.recovery.policy import decide

OPENED = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


def incident(severity: str = "fatal", repair: Repair = Repair.REPLACE, **extra: object) -> Incident:
    fields: dict[str, object] = {
        "incident_id": "i-1-x",
        "instance_id": "i-1",
        "cluster": "c",
        "kind": "node_condition",
        "severity": severity,
        "repair": repair,
        "reason": "r",
        "opened_at": OPENED,
        "first_signal_at": OPENED - timedelta(minutes=5),
    }
    fields.update(extra)
    return Incident.model_validate(fields)


def node(*reboots_ago_min: float) -> Node:
    return Node(
        instance_id="i-1",
        cluster="c",
        pool="workers",
        platform="hyperpod",
        instance_type="ml.p5.48xlarge",
        repairs=[
            {"at": (OPENED - timedelta(minutes=m)).isoformat(), "action": "reboot"}
            for m in reboots_ago_min
        ],
    )


def test_the_eks_shape_reads_unchanged() -> None:
    eks: dict[str, Any] = {
        "enabled": True,
        "maxUnhealthyNodeThresholdPercentage": 30,
        "maxParallelNodesRepairedCount": 2,
        "nodeRepairConfigOverrides": [
            {
                "nodeMonitoringCondition": "AcceleratedHardwareReady",
                "nodeUnhealthyReason": "NvidiaXID79Error",
                "minRepairWaitTimeMins": 1,
                "repairAction": "Replace",
            }
        ],
    }
    config = NodeRepairConfig.model_validate(eks)
    assert config.max_parallel_nodes_repaired_percentage is None  # count wins
    assert config.limit("max_parallel_nodes_repaired", 256) == 2
    assert config.limit("max_unhealthy_node_threshold", 256) == 76
    dumped = config.model_dump(mode="json", exclude_none=True)
    assert dumped["nodeRepairConfigOverrides"][0]["repairAction"] == "Replace"
    with pytest.raises(ValidationError):
        NodeRepairConfig.model_validate({"maxUnhealthyNodeThresholdPercentage": 101})
    with pytest.raises(ValidationError):  # EKS's model: minRepairWaitTimeMins is NonZeroInteger
        NodeRepairConfig.model_validate(
            {
                "nodeRepairConfigOverrides": [
                    {**eks["nodeRepairConfigOverrides"][0], "minRepairWaitTimeMins": 0}
                ]
            }
        )
    with pytest.raises(ValidationError):
        NodeRepairConfig.model_validate(
            {"nodeRepairConfigOverrides": [{"repairAction": "Explode"}]}
        )


def test_fatal_faults_act_at_once() -> None:
    decision = decide(NodeRepairConfig(), incident(), node(), OPENED)
    assert decision.action is Repair.REPLACE and decision.not_before is None


@pytest.mark.parametrize(
    ("facts", "wait_min"),
    [
        ({"condition_type": "AcceleratedHardwareReady", "reason": "NvidiaXID79Error"}, 10),
        ({"condition_type": "KernelReady", "reason": "KernelBug"}, 30),
        ({"condition_type": "NetworkingReady", "reason": "DCGMHealthCode14"}, 10),
    ],
)
def test_degraded_faults_wait_from_first_seen(facts: dict[str, str], wait_min: int) -> None:
    decision = decide(
        NodeRepairConfig(), incident("degraded", Repair.REBOOT, facts=facts), node(), OPENED
    )
    assert decision.action is Repair.REBOOT
    assert decision.not_before == OPENED + timedelta(minutes=wait_min)


def test_overrides_match_condition_and_reason_and_can_say_no_action() -> None:
    policy = NodeRepairConfig.model_validate(
        {
            "nodeRepairConfigOverrides": [
                {
                    "nodeMonitoringCondition": "KernelReady",
                    "nodeUnhealthyReason": "*",
                    "minRepairWaitTimeMins": 5,
                    "repairAction": "NoAction",
                }
            ]
        }
    )
    facts = {"condition_type": "KernelReady", "reason": "Anything"}
    decision = decide(policy, incident("degraded", Repair.REBOOT, facts=facts), node(), OPENED)
    assert decision.action is Repair.NONE
    other = {"condition_type": "StorageReady", "reason": "Anything"}
    assert (
        decide(policy, incident("degraded", facts=other), node(), OPENED).action is Repair.REPLACE
    )


def test_a_repeated_reboot_within_the_window_becomes_a_replace() -> None:
    policy = NodeRepairConfig()
    decision = decide(policy, incident(repair=Repair.REBOOT), node(60), OPENED)
    assert decision.action is Repair.REPLACE and "rebooted 1x" in decision.reason
    long_ago = decide(policy, incident(repair=Repair.REBOOT), node(60 * 25), OPENED)
    assert long_ago.action is Repair.REBOOT


def test_scheduled_changes_act_lead_time_before_start_and_waits_are_data() -> None:
    start = OPENED + timedelta(days=2)
    decision = decide(NodeRepairConfig(), incident("scheduled", not_before=start), node(), OPENED)
    assert decision.not_before == start - timedelta(minutes=60)
    # A policy stored with shorter waits (as the twin stores one for its fast clock).
    fast = decide(
        NodeRepairConfig(other_fault_wait_mins=0.5),
        incident("degraded", facts={"condition_type": "KernelReady"}),
        node(),
        OPENED,
    )
    assert fast.not_before == OPENED + timedelta(seconds=30)


def test_drain_incidents_drain_and_disabled_policy_does_nothing() -> None:
    assert (
        decide(NodeRepairConfig(), incident(repair=Repair.DRAIN), node(), OPENED).action
        is Repair.DRAIN
    )
    off = NodeRepairConfig(enabled=False)
    assert decide(off, incident(), node(), OPENED).action is Repair.NONE
