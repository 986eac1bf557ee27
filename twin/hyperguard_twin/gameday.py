"""`hyperguard twin gameday`: weeks of node failures at a published rate, each recovery
strategy's job taken through the real workflows on the twin, measured downtime and goodput
beside the planner's formula for the same inputs.

What is modelled, what is measured, what is extrapolated:
- modelled: when failures happen — a Poisson process of `instances * failure_rate` per
  hour over `days`, seeded — and the simulated cluster's durations (GAMEDAY_TIMINGS: the
  published replacement and resume times, the planner's assumed elastic rescale), the
  same component times the planner uses;
- measured: for each of the first `measure` failures, what HyperGuard's deployed code did
  on the twin — detection, the strategy it applied, cordon, drain, repair, restart, shrink
  and growth — read as lost GPU-time from the simulated cluster's timeline of the job;
- extrapolated: failures beyond `measure` are charged the mean measured downtime (the
  result says how many were measured).

One job per strategy (FULL replicas of 8 GPUs, elastic from 2), each in its own team, on
one twin. The job stands for the whole training run of the planner's model: every failure
strikes each strategy's job once, at the point of its checkpoint cycle that the failure's
time gives. A job's downtime per failure is its lost GPU-minutes divided by its GPUs:

    lost = ∫ (G - GPUs training) dt  over [fault, full size again]      (resources)
         + G * step * (step at fault - step resumed from)               (progress lost)

Goodput over the period, as the field splits it: scheduling goodput = time holding (and
using) all its resources / wall time; runtime goodput = progress kept / time holding them;
goodput = their product = 1 - downtime / wall time. Badput per incident is split by the
workflow's phase (hyperguard_twin.story) in which the GPUs stood idle; work redone after a
rollback is its own line.
"""

from __future__ import annotations

import math
import random
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from hyperguard import planning
from hyperguard.cli.executions import execution_states, history
from hyperguard.models.incidents import Incident
from hyperguard.store import IncidentStore
from hyperguard_twin.cluster import Progress, SimTimings
from hyperguard_twin.config import TwinError
from hyperguard_twin.runtime import Twin
from hyperguard_twin.scenarios import (
    FULL,
    GPUS_PER_REPLICA,
    Subject,
    back_at_full_size,
    configure,
    submit,
    wait_for,
)
from hyperguard_twin.story import phases

STRATEGIES = ("auto", "wait_for_repair", "hot_spare", "elastic_shrink")
GAMEDAY_TIMINGS = SimTimings(
    replace_s=940.0,  # HyperPod's published P90 (903-981 s), as the twin's default
    job_restart_s=planning.RESUME_S,
    rescale_s=planning.RESCALE_S,
)
MAX_DAYS = 365
MAX_MEASURED = 50
ROUND_TIMEOUT_S = 600.0
"""Wall seconds one round (every strategy's recovery) may take."""


@dataclass(frozen=True)
class Failure:
    """A modelled failure: hours into the period, and the fraction of the checkpoint cycle
    the job had run since its last checkpoint when it struck."""

    hour: float
    cycle: float


def failures(instances: int, rate: float, days: float, seed: int) -> list[Failure]:
    """Poisson arrivals over the period (exponential gaps, mean MTBF hours)."""
    rng = random.Random(seed)
    per_hour = planning.failures_per_hour(instances, rate)
    arrivals, hour = [], rng.expovariate(per_hour)
    while hour < days * 24:
        arrivals.append(Failure(hour, rng.random()))
        hour += rng.expovariate(per_hour)
    return arrivals


@dataclass
class Ledger:
    """One strategy's job over the rounds."""

    subject: Subject
    rounds: list[dict[str, Any]] = field(default_factory=list)


def run(
    twin: Twin,
    *,
    instances: int,
    failure_rate: float,
    days: float,
    strategies: Sequence[str] = STRATEGIES,
    measure: int = 3,
    seed: int = 0,
    step: Callable[[str], None] = lambda _what: None,
) -> dict[str, Any]:
    """The gameday on a twin started with `nodes_for(strategies)` HyperPod nodes, no seeded
    jobs and GAMEDAY_TIMINGS. `step(what)` is told as each stage begins (a progress bar)."""
    planning.check_size("instances", instances)
    planning.check_rate("failure_rate", failure_rate)
    arrivals = failures(instances, failure_rate, days, seed)
    spares = spares_for(strategies)
    configure(twin, strategies, hot_spares=spares)
    ledgers = [Ledger(submit(twin, s)) for s in strategies]
    interval = twin.cluster.timings.checkpoint_interval_steps
    step("the jobs train to a first checkpoint")
    for ledger in ledgers:  # a checkpoint to fall back to before the first failure
        _train_until(twin, ledger, lambda at: at >= 2 * interval + 1)
    measured = arrivals[:measure]
    for number, failure in enumerate(measured, 1):
        step(f"failure {number} of {len(measured)} (hour {failure.hour:.1f}): every recovery")
        _round(twin, ledgers, failure)
    wall_min = days * 24 * 60
    results = {
        ledger.subject.strategy: _summary(ledger, len(arrivals), wall_min, instances, failure_rate)
        for ledger in ledgers
    }
    return {
        "inputs": {
            "instances": instances,
            "failure_rate": failure_rate,
            "days": days,
            "seed": seed,
            "hot_spares": spares,
        },
        "failures": len(arrivals),
        "expected_failures": round(
            planning.failures_per_hour(instances, failure_rate) * days * 24, 2
        ),
        "measured_failures": min(measure, len(arrivals)),
        "strategies": results,
        "modelled": twin.cluster.timings.model_dump(),
        "time_scale": twin.config.time_scale,
    }


