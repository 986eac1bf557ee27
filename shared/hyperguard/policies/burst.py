"""The burst policy: what capacity costs, which capacity is already paid for, and how much
burst (EKS) capacity each team may spend per day.

Prices and the committed pools are data, not constants: placement
(`hyperguard.governance.placement`) ranks pools by them, and every placement records the
price it assumed. Stored in DynamoDB (TeamsTable, pk `POLICY`, sk `BURST`); these defaults
apply until one is stored (`PUT /policies/burst`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Self

from pydantic import (
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StringConstraints,
    field_validator,
    model_validator,
)

from hyperguard.catalogue import INSTANCE_TYPE_PATTERN, ec2_name, ml_name
from hyperguard.models.camel import CamelModel
from hyperguard.models.governance import TEAM_NAME_PATTERN
from hyperguard.models.nodes import BURST_LABEL, CapacityType, Node
from hyperguard.policies.prices import DEFAULT_REGION, PurchaseOption, in_region


class WhenCanPreempt(StrEnum):
    """What a job that may burst does when it could preempt lower-priority work of its team
    (PreemptTeamTasks LowerPriority) to start now (D121, after Kueue's
    `flavorFungibility.whenCanPreempt`)."""

    PREEMPT = "Preempt"
    """Preempt at once, as without bursting; a burst is asked for so that the job moves to
    burst capacity at its next checkpoint and the work it stopped resumes on HyperPod."""
    TRY_NEXT_FLAVOR = "TryNextFlavor"
    """Preempt nothing and wait for a burst (D52)."""


class PoolKind(StrEnum):
    HYPERPOD = "hyperpod"
    EKS_ON_DEMAND = "eks-on-demand"
    EKS_SPOT = "eks-spot"


_POOL_OPTIONS = {
    PoolKind.HYPERPOD: PurchaseOption.HYPERPOD_ON_DEMAND,
    PoolKind.EKS_ON_DEMAND: PurchaseOption.EC2_ON_DEMAND,
    PoolKind.EKS_SPOT: PurchaseOption.EC2_SPOT,
}
"""The purchase option each pool kind's price is (hyperguard.policies.prices)."""


TEMPLATE_POOL_KINDS: Mapping[str, tuple[PoolKind, ...]] = {
    "production": (PoolKind.HYPERPOD,),
    "development": (PoolKind.HYPERPOD, PoolKind.EKS_ON_DEMAND),
    "research": (PoolKind.EKS_SPOT,),
}
"""The pools a job of each template may run on."""


_BURSTABLE = frozenset(
    template
    for template, kinds in TEMPLATE_POOL_KINDS.items()
    if any(kind is not PoolKind.HYPERPOD for kind in kinds)
)


def allows_burst(template: str) -> bool:
    """Whether the template lets a job run on EKS burst capacity (asked of every job a pass
    holds: a set lookup)."""
    return template in _BURSTABLE


def burst_kinds(template: str) -> tuple[PoolKind, ...]:
    """The EKS pool kinds the template lets a job run on."""
    kinds = TEMPLATE_POOL_KINDS.get(template, ())
    return tuple(kind for kind in kinds if kind is not PoolKind.HYPERPOD)


def allows_hyperpod(template: str) -> bool:
    """Whether the template lets a job run on HyperPod."""
    return PoolKind.HYPERPOD in TEMPLATE_POOL_KINDS.get(template, ())


def default_hourly_prices(region: str = DEFAULT_REGION) -> dict[tuple[PoolKind, str], float]:
    """USD per instance-hour by (pool kind, instance type) in `region`, as
    hyperguard.policies.prices has them (with their sources)."""
    options = {option: kind for kind, option in _POOL_OPTIONS.items()}
    return {
        (options[p.option], p.instance_type): p.usd_per_hour
        for p in in_region(region)
        if p.option in options
    }


DEFAULT_HOURLY_PRICES: Mapping[tuple[PoolKind, str], float] = default_hourly_prices()
"""The burst policy's default `prices`: us-east-1's."""

