"""NodeRecovery's steps run one at a time, as its state machine runs them, against moto and
the simulated cluster behind real APIs, with a manual clock: what the recovery tests share."""

from __future__ import annotations

from typing import Any

from tests.conftest import Stack
from tests.integration.cluster_harness import ClusterApis
from tests.integration.incident_harness import fault_signal

from hyperguard.messaging import Escalator, EventPublisher
from hyperguard.models import Repair, Severity
from hyperguard.recovery.steps import RecoverySteps
from hyperguard.store import IncidentStore, JobStore, NodeStore
from hyperguard.store.checkpoints import CheckpointStore
from hyperguard.store.policy import RepairersStore, RepairPolicyStore

UP_TO_DRAIN = ("diagnose", "cordon", "guard", "protect_jobs", "drain")
"""The steps the state machine runs from an incident's diagnosis to the node's drain, by which
its jobs' recovery strategies have been carried out."""
UP_TO_REPAIR = (*UP_TO_DRAIN, "repair")
"""The steps the state machine runs from an incident's diagnosis to its repair request."""


def recovery_steps(
    stack: Stack,
    apis: ClusterApis,
    nodes: NodeStore,
    incidents: IncidentStore,
    publisher: EventPublisher,
    *,
    jobs: JobStore | None = None,
    repairers: RepairersStore | None = None,
) -> RecoverySteps:
    """Recovery's steps on the stack's tables and the cluster's APIs, on its clock; `jobs`: the
    test's own JobStore where it reads jobs through it too."""
    return RecoverySteps(
        incidents=incidents,
        nodes=nodes,
        jobs=jobs if jobs is not None else JobStore(stack.tables["JobsTable"]),
        policies=RepairPolicyStore(stack.tables["TeamsTable"]),
        checkpoints=CheckpointStore(),
        gateway=apis.gateway,
        publisher=publisher,
        escalator=Escalator(stack.topic_arn),
        clock=apis.clock.now,
        repairers=repairers,
    )


class StepRunner:
    """Opens incidents and runs recovery's steps on them; a test's world sets `apis`, the
    stores and `steps` (its RecoverySteps, wired as that test needs)."""

    apis: ClusterApis
    nodes: NodeStore
    incidents: IncidentStore
    steps: RecoverySteps

    def open(
        self,
        instance_id: str,
        repair: Repair = Repair.REPLACE,
        kind: str = "hyperpod_node_health",
        severity: Severity = Severity.FATAL,
    ) -> dict[str, Any]:
        """A HyperPod report of a fault on the node opens its incident: the state machine's
        input."""
        node = self.nodes.get(instance_id)
        assert node is not None
        now = self.apis.clock.now()
        signal = fault_signal(node, now, kind=kind, severity=severity, repair=repair)
        incident, _ = self.incidents.open_or_append(node, signal, now)
        return {"incident_id": incident.incident_id, "instance_id": instance_id}

    def run(self, *names: str, r: dict[str, Any]) -> dict[str, Any]:
        """The steps in turn, the cluster's controllers settled before each."""
        for name in names:
            self.apis.settle()
            r = self.steps.run(name, r)
        return r

    def until_healthy(
        self, r: dict[str, Any], step_s: float = 30, limit: int = 200
    ) -> dict[str, Any]:
        """check_health every `step_s` seconds of the clock until it is no longer pending."""
        for _ in range(limit):
            self.apis.advance(step_s)
            r = self.steps.run("check_health", r)
            if r["health"] != "pending":
                return r
        raise AssertionError("never healthy")
