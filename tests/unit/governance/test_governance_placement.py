"""Placement of admitted jobs onto HyperPod and EKS pools."""

from __future__ import annotations

import pytest

from hyperguard.governance.placement import DEFAULT_HOURLY_PRICES, Pool, PoolKind, place

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
