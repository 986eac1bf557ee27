"""Placement of admitted jobs onto HyperPod and EKS pools."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from hyperguard.governance.placement import Placement, Pool, place
from hyperguard.policies.burst import (
    DEFAULT_HOURLY_PRICES,
    BurstPolicy,
    PoolKind,
    PoolPrice,
    SpendCaps,
)

HP_COMMITTED = Pool("hp-reserved", PoolKind.HYPERPOD, "ml.p5.48xlarge", 16, 8, committed=True)
HP = Pool("hp-ondemand", PoolKind.HYPERPOD, "ml.p5.48xlarge", 16, 8)
OD = Pool("eks-od", PoolKind.EKS_ON_DEMAND, "p5.48xlarge", 64, 8)
OD_CHEAP = Pool("eks-od-cheap", PoolKind.EKS_ON_DEMAND, "p5.48xlarge", 8, 8, hourly_price=40.0)
SPOT = Pool("eks-spot", PoolKind.EKS_SPOT, "p5.48xlarge", 64, 8)
FULL_HP = Pool("hp-full", PoolKind.HYPERPOD, "ml.p5.48xlarge", 0, 8)


@pytest.mark.parametrize(
    ("template", "pools", "expected"),
    [
        ("production", [HP, HP_COMMITTED, OD, SPOT], "hp-reserved"),
        ("production", [HP, OD, SPOT], "hp-ondemand"),
        ("production", [FULL_HP, OD, SPOT], None),
        ("development", [HP, OD], "hp-ondemand"),
        ("development", [FULL_HP, OD, OD_CHEAP], "eks-od-cheap"),
        ("development", [FULL_HP, SPOT], None),
        ("research", [HP, OD, SPOT], "eks-spot"),
        ("research", [HP_COMMITTED, SPOT], "hp-reserved"),
        ("research", [HP, OD], None),
        ("unknown", [HP, OD, SPOT], None),
    ],
)
def test_template_routing(template: str, pools: list[Pool], expected: str | None) -> None:
    placement = place(
        template=template, instance_type="ml.p5.48xlarge", accelerators=8, pools=pools
    )
    assert placement.pool == expected
    assert placement.reason


def test_committed_capacity_costs_nothing_and_others_cost_their_share() -> None:
    placement = place(
        template="production", instance_type="ml.p5.48xlarge", accelerators=8, pools=[HP_COMMITTED]
    )
    assert placement.hourly_cost == 0.0
    placement = place(
        template="research", instance_type="ml.p5.48xlarge", accelerators=4, pools=[SPOT]
    )
    assert placement.hourly_cost == pytest.approx(
        DEFAULT_HOURLY_PRICES[(PoolKind.EKS_SPOT, "p5.48xlarge")] / 2
    )


def test_pool_too_small_is_skipped() -> None:
    small = Pool("hp-small", PoolKind.HYPERPOD, "ml.p5.48xlarge", 4, 8)
    placement = place(
        template="development", instance_type="ml.p5.48xlarge", accelerators=8, pools=[small, OD]
    )
    assert placement.pool == "eks-od"
    assert "full" in placement.reason


@pytest.mark.parametrize(
    ("template", "pools", "expected"),
    [
        ("development", [HP_COMMITTED, HP, OD], "eks-od"),  # burst before even committed
        ("development", [HP, FULL_HP], "hp-ondemand"),  # no burst room: HyperPod after all
        ("production", [HP, OD, SPOT], "hp-ondemand"),  # its template allows no burst
        ("research", [HP_COMMITTED, OD, SPOT], "eks-spot"),  # only the kinds it allows
    ],
)
def test_a_moved_job_prefers_the_burst_capacity_its_template_allows(
    template: str, pools: list[Pool], expected: str
) -> None:
    placement = place(
        template=template,
        instance_type="ml.p5.48xlarge",
        accelerators=8,
        pools=pools,
        prefer_burst=True,
    )
    assert placement.pool == expected


# -- the burst policy: committed pools, prices, spend caps -----------------------------------
def test_committed_pools_cost_nothing_and_record_a_zero_price() -> None:
    placement = place(
        template="research",
        instance_type="ml.p5.48xlarge",
        accelerators=8,
        pools=[HP_COMMITTED, SPOT],
    )
    assert placement.pool == "hp-reserved"
    assert placement.reason.startswith("committed capacity first")
    assert (placement.kind, placement.hourly_cost, placement.hourly_price) == (
        PoolKind.HYPERPOD,
        0.0,
        0.0,
    )


def test_a_committed_eks_pool_serves_templates_that_may_burst_but_not_production() -> None:
    reserved_od = Pool("eks-block", PoolKind.EKS_ON_DEMAND, "p5.48xlarge", 8, 8, committed=True)
    for template, expected in (
        ("development", "eks-block"),
        ("research", "eks-block"),
        ("production", "hp-ondemand"),
    ):
        placement = place(
            template=template,
            instance_type="ml.p5.48xlarge",
            accelerators=8,
            pools=[HP, reserved_od, SPOT],
        )
        assert placement.pool == expected, template


def test_prices_from_the_policy_change_the_choice_and_are_recorded() -> None:
    """At the default on-demand price a p5 burst breaks a $1000/day cap; at the account's
    negotiated price (stored in the policy, spelt with the ml. name) it fits."""
    caps = SpendCaps(teams={"ml": 1000})
    default = BurstPolicy(spend_caps=caps)
    negotiated = BurstPolicy(
        prices=[
            PoolPrice(
                pool_kind=PoolKind.EKS_ON_DEMAND, instance_type="ml.p5.48xlarge", hourly_usd=30
            )
        ],
        spend_caps=caps,
    )
    outcomes = [
        place(
            template="development",
            instance_type="ml.p5.48xlarge",
            accelerators=8,
            pools=[FULL_HP, OD],
            prices=policy.price_table(),
            budget=policy.budget("ml", {}),
        )
        for policy in (default, negotiated)
    ]
    assert outcomes[0].pool is None
    assert "$1000.00/day would be exceeded" in outcomes[0].reason
    assert outcomes[1].pool == "eks-od"
    assert (outcomes[1].kind, outcomes[1].hourly_price, outcomes[1].hourly_cost) == (
        PoolKind.EKS_ON_DEMAND,
        30.0,
        30.0,
    )
    # A pool the policy has no price for is never preferred to one it prices.
    unpriced = Pool("od-gone", PoolKind.EKS_ON_DEMAND, "p5.48xlarge", 64, 8)
    placement = place(
        template="development",
        instance_type="ml.p5.48xlarge",
        accelerators=8,
        pools=[FULL_HP, unpriced, OD_CHEAP],
        prices=BurstPolicy(prices=[]).price_table(),
    )
    assert placement.pool == "eks-od-cheap"


def _development(accelerators: int, pools: list[Pool], **budget_and_prices: Any) -> Placement:
    """A development job of `accelerators` on p5.48xlarge."""
    return place(
        template="development",
        instance_type="ml.p5.48xlarge",
        accelerators=accelerators,
        pools=pools,
        **budget_and_prices,
    )


def test_a_spend_cap_refuses_the_burst_placement_with_the_caps_reason() -> None:
    od = Pool("od", PoolKind.EKS_ON_DEMAND, "p5.48xlarge", 8, 8)
    price = DEFAULT_HOURLY_PRICES[(PoolKind.EKS_ON_DEMAND, "p5.48xlarge")]
    caps = SpendCaps(teams={"ml": 24 * price - 1})
    policy = BurstPolicy(spend_caps=caps)
    placement = _development(
        8, [FULL_HP, od], prices=policy.price_table(), budget=policy.budget("ml", {})
    )
    assert placement.pool is None
    assert placement.reason.startswith("waiting: team ml's burst spend cap of $")
    # Another team has no cap; half a node fits the cap.
    assert _development(8, [FULL_HP, od], budget=policy.budget("cv", {})).pool == "od"
    assert _development(4, [FULL_HP, od], budget=policy.budget("ml", {})).pool == "od"
    # What already runs counts: with half a node running, the other half is refused.
    assert (
        _development(4, [FULL_HP, od], budget=policy.budget("ml", {"ml": price / 2})).pool is None
    )
    # HyperPod is never capped; committed burst costs nothing, so is never capped either.
    assert _development(8, [HP, od], budget=policy.budget("ml", {"ml": 1e6})).pool == "hp-ondemand"
    block = Pool("block", PoolKind.EKS_ON_DEMAND, "p5.48xlarge", 8, 8, committed=True)
    assert (
        _development(8, [FULL_HP, block], budget=policy.budget("ml", {"ml": 1e6})).pool == "block"
    )


def test_the_global_cap_counts_every_teams_burst_spend() -> None:
    od = Pool("od", PoolKind.EKS_ON_DEMAND, "p5.48xlarge", 8, 8)
    policy = BurstPolicy(spend_caps=SpendCaps(global_usd_per_day=2000))
    placement = place(
        template="development",
        instance_type="ml.p5.48xlarge",
        accelerators=8,
        pools=[FULL_HP, od],
        budget=policy.budget("ml", {"cv": 40.0}),
    )
    assert placement.pool is None
    assert "the global burst spend cap of $2000.00/day" in placement.reason


def test_a_moved_job_over_its_cap_falls_back_to_hyperpod() -> None:
    policy = BurstPolicy(spend_caps=SpendCaps(teams={"ml": 0}))
    placement = place(
        template="development",
        instance_type="ml.p5.48xlarge",
        accelerators=8,
        pools=[HP, OD],
        prefer_burst=True,
        budget=policy.budget("ml", {}),
    )
    assert placement.pool == "hp-ondemand"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (
            {"prices": [{"poolKind": "gpu-farm", "instanceType": "p5.48xlarge", "hourlyUsd": 1}]},
            "poolKind",
        ),
        (
            {"prices": [{"poolKind": "eks-spot", "instanceType": "p5.48xlarge", "hourlyUsd": -1}]},
            "hourlyUsd",
        ),
        (
            {
                "prices": [
                    {"poolKind": "eks-spot", "instanceType": "p5.48xlarge", "hourlyUsd": 10001}
                ]
            },
            "hourlyUsd",
        ),
        ({"committedPools": ["bad name!"]}, "committedPools"),
        ({"spendCaps": {"teams": {"ml": -5}}}, "teams"),
        ({"spendCaps": {"globalUsdPerDay": -1}}, "globalUsdPerDay"),
        (
            {
                "prices": [{"poolKind": "eks-spot", "instanceType": "p5.48xlarge", "hourlyUsd": 1}]
                * 2
            },
            "priced twice",
        ),
    ],
)
def test_the_burst_policy_is_bounded(body: dict[str, object], field: str) -> None:
    with pytest.raises(ValidationError, match=field):
        BurstPolicy.model_validate(body)


def test_the_burst_policy_defaults_are_the_documented_prices() -> None:
    policy = BurstPolicy()
    assert dict(policy.price_table()) == dict(DEFAULT_HOURLY_PRICES)
    assert policy.committed_pools == []
    assert policy.spend_caps.teams == {} and policy.spend_caps.global_usd_per_day is None
