"""`plan --from-deployment`'s inputs (hyperguard.planning.measured): failure rate and MTBF per
instance type from incidents over instance-hours, recovery P50/P90 per phase, and the
published figures, labelled, where too few incidents support a measured one."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from hyperguard import planning
from hyperguard.models import Incident, Node
from hyperguard.models.incidents import JOB_STALLED
from hyperguard.models.signals import Repair
from hyperguard.planning import MIN_INCIDENTS
from hyperguard.planning.measured import (
    PUBLISHED_DOWNTIME_MIN,
    deployment_inputs,
    instance_hours,
    percentiles,
    recovery_seconds,
    to_json,
)

END = datetime(2026, 11, 23, tzinfo=UTC)
START = END - timedelta(days=10)
P5 = "ml.p5.48xlarge"


def node(instance_id: str, instance_type: str = P5, **fields: Any) -> Node:
    return Node(
        instance_id=instance_id,
        cluster="hp",
        pool="workers",
        platform="hyperpod",
        instance_type=instance_type,
        **fields,
    )


def incident(n: int, instance_id: str, total_s: float, **fields: Any) -> Incident:
    """Detected after 60 s, repair asked at 120 s, healthy 300 s before it resumed."""
    at = END - timedelta(hours=n + 1)
    return Incident(
        **{
            "incident_id": f"inc-{n}",
            "instance_id": instance_id,
            "cluster": "hp",
            "kind": "hyperpod_node_health",
            "severity": "fatal",
            "repair": Repair.REPLACE,
            "reason": "GPU fell off the bus",
            "opened_at": at,
            "first_signal_at": at,
            "timings": {
                "signal_to_detected_s": 60.0,
                "signal_to_repair_requested_s": 120.0,
                "signal_to_healthy_s": total_s - 300,
                "signal_to_resumed_s": total_s,
            },
        }
        | fields
    )


FLEET = [node(f"i-{n:02d}") for n in range(4)]
"""Four p5 instances all ten days: 960 instance-hours."""


def test_instance_hours_count_each_node_inside_the_window_only() -> None:
    nodes = [
        node("i-old", launch_time=START - timedelta(days=3)),  # all 240 h
        node("i-new", launch_time=END - timedelta(hours=6)),  # 6 h
        node("i-gone", retired_at=START + timedelta(hours=12)),  # 12 h
        node("i-before", retired_at=START - timedelta(hours=1)),  # none
        node("i-g5", "g5.48xlarge"),  # EC2 spelling: counted as ml.g5.48xlarge
    ]
    assert instance_hours(nodes, START, END) == {P5: 258.0, "ml.g5.48xlarge": 240.0}


def test_enough_incidents_give_a_measured_rate_mtbf_and_downtime() -> None:
    incidents = [incident(n, f"i-0{n}", total) for n, total in enumerate([1200, 1800, 2400])]
    inputs = deployment_inputs(incidents, FLEET, START, END)
    assert inputs.instance_type == P5 and inputs.incidents_considered == 3
    assert inputs.failure_rate.source == "measured"
    assert inputs.failure_rate.value == pytest.approx(3 / 960)
    assert inputs.failure_rate.incidents == 3
    assert inputs.downtime_min.source == "measured"
    assert inputs.downtime_min.value == pytest.approx(30.0)  # mean of 20, 30, 40 minutes
    (p5,) = inputs.types
    assert p5.mtbf_hours == pytest.approx(320.0)
    assert p5.phases["total"].p50_s == 1800 and p5.phases["total"].samples == 3
    assert p5.phases["total"].p90_s == pytest.approx(2280.0)
    assert p5.phases["detect"].p50_s == 60 and p5.phases["repair"].p50_s == 1380


def test_too_few_incidents_fall_back_to_the_published_figures_labelled() -> None:
    incidents = [incident(n, "i-00", 1200) for n in range(MIN_INCIDENTS - 1)]
    inputs = deployment_inputs(incidents, FLEET, START, END)
    assert inputs.failure_rate.source == "published"
    assert inputs.failure_rate.value == planning.PUBLISHED_RATE
    assert inputs.failure_rate.incidents == MIN_INCIDENTS - 1
    assert inputs.downtime_min.source == "published"
    assert inputs.downtime_min.value == PUBLISHED_DOWNTIME_MIN
    as_json = to_json(inputs)
    assert as_json["min_incidents"] == MIN_INCIDENTS
    assert as_json["failure_rate"] == {
        "value": planning.PUBLISHED_RATE,
        "source": "published",
        "incidents": MIN_INCIDENTS - 1,
    }


def test_planned_out_of_window_and_foreign_incidents_are_not_failures() -> None:
    incidents = [
        *(incident(n, "i-00", 1200) for n in range(2)),
        incident(2, "i-01", 1200, severity="scheduled"),  # planned maintenance
        incident(3, "i-02", 1200, first_signal_at=START - timedelta(hours=1)),
        incident(4, "i-unknown", 1200),  # no such node: no instance type
        incident(5, "i-00", 1200, kind=JOB_STALLED, severity="degraded"),  # a job's, D117
    ]
    inputs = deployment_inputs(incidents, FLEET, START, END)
    assert inputs.incidents_considered == 2
    assert inputs.failure_rate.source == "published"


def test_each_instance_type_has_its_own_figures_and_the_busiest_is_planned() -> None:
    nodes = [*FLEET, node("i-g5", "ml.g5.48xlarge")]
    incidents = [incident(n, "i-g5", 900) for n in range(3)]
    inputs = deployment_inputs(incidents, nodes, START, END)
    assert inputs.instance_type == P5  # 960 instance-hours against 240
    assert inputs.failure_rate.source == "published"
    chosen = deployment_inputs(incidents, nodes, START, END, "g5.48xlarge")
    assert chosen.instance_type == "ml.g5.48xlarge"
    assert chosen.failure_rate.value == pytest.approx(3 / 240)
    assert chosen.downtime_min.value == pytest.approx(15.0)
    assert [t.instance_type for t in chosen.types] == ["ml.g5.48xlarge", P5]


def test_a_recovery_without_a_resume_ends_when_the_node_was_healthy() -> None:
    drained = incident(0, "i-00", 1200)
    drained.timings.pop("signal_to_resumed_s")
    assert recovery_seconds(drained)["total"] == 900
    unfinished = incident(1, "i-00", 1200, timings={"signal_to_detected_s": 5.0})
    assert recovery_seconds(unfinished)["total"] is None


def test_percentiles_of_nothing_and_of_one() -> None:
    assert percentiles([]).p50_s is None and percentiles([]).samples == 0
    assert percentiles([42.0]).p90_s == 42.0
