"""Health ingestion: one EventBridge event in, normalised signals and incidents out.

Every effect is idempotent (conditional writes, named executions), and a delivery is
marked processed only after all its effects succeeded: an exception here makes the SQS
record fail alone, be retried, and land in the DLQ if it keeps failing.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from hyperguard.events import ClassifyConfig, MalformedEventError, classify
from hyperguard.lookup import NodeLookup
from hyperguard.messaging import Escalator, EventPublisher, RecoveryWorkflows, escalation
from hyperguard.models import (
    Action,
    HealthSignal,
    Incident,
    IncidentStatus,
    Node,
    NodeStatus,
    Severity,
    utcnow,
)
from hyperguard.observability import logger
from hyperguard.store import IdempotencyStore, IncidentStore, NodeStore, SignalOutcome


class Outcome(StrEnum):
    OPENED = "opened"
    MERGED = "merged"
    DUPLICATE = "duplicate"
    RESOLVED = "resolved"
    NOTIFIED = "notified"
    IGNORED = "ignored"
    FOREIGN = "foreign"
    MALFORMED = "malformed"
    SUPPRESSED = "suppressed"
    """A fault report right after the node's incident closed, while the node is healthy."""
    LEAVING = "leaving"
    """A fault report from an EKS node Karpenter is taking away, with no incident open: its
    going down is its removal (D206)."""
    ESCALATED = "escalated"
    """A recovery execution ended (failed, timed out, aborted) leaving its incident open:
    the incident was handed to an operator."""


EXECUTION_SOURCE = "aws.states"
EXECUTION_DETAIL_TYPE = "Step Functions Execution Status Change"
EXECUTION_ENDED = frozenset({"FAILED", "TIMED_OUT", "ABORTED"})
MAX_ARN = 2048
_REDRIVE_SUFFIX = re.compile(r"-r\d{1,4}$")


MAX_EVENT_AGE = timedelta(days=14)
"""Older event times are not believed: EventBridge retries for a day, SQS keeps 4 days."""
MAX_CLOCK_SKEW = timedelta(minutes=10)
HORIZON = timedelta(days=366)
"""Scheduled starts and deadlines further than this from now are not believed."""


def sane_times(signal: HealthSignal, now: datetime) -> tuple[HealthSignal, dict[str, str]]:
    """The signal with times outside a sane window replaced, and what was replaced: an event
    time in the far past or the future becomes now; a scheduled start or deadline more than
    a year away is dropped (a deadline already past becomes now)."""
    changes: dict[str, Any] = {}
    if not now - MAX_EVENT_AGE <= signal.observed_at <= now + MAX_CLOCK_SKEW:
        changes["observed_at"] = now
    if signal.not_before is not None and not now - HORIZON <= signal.not_before <= now + HORIZON:
        changes["not_before"] = None
    if signal.deadline is not None:
        if signal.deadline < now:
            changes["deadline"] = now
        elif signal.deadline > now + HORIZON:
            changes["deadline"] = None
    if not changes:
        return signal, {}
    replaced = {name: str(getattr(signal, name)) for name in changes}
    facts = {**signal.facts, "replaced_times": replaced}
    return signal.model_copy(update={**changes, "facts": facts}), replaced


_URGENCY = {Severity.FATAL: 3, Severity.DEGRADED: 2, Severity.SCHEDULED: 1}
_FAULTS = frozenset({Severity.FATAL, Severity.DEGRADED})


REPAIR_REQUESTED = "signal_to_repair_requested_s"


def repair_side_effect(signal: HealthSignal, incident: Incident) -> bool:
    """Whether the signal is what the incident's own repair does to the node: once HyperGuard
    has asked for the node's reboot or replacement, its kubelet goes NotReady (the in-cluster
    forwarder reports Ready=False). Such a report joins the incident as a signal, but is not
    a new fault to take the incident over (D133)."""
    facts = signal.facts or {}
    return (
        signal.kind == "node_condition"
        and facts.get("condition_type") == "Ready"
        and REPAIR_REQUESTED in incident.timings
    )


def more_urgent(signal: HealthSignal, incident: Incident) -> bool:
    """Whether the signal asks for quicker action than the incident is taking: a worse
    severity (fatal over degraded over scheduled), or at the same severity an earlier
    deadline or scheduled start."""
    new = _URGENCY.get(signal.severity, 0)
    old = _URGENCY.get(Severity(incident.severity), 0) if incident.severity in Severity else 0
    if new != old:
        return new > old
    if signal.deadline is not None:
        return incident.deadline is None or signal.deadline < incident.deadline
    if signal.not_before is not None and incident.not_before is not None:
        return signal.not_before < incident.not_before
    return False


def _late(node: Node, signal: HealthSignal) -> bool:
    """A fault on a node since retired, observed while the node was ours: a report that came
    after the inventory saw the node leave (at x60 a loaded twin's few seconds; on AWS, a
    delivery retried). It opens the incident it would have opened had it come first, whose
    diagnosis finds the instance gone, or joins the node's open one (D176): what happens does
    not depend on whether the report or the inventory's sync came first. Anything else about a
    retired node (a report an incident closed since had covered, one from after the node left,
    a notice) is dropped as foreign."""
    return (
        signal.action in (Action.OPEN_INCIDENT, Action.DRAIN)
        and node.retired_at is not None
        and signal.observed_at < node.retired_at
        and (
            node.open_incident_id is not None
            or node.last_closed_at is None
            or node.last_closed_at < signal.observed_at
        )
    )


