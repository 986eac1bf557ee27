"""Hostile event input: whatever a source sends, classification returns signals or a
MalformedEventError naming the field — nothing else escapes — and every signal is bounded.
Times outside a sane window are replaced; notifications fit SNS."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.conftest import EVENTS, load_event

from hyperguard.events import ClassifyConfig, MalformedEventError, classify
from hyperguard.ingestion import sane_times
from hyperguard.messaging import SNS_MESSAGE_LIMIT, sns_message
from hyperguard.models import Action, HealthSignal, Repair, Severity, SignalSource
from hyperguard.models.signals import MAX_FACT, MAX_FACTS_JSON, MAX_REASON

SAMPLES = sorted(p.stem for p in EVENTS.glob("*.json"))
CONFIG = ClassifyConfig()

json_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**40), max_value=10**40),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
    st.sampled_from(
        [
            "",
            "i-0123456789abcdef0",
            "1970-01-01T00:00:00Z",
            "0001-01-01T00:00:00Z",
            "Thu, 27 Aug 9999 13:19:03 GMT",
            "x" * 5000,
        ]
    ),
)
json_values = st.recursive(
    json_leaves,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=20,
)


def paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(node, dict):
        for key, value in node.items():
            found += paths(value, (*prefix, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found += paths(value, (*prefix, index))
    return found


def classified(event: Any) -> list[HealthSignal]:
    try:
        signals = classify(event, CONFIG)
    except MalformedEventError as error:
        assert error.field
        return []
    for signal in signals:
        assert len(signal.reason) <= MAX_REASON
        assert len(json.dumps(signal.facts, default=str)) <= MAX_FACTS_JSON * 2
        assert signal.instance_id is None or len(signal.instance_id) <= 42
    return signals


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(SAMPLES), st.data())
def test_a_mutated_sample_is_classified_or_named_malformed(name: str, data: st.DataObject) -> None:
    event = copy.deepcopy(load_event(name))
    for _ in range(data.draw(st.integers(min_value=1, max_value=3))):
        where = data.draw(st.sampled_from(paths(event)[1:]))
        parent = event
        for part in where[:-1]:
            parent = parent[part]
        if data.draw(st.booleans()) and isinstance(parent, dict):
            del parent[where[-1]]
        else:
            parent[where[-1]] = data.draw(json_values)
        if not isinstance(event, dict):
            break
    classified(event)


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(
        [
            ("aws.sagemaker", "SageMaker HyperPod Cluster Node Health Event"),
            ("aws.sagemaker", "SageMaker HyperPod Cluster Event"),
            ("aws.ec2", "EC2 Spot Instance Interruption Warning"),
            ("aws.ec2", "EC2 Instance State-change Notification"),
            ("aws.health", "AWS Health Event"),
            ("hyperguard.node-forwarder", "Kubernetes Node Condition Changed"),
            ("anything", "else"),
        ]
    ),
    json_values,
    json_values,
)
def test_any_body_under_a_known_source_is_classified_or_named_malformed(
    source: tuple[str, str], detail: Any, other: Any
) -> None:
    event = {
        "version": "0",
        "id": "11111111-2222-3333-4444-555555555555",
        "source": source[0],
        "detail-type": source[1],
        "account": "123456789012",
        "time": "2026-11-22T00:00:00Z",
        "region": "us-east-1",
        "resources": [],
        "detail": detail,
        "extra": other,
    }
    classified(event)


def test_an_event_id_too_long_for_a_key_is_malformed() -> None:
    event = load_event("ec2-spot-interruption-warning") | {"id": "x" * 5000}
    with pytest.raises(MalformedEventError) as error:
        classify(event, CONFIG)
    assert error.value.field == "id"
    bad_instance = copy.deepcopy(load_event("ec2-spot-interruption-warning"))
    bad_instance["detail"]["instance-id"] = "i-" + "9" * 5000
    with pytest.raises(MalformedEventError) as error:
        classify(bad_instance, CONFIG)
    assert error.value.field == "instance_id"


def test_a_huge_event_keeps_only_bounded_facts() -> None:
    event = copy.deepcopy(load_event("hyperpod-cluster-event-instance-error"))
    event["detail"]["EventDetails"]["EventMetadata"] = {"blob": "m" * 240_000}
    (signal,) = classify(event, CONFIG)
    assert len(json.dumps(signal.facts)) < 2 * MAX_FACT + 2048


NOW = datetime(2026, 11, 22, 12, tzinfo=UTC)


def signal(**fields: Any) -> HealthSignal:
    values: dict[str, Any] = {
        "source": SignalSource.AWS_HEALTH,
        "kind": "health_scheduled_change",
        "instance_id": "i-0123456789abcdef0",
        "severity": Severity.SCHEDULED,
        "action": Action.OPEN_INCIDENT,
        "repair": Repair.REPLACE,
        "reason": "retirement",
        "observed_at": NOW,
        "dedupe_key": "e",
    }
    return HealthSignal(**(values | fields))


@pytest.mark.parametrize(
    ("fields", "replaced"),
    [
        ({}, set()),
        ({"observed_at": datetime(1970, 1, 1, tzinfo=UTC)}, {"observed_at"}),
        ({"observed_at": NOW + timedelta(hours=1)}, {"observed_at"}),
        ({"not_before": datetime(1, 1, 1, tzinfo=UTC)}, {"not_before"}),
        ({"not_before": NOW + timedelta(days=30)}, set()),
        ({"not_before": datetime(9999, 1, 1, tzinfo=UTC)}, {"not_before"}),
        ({"deadline": NOW - timedelta(minutes=5)}, {"deadline"}),
        ({"deadline": NOW + timedelta(minutes=2)}, set()),
    ],
)
def test_times_outside_a_sane_window_are_replaced(
    fields: dict[str, Any], replaced: set[str]
) -> None:
    fixed, changes = sane_times(signal(**fields), NOW)
    assert set(changes) == replaced
    if "observed_at" in replaced:
        assert fixed.observed_at == NOW
    if "not_before" in replaced:
        assert fixed.not_before is None
    if "deadline" in replaced:
        assert fixed.deadline == NOW
    if replaced:
        assert set(fixed.facts["replaced_times"]) == replaced


def test_a_notification_too_large_for_sns_is_cut_and_names_its_record() -> None:
    small = {"incident_id": "inc-1", "why": "x"}
    assert json.loads(sns_message(small)) == small
    large = {
        "incident_id": "inc-1",
        "instance_id": "i-0123456789abcdef0",
        "facts": {"message": "é" * 300_000},
    }
    text = sns_message(large)
    assert len(text.encode()) <= SNS_MESSAGE_LIMIT
    cut = json.loads(text)
    assert cut["truncated"] is True and cut["original_bytes"] > SNS_MESSAGE_LIMIT
    assert cut["refers_to"] == {"incident_id": "inc-1", "instance_id": "i-0123456789abcdef0"}
    assert cut["excerpt"].startswith('{\n  "incident_id": "inc-1"')
