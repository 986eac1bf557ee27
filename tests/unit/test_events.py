"""hyperguard.events: every consumed event becomes the right HealthSignals.

Fixtures in tests/events are published AWS samples (see tests/events/README.md). Events built
below with `constructed(...)` or by editing a copy of a fixture are constructed for a branch
no published sample covers; they are labelled as such.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from hyperguard.events import ClassifyConfig, MalformedEventError, classify, classify_health_event
from hyperguard.events.health import parse_health_time
from hyperguard.models.signals import Action, HealthSignal, Repair, Severity, SignalSource

EVENTS_DIR = Path(__file__).resolve().parents[1] / "events"
EVENT_ID = "11111111-2222-3333-4444-555555555555"
EVENT_TIME = "2026-03-01T12:00:00Z"
EVENT_DATETIME = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def fixture(name: str) -> dict[str, Any]:
    event: dict[str, Any] = json.loads((EVENTS_DIR / name).read_text())
    return event


def constructed(source: str, detail_type: str, detail: dict[str, Any]) -> dict[str, Any]:
    """A constructed (not AWS-published) event around `detail`."""
    return {
        "version": "0",
        "id": EVENT_ID,
        "detail-type": detail_type,
        "source": source,
        "account": "123456789012",
        "time": EVENT_TIME,
        "region": "us-west-2",
        "resources": [],
        "detail": detail,
    }


def only(signals: list[HealthSignal]) -> HealthSignal:
    assert len(signals) == 1, signals
    return signals[0]


def malformed_field(event: dict[str, Any]) -> str:
    with pytest.raises(MalformedEventError) as caught:
        classify(event)
    assert caught.value.field in str(caught.value), "the message must name the field"
    return caught.value.field


# --- published samples: exact signals ------------------------------------------------------

FIXTURE_SIGNALS: dict[str, dict[str, Any]] = {
    "hyperpod-node-health-unhealthy.json": {
        "source": "hyperpod",
        "kind": "hyperpod_node_health",
        "instance_id": "i-12345678abcdefghi",
        "cluster": "sample-cluster",
        "severity": "fatal",
        "action": "open_incident",
        "repair": "replace",
        "reason": "HyperPod Health Monitoring Agent (HMA) has detected fault type "
        "NvidiaErrorTerminate on this node and is unhealthy.",
        "observed_at": "2021-10-25T01:52:12Z",
        "dedupe_key": "0bd4a141-0a02-9d8a-f977-3924c3fb259c",
        "not_before": None,
        "deadline": None,
        "facts": {
            "health_status": "Unhealthy",
            "repair_action": "None",
            "recommendation": "Please Replace the Faulty Node.",
            "fault_type": "NvidiaErrorTerminate",
        },
    },
    "hyperpod-cluster-event-instance-error.json": {
        "source": "hyperpod",
        "kind": "hyperpod_cluster_event",
        "instance_id": "i-0391f86fa0fe0d465",
        "cluster": "sample-cluster",
        "severity": "degraded",
        "action": "notify",
        "repair": "none",
        "reason": "Instance creation in Cluster sample-cluster and InstanceGroup p5Inst failed: "
        "We currently do not have sufficient capacity to launch new ml.p5.48xlarge instances. "
        "Please try again.",
        "observed_at": "2026-06-01T17:20:25Z",
        "dedupe_key": "0bd4a141-0a02-9d8a-f977-3924c3fb259c",
        "not_before": None,
        "deadline": None,
        "facts": {
            "event_id": "83ea0bb5-be77-45e8-a458-0a87f778a205",
            "event_level": "Error",
            "resource_type": "Instance",
            "instance_group": "p5Inst",
            "failure_message": "We currently do not have sufficient capacity to launch new "
            "ml.p5.48xlarge instances. Please try again.",
        },
    },
    "ec2-spot-interruption-warning.json": {
        "source": "ec2",
        "kind": "spot_interruption",
        "instance_id": "i-0b662ef9931388ba0",
        "cluster": None,
        "severity": "fatal",
        "action": "drain",
        "repair": "drain",
        "reason": "Spot interruption: instance will terminate at 1970-01-01T00:02:00+00:00",
        "observed_at": "1970-01-01T00:00:00Z",
        "dedupe_key": "1e5527d7-bb36-4607-3370-4164db56a40e",
        "not_before": None,
        "deadline": "1970-01-01T00:02:00Z",
        "facts": {"instance_action": "terminate"},
    },
    "ec2-rebalance-recommendation.json": {
        "source": "ec2",
        "kind": "rebalance_recommendation",
        "instance_id": "i-0b662ef9931388ba0",
        "cluster": None,
        "severity": "informational",
        "action": "ignore",
        "repair": "none",
        "reason": "EC2 recommends rebalancing: the Spot instance is at elevated interruption risk",
        "observed_at": "2020-10-26T14:14:14Z",
        "dedupe_key": "5d5555d5-dd55-5555-5555-5555dd55d55d",
        "not_before": None,
        "deadline": None,
        "facts": {},
    },
    "ec2-instance-state-change.json": {
        "source": "ec2",
        "kind": "instance_state_change",
        "instance_id": "i-1234567890abcdef0",
        "cluster": None,
        "severity": "informational",
        "action": "ignore",
        "repair": "none",
        "reason": "EC2 instance is pending: nothing to repair",
        "observed_at": "2021-11-11T21:29:54Z",
        "dedupe_key": "7bf73129-1428-4cd3-a780-95db273d1602",
        "not_before": None,
        "deadline": None,
        "facts": {"state": "pending"},
    },
    "aws-health-ec2-retirement.json": {
        "source": "aws_health",
        "kind": "health_scheduled_change",
        "instance_id": "i-1234567890abcdef0",
        "cluster": None,
        "severity": "scheduled",
        "action": "open_incident",
        "repair": "replace",
        "reason": "AWS Health scheduledChange: AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED",
        "observed_at": "2026-01-27T01:43:21Z",
        "dedupe_key": "7bf73129-1428-4cd3-a780-95db273d1602",
        "not_before": "2026-08-27T13:19:03Z",
        "deadline": None,
        "facts": {
            "service": "EC2",
            "event_type_code": "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED",
            "event_type_category": "scheduledChange",
            "event_arn": "arn:aws:health:us-east-1::event/"
            "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED_90353408594353983",
            "status_code": "open",
        },
    },
}


def test_every_fixture_has_an_expected_signal() -> None:
    assert {path.name for path in EVENTS_DIR.glob("*.json")} == set(FIXTURE_SIGNALS)


@pytest.mark.parametrize("name", sorted(FIXTURE_SIGNALS))
def test_published_sample_becomes_exact_signal(name: str) -> None:
    signal = only(classify(fixture(name)))
    assert signal.model_dump(mode="json") == FIXTURE_SIGNALS[name]


# --- SageMaker HyperPod node health --------------------------------------------------------


def node_health(**summary: Any) -> dict[str, Any]:
    """Constructed: the published Unhealthy sample with its HealthSummary edited."""
    event = fixture("hyperpod-node-health-unhealthy.json")
    event["detail"]["HealthSummary"].update(summary)
    return event


def test_healthy_node_resolves_and_never_opens_an_incident() -> None:
    signal = only(classify(node_health(HealthStatus="Healthy", HealthStatusReason="")))
    assert (signal.severity, signal.action, signal.repair) == (
        Severity.HEALTHY,
        Action.RESOLVE,
        Repair.NONE,
    )
    assert (signal.instance_id, signal.cluster) == ("i-12345678abcdefghi", "sample-cluster")
    assert signal.reason == "HyperPod reports the node Healthy"


@pytest.mark.parametrize(
    ("repair_action", "recommendation", "expected"),
    [
        ("None", "Please Replace the Faulty Node.", Repair.REPLACE),
        ("None", "Please Reboot the node.", Repair.REBOOT),
        ("Reboot", None, Repair.REBOOT),
        ("Replace", "Reboot the node", Repair.REPLACE),  # the explicit RepairAction wins
        ("Reboot", "Replace the node", Repair.REBOOT),
        (None, None, Repair.REPLACE),
        ("None", "Contact support", Repair.REPLACE),
    ],
)
def test_unhealthy_node_repair_follows_hyperpod_advice(
    repair_action: str | None, recommendation: str | None, expected: Repair
) -> None:
    signal = only(classify(node_health(RepairAction=repair_action, Recommendation=recommendation)))
    assert (signal.severity, signal.action, signal.repair) == (
        Severity.FATAL,
        Action.OPEN_INCIDENT,
        expected,
    )


def test_unrecognised_health_status_is_ignored() -> None:
    signal = only(classify(node_health(HealthStatus="Degraded")))
    assert (signal.severity, signal.action) == (Severity.INFORMATIONAL, Action.IGNORE)
    assert "'Degraded'" in signal.reason


def test_hyperpod_keeps_fields_aws_adds() -> None:
    event = node_health(NewField="x")
    event["detail"]["AnotherNewField"] = {"a": 1}
    assert only(classify(event)).action is Action.OPEN_INCIDENT


@pytest.mark.parametrize(
    ("path", "field"),
    [
        (("detail", "InstanceId"), "detail.InstanceId"),
        (("detail", "ClusterName"), "detail.ClusterName"),
        (("detail", "HealthSummary"), "detail.HealthSummary"),
        (("detail", "HealthSummary", "HealthStatus"), "detail.HealthSummary.HealthStatus"),
        (("time",), "time"),
        (("id",), "id"),
    ],
)
def test_malformed_node_health_names_the_field(path: tuple[str, ...], field: str) -> None:
    event = fixture("hyperpod-node-health-unhealthy.json")
    container = event
    for key in path[:-1]:
        container = container[key]
    del container[path[-1]]
    assert malformed_field(event) == field


def test_empty_instance_id_is_malformed() -> None:
    event = fixture("hyperpod-node-health-unhealthy.json")
    event["detail"]["InstanceId"] = ""
    assert malformed_field(event) == "detail.InstanceId"


# --- SageMaker HyperPod cluster events -----------------------------------------------------


def cluster_event(**record: Any) -> dict[str, Any]:
    """Constructed: the published cluster-event sample with EventDetails edited."""
    event = fixture("hyperpod-cluster-event-instance-error.json")
    event["detail"]["EventDetails"].update(record)
    return event


@pytest.mark.parametrize("level", ["Info", "Warning", None])
def test_cluster_event_below_error_is_ignored(level: str | None) -> None:
    signal = only(classify(cluster_event(EventLevel=level)))
    assert (signal.severity, signal.action) == (Severity.INFORMATIONAL, Action.IGNORE)
    assert signal.instance_id == "i-0391f86fa0fe0d465"
    assert signal.kind == "hyperpod_cluster_event"


def test_cluster_level_error_is_not_attached_to_a_node() -> None:
    event = cluster_event(ResourceType="Cluster", InstanceId=None, InstanceGroupName=None)
    signal = only(classify(event))
    assert (signal.action, signal.instance_id, signal.cluster) == (
        Action.IGNORE,
        None,
        "sample-cluster",
    )


def test_instance_error_without_metadata_uses_the_description() -> None:
    event = fixture("hyperpod-cluster-event-instance-error.json")
    del event["detail"]["EventDetails"]["EventDetails"]
    signal = only(classify(event))
    assert signal.action is Action.NOTIFY
    assert signal.reason == (
        "Instance creation in Cluster sample-cluster and InstanceGroup p5Inst failed"
    )
    assert "failure_message" not in signal.facts


@pytest.mark.parametrize(
    ("key", "field"),
    [
        ("ClusterName", "detail.EventDetails.ClusterName"),
        ("ResourceType", "detail.EventDetails.ResourceType"),
        ("EventId", "detail.EventDetails.EventId"),
    ],
)
def test_malformed_cluster_event_names_the_field(key: str, field: str) -> None:
    event = fixture("hyperpod-cluster-event-instance-error.json")
    del event["detail"]["EventDetails"][key]
    assert malformed_field(event) == field


def test_cluster_event_without_event_details_is_malformed() -> None:
    event = fixture("hyperpod-cluster-event-instance-error.json")
    event["detail"] = {}
    assert malformed_field(event) == "detail.EventDetails"


# --- EC2 -----------------------------------------------------------------------------------


GOING_AWAY = (Severity.FATAL, Action.OPEN_INCIDENT, Repair.REPLACE)
NOTHING_TO_DO = (Severity.INFORMATIONAL, Action.IGNORE, Repair.NONE)


@pytest.mark.parametrize(
    ("state", "expected", "reason"),
    [
        ("stopping", GOING_AWAY, "EC2 instance is stopping"),
        ("stopped", GOING_AWAY, "EC2 instance is stopped"),
        ("shutting-down", GOING_AWAY, "EC2 instance is shutting-down"),
        ("terminated", GOING_AWAY, "EC2 instance is terminated"),
        ("pending", NOTHING_TO_DO, "EC2 instance is pending: nothing to repair"),
        ("running", NOTHING_TO_DO, "EC2 instance is running: nothing to repair"),
        (
            "rebooting-someday",
            NOTHING_TO_DO,
            "EC2 instance is rebooting-someday: nothing to repair",
        ),
    ],
)
def test_instance_state_decides_the_action(
    state: str, expected: tuple[Severity, Action, Repair], reason: str
) -> None:
    event = constructed(
        "aws.ec2",
        "EC2 Instance State-change Notification",
        {"instance-id": "i-0abc", "state": state},
    )
    signal = only(classify(event))
    assert (signal.severity, signal.action, signal.repair) == expected
    assert (signal.reason, signal.facts, signal.instance_id) == (reason, {"state": state}, "i-0abc")


def capacity_reservation_warning(**extra: Any) -> dict[str, Any]:
    """Constructed from the shape documented (with placeholders) in the EC2 User Guide,
    "Monitor interruptible Capacity Reservations with EventBridge and CloudTrail"."""
    detail = {
        "instance-id": "i-0abc1234def567890",
        "instance-action": "terminate",
        "azId": "usw2-az1",
    }
    return constructed(
        "aws.ec2", "EC2 Capacity Reservation Instance Interruption Warning", detail | extra
    )


def test_capacity_reservation_interruption_uses_documented_termination_time() -> None:
    event = capacity_reservation_warning(**{"instance-termination-time": "2026-03-01T12:01:30Z"})
    signal = only(classify(event))
    assert signal.kind == "capacity_reservation_interruption"
    assert (signal.severity, signal.action, signal.repair) == (
        Severity.FATAL,
        Action.DRAIN,
        Repair.DRAIN,
    )
    assert signal.deadline == datetime(2026, 3, 1, 12, 1, 30, tzinfo=UTC)
    assert signal.instance_id == "i-0abc1234def567890"
    assert signal.source is SignalSource.EC2


def test_capacity_reservation_interruption_defaults_to_two_minutes() -> None:
    signal = only(classify(capacity_reservation_warning()))
    assert signal.deadline == EVENT_DATETIME + timedelta(minutes=2)


@pytest.mark.parametrize(
    ("configured", "repair"),
    [(Action.IGNORE, Repair.NONE), (Action.DRAIN, Repair.DRAIN), (Action.NOTIFY, Repair.NONE)],
)
def test_rebalance_recommendation_action_is_configurable(
    configured: Action, repair: Repair
) -> None:
    event = fixture("ec2-rebalance-recommendation.json")
    signal = only(classify(event, ClassifyConfig(rebalance_action=configured)))
    assert (signal.severity, signal.action, signal.repair) == (
        Severity.INFORMATIONAL,
        configured,
        repair,
    )


def test_rebalance_action_cannot_open_incidents() -> None:
    with pytest.raises(ValidationError):
        ClassifyConfig(rebalance_action=Action.OPEN_INCIDENT)


@pytest.mark.parametrize(
    "name",
    [
        "ec2-spot-interruption-warning.json",
        "ec2-rebalance-recommendation.json",
        "ec2-instance-state-change.json",
    ],
)
def test_ec2_event_without_instance_id_is_malformed(name: str) -> None:
    event = fixture(name)
    del event["detail"]["instance-id"]
    assert malformed_field(event) == "detail.instance-id"


def test_capacity_reservation_without_instance_id_is_malformed() -> None:
    event = capacity_reservation_warning()
    del event["detail"]["instance-id"]
    assert malformed_field(event) == "detail.instance-id"


def test_state_change_without_state_is_malformed() -> None:
    event = fixture("ec2-instance-state-change.json")
    del event["detail"]["state"]
    assert malformed_field(event) == "detail.state"


def test_unparseable_termination_time_is_malformed() -> None:
    event = capacity_reservation_warning(**{"instance-termination-time": "soon"})
    assert malformed_field(event) == "detail.instance-termination-time"


def test_deadline_past_the_end_of_time_is_malformed() -> None:
    event = fixture("ec2-spot-interruption-warning.json")
    event["time"] = "9999-12-31T23:59:59Z"
    assert malformed_field(event) == "time"


def test_naive_event_time_is_taken_as_utc() -> None:
    event = fixture("ec2-spot-interruption-warning.json")
    event["time"] = "2026-03-01T12:00:00"
    signal = only(classify(event))
    assert signal.observed_at == EVENT_DATETIME
    assert signal.deadline == EVENT_DATETIME + timedelta(minutes=2)


# --- AWS Health ----------------------------------------------------------------------------


def health(*entities: str, **detail: Any) -> dict[str, Any]:
    """Constructed: the published retirement sample with its entities and detail edited."""
    event = fixture("aws-health-ec2-retirement.json")
    event["detail"]["affectedEntities"] = [
        {"entityValue": value, "status": "PENDING"} for value in entities
    ]
    event["detail"].update(detail)
    return event


@pytest.mark.parametrize(
    "code",
    [
        "AWS_EC2_INSTANCE_REBOOT_MAINTENANCE_SCHEDULED",
        "AWS_EC2_SYSTEM_REBOOT_MAINTENANCE_SCHEDULED",
    ],
)
def test_a_scheduled_reboot_is_a_reboot_before_its_window(code: str) -> None:
    signal = only(classify(health("i-0aaa", eventTypeCode=code)))
    assert (signal.kind, signal.severity, signal.repair) == (
        "health_scheduled_change",
        Severity.SCHEDULED,
        Repair.REBOOT,
    )
    assert signal.not_before is not None and code in signal.reason


@pytest.mark.parametrize(
    "code",
    [
        "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED",
        "AWS_EC2_INSTANCE_POWER_MAINTENANCE_SCHEDULED",
        "AWS_EC2_INSTANCE_NETWORK_MAINTENANCE_SCHEDULED",
    ],
)
def test_other_scheduled_changes_move_the_node_to_new_hardware(code: str) -> None:
    signal = only(classify(health("i-0aaa", eventTypeCode=code)))
    assert (signal.severity, signal.repair) == (Severity.SCHEDULED, Repair.REPLACE)


def test_health_event_for_another_service_is_ignored_and_says_why() -> None:
    signal = only(classify(health("i-0aaa", service="RDS")))
    assert (signal.severity, signal.action, signal.instance_id) == (
        Severity.INFORMATIONAL,
        Action.IGNORE,
        None,
    )
    assert "RDS" in signal.reason
    assert "not about EC2" in signal.reason


def test_bare_instance_id_entity_is_accepted() -> None:
    signal = only(classify(health("i-0123456789abcdef0")))
    assert signal.instance_id == "i-0123456789abcdef0"
    assert signal.dedupe_key == "7bf73129-1428-4cd3-a780-95db273d1602"


def test_one_health_event_yields_one_signal_per_instance() -> None:
    event = health(
        "arn:aws:ec2:us-east-1:123456789012:instance/i-0aaa",
        "i-0bbb",
        "vol-0ccc",  # not an instance
        "i-0aaa",  # the first instance again, bare this time
        "arn:aws-us-gov:ec2:us-gov-west-1:123456789012:instance/i-0ddd",
    )
    signals = classify_health_event(event)
    assert [s.instance_id for s in signals] == ["i-0aaa", "i-0bbb", "i-0ddd"]
    assert [s.dedupe_key for s in signals] == [
        "7bf73129-1428-4cd3-a780-95db273d1602#i-0aaa",
        "7bf73129-1428-4cd3-a780-95db273d1602#i-0bbb",
        "7bf73129-1428-4cd3-a780-95db273d1602#i-0ddd",
    ]
    assert all(s.action is Action.OPEN_INCIDENT for s in signals)
    assert all(s.not_before == datetime(2026, 8, 27, 13, 19, 3, tzinfo=UTC) for s in signals)
    assert classify(event) == signals


def test_an_entity_too_long_for_an_instance_id_holds_back_none_of_the_others() -> None:
    signals = classify_health_event(health("i-" + "0" * 41, "i-0bbb"))
    assert [s.instance_id for s in signals] == ["i-0bbb"]
    assert signals[0].action is Action.OPEN_INCIDENT


def test_ec2_health_event_naming_no_instance_is_ignored() -> None:
    signal = only(classify(health("vol-0ccc")))
    assert (signal.action, signal.instance_id) == (Action.IGNORE, None)


@pytest.mark.parametrize(
    ("category", "kind", "severity", "action", "repair"),
    [
        ("issue", "health_issue", Severity.DEGRADED, Action.OPEN_INCIDENT, Repair.REPLACE),
        (
            "accountNotification",
            "health_notification",
            Severity.INFORMATIONAL,
            Action.IGNORE,
            Repair.NONE,
        ),
        (
            "investigation",
            "health_notification",
            Severity.INFORMATIONAL,
            Action.IGNORE,
            Repair.NONE,
        ),
    ],
)
def test_health_category_decides_the_action(
    category: str, kind: str, severity: Severity, action: Action, repair: Repair
) -> None:
    signal = only(classify(health("i-0aaa", eventTypeCategory=category)))
    assert (signal.kind, signal.severity, signal.action, signal.repair) == (
        kind,
        severity,
        action,
        repair,
    )
    assert signal.not_before is None


def test_closed_health_event_opens_nothing() -> None:
    signal = only(classify(health("i-0aaa", statusCode="closed")))
    assert (signal.kind, signal.action) == ("health_scheduled_change", Action.IGNORE)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Thu, 27 Aug 2026 13:19:03 GMT", datetime(2026, 8, 27, 13, 19, 3, tzinfo=UTC)),
        ("Thu, 27 Jan 2026 13:44:13 GMT", datetime(2026, 1, 27, 13, 44, 13, tzinfo=UTC)),
        ("27 Aug 2026 13:19:03 GMT", datetime(2026, 8, 27, 13, 19, 3, tzinfo=UTC)),
    ],
)
def test_rfc1123_times_parse_whatever_the_weekday(text: str, expected: datetime) -> None:
    assert parse_health_time(text) == expected


def test_iso_start_time_is_accepted_too() -> None:
    signal = only(classify(health("i-0aaa", startTime="2026-08-27T13:19:03Z")))
    assert signal.not_before == datetime(2026, 8, 27, 13, 19, 3, tzinfo=UTC)


@pytest.mark.parametrize(
    "start_time", ["Thu, 31 Feb 2026 13:19:03 GMT", "Thu, 27 Foo 2026 13:19:03 GMT", "later"]
)
def test_bad_start_time_is_malformed(start_time: str) -> None:
    assert malformed_field(health("i-0aaa", startTime=start_time)) == "detail.startTime"


@pytest.mark.parametrize("key", ["service", "eventTypeCategory", "eventTypeCode"])
def test_malformed_health_event_names_the_field(key: str) -> None:
    event = fixture("aws-health-ec2-retirement.json")
    del event["detail"][key]
    assert malformed_field(event) == f"detail.{key}"


def test_health_entity_without_value_is_malformed() -> None:
    event = fixture("aws-health-ec2-retirement.json")
    del event["detail"]["affectedEntities"][0]["entityValue"]
    assert malformed_field(event) == "detail.affectedEntities.0.entityValue"


# --- Kubernetes node conditions (HyperGuard's own contract, docs/events.md) -----------------


def node_condition(condition: str, status: str, /, **detail: Any) -> dict[str, Any]:
    """Constructed: the forwarder contract's example with the condition edited."""
    body = {
        "clusterName": "training-eks",
        "nodeName": "ip-10-0-1-23.us-west-2.compute.internal",
        "providerId": "aws:///us-west-2a/i-0abc1234def567890",
        "conditionType": condition,
        "status": status,
        "reason": "NvidiaXID79Error",
        "message": "GPU has fallen off the bus",
        "observedTime": "2026-03-01T11:59:58Z",
    }
    return constructed(
        "hyperguard.node-forwarder", "Kubernetes Node Condition Changed", body | detail
    )


