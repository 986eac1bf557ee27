"""Where an admitted job runs: which HyperPod instance group or EKS node pool.

Rules, in order:
0. A job recovery moved off a failed node (`prefer_burst`, its `move` strategy) goes to EKS
   burst capacity first, where its template allows it and a burst pool has room: the point
   of the move is not to wait for the HyperPod pool it failed in.
1. Capacity already paid for (committed HyperPod capacity: reserved instances, training plans)
   is used first by every template: its marginal cost is zero.
2. production → HyperPod only (its health agents, deep health checks and auto-resume are the
   point); waits when HyperPod is full.
3. development → HyperPod; when HyperPod is full, EKS on-demand.
4. research → EKS spot (cheap, interruptible work).
Among the pools a rule allows, the cheapest hourly cost for the job wins; ties go to the pool
with the most free accelerators. EKS pools match a HyperPod instance type by the EC2 name
(`ml.p5.48xlarge` ↔ `p5.48xlarge`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from hyperguard.catalogue import ec2_name


class PoolKind(StrEnum):
    HYPERPOD = "hyperpod"
    EKS_ON_DEMAND = "eks-on-demand"
    EKS_SPOT = "eks-spot"


DEFAULT_HOURLY_PRICES: Mapping[tuple[PoolKind, str], float] = {
    (PoolKind.HYPERPOD, "ml.p5.48xlarge"): 98.32,
    (PoolKind.HYPERPOD, "ml.p4d.24xlarge"): 37.69,
    (PoolKind.HYPERPOD, "ml.g5.48xlarge"): 20.36,
    (PoolKind.HYPERPOD, "ml.g5.12xlarge"): 7.09,
    (PoolKind.HYPERPOD, "ml.trn1.32xlarge"): 25.78,
    (PoolKind.EKS_ON_DEMAND, "p5.48xlarge"): 55.04,
    (PoolKind.EKS_ON_DEMAND, "p4d.24xlarge"): 21.96,
    (PoolKind.EKS_ON_DEMAND, "g5.48xlarge"): 16.29,
    (PoolKind.EKS_ON_DEMAND, "g5.12xlarge"): 5.67,
    (PoolKind.EKS_ON_DEMAND, "trn1.32xlarge"): 21.50,
    (PoolKind.EKS_SPOT, "p5.48xlarge"): 30.00,
    (PoolKind.EKS_SPOT, "p4d.24xlarge"): 9.00,
    (PoolKind.EKS_SPOT, "g5.48xlarge"): 6.50,
    (PoolKind.EKS_SPOT, "g5.12xlarge"): 2.30,
    (PoolKind.EKS_SPOT, "trn1.32xlarge"): 8.60,
}
"""Hourly USD per instance, us-east-1, rounded from the public price pages (SageMaker
HyperPod pricing for `ml.*`; EC2 On-Demand pricing for EKS; spot is a typical recent spot
price, which moves hourly). These are defaults for ranking pools, not a bill: override them
with the account's negotiated, reserved or current spot prices. Committed capacity is charged
at 0 regardless (it is paid whether used or not)."""


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
    """Per instance; None → DEFAULT_HOURLY_PRICES."""


@dataclass(frozen=True, slots=True)
class Placement:
    pool: str | None
    reason: str
    hourly_cost: float = 0.0


_ALLOWED: Mapping[str, tuple[PoolKind, ...]] = {
    "production": (PoolKind.HYPERPOD,),
    "development": (PoolKind.HYPERPOD, PoolKind.EKS_ON_DEMAND),
    "research": (PoolKind.EKS_SPOT,),
}


def allows_burst(template: str) -> bool:
    """Whether the template lets a job run on EKS burst capacity."""
    return any(kind is not PoolKind.HYPERPOD for kind in _ALLOWED.get(template, ()))


def hourly_cost(
    pool: Pool, accelerators: int, prices: Mapping[tuple[PoolKind, str], float]
) -> float:
    """Cost of the job's share of the pool's instances (accelerators / per instance)."""
    if pool.committed:
        return 0.0
    price = pool.hourly_price
    if price is None:
        price = prices.get((pool.kind, pool.instance_type), float("inf"))
    return price * accelerators / max(pool.per_instance, 1)


def place(
    *,
    template: str,
    instance_type: str,
    accelerators: int,
    pools: Sequence[Pool],
    prices: Mapping[tuple[PoolKind, str], float] = DEFAULT_HOURLY_PRICES,
    prefer_burst: bool = False,
) -> Placement:
    """Choose a pool for an admitted job needing `accelerators` of `instance_type`."""
    allowed = _ALLOWED.get(template)
    if allowed is None:
        return Placement(None, f"unknown template {template!r}")
    wanted = ec2_name(instance_type)
    fitting = [
        pool
        for pool in pools
        if ec2_name(pool.instance_type) == wanted and pool.free_accelerators >= accelerators
    ]
    if prefer_burst:
        burst = [p for p in fitting if p.kind in allowed and p.kind is not PoolKind.HYPERPOD]
        if burst:
            why = f"{template} → burst capacity first: moved off a failed node"
            return _cheapest(burst, accelerators, prices, why)
    committed = [p for p in fitting if p.committed and p.kind is PoolKind.HYPERPOD]
    if committed:
        return _cheapest(committed, accelerators, prices, "committed HyperPod capacity first")
    for kind in allowed:
        candidates = [p for p in fitting if p.kind is kind]
        if candidates:
            why = (
                f"{template} → {kind.value}"
                if kind is allowed[0]
                else f"{template} → {kind.value} because {allowed[0].value} is full"
            )
            return _cheapest(candidates, accelerators, prices, why)
    kinds = " or ".join(kind.value for kind in allowed)
    return Placement(
        None, f"waiting: no {kinds} pool of {wanted} has {accelerators} free accelerators"
    )


def _cheapest(
    pools: list[Pool],
    accelerators: int,
    prices: Mapping[tuple[PoolKind, str], float],
    why: str,
) -> Placement:
    best = min(pools, key=lambda p: (hourly_cost(p, accelerators, prices), -p.free_accelerators))
    cost = hourly_cost(best, accelerators, prices)
    return Placement(best.name, f"{why}: {best.name} at ${cost:.2f}/h", cost)
