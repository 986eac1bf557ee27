"""The planner's inputs from the deployment's own incidents, instead of published figures.

- failure rate per instance-hour, per instance type = unplanned incidents (severity other
  than `scheduled`, and not about a job: a stall is no node's failure, D117) whose first
  signal falls in the window, on instances of that type, / the
  instance-hours of that type in the window (each node from its launch, or the window's start,
  to its retirement, or the window's end); MTBF per instance = 1 / rate;
- recovery time per phase (hyperguard.models.incidents.incident_phases: detect, cordon/drain,
  repair, resume) and in total (first signal to resumed, else to healthy), P50 and P90 over
  those incidents, and the mean total: the planner's downtime per failure, because its days
  lost are failures x downtime, an expectation.

Each figure needs MIN_INCIDENTS incidents behind it; with fewer, the published one is used
and labelled so (`source`).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from hyperguard import planning
from hyperguard.catalogue import ml_name
from hyperguard.models import Incident, Node
from hyperguard.models.incidents import incident_phases
from hyperguard.planning import MIN_INCIDENTS

PUBLISHED_DOWNTIME_MIN = 40.0
"""HyperPod's published typical downtime per failure (burst-elastic reference, p5.48xlarge)."""
PLANNED = "scheduled"
PHASES = ("detect", "cordon_drain", "repair", "resume", "total")


@dataclass(frozen=True)
class Percentiles:
    samples: int
    p50_s: float | None
    p90_s: float | None


@dataclass(frozen=True)
class TypeFigures:
    """One instance type over the window."""

    instance_type: str
    instance_hours: float
    incidents: int
    failure_rate: float | None
    """Per instance-hour; None with no instance-hours."""
    mtbf_hours: float | None
    """Per instance; None with no incident."""
    phases: Mapping[str, Percentiles]
    mean_total_s: float | None


@dataclass(frozen=True)
class PlanFigure:
    value: float
    source: str
    """`measured` or `published`."""
    incidents: int
    """How many incidents the figure rests on (measured), or were too few (published)."""


@dataclass(frozen=True)
class DeploymentInputs:
    instance_type: str
    failure_rate: PlanFigure
    downtime_min: PlanFigure
    types: tuple[TypeFigures, ...]
    incidents_considered: int


def instance_hours(nodes: Iterable[Node], start: datetime, end: datetime) -> dict[str, float]:
    """Hours each instance type (HyperPod's spelling) was present in [start, end]."""
    hours: dict[str, float] = defaultdict(float)
    for node in nodes:
        since = max(node.launch_time or start, start)
        until = min(node.retired_at or end, end)
        if until > since:
            hours[ml_name(node.instance_type)] += (until - since).total_seconds() / 3600
    return dict(hours)


def recovery_seconds(incident: Incident) -> dict[str, float | None]:
    """Each phase's seconds, and the total: first signal to resumed (else to healthy)."""
    timings = incident.timings
    total = timings.get("signal_to_resumed_s", timings.get("signal_to_healthy_s"))
    return {**incident_phases(timings), "total": None if total is None else float(total)}


def percentiles(values: Sequence[float]) -> Percentiles:
    if not values:
        return Percentiles(0, None, None)
    ordered = sorted(values)
    if len(ordered) == 1:
        return Percentiles(1, ordered[0], ordered[0])
    deciles = statistics.quantiles(ordered, n=10, method="inclusive")
    return Percentiles(len(ordered), statistics.median(ordered), deciles[8])


def type_figures(instance_type: str, hours: float, incidents: Sequence[Incident]) -> TypeFigures:
    recoveries = [recovery_seconds(i) for i in incidents]
    by_phase = {
        phase: percentiles([s for r in recoveries if (s := r[phase]) is not None])
        for phase in PHASES
    }
    totals = [t for r in recoveries if (t := r["total"]) is not None]
    rate = len(incidents) / hours if hours > 0 else None
    return TypeFigures(
        instance_type=instance_type,
        instance_hours=hours,
        incidents=len(incidents),
        failure_rate=rate,
        mtbf_hours=1 / rate if rate else None,
        phases=by_phase,
        mean_total_s=statistics.fmean(totals) if totals else None,
    )


def deployment_inputs(
    incidents: Iterable[Incident],
    nodes: Sequence[Node],
    start: datetime,
    end: datetime,
    instance_type: str | None = None,
) -> DeploymentInputs:
    """The failure rate and downtime per failure `hyperguard plan` takes, for `instance_type`
    (default: the type with the most instance-hours), measured where MIN_INCIDENTS unplanned
    incidents support them, else published."""
    type_of = {n.instance_id: ml_name(n.instance_type) for n in nodes}
    considered = [
        i
        for i in incidents
        if start <= i.first_signal_at <= end
        and i.severity != PLANNED
        and not i.about_job
        and i.instance_id in type_of
    ]
    by_type: dict[str, list[Incident]] = defaultdict(list)
    for incident in considered:
        by_type[type_of[incident.instance_id]].append(incident)
    hours = instance_hours(nodes, start, end)
    types = tuple(
        type_figures(t, hours.get(t, 0.0), by_type.get(t, []))
        for t in sorted(set(hours) | set(by_type))
    )
    chosen = ml_name(instance_type) if instance_type else _busiest(hours)
    figures = next((f for f in types if f.instance_type == chosen), None)
    return DeploymentInputs(
        instance_type=chosen,
        failure_rate=_rate(figures),
        downtime_min=_downtime(figures),
        types=types,
        incidents_considered=len(considered),
    )


def _busiest(hours: Mapping[str, float]) -> str:
    return max(hours, key=lambda t: (hours[t], t)) if hours else "ml.p5.48xlarge"


def _rate(figures: TypeFigures | None) -> PlanFigure:
    count = figures.incidents if figures else 0
    if figures and figures.failure_rate and count >= MIN_INCIDENTS:
        rate = max(planning.MIN_RATE, min(figures.failure_rate, 1.0))
        return PlanFigure(rate, "measured", count)
    return PlanFigure(planning.PUBLISHED_RATE, "published", count)


def _downtime(figures: TypeFigures | None) -> PlanFigure:
    samples = figures.phases["total"].samples if figures else 0
    if figures and figures.mean_total_s is not None and samples >= MIN_INCIDENTS:
        return PlanFigure(figures.mean_total_s / 60, "measured", samples)
    return PlanFigure(PUBLISHED_DOWNTIME_MIN, "published", samples)


def to_json(inputs: DeploymentInputs) -> dict[str, object]:
    """The `inputs` block `plan --from-deployment` prints beside the plan."""

    def figure(f: PlanFigure) -> dict[str, object]:
        return {"value": round(f.value, 8), "source": f.source, "incidents": f.incidents}

    return {
        "instance_type": inputs.instance_type,
        "min_incidents": MIN_INCIDENTS,
        "incidents_considered": inputs.incidents_considered,
        "failure_rate": figure(inputs.failure_rate),
        "downtime_min": figure(inputs.downtime_min),
        "instance_types": [
            {
                "instance_type": t.instance_type,
                "instance_hours": round(t.instance_hours, 3),
                "incidents": t.incidents,
                "failure_rate": None if t.failure_rate is None else round(t.failure_rate, 8),
                "mtbf_hours": None if t.mtbf_hours is None else round(t.mtbf_hours, 3),
                "mean_recovery_s": None if t.mean_total_s is None else round(t.mean_total_s, 1),
                "recovery_s": {
                    phase: {"samples": p.samples, "p50": p.p50_s, "p90": p.p90_s}
                    for phase, p in t.phases.items()
                },
            }
            for t in inputs.types
        ],
    }
