"""Where an admitted job runs: which HyperPod instance group or EKS node pool.

Rules, in order:
0. A job recovery moved off a failed node (`prefer_burst`, its `move` strategy) goes to EKS
   burst capacity first, where its template allows it and a burst pool has room: the point
   of the move is not to wait for the HyperPod pool it failed in.
1. Capacity already paid for (the burst policy's `committedPools`: reserved instances,
   training plans, capacity blocks) is used first: its marginal cost is zero. Committed
   HyperPod capacity by every template; a committed EKS pool by every template that may
   burst at all (development, research) — production stays on HyperPod.
2. production → HyperPod only (its health agents, deep health checks and auto-resume are the
   point); waits when HyperPod is full.
3. development → HyperPod; when HyperPod is full, EKS on-demand.
4. research → EKS spot (cheap, interruptible work).
Among the pools a rule allows, the cheapest hourly cost for the job wins; ties go to the pool
with the most free accelerators. EKS pools match a HyperPod instance type by the EC2 name
(`ml.p5.48xlarge` ↔ `p5.48xlarge`).

Spend caps (`BurstBudget`, from the burst policy): an EKS pool whose cost for the job would
take the team's (or all teams') burst spend rate — the hourly cost of its jobs on EKS pools
plus this job's, x 24 — above its cap in USD per day is not a candidate. When that leaves
no pool, the job waits with the cap as its reason.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from hyperguard.catalogue import ec2_name
from hyperguard.models import Node
from hyperguard.policies.burst import (
    DEFAULT_HOURLY_PRICES,
    TEMPLATE_POOL_KINDS,
    BurstBudget,
    PoolKind,
    allows_burst,
    price_key,
)


def pool_of(node: Node) -> tuple[str, PoolKind]:
    """HyperPod instance group, or EKS NodePool split by capacity type (one Karpenter
    NodePool may hold all three). Reserved EKS capacity (ODCR, Capacity Blocks) is
    on-demand capacity by price and by what a template allows; list `<NodePool>-reserved`
    among the burst policy's committed pools when it is paid for already."""
    if node.platform == "hyperpod":
        return node.pool, PoolKind.HYPERPOD
    capacity = node.capacity_type.lower()
    if capacity == "spot":
        return f"{node.pool}-spot", PoolKind.EKS_SPOT
    if capacity == "reserved":
        return f"{node.pool}-reserved", PoolKind.EKS_ON_DEMAND
    return f"{node.pool}-on-demand", PoolKind.EKS_ON_DEMAND


@dataclass(frozen=True, slots=True)
class Pool:
    name: str
    kind: PoolKind
    instance_type: str
    free_accelerators: int
    per_instance: int
    """Accelerators of one of the pool's instances."""
    committed: bool = False
    hourly_price: float | None = None
    """Per instance; None → the prices `place` is given."""


@dataclass(frozen=True, slots=True)
class Placement:
    pool: str | None
    reason: str
    hourly_cost: float = 0.0
    """The job's share of the pool's instances at `hourly_price` (0 on committed capacity)."""
    kind: PoolKind | None = None
    hourly_price: float = 0.0
    """USD per instance-hour the placement assumed (0 on committed capacity)."""
    short: bool = False
    """No allowed pool has room (rather than a spend cap refusing): more capacity would do."""


def instance_price(pool: Pool, prices: Mapping[tuple[PoolKind, str], float]) -> float:
    """USD per instance-hour of the pool: 0 when committed; inf when no price is known."""
    if pool.committed:
        return 0.0
    if pool.hourly_price is not None:
        return pool.hourly_price
    return prices.get(price_key(pool.kind, pool.instance_type), float("inf"))


def hourly_cost(
    pool: Pool, accelerators: int, prices: Mapping[tuple[PoolKind, str], float]
) -> float:
    """Cost of the job's share of the pool's instances (accelerators / per instance)."""
    if pool.committed:
        return 0.0
    return instance_price(pool, prices) * accelerators / max(pool.per_instance, 1)