@pytest.mark.parametrize(
    ("condition", "status", "repair"),
    [
        ("AcceleratedHardwareReady", "False", Repair.REPLACE),
        ("StorageReady", "False", Repair.REPLACE),
        ("Ready", "False", Repair.REPLACE),
        ("Ready", "Unknown", Repair.REPLACE),
        ("KernelReady", "False", Repair.REBOOT),
        ("ContainerRuntimeReady", "Unknown", Repair.REBOOT),
        ("NetworkingReady", "False", Repair.REBOOT),
        ("KernelDeadlock", "True", Repair.REBOOT),
        ("ReadonlyFilesystem", "True", Repair.REBOOT),
    ],
)
def test_node_condition_problem_opens_an_incident(
    condition: str, status: str, repair: Repair
) -> None:
    signal = only(classify(node_condition(condition, status)))
    assert (signal.severity, signal.action, signal.repair) == (
        Severity.DEGRADED,
        Action.OPEN_INCIDENT,
        repair,
    )
    assert signal.facts["condition_type"] == condition
    assert signal.facts["reason"] == "NvidiaXID79Error"
    assert signal.kind == "node_condition"
    assert signal.source is SignalSource.KUBERNETES


@pytest.mark.parametrize(
    ("reason", "repair"),
    [
        ("NvidiaXID48Error", Repair.REBOOT),  # double-bit ECC: a GPU reset first
        ("NvidiaXID95Error", Repair.REBOOT),
        ("NvidiaXID119Error", Repair.REBOOT),
        ("NvidiaDoubleBitError", Repair.REBOOT),
        ("NvidiaNVLinkError", Repair.REBOOT),
        ("NvidiaXID79Error", Repair.REPLACE),  # off the bus: a power cycle
        ("NvidiaXID63Error", Repair.REPLACE),  # EC2 replaces on memory remapping
        ("NvidiaXID54Error", Repair.REPLACE),
        ("NvidiaXID13Warning", Repair.REPLACE),
        ("NvidiaXID480Error", Repair.REPLACE),
        ("DCGMDiagnosticFailure", Repair.REPLACE),
        ("", Repair.REPLACE),
    ],
)
def test_a_gpu_condition_is_rebooted_where_nvidia_says_a_gpu_reset_cures_it(
    reason: str, repair: Repair
) -> None:
    signal = only(classify(node_condition("AcceleratedHardwareReady", "False", reason=reason)))
    assert signal.repair is repair


