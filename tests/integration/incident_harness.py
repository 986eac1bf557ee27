"""A node's faults as HyperPod reports them, and past incidents written as the service writes
them, for tests that need a node's history."""

from __future__ import annotations

from datetime import datetime

from hyperguard.models import Action, HealthSignal, Node, Repair, Severity, SignalSource
from hyperguard.store import IncidentStore


def fault_signal(
    node: Node,
    at: datetime,
    *,
    kind: str = "hyperpod_node_health",
    severity: Severity = Severity.FATAL,
    repair: Repair = Repair.REBOOT,
) -> HealthSignal:
    """HyperPod's health agent reports a GPU fault on `node` at `at`."""
    return HealthSignal(
        source=SignalSource.HYPERPOD,
        kind=kind,
        instance_id=node.instance_id,
        cluster=node.cluster,
        severity=severity,
        action=Action.OPEN_INCIDENT,
        repair=repair,
        reason="NvidiaErrorTerminate",
        observed_at=at,
        dedupe_key=f"{node.instance_id}-{at.isoformat()}",
    )


def closed_fault(
    incidents: IncidentStore, node: Node, at: datetime, kind: str = "hyperpod_node_health"
) -> None:
    """A fault on `node` at `at`, its incident opened and closed (rebooted) at that time."""
    incident, _ = incidents.open_or_append(node, fault_signal(node, at, kind=kind), at)
    assert incidents.close(incident, "rebooted", signal_count=1, at=at)
