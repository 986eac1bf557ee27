"""Which recovery strategy a job gets when its node fails, and why.

A job may ask for one (`recovery.strategy`); `auto` (the default) takes the feasible one
with the least expected lost GPU-time. The estimate counts GPU-seconds the job's GPUs stand
idle (or are missing) from now until it trains at full size again; the work since its last
checkpoint is lost under every strategy (all restart from it), so it is reported but does
not change the choice.

    wait_for_repair  G * (repair + resume)            the node (or its replacement) comes back
    hot_spare        G * resume                       an idle healthy node of the pool
    elastic_shrink   G * rescale + k*g * repair       elastic, above its minimum without the
                     + G * rescale                      node: shrink now, grow back afterwards
    move             G * (provision + resume)         back to the queue, placed on the burst
                                                        (EKS) pools its template allows first

G: the job's GPUs; k*g: those on the failed node; repair: the reboot's or replacement's
duration; resume: a job restart from its checkpoint; rescale: an elastic checkpoint-and-
restart at a new size; provision: new capacity coming up. Component times are the policy's
`strategyTimes` (defaults: published HyperPod figures where there are some, see
`hyperguard.policies.repair.ComponentTimes`), replaced by the median of this deployment's
own incidents once it has `MIN_SAMPLES` of a repair kind.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field

from hyperguard.models import Incident, IncidentStatus, Job, Repair
from hyperguard.models.jobs import AppliedStrategy, RecoveryStrategy
from hyperguard.policies.repair import ComponentTimes

MIN_SAMPLES = 3


def measured(times: ComponentTimes, incidents: Iterable[Incident]) -> tuple[ComponentTimes, str]:
    """`times` with reboot/replace durations replaced by the median this deployment saw
    (repair requested → healthy), where it has MIN_SAMPLES of them."""
    samples: dict[str, list[float]] = {Repair.REBOOT.value: [], Repair.REPLACE.value: []}
    for incident in incidents:
        if incident.status is not IncidentStatus.RESOLVED or incident.action not in samples:
            continue
        start = incident.timings.get("signal_to_repair_requested_s")
        end = incident.timings.get("signal_to_healthy_s")
        if start is not None and end is not None and end >= start:
            samples[incident.action].append(end - start)
    update: dict[str, float] = {}
    notes = []
    for action, values in samples.items():
        if len(values) >= MIN_SAMPLES:
            update[f"{action}_s"] = statistics.median(values)
            notes.append(f"{action} {update[f'{action}_s']:.0f}s (median of {len(values)})")
    source = "measured " + ", ".join(notes) if notes else "policy/published times"
    return times.model_copy(update=update), source


@dataclass(frozen=True)
class Situation:
    """What recovery knows about a job on a failed node."""

    job: Job
    replicas_on_node: int
    repair: Repair
    """What happens to the node: reboot, replace, or drain (it goes away)."""
    node_returns: bool
    """The node (or a replacement in its slot) comes back: HyperPod, not drained."""
    spare: bool
    """An idle healthy node of the pool is free for it."""
    template_allows_burst: bool


@dataclass(frozen=True)
class Choice:
    strategy: AppliedStrategy
    why: str
    lost_gpu_minutes: dict[str, float] = field(default_factory=dict)
    """Expected lost GPU-minutes per feasible strategy."""


def choose(situation: Situation, times: ComponentTimes, source: str) -> Choice:
    job = situation.job
    if job.auto_resume:
        return Choice(
            AppliedStrategy.HYPERPOD_AUTO_RESUME, "the job opted into HyperPod auto-resume"
        )
    costs = estimates(situation, times)
    asked = job.recovery.strategy
    if asked is not RecoveryStrategy.AUTO:
        wanted = AppliedStrategy(asked.value)
        if wanted in costs:
            return Choice(wanted, f"asked for {asked.value}", _minutes(costs))
        fallback = _cheapest(costs)
        return Choice(
            fallback,
            f"asked for {asked.value}, which is not possible here ({_why_not(asked, situation)}): "
            f"{fallback.value} loses the least",
            _minutes(costs),
        )
    best = _cheapest(costs)
    ranked = ", ".join(
        f"{s.value} {costs[s] / 60:.0f}" for s in sorted(costs, key=costs.__getitem__)
    )
    return Choice(
        best,
        f"auto: least expected lost GPU-minutes ({ranked}; {source})",
        _minutes(costs),
    )


def estimates(situation: Situation, times: ComponentTimes) -> dict[AppliedStrategy, float]:
    """Expected lost GPU-seconds of every strategy feasible for the job."""
    job = situation.job
    replicas = len(job.nodes) or job.replicas
    gpus = replicas * job.accelerators_per_replica
    on_node = situation.replicas_on_node * job.accelerators_per_replica
    repair = times.reboot_s if situation.repair is Repair.REBOOT else times.replace_s
    costs: dict[AppliedStrategy, float] = {}
    if situation.node_returns:
        costs[AppliedStrategy.WAIT_FOR_REPAIR] = gpus * (repair + times.resume_s)
    if situation.spare:
        costs[AppliedStrategy.HOT_SPARE] = gpus * times.resume_s
    policy = job.elastic_policy
    if policy is not None and policy.at_most(replicas - situation.replicas_on_node):
        grow_back = gpus * times.rescale_s if situation.node_returns else 0.0
        costs[AppliedStrategy.ELASTIC_SHRINK] = (
            gpus * times.rescale_s + on_node * repair + grow_back
        )
    if situation.template_allows_burst:
        costs[AppliedStrategy.MOVE] = gpus * (times.provision_s + times.resume_s)
    if not costs:
        # Nothing better: back to the queue, to run when capacity allows.
        costs[AppliedStrategy.REQUEUE] = gpus * (repair + times.resume_s)
    return costs


def _cheapest(costs: dict[AppliedStrategy, float]) -> AppliedStrategy:
    order = list(AppliedStrategy)
    return min(costs, key=lambda s: (costs[s], order.index(s)))


def _minutes(costs: dict[AppliedStrategy, float]) -> dict[str, float]:
    return {s.value: round(c / 60, 1) for s, c in costs.items()}


def _why_not(asked: RecoveryStrategy, situation: Situation) -> str:
    match asked:
        case RecoveryStrategy.WAIT_FOR_REPAIR:
            return "the node does not come back"
        case RecoveryStrategy.HOT_SPARE:
            return "no idle healthy node in the pool"
        case RecoveryStrategy.ELASTIC_SHRINK:
            return "the job is not elastic or is at its minimum"
        case RecoveryStrategy.MOVE:
            return f"template {situation.job.template} does not allow burst capacity"
        case _:
            return "unknown"
