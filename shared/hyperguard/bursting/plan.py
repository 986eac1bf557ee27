"""The burst's side of burst capacity, pure: which of a burst's jobs it buys nodes for,
which capacity to try in which order, and whether the nodes came.

A burst is one BurstCapacity execution for one job template and one instance type: the jobs
that only installed capacity holds back (their team's quota would take them). It tries,
cheapest first: the HyperPod instance groups the burst policy lets grow
(`capacity.hyperpodGroups`, BatchAddClusterNodes, for templates that run on HyperPod), then
the EKS capacity types it orders (`capacity.capacityOrder`), each only if the template
allows it (development: reserved or on-demand; research: spot; production: HyperPod only),
has a price, and keeps every team's and the global burst spend rate within the caps. One
option is one attempt: all the burst's nodes (an all-or-nothing gang) come, or the
attempt's nodes are given back and the next option is tried; when none is left the burst
rolls back and the jobs stay pending with the reasons.

The request, the burst id, the rollback note and scale-in are the scheduler's, in
`hyperguard.bursting.requests`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Self

from pydantic import Field, model_validator

from hyperguard.bursting.requests import BurstJob, BurstRequest
from hyperguard.catalogue import ml_name
from hyperguard.models.camel import CamelModel
from hyperguard.models.cluster import ADD_LIMIT, HYPERPOD_CAPACITY, BurstClaim, InstanceGroupSize
from hyperguard.models.nodes import CapacityType
from hyperguard.policies.burst import BurstPolicy, allows_hyperpod

TEMPLATE_CAPACITY: Mapping[str, tuple[CapacityType, ...]] = {
    "development": (CapacityType.RESERVED, CapacityType.ON_DEMAND),
    "research": (CapacityType.SPOT,),
}
"""Capacity types each template may burst onto (the placement rules' EKS pools)."""


class CapacityOption(CamelModel):
    capacity_type: CapacityType | None = Field(
        default=None, description="the Karpenter capacity type; None: a HyperPod group grows"
    )
    instance_group: str | None = Field(
        default=None, description="the HyperPod instance group BatchAddClusterNodes grows"
    )
    pool: str = Field(
        description="`<NodePool>-<capacity type>` or the instance group, as placement names it"
    )
    usd_per_node_hour: float = 0.0
    usd_per_hour: float = Field(default=0.0, description="the burst's nodes together")

    @model_validator(mode="after")
    def _one_source(self) -> Self:
        if (self.capacity_type is None) == (self.instance_group is None):
            raise ValueError("an option is either a capacity type or an instance group")
        return self

    @property
    def label(self) -> str:
        """`hyperpod`, or the capacity type: what events, metrics and reasons call it."""
        return self.capacity_type.value if self.capacity_type else HYPERPOD_CAPACITY


class BurstPlan(CamelModel):
    jobs: list[BurstJob]
    nodes: int
    options: list[CapacityOption]
    refused: list[str] = Field(default_factory=list, description="why capacity was left out")


def plan_burst(
    request: BurstRequest,
    policy: BurstPolicy,
    *,
    claims_elsewhere: int,
    spend_usd_per_hour: Mapping[str, float],
    hyperpod_groups: Sequence[InstanceGroupSize] = (),
    nodepool_room: tuple[int | None, str | None] = (None, None),
) -> BurstPlan:
    """The jobs this burst raises nodes for (in order, while burst nodes stay within
    `maxNodes` counting the `claims_elsewhere` other bursts hold) and the options to try, in
    order, each within the spend caps given every team's burst spend now: the HyperPod
    groups the policy lets grow (`hyperpod_groups`: the cluster's, when it adds nodes on
    request), then the EKS capacity types, each only while the NodePool's limits leave room
    for the burst's nodes (`nodepool_room`: more nodes of the type they allow, None for no
    limit, and the limit that binds)."""
    capacity = policy.capacity
    room = capacity.max_nodes - claims_elsewhere
    refused: list[str] = []
    jobs: list[BurstJob] = []
    for job in request.jobs:
        if sum(j.nodes for j in jobs) + job.nodes > room:
            refused.append(
                f"job {job.job_id}: {job.nodes} more node(s) would exceed maxNodes "
                f"{capacity.max_nodes} ({claims_elsewhere} held by other bursts)"
            )
            continue
        jobs.append(job)
    nodes = sum(job.nodes for job in jobs)
    options: list[CapacityOption] = []
    if jobs and allows_hyperpod(request.template):
        options += _group_options(
            request, policy, jobs, nodes, hyperpod_groups, spend_usd_per_hour, refused
        )
    allowed = TEMPLATE_CAPACITY.get(request.template, ())
    pool_room, limit = nodepool_room
    if jobs and allowed and pool_room is not None and nodes > pool_room:
        refused.append(
            f"NodePool {capacity.node_pool}: its limits leave room for {pool_room} more "
            f"{request.instance_type} node(s), the burst needs {nodes} ({limit})"
        )
        allowed = ()
    for kind in capacity.capacity_order:
        if not jobs:
            break
        if kind not in allowed:
            continue
        option = _priced(
            CapacityOption(capacity_type=kind, pool=f"{capacity.node_pool}-{kind.value}"),
            policy.node_price(kind, request.instance_type),
            refused,
            purchase=(policy, request, jobs, nodes, spend_usd_per_hour),
        )
        if option is not None:
            options.append(option)
    if jobs and request.template not in TEMPLATE_CAPACITY and not options:
        refused.append(f"template {request.template} never bursts onto EKS")
    return BurstPlan(jobs=jobs, nodes=nodes, options=options, refused=refused)


def _group_options(
    request: BurstRequest,
    policy: BurstPolicy,
    jobs: Sequence[BurstJob],
    nodes: int,
    groups: Sequence[InstanceGroupSize],
    spend: Mapping[str, float],
    refused: list[str],
) -> list[CapacityOption]:
    """The HyperPod groups of the request's instance type the policy lets grow by `nodes`."""
    found = {g.name: g for g in groups}
    options: list[CapacityOption] = []
    for growth in policy.capacity.hyperpod_groups:
        name = growth.instance_group_name
        group = found.get(name)
        if group is None:
            refused.append(f"hyperpod {name}: not an instance group the cluster can grow")
            continue
        if ml_name(group.instance_type) != ml_name(request.instance_type):
            continue
        if group.autoscaled:
            refused.append(
                f"hyperpod {name}: HyperPod's managed autoscaling (Karpenter) is on, and it "
                "scales back nodes added to its groups by hand"
            )
            continue
        if nodes > ADD_LIMIT:
            refused.append(f"hyperpod {name}: {nodes} nodes, more than {ADD_LIMIT} at once")
            continue
        if group.target_count + nodes > growth.max_count:
            refused.append(
                f"hyperpod {name}: {nodes} more node(s) would exceed maxCount "
                f"{growth.max_count} (target {group.target_count})"
            )
            continue
        option = _priced(
            CapacityOption(instance_group=name, pool=name),
            policy.group_node_price(name, group.instance_type),
            refused,
            purchase=(policy, request, jobs, nodes, spend),
        )
        if option is not None:
            options.append(option)
    return options


_Purchase = tuple[BurstPolicy, BurstRequest, Sequence[BurstJob], int, Mapping[str, float]]
"""What an option would buy: the policy, the request, the plan's jobs and nodes, and every
team's burst spend now."""


def _priced(
    option: CapacityOption, price: float | None, refused: list[str], *, purchase: _Purchase
) -> CapacityOption | None:
    """The option at its price per node, if it has one and the caps allow it; else None,
    with why in `refused`."""
    policy, request, jobs, nodes, spend = purchase
    where = f"hyperpod {option.instance_group}" if option.instance_group else option.label
    if price is None:
        refused.append(f"{where}: no price for {request.instance_type}")
        return None
    refusal = _cap_refusal(policy, request, jobs, price, spend)
    if refusal is not None:
        refused.append(f"{where}: {refusal}")
        return None
    return option.model_copy(
        update={"usd_per_node_hour": price, "usd_per_hour": round(price * nodes, 6)}
    )


def _cap_refusal(
    policy: BurstPolicy,
    request: BurstRequest,
    jobs: Sequence[BurstJob],
    price: float,
    spend: Mapping[str, float],
) -> str | None:
    """Why buying the jobs' nodes at `price` would break a spend or GPU-hour cap."""
    cost: dict[str, float] = defaultdict(float)
    gpus: dict[str, float] = defaultdict(float)
    for job in jobs:
        cost[job.team] += price * job.nodes
        gpus[job.team] += request.accelerators_per_node * job.nodes
    for team in sorted(cost):
        refusal = policy.budget(team, spend, request.burst_gpus).refusal(cost[team], gpus[team])
        if refusal is not None:
            return refusal
    return policy.budget("", spend, request.burst_gpus).refusal(
        sum(cost.values()), sum(gpus.values())
    )


def assess(
    claims: Sequence[BurstClaim],
    nodes: int,
    *,
    waited_s: float,
    timeout_s: float,
) -> tuple[str, str | None]:
    """Where one attempt stands: `ready` (every node Ready), `failed` (Karpenter could not
    launch one, or removed one), `timeout`, or `waiting`; and why, when it did not work."""
    failures = [c for c in claims if c.failure]
    if failures:
        return "failed", f"NodeClaim {failures[0].name}: {failures[0].failure}"
    alive = [c for c in claims if not c.deleting]
    if len(alive) < nodes:
        if claims and claims[0].platform == "hyperpod":
            return "failed", f"{nodes - len(alive)} of {nodes} added HyperPod node(s) deleted"
        return "failed", (
            f"{nodes - len(alive)} of {nodes} NodeClaim(s) removed by Karpenter (it deletes a "
            "claim EC2 has no capacity for, or whose node never registered)"
        )
    if sum(1 for c in alive if c.ready) >= nodes:
        return "ready", None
    if waited_s >= timeout_s:
        ready = sum(1 for c in alive if c.ready)
        return "timeout", f"{ready} of {nodes} node(s) Ready after {waited_s:.0f} s"
    return "waiting", None
