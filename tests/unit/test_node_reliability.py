"""Lemon nodes and the per-node reliability view (hyperguard.policies.reliability, D87)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from hyperguard.models import Incident, Node, NodeStatus, Repair
from hyperguard.models.incidents import JOB_STALLED
from hyperguard.policies.reliability import lemon_reason, lemon_slots, reliability
from hyperguard.policies.repair import NodeRepairConfig
from hyperguard.recovery.policy import RepairDecision, replace_lemon
from hyperguard.store.history import read_history

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
POLICY = NodeRepairConfig()


def incident(
    instance_id: str, days_ago: float, kind: str = "hyperpod_node_health", n: int = 0
) -> Incident:
    opened = NOW - timedelta(days=days_ago)
    return Incident(
        incident_id=f"{instance_id}-{days_ago}-{n}",
        instance_id=instance_id,
        cluster="c",
        kind=kind,
        severity="fatal",
        repair=Repair.REBOOT,
        reason="r",
        opened_at=opened,
        first_signal_at=opened,
    )


def node(instance_id: str, logical_id: str | None = None, **extra: object) -> Node:
    return Node.model_validate(
        {
            "instance_id": instance_id,
            "cluster": "c",
            "pool": "workers",
            "platform": "hyperpod",
            "instance_type": "ml.p5.48xlarge",
            "logical_id": logical_id,
            **extra,
        }
    )


REBOOT = RepairDecision(action=Repair.REBOOT, reason="fatal: act at once")


def test_the_defaults_are_three_faults_in_thirty_days_and_bounded() -> None:
    assert (POLICY.lemon_incident_threshold, POLICY.lemon_window_days) == (3, 30)
    wire = NodeRepairConfig.model_validate({"lemonIncidentThreshold": 0, "lemonWindowDays": 7})
    assert (wire.lemon_incident_threshold, wire.lemon_window_days) == (0, 7)
    for bad in (
        {"lemonIncidentThreshold": 1},
        {"lemonIncidentThreshold": -1},
        {"lemonIncidentThreshold": None},
        {"lemonIncidentThreshold": 1001},
        {"lemonIncidentThreshold": 3.0},
        {"lemonWindowDays": 0},
        {"lemonWindowDays": 366},
    ):
        with pytest.raises(ValidationError):
            NodeRepairConfig.model_validate(bad)


def test_a_node_is_a_lemon_at_the_threshold_within_the_window() -> None:
    times = [NOW - timedelta(days=d) for d in (1, 10, 29.9)]
    assert lemon_reason(POLICY, times, NOW) == "lemon: 3 incidents in 30 days"
    assert lemon_reason(POLICY, times[:2], NOW) is None
    older = [*times[:2], NOW - timedelta(days=30, seconds=1)]
    assert lemon_reason(POLICY, older, NOW) is None
    off = NodeRepairConfig(lemon_incident_threshold=0)
    assert lemon_reason(off, times * 10, NOW) is None


def test_a_lemons_reboot_becomes_a_replacement_that_says_why() -> None:
    times = [NOW - timedelta(days=d) for d in (0, 3, 6)]
    fault = incident("i-1", 0)
    decision = replace_lemon(POLICY, fault, REBOOT, times, NOW)
    assert decision.action is Repair.REPLACE
    assert decision.reason == "fatal: act at once; lemon: 3 incidents in 30 days, so replace"
    assert replace_lemon(POLICY, fault, REBOOT, times[:2], NOW) == REBOOT
    # An operator's own reboot is carried out as asked; other actions are left alone.
    asked = incident("i-1", 0, kind="operator_reboot")
    assert replace_lemon(POLICY, asked, REBOOT, times, NOW) == REBOOT
    none = RepairDecision(action=Repair.NONE, reason="disabled")
    assert replace_lemon(POLICY, fault, none, times, NOW) == none


def test_a_slot_is_counted_across_its_replacement_and_planned_disruptions_are_not() -> None:
    logical_ids = {"i-old": "slot-7", "i-new": "slot-7", "i-eks": None}
    history = [
        incident("i-old", 20),
        incident("i-old", 12),
        incident("i-new", 1),
        incident("i-eks", 1),
        incident("i-eks", 2, kind="spot_interruption"),
        incident("i-eks", 3, kind="health_scheduled_change"),
        incident("i-eks", 4, kind="operator_replace"),
    ]
    assert lemon_slots(POLICY, history, logical_ids, NOW) == {"slot-7"}
    # The same incident read twice (the index and the one at hand) counts once.
    assert lemon_slots(POLICY, history[1:] + history[2:3], logical_ids, NOW) == frozenset()


def test_a_stalled_job_is_no_nodes_fault_in_the_rule_the_view_or_the_history_read() -> None:
    """A stall's incident (D117) names no node; were one to carry a node's id it would still
    count for nothing, and the history read never looks an empty id up in the inventory."""
    stalls = [incident("", d, kind=JOB_STALLED, n=d) for d in (1, 2, 3)]
    on_a_node = [incident("i-1", d, kind=JOB_STALLED, n=d) for d in (1, 2, 3)]
    assert lemon_slots(POLICY, [*stalls, *on_a_node], {"i-1": None}, NOW) == frozenset()
    assert (
        reliability(POLICY, [*stalls, *on_a_node, incident("i-2", 1)], [], NOW)[0].instance_id
        == "i-2"
    )
    assert len(reliability(POLICY, [*stalls, *on_a_node], [], NOW)) == 0

    class Incidents:
        def opened_since(self, since: datetime, limit: int) -> tuple[list[Incident], bool]:
            return [*stalls, incident("i-9", 1)], False

    class Nodes:
        asked: list[str] = []

        def many(self, ids: list[str]) -> list[Node]:
            self.asked.extend(ids)
            return []

    nodes = Nodes()
    history = read_history(Incidents(), nodes, POLICY, NOW, [])  # type: ignore[arg-type]
    assert [i.instance_id for i in history.incidents] == ["i-9"] and nodes.asked == ["i-9"]


def test_the_view_puts_repeat_offenders_first_with_causes_and_mtbf() -> None:
    nodes = [
        node("i-old", "slot-7", status=NodeStatus.NOT_FOUND, retired_at=NOW - timedelta(days=5)),
        node("i-new", "slot-7", launch_time=NOW - timedelta(days=5)),
        node("i-2", "slot-2", launch_time=NOW - timedelta(days=10)),
        node("i-3", "slot-3"),
    ]
    history = [
        incident("i-old", 20, kind="node_condition"),
        incident("i-old", 12),
        incident("i-new", 1),
        incident("i-2", 2),
        incident("i-3", 3),
        incident("i-3", 40),  # outside the window
    ]
    rows = reliability(POLICY, history, nodes, NOW)
    assert [(r.instance_id, r.incidents, r.lemon) for r in rows] == [
        ("i-new", 3, True),
        ("i-2", 1, False),
        ("i-3", 1, False),
    ]
    slot = rows[0]
    assert (slot.logical_id, slot.pool, slot.instance_ids) == (
        "slot-7",
        "workers",
        ["i-old", "i-new"],
    )
    assert slot.causes == {"hyperpod_node_health": 2, "node_condition": 1}
    assert slot.mtbf_hours == 240.0  # the window's 30 days over 3 faults
    assert rows[1].mtbf_hours == 240.0  # launched 10 days ago, one fault
    assert rows[2].mtbf_hours == 720.0
    assert rows[2].last_incident_at == NOW - timedelta(days=3)


def test_a_failed_instance_the_inventory_does_not_know_is_its_own_row() -> None:
    rows = reliability(POLICY, [incident("i-9", 1)], [], NOW)
    assert [(r.instance_id, r.logical_id, r.pool) for r in rows] == [("i-9", None, None)]


@given(
    days=st.lists(st.floats(min_value=0, max_value=60), max_size=12),
    threshold=st.integers(min_value=2, max_value=6),
    window=st.integers(min_value=1, max_value=45),
)
def test_a_lemon_is_exactly_a_node_with_threshold_faults_in_the_window(
    days: list[float], threshold: int, window: int
) -> None:
    policy = NodeRepairConfig(lemon_incident_threshold=threshold, lemon_window_days=window)
    history = [incident("i-1", d, n=n) for n, d in enumerate(days)]
    in_window = sum(1 for d in days if d <= window)
    is_lemon = lemon_slots(policy, history, {}, NOW) == {"i-1"}
    assert is_lemon == (in_window >= threshold)
    rows = reliability(policy, history, [node("i-1")], NOW)
    assert [r.incidents for r in rows] == ([in_window] if in_window else [])
    assert all(r.lemon == is_lemon for r in rows)
    # One more fault never makes a lemon a good node again.
    more = lemon_slots(policy, [*history, incident("i-1", 0, n=99)], {}, NOW)
    assert not is_lemon or more == {"i-1"}
