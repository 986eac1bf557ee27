"""The day-in-the-life scenario: one simulated day of demand, hybrid against static and
against on-demand sized for the peak.

The same demand runs three times, each on a fresh twin with a HyperPod cluster
(ml.p5.48xlarge, 8 GPUs each) and an empty Karpenter pool, through the real workflows:

- **hybrid**: 16 committed nodes, bursting on (the twin's burst policy), production training
  elastic;
- **static**: 16 committed nodes, no burst (`maxNodes` 0), the training job fixed at its
  starting size;
- **on_demand**: what the hybrid design's customer had before: a cluster sized for the peak
  of the demand (`PEAK_NODES`, 19) bought on demand for the whole day, no burst, the
  training job fixed; the team `product`'s quota covers its share of the peak (11 nodes).

The demand, in hours of the simulated day (`DEMAND`):
- 00:00, team `training`: one production training job, 8 replicas (elastic 8-16 in hybrid),
  all day;
- 08:00, team `product`: five production jobs of one node, 12 hours of work each: with the
  training job, 13 of the 16 nodes (81 %) are busy during the day;
- 11:00, team `product`: a spike of six development jobs of one node, 2 hours of work each,
  at a higher priority;
- 20:00: the day jobs are done and their nodes are free for the night.

Both teams' quotas are 8 nodes, LendAndBorrow, with IdleResourceSharing and fair share. What
is measured, by sampling the simulated cluster every simulated minute (`SAMPLE_S`): GPUs
held by running jobs per pool and burst nodes alive. Each job's wait is exact, not sampled:
from the simulated time its submission was sent to the first training step the simulated
cluster's timeline records (which includes the cluster's modelled restart, `job_restart_s`);
beside it, the service's own admission time in wall seconds, from the job's
`submitted_at` and `first_admitted_at` as the service recorded them, which the scaled clock
does not stretch (at x240 every wall second of HyperGuard's work is four simulated minutes
of the wait, longer on a loaded host). The cost is those node-hours priced like for like
(`PRICE_BASES`, D146): each side's HyperPod nodes are paid all day whether used or not, the
committed sides' at the committed rate, the on-demand side's at the on-demand rate of the
same platform, and burst node-hours at the burst policy's EKS prices. `published` prices the
base as it could be bought on EC2 at published prices (a Capacity Block committed, On-Demand
for the peak); `hyperpod_assumed` at the assumed HyperPod price on both (no committed
HyperPod rate was found, so no commitment discount). What is modelled: the demand above, the
simulated cluster's timings (node launch, job restart, step time), and the prices.
"""

from __future__ import annotations

import os
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from statistics import fmean
from typing import Any, NamedTuple

from hyperguard.catalogue import ec2_name
from hyperguard.cluster.conventions import EC2_CAPACITY_TYPES
from hyperguard.models.nodes import CapacityType
from hyperguard.policies.burst import BurstPolicy
from hyperguard.policies.prices import Price, PurchaseOption, price_of
from hyperguard_twin.config import INSTANCE_TYPE, TwinError
from hyperguard_twin.runtime import Twin
from hyperguard_twin.scenarios import add_team, ok, told
from hyperguard_twin.service_users import fast_burst_policy, team_role

HOURS = 24
NODES = 16
GPUS = 8
STEP_S = 30.0
"""The simulated trainer's step (SimTimings' default)."""
SAMPLE_S = 60.0
"""Virtual seconds between two looks at the cluster."""
TIME_SCALE = 240.0
"""The scenario's default clock: virtual seconds per wall second (six minutes a side)."""
PRIORITIES = {"training": 50, "inference": 100}
SIDES = ("hybrid", "static", "on_demand")
PRICES = BurstPolicy()
"""The default burst policy: the price a burst node is charged at."""
KARPENTER_CAPACITY = {ec2: label for label, ec2 in EC2_CAPACITY_TYPES.items()}


@dataclass(frozen=True)
class Demand:
    at_h: float
    team: str
    name: str
    template: str
    priority: str
    replicas: int
    work_h: float | None
    """Hours of training at full size; None: runs all day."""
    elastic_max: int | None = None