PRICE_SOURCE = (
    "Hourly USD per instance, us-east-1, from copies of AWS's price lists read on 2026-11-26 "
    "(hyperguard.policies.prices names each source): EC2 On-Demand for EKS on-demand, the "
    "median of the Availability Zones' spot prices for EKS spot (spot moves hourly). No "
    "published HyperPod price was found: the HyperPod figures are the project's assumption. "
    "These are defaults for ranking pools, not a bill: store the account's negotiated, "
    "committed or current spot prices instead. Committed capacity is charged at 0 here: it "
    "is paid whether used or not, so using it costs nothing more."
)


def price_key(kind: PoolKind, instance_type: str) -> tuple[PoolKind, str]:
    """How prices are looked up: HyperPod by its `ml.` name, EKS by the EC2 name."""
    name = ml_name(instance_type) if kind is PoolKind.HYPERPOD else ec2_name(instance_type)
    return kind, name


@dataclass(frozen=True, slots=True)
class BurstBudget:
    """What a team may still use of burst capacity: its jobs' and all teams' jobs' current
    hourly cost and GPUs on burst capacity, and the caps, in USD and in GPU-hours per day
    (None: no cap). Both are rates: what runs now, and what is added, for 24 hours."""

    team: str
    team_usd_per_hour: float = 0.0
    total_usd_per_hour: float = 0.0
    team_cap_usd_per_day: float | None = None
    global_cap_usd_per_day: float | None = None
    team_gpus: float = 0.0
    total_gpus: float = 0.0
    team_cap_gpu_hours_per_day: float | None = None
    global_cap_gpu_hours_per_day: float | None = None

    def refusal(self, cost: float, gpus: float = 0.0) -> str | None:
        """Why adding `cost` USD/h and `gpus` GPUs of burst would break a cap; None when it
        would not."""
        team = f"team {self.team}'s"
        caps = (
            (_USD_CAP, team, cost, self.team_usd_per_hour, self.team_cap_usd_per_day),
            (_USD_CAP, "the global", cost, self.total_usd_per_hour, self.global_cap_usd_per_day),
            (_GPU_CAP, team, gpus, self.team_gpus, self.team_cap_gpu_hours_per_day),
            (_GPU_CAP, "the global", gpus, self.total_gpus, self.global_cap_gpu_hours_per_day),
        )
        for why, whose, added, running, cap in caps:
            daily = (running + added) * 24
            if added > 0 and cap is not None and daily > cap + 1e-9:
                return why.format(whose=whose, cap=cap, running=running, added=added, daily=daily)
        return None


_USD_CAP = (
    "{whose} burst spend cap of ${cap:.2f}/day would be exceeded: ${running:.2f}/h running + "
    "${added:.2f}/h for this job = ${daily:.2f}/day"
)
_GPU_CAP = (
    "{whose} burst cap of {cap:.0f} GPU-hours/day would be exceeded: {running:.0f} GPUs "
    "running + {added:.0f} for this job = {daily:.0f} GPU-hours/day"
)


POOL_NAME = r"^[A-Za-z0-9][-A-Za-z0-9_.]{0,62}$"
INSTANCE_GROUP_NAME = r"^[a-zA-Z0-9](-*[a-zA-Z0-9])*$"
MAX_USD_PER_DAY = 10_000_000.0
MAX_GPU_HOURS_PER_DAY = 10_000_000.0
MAX_BURST_AFTER_S = 7 * 86400
MAX_PRIORITY_CLASSES = 10
"""The scheduler config's limit on priority classes."""
PriorityClassName = Annotated[str, StringConstraints(pattern=TEAM_NAME_PATTERN, max_length=63)]
MAX_HOURLY_USD = 10_000.0


class PoolPrice(CamelModel):
    pool_kind: PoolKind
    instance_type: str = Field(
        pattern=INSTANCE_TYPE_PATTERN,
        max_length=50,
        description="ml.* (HyperPod) or the EC2 name (EKS); either spelling is matched",
    )
    hourly_usd: StrictFloat = Field(ge=0, le=MAX_HOURLY_USD, description="USD per instance-hour")


TeamName = Annotated[str, StringConstraints(pattern=TEAM_NAME_PATTERN, max_length=63)]


