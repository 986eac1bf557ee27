"""Any EventBridge event in, normalised HealthSignals out: a registry keyed by source and type."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pydantic import Field

from hyperguard.events import ec2, health, hyperpod, kubernetes
from hyperguard.events.base import (
    ClassifyConfig,
    EventEnvelope,
    MalformedEventError,
    new_signal,
    parse_event,
)
from hyperguard.models.signals import Action, HealthSignal, Repair, Severity, SignalSource

Classifier = Callable[[Mapping[str, Any], ClassifyConfig], list[HealthSignal]]


def _ignoring_config(
    classify_event: Callable[[Mapping[str, Any]], list[HealthSignal]],
) -> Classifier:
    return lambda event, _config: classify_event(event)


CLASSIFIERS: dict[tuple[str, str], Classifier] = {
    ("aws.sagemaker", hyperpod.NODE_HEALTH): _ignoring_config(hyperpod.classify_node_health),
    ("aws.sagemaker", hyperpod.CLUSTER_EVENT): _ignoring_config(hyperpod.classify_cluster_event),
    ("aws.ec2", ec2.SPOT_INTERRUPTION): _ignoring_config(ec2.classify_spot_interruption),
    ("aws.ec2", ec2.CAPACITY_RESERVATION_INTERRUPTION): _ignoring_config(
        ec2.classify_capacity_reservation_interruption
    ),
    ("aws.ec2", ec2.REBALANCE_RECOMMENDATION): ec2.classify_rebalance_recommendation,
    ("aws.ec2", ec2.STATE_CHANGE): _ignoring_config(ec2.classify_state_change),
    ("aws.health", health.HEALTH_EVENT): _ignoring_config(health.classify_health_event),
    (kubernetes.FORWARDER_SOURCE, kubernetes.NODE_CONDITION_CHANGED): _ignoring_config(
        kubernetes.classify_node_condition
    ),
}

SIGNAL_SOURCES = {
    "aws.sagemaker": SignalSource.HYPERPOD,
    "aws.ec2": SignalSource.EC2,
    "aws.health": SignalSource.AWS_HEALTH,
    kubernetes.FORWARDER_SOURCE: SignalSource.KUBERNETES,
}
# Events from a source HyperGuard does not know can only arrive through a custom rule;
# they are ignored, and say so.
FOREIGN_SIGNAL_SOURCE = SignalSource.UNKNOWN


class AnyEvent(EventEnvelope):
    """Only what every signal needs: id and time. The rest may be anything."""

    source: str = ""
    detail_type: str = Field(default="", alias="detail-type")
    account: str = ""
    region: str = ""
    detail: Any = None


def classify(event: Mapping[str, Any], config: ClassifyConfig | None = None) -> list[HealthSignal]:
    """Normalise one EventBridge event into signals (one per instance it is about).

    Unknown source/detail-type pairs yield one `ignore` signal naming what arrived. Raises
    MalformedEventError when a known pair's body does not validate, or when the event has no
    usable `id` or `time`.
    """
    if not isinstance(event, Mapping):
        raise MalformedEventError(
            f"an EventBridge event is a JSON object, not {type(event).__name__}",
            field="<event>",
            source=None,
            detail_type=None,
        )
    source, detail_type = event.get("source"), event.get("detail-type")
    if isinstance(source, str) and isinstance(detail_type, str):
        classifier = CLASSIFIERS.get((source, detail_type))
        if classifier is not None:
            return classifier(event, config or ClassifyConfig())
    return [_unknown(event)]


def _unknown(event: Mapping[str, Any]) -> HealthSignal:
    parsed = parse_event(AnyEvent, event)
    return new_signal(
        parsed,
        source=SIGNAL_SOURCES.get(parsed.source, FOREIGN_SIGNAL_SOURCE),
        kind="unknown",
        instance_id=None,
        severity=Severity.INFORMATIONAL,
        action=Action.IGNORE,
        repair=Repair.NONE,
        reason=f"unhandled event: source {parsed.source!r}, detail-type {parsed.detail_type!r}",
        facts={"event_source": parsed.source, "detail_type": parsed.detail_type},
    )