def report_data(result: dict[str, Any]) -> dict[str, Any]:
    """The HTML report's sections (hyperguard_twin.report): measured against formula
    goodput, and the planner's trade-off at the same failure rate."""
    from hyperguard_twin.demo import tradeoff

    inputs = result["inputs"]
    return {
        "title": "HyperGuard game day",
        "subtitle": (
            f"{result['failures']} failures in {inputs['days']:g} days on "
            f"{inputs['instances']} instances at {inputs['failure_rate']:g} per "
            f"instance-hour; {result['measured_failures']} per strategy measured on the twin"
        ),
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "gameday": {"strategies": result["strategies"], "failures": result["failures"]},
        "tradeoff": tradeoff(inputs["failure_rate"]),
    }


def spares_for(strategies: Sequence[str]) -> int:
    """A spare for each strategy that may take one."""
    return sum(s in ("auto", "hot_spare") for s in strategies)


def nodes_for(strategies: Sequence[str]) -> int:
    """Each job's nodes, the spares, and one node of slack."""
    return FULL * len(strategies) + spares_for(strategies) + 1


def _train_until(twin: Twin, ledger: Ledger, done: Any) -> None:
    wait_for(
        lambda: _at_full_size(twin, ledger) and done(twin.cluster.step_of(ledger.subject.job_id)),
        time.monotonic() + ROUND_TIMEOUT_S,
        f"the {ledger.subject.strategy} job did not train",
    )


def _at_full_size(twin: Twin, ledger: Ledger) -> bool:
    timeline = twin.cluster.timeline(ledger.subject.job_id)
    return bool(timeline) and timeline[-1].replicas == FULL