class SpendCaps(CamelModel):
    global_usd_per_day: StrictFloat | None = Field(
        default=None,
        ge=0,
        le=MAX_USD_PER_DAY,
        description="cap on all teams' burst spend rate together; null: none",
    )
    teams: dict[TeamName, Annotated[StrictFloat, Field(ge=0, le=MAX_USD_PER_DAY)]] = Field(
        default_factory=dict,
        max_length=500,
        description="team → cap on its burst spend rate, USD per day; a team not named has none",
    )
    global_gpu_hours_per_day: StrictFloat | None = Field(
        default=None,
        ge=0,
        le=MAX_GPU_HOURS_PER_DAY,
        description="cap on all teams' burst GPUs together, as GPU-hours per day (GPUs on "
        "burst capacity x 24); null: none",
    )
    team_gpu_hours_per_day: dict[
        TeamName, Annotated[StrictFloat, Field(ge=0, le=MAX_GPU_HOURS_PER_DAY)]
    ] = Field(
        default_factory=dict,
        max_length=500,
        description="team → cap on its burst GPUs, GPU-hours per day; a team not named has none",
    )


class GroupGrowth(CamelModel):
    """A HyperPod instance group bursts may grow with BatchAddClusterNodes."""

    instance_group_name: str = Field(pattern=INSTANCE_GROUP_NAME, max_length=63)
    max_count: StrictInt = Field(
        ge=1,
        le=10000,
        description="the most nodes the group may have (TargetCount) once a burst has grown it",
    )


class BurstCapacity(CamelModel):
    """How the BurstCapacity workflow raises EKS capacity through Karpenter, and when the
    scheduler gives it back. The durations are what the workflow and the scheduler wait for;
    the defaults suit GPU nodes, which take minutes to launch and register."""

    node_pool: str = Field(
        default="gpu-burst",
        pattern=POOL_NAME,
        description="the Karpenter NodePool HyperGuard's NodeClaims belong to (its "
        "disruption budgets and the node's labels come from it)",
    )
    node_class: str = Field(
        default="default",
        pattern=POOL_NAME,
        description="the EC2NodeClass the NodeClaims launch with; for `reserved` it must "
        "select the capacity reservations (capacityReservationSelectorTerms)",
    )
    hyperpod_groups: list[GroupGrowth] = Field(
        default_factory=list,
        max_length=20,
        description="HyperPod instance groups a burst grows before it buys any EKS capacity "
        "(BatchAddClusterNodes; the cluster's NodeProvisioningMode must be Continuous), in "
        "this order, for production and development jobs of the group's instance type. None "
        "by default: a group grows only when named here",
    )
    capacity_order: list[CapacityType] = Field(
        default_factory=lambda: [CapacityType.ON_DEMAND, CapacityType.SPOT],
        min_length=1,
        max_length=3,
        description="capacity types in the order a burst tries them (each within what the "
        "job's template allows: development on-demand or reserved, research spot). Put "
        "`reserved` first when the node class selects ODCRs or Capacity Blocks",
    )
    burst_after_s: dict[
        PriorityClassName, Annotated[StrictInt, Field(ge=0, le=MAX_BURST_AFTER_S)]
    ] = Field(
        default_factory=dict,
        max_length=MAX_PRIORITY_CLASSES,
        description="priority class → how long (seconds) its jobs wait for HyperPod capacity "
        "before a burst is asked for them: a job admissible by quota but not placeable "
        "bursts once it has waited this long since it last began waiting (submitted, "
        "preempted, requeued). A class not named here, and a job without a class, bursts at "
        "once (0)",
    )
    max_nodes: StrictInt = Field(
        default=0,
        ge=0,
        le=1000,
        description="burst nodes alive at once, launching or running: HyperGuard's NodeClaims "
        "and the HyperPod nodes bursts added. 0 (the default: bursting spends money, so it "
        "is asked for) turns bursting off; idle burst nodes are still released. Enforced "
        "before a node is asked for (Karpenter's NodePool limits are only checked eventually "
        "and a fast scale-out can overrun them)",
    )
    poll_interval_s: StrictInt = Field(
        default=30, ge=1, le=600, description="between two looks at the NodeClaims"
    )
    launch_timeout_s: StrictInt = Field(
        default=900,
        ge=5,
        le=3600,
        description="how long one capacity type may take to bring every node of a burst to "
        "Ready before the next type is tried (Karpenter removes a node that has not "
        "registered in 15 minutes)",
    )
    scale_in_after_s: StrictInt = Field(
        default=600,
        ge=0,
        le=86400,
        description="cooldown: a burst node idle this long is released",
    )
    move_back: StrictBool = Field(
        default=False,
        description="move a development job on burst capacity back to HyperPod when a "
        "HyperPod node of its type is free and nobody waits for it: at a pass at most 90 s "
        "after the job completes a checkpoint, it is stopped and resumes from that "
        "checkpoint on HyperPod (work since the checkpoint, at most 90 s, is redone)",
    )
    when_can_preempt: WhenCanPreempt = Field(
        default=WhenCanPreempt.PREEMPT,
        description="what a job whose template may burst (development, research) does when "
        "it could start by preempting lower-priority jobs of its own team (PreemptTeamTasks "
        "LowerPriority): `Preempt` (the default) preempts them at once, as without bursting, "
        "and asks for burst capacity for the work it stopped that only HyperPod runs; when "
        "that capacity is Ready, the job moves there at its next checkpoint and the stopped "
        "work resumes on HyperPod. `TryNextFlavor` preempts nothing: the job waits for a "
        "burst (cheaper for the team's lower-priority work, slower for the urgent job)",
    )
    retry_after_s: StrictInt = Field(
        default=600,
        ge=5,
        le=86400,
        description="bursts for the same jobs are tried at most once per window of this "
        "length (windows aligned to the clock): after a rollback, the next try comes when the "
        "window turns, up to this long after",
    )

    @field_validator("capacity_order")
    @classmethod
    def _each_once(cls, value: list[CapacityType]) -> list[CapacityType]:
        if len(set(value)) != len(value):
            raise ValueError("capacityOrder names a capacity type twice")
        return value

    @field_validator("hyperpod_groups")
    @classmethod
    def _groups_once(cls, value: list[GroupGrowth]) -> list[GroupGrowth]:
        names = [g.instance_group_name for g in value]
        if len(set(names)) != len(names):
            raise ValueError("hyperpodGroups names an instance group twice")
        return value