DEMAND: tuple[Demand, ...] = (
    Demand(0, "training", "pretrain", "production", "training", 8, None, elastic_max=NODES),
    *(Demand(8, "product", f"day-{i}", "production", "training", 1, 12) for i in range(5)),
    *(Demand(11, "product", f"spike-{i}", "development", "inference", 1, 2) for i in range(6)),
)


def peak_nodes(demands: tuple[Demand, ...], team: str | None = None) -> int:
    """The most nodes the demand (of `team`, or all) asks for at once, each job at its
    starting size for its hours of work as submitted."""

    def asked(at_h: float) -> int:
        return sum(
            d.replicas
            for d in demands
            if (team is None or d.team == team)
            and d.at_h <= at_h < d.at_h + (d.work_h if d.work_h is not None else HOURS)
        )

    return max(asked(d.at_h) for d in demands)


PEAK_NODES = peak_nodes(DEMAND)


@dataclass(frozen=True)
class Side:
    """How one side's cluster is bought and run."""

    nodes: int
    burst_max_nodes: int
    elastic: bool
    quotas: dict[str, int]
    """Nodes of each team's quota (LendAndBorrow)."""
    committed: bool = True
    """Its HyperPod nodes are committed capacity (else bought on demand)."""


SIDE_SETUPS = {
    "hybrid": Side(NODES, 8, True, {"training": 8, "product": 8}),
    "static": Side(NODES, 0, False, {"training": 8, "product": 8}),
    "on_demand": Side(
        PEAK_NODES,
        0,
        False,
        {"training": peak_nodes(DEMAND, "training"), "product": peak_nodes(DEMAND, "product")},
        committed=False,
    ),
}


@dataclass(frozen=True)
class PriceBasis:
    """The rates a side's HyperPod nodes are paid at, on one platform: `committed` for the
    committed sides, `on_demand` for the side bought on demand."""

    committed: Price
    on_demand: Price

    def node_rate(self, setup: Side) -> Price:
        return self.committed if setup.committed else self.on_demand


def _price(option: PurchaseOption, instance_type: str) -> Price:
    price = price_of(option, instance_type)
    if price is None:
        raise TwinError(f"no {option} price for {instance_type} (hyperguard.policies.prices)")
    return price


PRICE_BASES = {
    "published": PriceBasis(
        committed=_price(PurchaseOption.EC2_CAPACITY_BLOCK, ec2_name(INSTANCE_TYPE)),
        on_demand=_price(PurchaseOption.EC2_ON_DEMAND, ec2_name(INSTANCE_TYPE)),
    ),
    "hyperpod_assumed": PriceBasis(
        committed=_price(PurchaseOption.HYPERPOD_ON_DEMAND, INSTANCE_TYPE),
        on_demand=_price(PurchaseOption.HYPERPOD_ON_DEMAND, INSTANCE_TYPE),
    ),
}
"""Like for like: the base of every side priced on one platform; burst is EKS's either way."""
DEFAULT_BASIS = "published"
"""The basis of `cost_usd` and `cost_usd_by_pool`: every figure in it is published."""
BASE_POOL = "workers"
"""The HyperPod instance group the twin's nodes are in."""


def side_costs(
    setup: Side, hours: float, burst_usd_by_pool: dict[str, float]
) -> dict[str, dict[str, float]]:
    """USD by pool for each of PRICE_BASES: the side's HyperPod nodes paid every hour of the
    day at the basis' rate, used or not, and its burst node-hours as sampled."""
    return {
        name: {
            BASE_POOL: round(setup.nodes * hours * basis.node_rate(setup).usd_per_hour, 2),
            **{pool: round(usd, 2) for pool, usd in burst_usd_by_pool.items()},
        }
        for name, basis in PRICE_BASES.items()
    }