@pytest.mark.parametrize(
    ("condition", "status"),
    [
        ("AcceleratedHardwareReady", "True"),
        ("Ready", "True"),
        ("KernelDeadlock", "False"),
        ("ReadonlyFilesystem", "Unknown"),
    ],
)
def test_node_condition_cleared_resolves(condition: str, status: str) -> None:
    signal = only(classify(node_condition(condition, status)))
    assert (signal.severity, signal.action, signal.repair) == (
        Severity.HEALTHY,
        Action.RESOLVE,
        Repair.NONE,
    )


def test_node_condition_signal_fields() -> None:
    signal = only(classify(node_condition("AcceleratedHardwareReady", "False")))
    assert signal.instance_id == "i-0abc1234def567890"  # from providerId
    assert signal.cluster == "training-eks"
    assert signal.observed_at == EVENT_DATETIME
    assert signal.dedupe_key == EVENT_ID
    assert signal.facts["observed_time"] == "2026-03-01T11:59:58+00:00"
    assert signal.reason == (
        "node ip-10-0-1-23.us-west-2.compute.internal AcceleratedHardwareReady=False "
        "(NvidiaXID79Error)"
    )


def test_explicit_instance_id_wins_over_provider_id() -> None:
    event = node_condition("Ready", "False", instanceId="i-0fff")
    assert only(classify(event)).instance_id == "i-0fff"