def place(
    *,
    template: str,
    instance_type: str,
    accelerators: int,
    pools: Sequence[Pool],
    prices: Mapping[tuple[PoolKind, str], float] = DEFAULT_HOURLY_PRICES,
    prefer_burst: bool = False,
    budget: BurstBudget | None = None,
) -> Placement:
    """Choose a pool for an admitted job needing `accelerators` of `instance_type`; EKS
    pools only within `budget`'s spend caps."""
    allowed = TEMPLATE_POOL_KINDS.get(template)
    if allowed is None:
        return Placement(None, f"unknown template {template!r}")
    wanted = ec2_name(instance_type)
    fitting, capped = _fitting(pools, wanted, accelerators, allowed, prices, budget)
    chosen = _choose(template, allowed, fitting, accelerators, prices, prefer_burst=prefer_burst)
    if chosen is not None:
        return chosen
    if capped:
        return Placement(None, f"waiting: {capped[0]}")
    kinds = " or ".join(kind.value for kind in allowed)
    return Placement(
        None,
        f"waiting: no {kinds} pool of {wanted} has {accelerators} free accelerators",
        short=True,
    )


def _fitting(
    pools: Sequence[Pool],
    wanted: str,
    accelerators: int,
    allowed: Sequence[PoolKind],
    prices: Mapping[tuple[PoolKind, str], float],
    budget: BurstBudget | None,
) -> tuple[list[Pool], list[str]]:
    """The pools of the instance type with room, each EKS one within the spend caps; and
    the caps' refusals of the pools the template allows."""
    fitting: list[Pool] = []
    capped: list[str] = []
    for pool in pools:
        if ec2_name(pool.instance_type) != wanted or pool.free_accelerators < accelerators:
            continue
        refusal = None
        if budget is not None and pool.kind is not PoolKind.HYPERPOD:
            refusal = budget.refusal(hourly_cost(pool, accelerators, prices), accelerators)
        if refusal is None:
            fitting.append(pool)
        elif pool.kind in allowed:
            capped.append(refusal)
    return fitting, capped


def _choose(
    template: str,
    allowed: Sequence[PoolKind],
    fitting: list[Pool],
    accelerators: int,
    prices: Mapping[tuple[PoolKind, str], float],
    *,
    prefer_burst: bool,
) -> Placement | None:
    """Burst capacity first for a job moved off a failed node, then committed capacity,
    then the template's pool kinds in order; None when none has room."""
    if prefer_burst:
        burst = [p for p in fitting if p.kind in allowed and p.kind is not PoolKind.HYPERPOD]
        if burst:
            why = (
                f"{template} → burst capacity first: moved off a failed node or handing "
                "HyperPod back"
            )
            return _cheapest(burst, accelerators, prices, why)
    committed = [
        p
        for p in fitting
        if p.committed and (p.kind is PoolKind.HYPERPOD or allows_burst(template))
    ]
    if committed:
        return _cheapest(committed, accelerators, prices, "committed capacity first")
    for kind in allowed:
        candidates = [p for p in fitting if p.kind is kind]
        if candidates:
            why = (
                f"{template} → {kind.value}"
                if kind is allowed[0]
                else f"{template} → {kind.value} because {allowed[0].value} is full"
            )
            return _cheapest(candidates, accelerators, prices, why)
    return None


def _cheapest(
    pools: list[Pool],
    accelerators: int,
    prices: Mapping[tuple[PoolKind, str], float],
    why: str,
) -> Placement:
    best = min(pools, key=lambda p: (hourly_cost(p, accelerators, prices), -p.free_accelerators))
    cost = hourly_cost(best, accelerators, prices)
    return Placement(
        best.name,
        f"{why}: {best.name} at ${cost:.2f}/h",
        cost,
        best.kind,
        instance_price(best, prices),
    )