def cost_ratios(results: dict[str, dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Each side's cost over the on-demand side's, per basis (1.0 for on_demand itself)."""
    return {
        basis: {
            side: round(result["cost_usd_by_basis"][basis] / on_demand, 4)
            for side, result in results.items()
        }
        for basis in PRICE_BASES
        if (on_demand := results["on_demand"]["cost_usd_by_basis"][basis])
    }


class Submission(NamedTuple):
    """One job of the demand as the day sent it."""

    name: str
    priority: str
    sent: datetime
    """The virtual time its submission was sent."""


@dataclass
class Ledger:
    """What one side's day looked like, sampled."""

    gpu_s_by_pool: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    burst_node_s_by_pool: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    burst_usd_by_pool: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    burst_nodes_peak: int = 0
    burst_nodes_at_end: int = 0
    burst_used_at: dict[str, float] = field(default_factory=dict)
    """Burst node → when (monotonic wall time) it last held a running run's pod, or appeared."""
    burst_idle_wall_s_at_end: list[float] = field(default_factory=list)
    """Idle burst nodes at the end: wall seconds each has held no running run's pod."""
    submitted: dict[str, Submission] = field(default_factory=dict)
    """job id → its submission."""
    load: list[float] = field(default_factory=list)
    """The host's 1-minute load average at the start and at the end of the day."""


def day_in_the_life(
    start: Callable[..., Twin], side: str, *, hours: float = HOURS
) -> dict[str, Any]:
    """Run the day for one side (one of SIDES) on a fresh twin. `start(**config)`
    returns a running twin with those TwinConfig settings (the CLI's ports and clock). The
    CLI runs each side in a process of its own, so that nothing of one twin (moto keeps its
    state per process) can reach the other. `hours` < 24 runs the same day compressed: every
    arrival and every job's work scaled by hours / 24 (`demand`), the cluster's own timings
    unchanged (CI's smoke size)."""
    if side not in SIDES:
        raise TwinError(f"unknown side {side!r}: {' or '.join(SIDES)}")
    if not 0 < hours <= HOURS:
        raise TwinError(f"a day lasts more than 0 and at most {HOURS} hours, not {hours}")
    setup = SIDE_SETUPS[side]
    twin = start(hyperpod_nodes=setup.nodes, burst_nodes=0, seed_jobs=False)
    try:
        result, executions = _run_day(twin, setup, hours=hours)
        return {
            "side": side,
            "result": result,
            "executions": executions,
            "time_scale": twin.config.time_scale,
            "hours": hours,
            "demand": [d.__dict__ for d in demand(hours)],
        }
    finally:
        twin.down()


def compare(sides: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The scenario's answer from each side's run."""
    results = {side: run["result"] for side, run in sides.items()}
    return {
        **results,
        "cost_ratio_to_on_demand": cost_ratios(results) if "on_demand" in results else {},
        "prices": {
            name: {"committed": b.committed.describe(), "on_demand": b.on_demand.describe()}
            for name, b in PRICE_BASES.items()
        },
        # Every state machine of both twins, by its name (each twin's names are its own).
        "executions": {
            name: counts for run in sides.values() for name, counts in run["executions"].items()
        },
        "executions_by_side": {side: run["executions"] for side, run in sides.items()},
        "demand": next(iter(sides.values()))["demand"],
        "hours": next(iter(sides.values()))["hours"],
        "time_scale": next(iter(sides.values()))["time_scale"],
    }


def demand(hours: float = HOURS) -> tuple[Demand, ...]:
    """DEMAND on a day of `hours`: arrivals and work scaled by hours / 24."""
    scale = hours / HOURS
    return tuple(
        replace(
            d,
            at_h=d.at_h * scale,
            work_h=None if d.work_h is None else d.work_h * scale,
        )
        for d in DEMAND
    )


def _run_day(
    twin: Twin, setup: Side, *, hours: float
) -> tuple[dict[str, Any], dict[str, dict[str, int]]]:
    _configure(twin, setup)
    clock = twin.cluster.clock
    start = clock.now()
    end = start + timedelta(hours=hours)
    ledger = Ledger()
    pending = sorted(demand(hours), key=lambda d: d.at_h)
    last = start
    ledger.load.append(os.getloadavg()[0])
    while True:
        now = clock.now()
        while pending and now >= start + timedelta(hours=pending[0].at_h):
            arrival = pending.pop(0)
            sent = clock.now()
            job_id = _submit(twin, arrival, elastic=setup.elastic)
            ledger.submitted[job_id] = Submission(arrival.name, arrival.priority, sent)
        _sample(twin, ledger, (min(now, end) - last).total_seconds())
        last = min(now, end)
        if now >= end:
            break
        time.sleep(SAMPLE_S / twin.config.time_scale)
    ledger.load.append(os.getloadavg()[0])
    return _summary(twin, ledger, start, end, hours, setup), _executions(twin)


def _configure(twin: Twin, setup: Side) -> None:
    policy = fast_burst_policy(twin.config.time_scale, max_nodes=setup.burst_max_nodes)
    ok(twin, "PUT", "/policies/burst", policy.model_dump(mode="json", by_alias=True))
    ok(
        twin,
        "PUT",
        "/scheduler-config",
        {
            "PriorityClasses": [{"Name": n, "Weight": w} for n, w in PRIORITIES.items()],
            "FairShare": "Enabled",
            "IdleResourceSharing": "Enabled",
        },
    )
    for team, nodes in setup.quotas.items():
        sharing = {"Strategy": "LendAndBorrow", "BorrowLimit": 100}
        add_team(twin, team, nodes, sharing, preempt="LowerPriority")


def _submit(twin: Twin, demand: Demand, *, elastic: bool) -> str:
    body: dict[str, Any] = {
        "name": demand.name,
        "template": demand.template,
        "priority_class": demand.priority,
        "instance_type": INSTANCE_TYPE,
        "replicas": demand.replicas,
        "image": "hyperguard/trainer:twin",
        "checkpoint_location": f"s3://{twin.config.parameters['CheckpointBucketName']}/"
        f"{demand.name}/",
    }
    if demand.work_h is not None:
        body["max_steps"] = round(demand.work_h * 3600 / STEP_S)
    if elastic and demand.elastic_max is not None:
        body["elastic_policy"] = {
            "minReplicas": demand.replicas,
            "maxReplicas": demand.elastic_max,
            "replicaIncrementStep": 1,
            "gracefulShutdownTimeoutInSeconds": 600,
            "scalingTimeoutInSeconds": 60,
            "faultyScaleDownTimeoutInSeconds": 30,
        }
    job = ok(twin, "POST", "/jobs", body, principal=team_role(demand.team))
    return str(job["job_id"])


def _sample(twin: Twin, ledger: Ledger, dt: float) -> None:
    """GPUs held per pool and burst nodes alive, charged for the `dt` seconds since the
    last sample."""
    instances = {i.node_name: i for i in twin.cluster.instances()}
    burst = [i for i in instances.values() if i.platform == "eks"]
    ledger.burst_nodes_peak = max(ledger.burst_nodes_peak, len(burst))
    ledger.burst_nodes_at_end = len(burst)
    for instance in burst:
        pool = _pool(instance)
        ledger.burst_node_s_by_pool[pool] += dt
        price = PRICES.node_price(_capacity(instance), instance.instance_type)
        if price is None:
            raise TwinError(f"the burst policy has no price for {instance.instance_type}")
        ledger.burst_usd_by_pool[pool] += price * dt / 3600
    used: set[str] = set()
    for run in twin.cluster.runs().values():
        if run.state != "running" or not run.nodes:
            continue
        used.update(run.nodes)
        for node in run.nodes:
            held = instances.get(node)
            if held is not None:
                ledger.gpu_s_by_pool[_pool(held)] += GPUS * dt
    wall = time.monotonic()
    for instance in burst:
        if instance.node_name in used or instance.node_name not in ledger.burst_used_at:
            ledger.burst_used_at[instance.node_name] = wall
    ledger.burst_idle_wall_s_at_end = sorted(
        round(wall - ledger.burst_used_at[i.node_name], 1) for i in burst if i.node_name not in used
    )


def _capacity(instance: Any) -> CapacityType:
    """A burst node's Karpenter capacity type."""
    return CapacityType(KARPENTER_CAPACITY.get(instance.capacity_type, "on-demand"))


def _pool(instance: Any) -> str:
    """The pool as placement names it: the instance group, or `<NodePool>-<capacity type>`."""
    if instance.platform == "hyperpod":
        return str(instance.group)
    return f"{instance.group}-{_capacity(instance).value}"


def _summary(
    twin: Twin, ledger: Ledger, start: datetime, end: datetime, hours: float, setup: Side
) -> dict[str, Any]:
    by_basis = side_costs(setup, hours, ledger.burst_usd_by_pool)
    cost = by_basis[DEFAULT_BASIS]
    used = sum(ledger.gpu_s_by_pool.values()) / 3600
    provisioned = (
        setup.nodes * GPUS * hours + sum(ledger.burst_node_s_by_pool.values()) / 3600 * GPUS
    )
    jobs = ok(twin, "GET", "/jobs")["jobs"]
    waits, never_ids = _waits(twin, ledger, end)
    never = Counter(ledger.submitted[job_id].priority for job_id in never_ids)
    admission = _admission_wall_s(ledger, jobs)
    return {
        "gpu_hours_used": round(used, 1),
        "gpu_hours_by_pool": {p: round(s / 3600, 1) for p, s in ledger.gpu_s_by_pool.items()},
        "idle_gpu_hours": round(provisioned - used, 1),
        "cost_usd_by_pool": cost,
        "cost_usd": round(sum(cost.values()), 2),
        "cost_usd_by_basis": {name: round(sum(c.values()), 2) for name, c in by_basis.items()},
        "usd_per_used_gpu_hour": round(sum(cost.values()) / used, 2) if used else None,
        "burst_nodes_peak": ledger.burst_nodes_peak,
        "burst_nodes_at_end": ledger.burst_nodes_at_end,
        "burst_idle_wall_s_at_end": ledger.burst_idle_wall_s_at_end,
        "jobs_completed": sum(1 for j in jobs if j["status"] == "Succeeded"),
        "avg_wait_s_by_priority": _by_priority(ledger, waits, fmean),
        "max_wait_s_by_priority": _by_priority(ledger, waits, max),
        "wait_s_by_job": {ledger.submitted[j].name: round(w, 1) for j, w in waits.items()},
        # The service's own part, on the real clock: every wall second of it is
        # `time_scale` simulated seconds of the waits above, and takes longer on a loaded
        # host: the host's 1-minute load average at the day's start and end says how loaded.
        "avg_admission_wall_s_by_priority": _by_priority(ledger, admission, fmean, digits=3),
        "max_admission_wall_s_by_priority": _by_priority(ledger, admission, max, digits=3),
        "load_average": [round(v, 2) for v in ledger.load],
        "never_started_by_priority": dict(never),
        "never_started": {  # each, as the API tells it
            ledger.submitted[j].name: told(ok(twin, "GET", f"/jobs/{j}")) for j in never_ids
        },
    }


def _waits(twin: Twin, ledger: Ledger, end: datetime) -> tuple[dict[str, float], list[str]]:
    """Each job's wait in simulated seconds: from its submission to its first training step
    on the simulated cluster (the day's end for one that never stepped, listed second)."""
    first = {
        job_id: min((p.at for p in twin.cluster.timeline(job_id) if p.replicas > 0), default=None)
        for job_id in ledger.submitted
    }
    waits = {j: ((at or end) - ledger.submitted[j].sent).total_seconds() for j, at in first.items()}
    return waits, [job_id for job_id, at in first.items() if at is None]


def _admission_wall_s(ledger: Ledger, jobs: list[dict[str, Any]]) -> dict[str, float]:
    """Wall seconds from each admitted job's submission to its first admission, as the
    service recorded them."""
    admitted = {}
    for job in jobs:
        if job["job_id"] in ledger.submitted and job.get("first_admitted_at"):
            submitted = datetime.fromisoformat(job["submitted_at"])
            first = datetime.fromisoformat(job["first_admitted_at"])
            admitted[job["job_id"]] = (first - submitted).total_seconds()
    return admitted


def _by_priority(
    ledger: Ledger,
    values: dict[str, float],
    reduce: Callable[[list[float]], float],
    *,
    digits: int = 1,
) -> dict[str, float]:
    """`values` by job id, reduced per priority class."""
    grouped: dict[str, list[float]] = defaultdict(list)
    for job_id, value in values.items():
        grouped[ledger.submitted[job_id].priority].append(value)
    return {p: round(reduce(v), digits) for p, v in sorted(grouped.items())}


def _executions(twin: Twin) -> dict[str, dict[str, int]]:
    """Executions per state machine, by status."""
    sfn = twin.client("stepfunctions")
    counts: dict[str, dict[str, int]] = {}
    for machine in sfn.list_state_machines()["stateMachines"]:
        by_status: dict[str, int] = defaultdict(int)
        for execution in sfn.list_executions(stateMachineArn=machine["stateMachineArn"])[
            "executions"
        ]:
            by_status[execution["status"]] += 1
        counts[machine["name"]] = dict(by_status)
    return counts