def test_node_condition_reads_hyperpods_provider_id_form() -> None:
    provider_id = "aws:///us-west-2b/sagemaker/cluster/hyperpod-abc123xyz0-i-0123456789abcdef0"
    event = node_condition("Ready", "False", providerId=provider_id)
    assert only(classify(event)).instance_id == "i-0123456789abcdef0"


@pytest.mark.parametrize(
    "provider_id",
    [
        None,
        "kind://docker/node-1",
        "aws:///us-west-2a/",
        # not guessed from the last segment: neither EKS's form nor HyperPod's
        "aws:///us-west-2a/sagemaker/other/i-0123456789abcdef0",
    ],
)
def test_node_condition_without_instance_is_malformed(provider_id: str | None) -> None:
    event = node_condition("Ready", "False", providerId=provider_id)
    assert malformed_field(event) == "detail.instanceId"


@pytest.mark.parametrize(
    ("key", "value", "field"),
    [
        ("status", "Yes", "detail.status"),
        ("conditionType", None, "detail.conditionType"),
        ("clusterName", "", "detail.clusterName"),
        ("observedTime", "yesterday", "detail.observedTime"),
    ],
)
def test_malformed_node_condition_names_the_field(key: str, value: Any, field: str) -> None:
    assert malformed_field(node_condition("Ready", "False", **{key: value})) == field


