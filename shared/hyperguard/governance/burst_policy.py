"""The burst policy: what capacity costs, which capacity is already paid for, and how much
burst (EKS) capacity each team may spend per day.

Prices and the committed pools are data, not constants: placement ranks pools by them, and
every placement records the price it assumed. Stored in DynamoDB (TeamsTable, pk `POLICY`,
sk `BURST`); these defaults apply until one is stored (`PUT /policies/burst`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Self

from pydantic import Field, StringConstraints, field_validator, model_validator

from hyperguard.governance.placement import (
    DEFAULT_HOURLY_PRICES,
    PRICE_SOURCE,
    BurstBudget,
    PoolKind,
    price_key,
)
from hyperguard.models.camel import CamelModel
from hyperguard.models.governance import TEAM_NAME_PATTERN

POOL_NAME = r"^[A-Za-z0-9][-A-Za-z0-9_.]{0,62}$"
INSTANCE_TYPE = r"^(ml\.)?[a-z0-9-]{1,24}\.[a-z0-9-]{1,24}$"
MAX_USD_PER_DAY = 10_000_000.0
MAX_HOURLY_USD = 10_000.0


class PoolPrice(CamelModel):
    pool_kind: PoolKind
    instance_type: str = Field(
        pattern=INSTANCE_TYPE,
        max_length=50,
        description="ml.* (HyperPod) or the EC2 name (EKS); either spelling is matched",
    )
    hourly_usd: float = Field(ge=0, le=MAX_HOURLY_USD, description="USD per instance-hour")


class SpendCaps(CamelModel):
    global_usd_per_day: float | None = Field(
        default=None,
        ge=0,
        le=MAX_USD_PER_DAY,
        description="cap on all teams' burst spend rate together; null: none",
    )
    teams: dict[
        Annotated[str, StringConstraints(pattern=TEAM_NAME_PATTERN, max_length=63)], float
    ] = Field(
        default_factory=dict,
        max_length=500,
        description="team → cap on its burst spend rate, USD per day; a team not named has none",
    )

    @field_validator("teams")
    @classmethod
    def _caps_in_range(cls, value: dict[str, float]) -> dict[str, float]:
        for team, cap in value.items():
            if not 0 <= cap <= MAX_USD_PER_DAY:
                raise ValueError(f"teams[{team}] must be 0..{MAX_USD_PER_DAY:.0f} USD per day")
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
        "`<NodePool>-spot`) whose capacity is already paid for: reserved instances, training "
        "plans, capacity blocks. Placement uses them first (rule 1) at a cost of 0",
    )
    spend_caps: SpendCaps = Field(
        default_factory=SpendCaps,
        description="caps on the burst spend rate: the hourly cost of a team's jobs on EKS "
        "pools plus a new job's, x 24, may not exceed its cap (nor all teams' the global "
        "cap); a placement that would is refused and the job stays pending",
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

    def price_table(self) -> Mapping[tuple[PoolKind, str], float]:
        """USD per instance-hour by (pool kind, instance type) as placement looks it up."""
        return {price_key(p.pool_kind, p.instance_type): p.hourly_usd for p in self.prices}

    def job_usd_per_hour(
        self, kind: PoolKind, pool: str, instance_type: str, gpus: int, per_instance: int
    ) -> float:
        """A job's share of its pool's instances at these prices (0 on committed capacity,
        and where no price is known)."""
        if pool in self.committed_pools:
            return 0.0
        price = self.price_table().get(price_key(kind, instance_type), 0.0)
        return price * gpus / max(per_instance, 1)

    def budget(self, team: str, burst_usd_per_hour: Mapping[str, float]) -> BurstBudget:
        """What `team` may still spend on burst, given every team's burst spend now."""
        return BurstBudget(
            team=team,
            team_usd_per_hour=burst_usd_per_hour.get(team, 0.0),
            total_usd_per_hour=sum(burst_usd_per_hour.values()),
            team_cap_usd_per_day=self.spend_caps.teams.get(team),
            global_cap_usd_per_day=self.spend_caps.global_usd_per_day,
        )


def is_burst(kind: str | PoolKind | None) -> bool:
    return kind in (PoolKind.EKS_ON_DEMAND, PoolKind.EKS_SPOT)