def _round(twin: Twin, ledgers: list[Ledger], failure: Failure) -> None:
    """Each job trains on for at least a checkpoint cycle, then its node fails
    `failure.cycle` of a cycle after its latest checkpoint; the round ends when every job
    trains at full size again."""
    interval = twin.cluster.timings.checkpoint_interval_steps
    offset = min(interval - 1, math.floor(failure.cycle * interval))
    # the first step past a full cycle at which `offset` steps follow a checkpoint
    targets = {
        ledger.subject.job_id: (twin.cluster.step_of(ledger.subject.job_id) // interval + 1)
        * interval
        + offset
        for ledger in ledgers
    }
    faulted: list[tuple[Ledger, Subject]] = []
    pending = list(ledgers)
    deadline = time.monotonic() + ROUND_TIMEOUT_S
    while pending:
        for ledger in list(pending):
            job = ledger.subject.job_id
            step = twin.cluster.step_of(job)
            if step < targets[job] or not _at_full_size(twin, ledger):
                continue
            node = twin.cluster.job_instances(job)[-1]
            at = twin.cluster.clock.now()
            twin.cluster.inject_fault(node, "persistent")
            subject = Subject(
                ledger.subject.strategy,
                ledger.subject.team,
                job,
                node,
                at,
                step,
                twin.cluster.checkpoint_step(job),
            )
            faulted.append((ledger, subject))
            pending.remove(ledger)
        if time.monotonic() > deadline:
            raise TwinError("a job did not reach its failure's step within the round's limit")
        time.sleep(0.05)
    wait_for(
        lambda: all(back_at_full_size(twin, s) is not None for _, s in faulted),
        deadline,
        "a job did not train at full size again",
    )
    for ledger, subject in faulted:
        ledger.rounds.append(_measure(twin, subject))


def _measure(twin: Twin, subject: Subject) -> dict[str, Any]:
    """One failure's cost to one job, and where it went."""
    assert subject.fault_at is not None
    full = back_at_full_size(twin, subject)
    assert full is not None
    timeline = twin.cluster.timeline(subject.job_id)
    gpus = FULL * GPUS_PER_REPLICA
    step_s = twin.cluster.timings.step_duration_s
    after = [p for p in timeline if subject.fault_at < p.at <= full.at]
    resumed = next((p.step for p in after if p.replicas > 0), full.step)
    rolled_back = max(0, subject.step_at_fault - resumed) * step_s * gpus
    incident, spans = _recovery(twin, subject)
    badput: dict[str, float] = {}
    wall_s: dict[str, float] = {}
    edge = subject.fault_at
    for name, start, end, wall in spans:
        wall_s[name] = round(wall_s.get(name, 0.0) + wall, 1)
        start, end = max(start, edge), min(end, full.at)
        if end > start:
            badput[name] = badput.get(name, 0.0) + _idle(timeline, start, end, gpus)
            edge = end
    if full.at > edge:
        badput["job restart"] = _idle(timeline, edge, full.at, gpus)
    badput["progress lost"] = rolled_back
    lost = sum(badput.values())
    return {
        "incident_id": incident.incident_id if incident else None,
        # the strategy HyperGuard recorded for the job on the incident
        "strategy": next((j.strategy for j in incident.jobs if j.job_id == subject.job_id), None)
        if incident
        else None,
        "downtime_min": round(lost / gpus / 60, 2),
        "without_all_resources_min": round((lost - rolled_back) / gpus / 60, 2),
        "progress_lost_min": round(rolled_back / gpus / 60, 2),
        "badput_gpu_min_by_phase": {k: round(v / 60, 1) for k, v in badput.items()},
        # each phase's wall seconds: the service's own time, which the cluster's clock scales
        "phase_wall_s": wall_s,
        "full_size_again_after_min": round((full.at - subject.fault_at).total_seconds() / 60, 2),
    }


def _idle(timeline: list[Progress], start: datetime, end: datetime, gpus: int) -> float:
    """GPU-seconds of the job's `gpus` not training between `start` and `end` (a smaller
    size trains proportionally slower: the missing GPUs count)."""
    idle, at = 0.0, start
    points = [p for p in timeline if start < p.at < end]
    size = next((p.replicas for p in reversed(timeline) if p.at <= start), 0)
    for point in [*points, Progress(end, size, 0)]:
        idle += (gpus - size * GPUS_PER_REPLICA) * (point.at - at).total_seconds()
        at, size = point.at, point.replicas
    return idle


def _recovery(
    twin: Twin, subject: Subject
) -> tuple[Incident | None, list[tuple[str, Any, Any, float]]]:
    """The incident the fault opened (with its execution) and its phases: name, start and
    end in the cluster's time, and the wall seconds it took."""
    assert twin.deployment is not None and subject.fault_at is not None
    outputs = twin.deployment.outputs
    store = IncidentStore(outputs["IncidentsTableName"], outputs["NodesTableName"])
    since = twin.cluster.clock.wall(subject.fault_at) - timedelta(seconds=1)
    incident = next(
        (i for i in store.recent() if i.instance_id == subject.node and i.first_signal_at >= since),
        None,
    )
    if incident is None or not incident.execution_arn:
        return None, []
    sfn = twin.client("stepfunctions")
    states = execution_states(history(sfn, incident.execution_arn))
    to_cluster = twin.cluster.clock.virtual
    return incident, [
        (p.name, to_cluster(p.start), to_cluster(p.end), (p.end - p.start).total_seconds())
        for p in phases(incident, states)
    ]


def _summary(
    ledger: Ledger, count: int, wall_min: float, instances: int, rate: float
) -> dict[str, Any]:
    rounds = ledger.rounds
    if not rounds:
        return {"team": ledger.subject.team, "job_id": ledger.subject.job_id, "rounds": []}
    downtimes = [r["downtime_min"] for r in rounds]
    downtime = statistics.fmean(downtimes)
    short = statistics.fmean(r["without_all_resources_min"] for r in rounds)
    scheduling = max(0.0, 1 - count * short / wall_min)
    goodput = max(0.0, 1 - count * downtime / wall_min)
    formula = _formula(ledger.subject.strategy)
    expected = planning.failures_per_hour(instances, rate) * wall_min / 60
    return {
        "team": ledger.subject.team,
        "job_id": ledger.subject.job_id,
        "downtime_per_failure_min": round(downtime, 2),
        "downtime_min_range": [
            min(r["downtime_min"] for r in rounds),
            max(r["downtime_min"] for r in rounds),
        ],
        "goodput_pct": round(100 * goodput, 3),
        "scheduling_goodput_pct": round(100 * scheduling, 3),
        "runtime_goodput_pct": round(100 * goodput / scheduling, 3) if scheduling else 0.0,
        "badput_min": round(count * downtime, 1),
        "formula_downtime_per_failure_min": formula,
        # like for like: the planner's downtime per failure over the same failures drawn
        "formula_goodput_pct": round(100 * max(0.0, 1 - count * formula / wall_min), 3),
        # the planner's own figure: over the failures expected at the rate, not those drawn
        "formula_goodput_at_expected_failures_pct": round(
            100 * max(0.0, 1 - expected * formula / wall_min), 3
        ),
        "rounds": rounds,
    }


def _formula(strategy: str) -> float:
    """The planner's downtime per failure for the strategy, at the twin job's size (like
    for like: an elastic job of FULL nodes loses 1/FULL of itself, not 1/instances); auto:
    the least of the strategies the twin's job can take."""
    downtimes = planning.strategy_downtimes(FULL)
    if strategy == "auto":
        return min(downtimes[s] for s in ("wait_for_repair", "hot_spare", "elastic_shrink"))
    if strategy not in downtimes:
        raise TwinError(f"no formula for strategy {strategy}")
    return downtimes[strategy]