# --- unknown events and the envelope -------------------------------------------------------


def test_unknown_source_is_ignored_and_named() -> None:
    event = constructed("aws.s3", "Object Created", {"bucket": {"name": "b"}})
    signal = only(classify(event))
    assert (signal.kind, signal.severity, signal.action, signal.repair) == (
        "unknown",
        Severity.INFORMATIONAL,
        Action.IGNORE,
        Repair.NONE,
    )
    assert signal.instance_id is None
    assert signal.source is SignalSource.UNKNOWN
    assert "aws.s3" in signal.reason
    assert "Object Created" in signal.reason
    assert (signal.observed_at, signal.dedupe_key) == (EVENT_DATETIME, EVENT_ID)


def test_unknown_detail_type_of_a_known_source_keeps_the_source() -> None:
    event = constructed("aws.ec2", "EC2 Fast Launch State-change Notification", {})
    signal = only(classify(event))
    assert (signal.kind, signal.source, signal.action) == (
        "unknown",
        SignalSource.EC2,
        Action.IGNORE,
    )


def test_unknown_event_body_is_not_validated() -> None:
    event = constructed("aws.sagemaker", "SageMaker Training Job State Change", {})
    event["detail"] = "not an object"
    del event["account"]
    assert only(classify(event)).action is Action.IGNORE