@dataclass
class HealthIngestor:
    nodes: NodeStore
    lookup: NodeLookup
    incidents: IncidentStore
    idempotency: IdempotencyStore
    workflows: RecoveryWorkflows
    escalator: Escalator
    publisher: EventPublisher
    config: ClassifyConfig = field(default_factory=ClassifyConfig)
    # The EKS cluster that orchestrates the HyperPod cluster and holds the burst pools.
    orchestrator: str = ""
    reopen_window_s: float = 600.0
    clamped: int = 0
    """Signals whose times were outside the sane window (sane_times)."""
    clock: Callable[[], datetime] = utcnow
    counts: Counter[str] = field(default_factory=Counter)

    def ingest_body(self, body: str) -> list[Outcome]:
        """An SQS record body: the EventBridge event as JSON."""
        try:
            event = json.loads(body)
        except json.JSONDecodeError as exc:
            return self._malformed(f"body is not JSON: {exc}", body)
        if not isinstance(event, dict):
            return self._malformed("body is not a JSON object", body)
        return self.ingest(event)

    def ingest(self, event: Mapping[str, Any]) -> list[Outcome]:
        if event.get("source") == EXECUTION_SOURCE:
            return self._count([self._execution_ended(event)])
        try:
            signals = classify(event, self.config)
        except MalformedEventError as exc:
            return self._malformed(str(exc), event)
        # EventBridge ids are unique per event, but AWS's own published samples reuse one id
        # across sources, so the delivery key names the source and type too.
        delivery = f"event#{event.get('source')}#{event.get('detail-type')}#{event.get('id')}"
        if self.idempotency.seen(delivery):
            return self._count([Outcome.DUPLICATE] * len(signals))
        outcomes = self._apply_each(signals)
        self.idempotency.mark(delivery, outcomes=[o.value for o in outcomes])
        return self._count(outcomes)

    def _apply_each(self, signals: list[HealthSignal]) -> list[Outcome]:
        """Every signal of one event applied, one instance's failure (a node the cluster
        will not describe) holding back none of the others; then the first failure is
        raised, so that the delivery is retried for it (the others' effects are
        idempotent: a retry finds them duplicates)."""
        outcomes: list[Outcome] = []
        failure: Exception | None = None
        for signal in signals:
            try:
                outcomes.append(self._apply(signal))
            except Exception as error:
                logger.exception(
                    "signal not applied: its event is retried",
                    extra={"instance_id": signal.instance_id, "kind": signal.kind},
                )
                failure = failure or error
        if failure is not None:
            raise failure
        return outcomes

    def _apply(self, signal: HealthSignal) -> Outcome:
        signal, replaced = sane_times(signal, self.clock())
        if replaced:
            self.clamped += 1
            logger.warning(
                "event times outside the sane window replaced",
                extra={"kind": signal.kind, "replaced": replaced},
            )
        if signal.action is Action.IGNORE or signal.instance_id is None:
            logger.info("signal ignored", extra={"kind": signal.kind, "reason": signal.reason})
            return Outcome.IGNORED
        node = self.lookup.find(signal.instance_id)
        # Kubernetes signals name the EKS cluster, HyperPod's name the HyperPod cluster.
        names = {node.cluster, self.orchestrator} if node else set()
        gone = node is not None and node.status is NodeStatus.NOT_FOUND and not _late(node, signal)
        if node is None or gone or (signal.cluster is not None and signal.cluster not in names):
            logger.info(
                "signal for a foreign instance dropped",
                extra={"instance_id": signal.instance_id, "cluster": signal.cluster},
            )
            return Outcome.FOREIGN
        match signal.action:
            case Action.OPEN_INCIDENT | Action.DRAIN:
                if self._leaving(node, signal):
                    logger.info(
                        "fault report for a node Karpenter is removing: dropped",
                        extra={"instance_id": node.instance_id, "kind": signal.kind},
                    )
                    return Outcome.LEAVING
                if self._just_closed_and_healthy(node, signal):
                    logger.info(
                        "fault report for a node just recovered and healthy: suppressed",
                        extra={"instance_id": node.instance_id, "kind": signal.kind},
                    )
                    return Outcome.SUPPRESSED
                incident, outcome = self.incidents.open_or_append(node, signal, self.clock())
                if (
                    outcome is SignalOutcome.APPENDED
                    and not repair_side_effect(signal, incident)
                    and more_urgent(signal, incident)
                ):
                    self._escalate(incident, signal)
                self._ensure_workflow(incident)
                return {
                    SignalOutcome.OPENED: Outcome.OPENED,
                    SignalOutcome.APPENDED: Outcome.MERGED,
                    SignalOutcome.DUPLICATE: Outcome.DUPLICATE,
                }[outcome]
            case Action.RESOLVE:
                self.nodes.mark_health(node.instance_id, healthy=True)
                self._attach(node.instance_id, signal)
                return Outcome.RESOLVED
            case Action.NOTIFY:
                incident_id = self._attach(node.instance_id, signal)
                self.escalator.notify(
                    f"HyperGuard: {signal.kind} on {node.instance_id}",
                    {"incident_id": incident_id, **signal.model_dump(mode="json")},
                )
                return Outcome.NOTIFIED
        raise AssertionError(f"unhandled action {signal.action}")

    def _leaving(self, node: Node, signal: HealthSignal) -> bool:
        """A report that a node with no incident open is down or faulty, while Karpenter takes
        it away: a scale-in, consolidation, expiry or drift stops its kubelet and terminates
        its instance, and nothing is left to repair (D206). Warnings (an interruption's drain)
        still act, and a report joins an incident already open."""
        return (
            signal.action is Action.OPEN_INCIDENT
            and node.open_incident_id is None
            and self.lookup.leaving(node)
        )

    def _just_closed_and_healthy(self, node: Node, signal: HealthSignal) -> bool:
        if node.open_incident_id or node.last_closed_at is None or signal.severity not in _FAULTS:
            return False
        since = (self.clock() - node.last_closed_at).total_seconds()
        return since < self.reopen_window_s and self.lookup.healthy_now(node.instance_id)

    def _escalate(self, incident: Incident, signal: HealthSignal) -> None:
        """Make the incident as urgent as the signal; wake its recovery if it waits."""
        updated = self.incidents.escalate_urgency(incident, signal)
        if updated is None or updated.status is not IncidentStatus.WAITING:
            return
        if updated.wait_token and self.workflows.wake(
            updated.wait_token, {"woken_by": signal.kind, "severity": signal.severity.value}
        ):
            logger.info(
                "waiting recovery woken by a more urgent signal",
                extra={"incident_id": incident.incident_id, "kind": signal.kind},
            )

    def _attach(self, instance_id: str, signal: HealthSignal) -> str | None:
        incident = self.incidents.open_incident_for(instance_id)
        if incident is None:
            return None
        self.incidents.append_signal(incident.incident_id, signal)
        return incident.incident_id

    def _ensure_workflow(self, incident: Incident) -> None:
        if incident.execution_arn is not None:
            return
        arn = self.workflows.ensure_started(
            incident.incident_id,
            {
                "incident_id": incident.incident_id,
                "instance_id": incident.instance_id,
                "cluster": incident.cluster,
                "repair": incident.repair.value,
                "kind": incident.kind,
            },
        )
        self.incidents.set_execution(incident.incident_id, arn)
        logger.info("recovery started", extra={"incident_id": incident.incident_id, "arn": arn})

    def _execution_ended(self, event: Mapping[str, Any]) -> Outcome:
        """The backstop for failures no Catch handled (Escalate itself failing, a timeout, an
        abort): an execution that ended while its incident is still open hands the incident
        to an operator and says so. Executions that escalated or closed their incident, and
        older executions of an incident that was re-driven since, change nothing."""
        detail = event.get("detail")
        if event.get("detail-type") != EXECUTION_DETAIL_TYPE or not isinstance(detail, dict):
            return self._dropped("not a Step Functions execution status change", event)
        arn, status = detail.get("executionArn"), detail.get("status")
        if not isinstance(arn, str) or not 0 < len(arn) <= MAX_ARN or ":execution:" not in arn:
            return self._dropped("execution status change without an execution ARN", event)
        if status not in EXECUTION_ENDED:
            return Outcome.IGNORED
        name = arn.rsplit(":", 1)[1]
        incident = self.incidents.get(name) or self.incidents.get(_REDRIVE_SUFFIX.sub("", name))
        if incident is None:
            return Outcome.IGNORED
        note = f"recovery execution {name} ended {status} without closing the incident"
        if not self.incidents.hand_to_operator(incident.incident_id, arn, note):
            return Outcome.IGNORED
        logger.error(
            "recovery ended with its incident open: handed to an operator",
            extra={"incident_id": incident.incident_id, "status": status},
        )
        self.escalator.notify(
            f"HyperGuard incident {incident.incident_id} needs an operator",
            {
                "incident_id": incident.incident_id,
                "instance_id": incident.instance_id,
                "why": note,
                "jobs": "jobs the recovery protected stay with the incident until it is re-driven",
                "redrive": f"hyperguard incidents redrive {incident.incident_id}",
            },
        )
        self.publisher.publish("IncidentEscalated", escalation(incident, note))
        return Outcome.ESCALATED

    def _malformed(self, why: str, payload: object) -> list[Outcome]:
        return self._count([self._dropped(why, payload)])

    def _dropped(self, why: str, payload: object) -> Outcome:
        logger.error("malformed event dropped", extra={"why": why, "payload": str(payload)[:2000]})
        return Outcome.MALFORMED

    def _count(self, outcomes: list[Outcome]) -> list[Outcome]:
        self.counts.update(o.value for o in outcomes)
        return outcomes
