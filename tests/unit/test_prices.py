"""The published price table (hyperguard.policies.prices): every figure has a source and the
date it was read, assumptions say so, commitments are cheaper than bursting the same
instance, and the burst policy's defaults are us-east-1's figures."""

from __future__ import annotations

from statistics import median

from hyperguard.policies.burst import DEFAULT_HOURLY_PRICES, PoolKind, default_hourly_prices
from hyperguard.policies.prices import (
    NOT_FOUND,
    PRICES,
    READ_ON,
    REGIONS,
    PurchaseOption,
    in_region,
    price_of,
)


def test_every_price_names_its_source_and_when_it_was_read() -> None:
    assert PRICES
    for price in PRICES:
        assert price.region in REGIONS
        assert price.source.url.startswith("https://")
        assert price.source.read_on == READ_ON
        assert 0 < price.usd_per_hour < 1000


def test_only_hyperpods_price_is_an_assumption_and_it_says_why() -> None:
    assumed = {p.option for p in PRICES if p.assumed}
    assert assumed == {PurchaseOption.HYPERPOD_ON_DEMAND}
    assert all("not found" in (p.assumed or "") for p in PRICES if p.assumed)
    assert {"SageMaker Savings Plans", "SageMaker flexible training plans"} <= set(NOT_FOUND)


def test_a_commitment_costs_less_an_hour_than_on_demand_for_the_same_instance() -> None:
    blocks = [p for p in PRICES if p.committed]
    assert {p.option for p in blocks} == {PurchaseOption.EC2_CAPACITY_BLOCK}
    for block in blocks:
        on_demand = price_of(PurchaseOption.EC2_ON_DEMAND, block.instance_type, block.region)
        assert on_demand is not None and block.usd_per_hour < on_demand.usd_per_hour


def test_the_published_p5_figures_read_on_the_day() -> None:
    def usd(option: PurchaseOption, region: str = "us-east-1") -> float | None:
        price = price_of(option, "p5.48xlarge", region)
        return None if price is None else price.usd_per_hour

    assert usd(PurchaseOption.EC2_ON_DEMAND) == 55.04
    assert usd(PurchaseOption.EC2_CAPACITY_BLOCK) == 39.33
    assert usd(PurchaseOption.EC2_SPOT) == median((55.04, 47.2054, 14.582, 55.04, 14.246, 14.8686))
    assert usd(PurchaseOption.EC2_CAPACITY_BLOCK, "us-west-2") is None  # none published found


def test_the_burst_policys_defaults_are_the_regions_prices_by_pool_kind() -> None:
    assert default_hourly_prices("us-east-1") == DEFAULT_HOURLY_PRICES
    kinds = {
        PurchaseOption.HYPERPOD_ON_DEMAND: PoolKind.HYPERPOD,
        PurchaseOption.EC2_ON_DEMAND: PoolKind.EKS_ON_DEMAND,
        PurchaseOption.EC2_SPOT: PoolKind.EKS_SPOT,
    }
    for region in REGIONS:
        table = default_hourly_prices(region)
        expected = {
            (kinds[p.option], p.instance_type): p.usd_per_hour
            for p in in_region(region)
            if p.option in kinds
        }
        assert table == expected
    # HyperPod by its ml. name, EKS by the EC2 name
    assert (PoolKind.HYPERPOD, "ml.p5.48xlarge") in DEFAULT_HOURLY_PRICES
    assert (PoolKind.EKS_ON_DEMAND, "p5.48xlarge") in DEFAULT_HOURLY_PRICES