def test_event_without_id_is_malformed_even_if_unknown() -> None:
    event = constructed("aws.s3", "Object Created", {})
    del event["id"]
    assert malformed_field(event) == "id"


def test_non_object_event_is_malformed() -> None:
    with pytest.raises(MalformedEventError):
        classify(["not", "an", "event"])  # type: ignore[arg-type]


def test_importing_events_pulls_in_no_aws_sdk() -> None:
    # Powertools itself imports the bare `botocore` package (for its user agent); the SDK's
    # clients and boto3 are what cost Lambda init time.
    code = (
        "import sys, hyperguard.events; "
        "print(sorted({'boto3', 'botocore.client', 'botocore.session'} & set(sys.modules)))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"


# --- robustness: arbitrary mutations of real and constructed events -------------------------

SEED_EVENTS = [fixture(name) for name in sorted(FIXTURE_SIGNALS)] + [
    capacity_reservation_warning(**{"instance-termination-time": "2026-03-01T12:01:30Z"}),
    node_condition("AcceleratedHardwareReady", "False"),
    health("i-0aaa", "arn:aws:ec2:us-east-1:123456789012:instance/i-0bbb"),
]
# Values that steer mutations into real branches, mixed with arbitrary JSON.
MEANINGFUL = st.sampled_from(
    [
        "Healthy", "Unhealthy", "Error", "Instance", "EC2", "RDS", "issue", "scheduledChange",
        "closed", "stopped", "running", "True", "False", "Unknown", "Ready", "KernelDeadlock",
        "aws.ec2", "aws.health", "aws.sagemaker", "hyperguard.node-forwarder", "i-0abc",
        "Thu, 31 Feb 2026 13:19:03 GMT", "9999-12-31T23:59:59Z", "0001-01-01T00:00:00Z", "",
    ]
)  # fmt: skip
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text() | MEANINGFUL,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3)
    ),
    max_leaves=6,
)