def default_prices() -> list[PoolPrice]:
    return [
        PoolPrice(pool_kind=kind, instance_type=itype, hourly_usd=usd)
        for (kind, itype), usd in DEFAULT_HOURLY_PRICES.items()
    ]


class BurstPolicy(CamelModel):
    prices: list[PoolPrice] = Field(
        default_factory=default_prices,
        max_length=200,
        description=f"{PRICE_SOURCE} An instance type without a price here is never chosen "
        "over one with a price.",
    )
    committed_pools: list[Annotated[str, StringConstraints(pattern=POOL_NAME)]] = Field(
        default_factory=list,
        max_length=100,
        description="HyperPod instance groups or EKS pools (`<NodePool>-on-demand`, "
        "`<NodePool>-spot`, `<NodePool>-reserved`) whose capacity is already paid for: "
        "reserved instances, training plans, capacity blocks. Placement uses them first "
        "(rule 1) and bursts price them at 0",
    )
    spend_caps: SpendCaps = Field(
        default_factory=SpendCaps,
        description="caps on burst use, in USD or GPU-hours per day, as rates: the hourly "
        "cost (or the GPUs) of a team's jobs on EKS pools plus a new job's, x 24, may not "
        "exceed its cap (nor all teams' the global cap); a placement or a burst that would "
        "is refused and the job stays pending",
    )

    capacity: BurstCapacity = Field(
        default_factory=BurstCapacity,
        description="how bursts raise EKS capacity through Karpenter and release it",
    )

    @model_validator(mode="after")
    def _one_price_each(self) -> Self:
        seen: set[tuple[PoolKind, str]] = set()
        for entry in self.prices:
            key = price_key(entry.pool_kind, entry.instance_type)
            if key in seen:
                raise ValueError(
                    f"prices: {entry.pool_kind.value} {entry.instance_type} is priced twice"
                )
            seen.add(key)
        return self

    def seen_by_team(self, team: str | None) -> BurstPolicy:
        """The policy as a team's member may read it: the other teams' caps left out (what
        another team may spend is theirs to know)."""
        caps = self.spend_caps
        mine = caps.model_copy(
            update={
                "teams": {t: c for t, c in caps.teams.items() if t == team},
                "team_gpu_hours_per_day": {
                    t: c for t, c in caps.team_gpu_hours_per_day.items() if t == team
                },
            }
        )
        return self.model_copy(update={"spend_caps": mine})

    def price_table(self) -> Mapping[tuple[PoolKind, str], float]:
        """USD per instance-hour by (pool kind, instance type) as placement looks it up."""
        return {price_key(p.pool_kind, p.instance_type): p.hourly_usd for p in self.prices}

    def job_usd_per_hour(
        self, kind: PoolKind, pool: str, instance_type: str, gpus: float, per_instance: int
    ) -> float:
        """A job's share of its pool's instances at these prices (0 on committed capacity,
        and where no price is known)."""
        if pool in self.committed_pools:
            return 0.0
        price = self.price_table().get(price_key(kind, instance_type), 0.0)
        return price * gpus / max(per_instance, 1)

    def held_on_burst(
        self,
        kind: str | PoolKind | None,
        pool: str | None,
        instance_type: str,
        nodes: Sequence[str],
        gpus: float,
        per_instance: int,
        added: Callable[[str], bool],
    ) -> tuple[float, float]:
        """USD per hour at these prices, and GPUs, of the burst capacity a job holds with
        `gpus` on `nodes` of `pool` (see burst_share); (0, 0) when it holds none."""
        share = burst_share(kind, nodes, gpus, added)
        if share is None or pool is None:
            return 0.0, 0.0
        burst_kind, on_burst = share
        usd = self.job_usd_per_hour(burst_kind, pool, instance_type, on_burst, per_instance)
        return usd, on_burst

    def node_price(self, capacity: CapacityType, instance_type: str) -> float | None:
        """USD per instance-hour of a burst node (0 when its pool is committed; None when
        no price is known, and such capacity is never bought)."""
        if f"{self.capacity.node_pool}-{capacity.value}" in self.committed_pools:
            return 0.0
        kind = PoolKind.EKS_SPOT if capacity is CapacityType.SPOT else PoolKind.EKS_ON_DEMAND
        return self.price_table().get(price_key(kind, instance_type))

    def group_node_price(self, group: str, instance_type: str) -> float | None:
        """USD per instance-hour of a node a burst adds to a HyperPod instance group (0 when
        the group is committed; None when no price is known)."""
        if group in self.committed_pools:
            return 0.0
        return self.price_table().get(price_key(PoolKind.HYPERPOD, instance_type))

    def budget(
        self,
        team: str,
        burst_usd_per_hour: Mapping[str, float],
        burst_gpus: Mapping[str, float] | None = None,
    ) -> BurstBudget:
        """What `team` may still use of burst capacity, given every team's burst spend and
        GPUs now."""
        gpus = burst_gpus or {}
        caps = self.spend_caps
        return BurstBudget(
            team=team,
            team_usd_per_hour=burst_usd_per_hour.get(team, 0.0),
            total_usd_per_hour=sum(burst_usd_per_hour.values()),
            team_cap_usd_per_day=caps.teams.get(team),
            global_cap_usd_per_day=caps.global_usd_per_day,
            team_gpus=gpus.get(team, 0.0),
            total_gpus=sum(gpus.values()),
            team_cap_gpu_hours_per_day=caps.team_gpu_hours_per_day.get(team),
            global_cap_gpu_hours_per_day=caps.global_gpu_hours_per_day,
        )


def is_burst(kind: str | PoolKind | None) -> bool:
    return kind in (PoolKind.EKS_ON_DEMAND, PoolKind.EKS_SPOT)


def added_by_burst(node: Node | None) -> bool:
    """A HyperPod node a burst added: its Kubernetes Node carries the burst's label."""
    return node is not None and node.platform == "hyperpod" and BURST_LABEL in node.labels


def burst_share(
    kind: str | PoolKind | None, nodes: Sequence[str], gpus: float, added: Callable[[str], bool]
) -> tuple[PoolKind, float] | None:
    """The pool kind and the GPUs of a job's `gpus` that are burst capacity: all of them on
    an EKS pool; on HyperPod, the share on nodes a burst added (`added`), which stays burst
    capacity, counted by the caps, until scale-in gives the node back. None: no burst."""
    if is_burst(kind):
        return PoolKind(str(kind)), gpus
    on_added = sum(1 for instance_id in nodes if added(instance_id))
    if not on_added:
        return None
    return PoolKind.HYPERPOD, gpus * on_added / len(nodes)
