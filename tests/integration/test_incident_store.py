"""IncidentStore against moto: one open incident per node, redelivery is a no-op."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from tests.conftest import Stack

from hyperguard.models import (
    Action,
    HealthSignal,
    IncidentStatus,
    Node,
    Repair,
    Severity,
    SignalSource,
)
from hyperguard.store import IncidentStore, NodeStore, SignalOutcome
from hyperguard.store.incidents import IncidentNotFoundError

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


def signal(
    key: str, source: SignalSource = SignalSource.HYPERPOD, instance: str = "i-0aaa"
) -> HealthSignal:
    return HealthSignal(
        source=source,
        kind="hyperpod_node_health",
        instance_id=instance,
        cluster="c1",
        severity=Severity.FATAL,
        action=Action.OPEN_INCIDENT,
        repair=Repair.REPLACE,
        reason="NvidiaErrorTerminate",
        observed_at=NOW,
        dedupe_key=key,
    )


@pytest.fixture
def stores(stack: Stack) -> tuple[IncidentStore, NodeStore]:
    nodes = NodeStore(stack.tables["NodesTable"])
    nodes.upsert_inventory(
        [
            Node(
                instance_id=i,
                cluster="c1",
                pool="workers",
                platform="hyperpod",
                instance_type="ml.p5.48xlarge",
            )
            for i in ("i-0aaa", "i-0bbb")
        ]
    )
    return IncidentStore(stack.tables["IncidentsTable"], stack.tables["NodesTable"]), nodes


def test_first_signal_opens_and_locks_the_node(stores: tuple[IncidentStore, NodeStore]) -> None:
    incidents, nodes = stores
    node = nodes.get("i-0aaa")
    assert node is not None
    incident, outcome = incidents.open_or_append(node, signal("e1"), NOW)
    assert outcome is SignalOutcome.OPENED
    assert incident.incident_id.startswith("i-0aaa-20261122T120000Z-")
    node = nodes.get("i-0aaa")
    assert node is not None and node.open_incident_id == incident.incident_id
    stored = incidents.get(incident.incident_id)
    assert stored is not None and stored.status is IncidentStatus.OPEN and stored.signal_count == 1


def test_other_sources_append_and_redelivery_is_a_duplicate(
    stores: tuple[IncidentStore, NodeStore],
) -> None:
    incidents, nodes = stores
    node = nodes.get("i-0aaa")
    assert node is not None
    first, _ = incidents.open_or_append(node, signal("e1"), NOW)
    second, outcome = incidents.open_or_append(node, signal("e2", SignalSource.AWS_HEALTH), NOW)
    assert outcome is SignalOutcome.APPENDED and second.incident_id == first.incident_id
    again, outcome = incidents.open_or_append(node, signal("e2", SignalSource.AWS_HEALTH), NOW)
    assert outcome is SignalOutcome.DUPLICATE and again.incident_id == first.incident_id
    stored = incidents.get(first.incident_id)
    assert stored is not None
    assert stored.signal_count == 2
    assert stored.sources == ["aws_health", "hyperpod"]
    assert sorted(s["dedupe_key"] for s in incidents.signals(first.incident_id)) == ["e1", "e2"]


def test_the_same_first_report_twice_opens_once(stores: tuple[IncidentStore, NodeStore]) -> None:
    incidents, nodes = stores
    node = nodes.get("i-0aaa")
    assert node is not None
    a, first = incidents.open_or_append(node, signal("e1"), NOW)
    b, second = incidents.open_or_append(node, signal("e1"), NOW)
    assert (first, second) == (SignalOutcome.OPENED, SignalOutcome.DUPLICATE)
    assert a.incident_id == b.incident_id
    assert [i.incident_id for i in incidents.recent()] == [a.incident_id]


def test_nodes_are_independent(stores: tuple[IncidentStore, NodeStore]) -> None:
    incidents, nodes = stores
    for instance in ("i-0aaa", "i-0bbb"):
        node = nodes.get(instance)
        assert node is not None
        _, outcome = incidents.open_or_append(node, signal(f"e-{instance}", instance=instance), NOW)
        assert outcome is SignalOutcome.OPENED
    assert len(incidents.recent()) == 2


def test_status_timings_and_notes_are_recorded(stores: tuple[IncidentStore, NodeStore]) -> None:
    incidents, nodes = stores
    node = nodes.get("i-0aaa")
    assert node is not None
    incident, _ = incidents.open_or_append(node, signal("e1"), NOW)
    incidents.set_status(
        incident.incident_id, IncidentStatus.DETECTED, timings={"signal_to_detected_s": 1.25}
    )
    incidents.set_status(incident.incident_id, IncidentStatus.NEEDS_OPERATOR, note="replace failed")
    stored = incidents.get(incident.incident_id)
    assert stored is not None
    assert stored.status is IncidentStatus.NEEDS_OPERATOR
    assert stored.timings == {"signal_to_detected_s": 1.25}
    assert stored.notes == ["replace failed"]


def test_appending_to_a_missing_incident_is_an_error(
    stores: tuple[IncidentStore, NodeStore],
) -> None:
    incidents, _ = stores
    with pytest.raises(IncidentNotFoundError):
        incidents.append_signal("no-such-incident", signal("e9"))
