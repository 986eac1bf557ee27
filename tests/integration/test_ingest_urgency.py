"""Signals that join an open incident: a more urgent one makes the incident its own and
wakes the waiting recovery; one right after a close, for a node the cluster says is
healthy, opens no new incident. Moto tables, the simulated cluster behind real APIs."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from tests.conftest import Stack
from tests.integration.cluster_harness import ClusterApis, cluster_apis

from hyperguard.ingestion import HealthIngestor, Outcome, more_urgent, repair_side_effect
from hyperguard.inventory import InventorySync
from hyperguard.lookup import NodeLookup
from hyperguard.messaging import Escalator, EventPublisher, RecoveryWorkflows
from hyperguard.models import (
    Action,
    HealthSignal,
    Incident,
    IncidentStatus,
    Repair,
    Severity,
    SignalSource,
)
from hyperguard.store import IdempotencyStore, IncidentStore, NodeStore


class Workflows(RecoveryWorkflows):
    """Step Functions as far as ingestion uses it, recording the wake-ups it sends."""

    def __init__(self) -> None:
        self.woken: list[tuple[str, dict[str, Any]]] = []

    def ensure_started(self, incident_id: str, payload: dict[str, Any]) -> str:
        return f"arn:aws:states:us-east-1:123456789012:execution:recovery:{incident_id}"

    def wake(self, task_token: str, output: dict[str, Any]) -> bool:
        self.woken.append((task_token, output))
        return True


class World:
    def __init__(self, stack: Stack, apis: ClusterApis) -> None:
        self.apis = apis
        self.nodes = NodeStore(stack.tables["NodesTable"])
        InventorySync(self.nodes, apis.gateway, frozenset({"hyperguard-twin"})).sync()
        self.incidents = IncidentStore(stack.tables["IncidentsTable"], stack.tables["NodesTable"])
        self.workflows = Workflows()
        self.ingestor = HealthIngestor(
            nodes=self.nodes,
            lookup=NodeLookup(self.nodes, apis.gateway),
            incidents=self.incidents,
            idempotency=IdempotencyStore(stack.tables["IdempotencyTable"], 3600),
            workflows=self.workflows,
            escalator=Escalator(stack.topic_arn),
            publisher=EventPublisher(stack.bus_name),
            clock=apis.clock.now,
            reopen_window_s=600,
        )
        self._n = 0

    def signal(self, instance_id: str, severity: Severity, **fields: Any) -> HealthSignal:
        self._n += 1
        values: dict[str, Any] = {
            "source": SignalSource.HYPERPOD,
            "kind": "hyperpod_node_health",
            "instance_id": instance_id,
            "cluster": "hyperguard-twin",
            "severity": severity,
            "action": Action.OPEN_INCIDENT,
            "repair": Repair.REBOOT,
            "reason": "a report",
            "observed_at": self.apis.clock.now(),
            "dedupe_key": f"report-{self._n}",
        }
        return HealthSignal(**(values | fields))


@pytest.fixture
def world(stack: Stack) -> Iterator[World]:
    with cluster_apis(hyperpod_nodes=2, burst_nodes=0) as apis:
        yield World(stack, apis)


def test_a_fatal_fault_joining_a_waiting_retirement_takes_it_over_and_wakes_it(
    world: World,
) -> None:
    node = world.apis.hyperpod[0]
    now = world.apis.clock.now()
    retirement = world.signal(
        node,
        Severity.SCHEDULED,
        source=SignalSource.AWS_HEALTH,
        kind="health_scheduled_change",
        repair=Repair.REPLACE,
        not_before=now + timedelta(days=7),
    )
    assert world.ingestor._apply(retirement) is Outcome.OPENED
    incident = world.incidents.open_incident_for(node)
    assert incident is not None
    world.incidents.set_status(incident.incident_id, IncidentStatus.WAITING)
    assert world.incidents.park(incident.incident_id, "token-1", urgency=0)

    gpu = world.signal(node, Severity.FATAL, reason="NvidiaXidError")
    assert world.ingestor._apply(gpu) is Outcome.MERGED
    now_urgent = world.incidents.get(incident.incident_id)
    assert now_urgent is not None
    assert (now_urgent.kind, now_urgent.severity, now_urgent.repair) == (
        "hyperpod_node_health",
        "fatal",
        Repair.REBOOT,
    )
    assert now_urgent.not_before is None and now_urgent.urgency == 1
    assert world.workflows.woken == [
        ("token-1", {"woken_by": "hyperpod_node_health", "severity": "fatal"})
    ]
    # a recovery that had not parked yet sees the change and does not wait
    assert not world.incidents.park(incident.incident_id, "token-2", urgency=0)
    assert world.incidents.park(incident.incident_id, "token-2", urgency=1)

    # a report no more urgent than the incident changes nothing and wakes nobody
    again = world.signal(node, Severity.DEGRADED)
    assert world.ingestor._apply(again) is Outcome.MERGED
    stored = world.incidents.get(incident.incident_id)
    assert stored is not None and stored.urgency == 1
    assert len(world.workflows.woken) == 1


def test_urgency_is_severity_then_the_earlier_deadline() -> None:
    now = datetime(2026, 11, 22, tzinfo=UTC)

    def incident(severity: str, **fields: Any) -> Incident:
        return Incident(
            incident_id="i",
            instance_id="i-0123456789abcdef0",
            cluster="c",
            kind="k",
            severity=severity,
            repair=Repair.REPLACE,
            reason="",
            opened_at=now,
            first_signal_at=now,
            **fields,
        )

    def signal(severity: Severity, **fields: Any) -> HealthSignal:
        return HealthSignal(
            source=SignalSource.EC2,
            kind="k",
            instance_id="i-0123456789abcdef0",
            severity=severity,
            action=Action.OPEN_INCIDENT,
            repair=Repair.DRAIN,
            reason="",
            observed_at=now,
            dedupe_key="d",
            **fields,
        )

    assert more_urgent(signal(Severity.FATAL), incident("scheduled"))
    assert more_urgent(signal(Severity.DEGRADED), incident("scheduled"))
    assert not more_urgent(signal(Severity.DEGRADED), incident("fatal"))
    assert not more_urgent(signal(Severity.SCHEDULED), incident("scheduled"))
    soon, later = now + timedelta(minutes=2), now + timedelta(hours=1)
    assert more_urgent(signal(Severity.FATAL, deadline=soon), incident("fatal", deadline=later))
    assert not more_urgent(signal(Severity.FATAL, deadline=later), incident("fatal", deadline=soon))
    assert more_urgent(
        signal(Severity.SCHEDULED, not_before=soon), incident("scheduled", not_before=later)
    )


def test_a_report_right_after_a_close_is_suppressed_while_the_node_is_healthy(
    world: World,
) -> None:
    node = world.apis.hyperpod[1]
    first = world.signal(node, Severity.FATAL)
    assert world.ingestor._apply(first) is Outcome.OPENED
    incident = world.incidents.open_incident_for(node)
    assert incident is not None
    assert world.incidents.close(
        incident, "recovered_on_its_own", signal_count=1, at=world.apis.clock.now()
    )
    world.apis.advance(60)
    late = world.signal(node, Severity.FATAL)
    assert world.ingestor._apply(late) is Outcome.SUPPRESSED
    assert world.incidents.open_incident_for(node) is None
    # a scheduled change is never suppressed: it is about the future
    notice = world.signal(
        node,
        Severity.SCHEDULED,
        kind="health_scheduled_change",
        not_before=world.apis.clock.now() + timedelta(days=3),
    )
    assert world.ingestor._apply(notice) is Outcome.OPENED
    reopened = world.incidents.open_incident_for(node)
    assert reopened is not None
    assert world.incidents.close(reopened, "noted", signal_count=1, at=world.apis.clock.now())
    # the node really fails again: that opens an incident at once
    world.apis.cluster.inject_fault(node, "gpu")
    assert world.ingestor._apply(world.signal(node, Severity.FATAL)) is Outcome.OPENED


def test_a_kubelet_going_not_ready_under_the_incidents_own_repair_takes_nothing_over() -> None:
    """Once HyperGuard asked for the node's reboot or replacement, the node's NotReady (the
    forwarder's Ready=False) is what the repair does, not a new fault (D133); before that,
    and for any other condition, it is a fault like any other."""
    now = datetime(2026, 11, 22, tzinfo=UTC)

    def incident(timings: dict[str, float]) -> Incident:
        return Incident(
            incident_id="i",
            instance_id="i-0123456789abcdef0",
            cluster="c",
            kind="health_scheduled_change",
            severity="scheduled",
            repair=Repair.REPLACE,
            reason="",
            opened_at=now,
            first_signal_at=now,
            timings=timings,
        )

    def condition(kind: str) -> HealthSignal:
        return HealthSignal(
            source=SignalSource.KUBERNETES,
            kind="node_condition",
            instance_id="i-0123456789abcdef0",
            severity=Severity.DEGRADED,
            action=Action.OPEN_INCIDENT,
            repair=Repair.REPLACE,
            reason="",
            observed_at=now,
            dedupe_key="d",
            facts={"condition_type": kind, "status": "False"},
        )

    repairing = incident({"signal_to_repair_requested_s": 40.0})
    assert repair_side_effect(condition("Ready"), repairing)
    assert not repair_side_effect(condition("AcceleratedHardwareReady"), repairing)
    assert not repair_side_effect(condition("Ready"), incident({"signal_to_detected_s": 5.0}))
    assert more_urgent(condition("Ready"), incident({}))  # before the repair: a fault


def test_a_fault_reported_after_the_inventory_retired_its_node_opens_the_incident_it_would_have(
    world: World,
) -> None:
    """D176: whether the fault's report or the inventory's sync of the node's replacement
    came first does not decide whether the fault has an incident."""
    faulty, other = world.apis.hyperpod
    observed = world.apis.clock.now()
    world.apis.advance(240)  # HyperPod replaces the node, the inventory sees it go
    left = world.apis.clock.now()
    world.nodes.retire(faulty, at=left)
    world.nodes.retire(other, at=left)

    late = world.signal(faulty, Severity.FATAL, observed_at=observed)
    assert world.ingestor._apply(late) is Outcome.OPENED
    incident = world.incidents.open_incident_for(faulty)
    assert incident is not None and incident.first_signal_at == observed
    # a second late report joins it
    again = world.signal(faulty, Severity.DEGRADED, observed_at=observed + timedelta(seconds=5))
    assert world.ingestor._apply(again) is Outcome.MERGED
    assert world.incidents.close(incident, "instance_gone", signal_count=2, at=left)
    # once closed, a report from before the close is an echo the incident covered
    echo = world.signal(faulty, Severity.FATAL, observed_at=observed + timedelta(seconds=10))
    assert world.ingestor._apply(echo) is Outcome.FOREIGN
    # a report from after a node left is about no node of ours
    after = world.signal(other, Severity.FATAL, observed_at=left + timedelta(seconds=1))
    assert world.ingestor._apply(after) is Outcome.FOREIGN
    # nor is a notice about the node's future
    notice = world.signal(
        other,
        Severity.SCHEDULED,
        kind="health_scheduled_change",
        action=Action.NOTIFY,
        observed_at=observed,
    )
    assert world.ingestor._apply(notice) is Outcome.FOREIGN
    assert world.incidents.open_incident_for(other) is None