def containers(value: Any) -> list[Any]:
    found: list[Any] = []
    if isinstance(value, dict | list):
        found.append(value)
        for child in value.values() if isinstance(value, dict) else value:
            found.extend(containers(child))
    return found


@st.composite
def mutated_events(draw: st.DrawFn) -> dict[str, Any]:
    event: dict[str, Any] = copy.deepcopy(draw(st.sampled_from(SEED_EVENTS)))
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        target = draw(st.sampled_from(containers(event)))
        keys = list(target) if isinstance(target, dict) else list(range(len(target)))
        operation = draw(st.sampled_from(["delete", "replace", "add"]))
        if operation == "add" or not keys:
            if isinstance(target, dict):
                target[draw(st.text(max_size=8) | MEANINGFUL)] = draw(JSON_VALUES)
            else:
                target.append(draw(JSON_VALUES))
        elif operation == "delete":
            del target[draw(st.sampled_from(keys))]
        else:
            target[draw(st.sampled_from(keys))] = draw(JSON_VALUES)
    return event


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(event=mutated_events())
def test_classify_raises_only_malformed_event_error(event: dict[str, Any]) -> None:
    try:
        signals = classify(event)
    except MalformedEventError as error:
        assert error.field
        return
    assert signals
    assert all(isinstance(signal, HealthSignal) for signal in signals)
    assert len({signal.dedupe_key for signal in signals}) == len(signals)
