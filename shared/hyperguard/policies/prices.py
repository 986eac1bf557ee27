"""Published hourly prices per region and instance type, each with where it was read and
when: the burst policy's default prices, the commitment planner's and the day in the life's
all come from here (D146).

AWS's own price pages were not reachable from where these were read (2026-11-26); each
figure comes from a copy of AWS's price list named in its `Source`, and the primary page is
named beside it. A figure no source gave is either left out (listed in `NOT_FOUND` with why)
or carried as an assumption that says so (`Price.assumed`). These are defaults for ranking
pools and planning, not a bill: store the account's own prices (`PUT /policies/burst`, the
planner's price options).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date
from enum import StrEnum
from statistics import median

READ_ON = date(2026, 11, 26)
"""When every figure below was read."""
DEFAULT_REGION = "us-east-1"
REGIONS = ("us-east-1", "us-east-2", "us-west-2")


class PurchaseOption(StrEnum):
    HYPERPOD_ON_DEMAND = "hyperpod-on-demand"
    EC2_ON_DEMAND = "ec2-on-demand"
    EC2_SPOT = "ec2-spot"
    EC2_CAPACITY_BLOCK = "ec2-capacity-block"
    """Paid up front for every hour of the block, used or not: a commitment."""


COMMITMENTS = frozenset({PurchaseOption.EC2_CAPACITY_BLOCK})
"""The options paid for every hour whether used or not."""


@dataclass(frozen=True)
class Source:
    title: str
    url: str
    note: str
    read_on: date = READ_ON


@dataclass(frozen=True)
class Price:
    option: PurchaseOption
    region: str
    instance_type: str
    """HyperPod's `ml.` name for HyperPod, the EC2 name otherwise."""
    usd_per_hour: float
    source: Source
    assumed: str | None = None
    """Why this figure is an assumption and not a published price; None when published."""

    @property
    def committed(self) -> bool:
        return self.option in COMMITMENTS

    def describe(self) -> dict[str, object]:
        """The price and where it comes from, as `plan commitment --json` and the day print it."""
        return {
            "option": self.option.value,
            "region": self.region,
            "instance_type": self.instance_type,
            "usd_per_hour": self.usd_per_hour,
            "source": self.source.title,
            "url": self.source.url,
            "note": self.source.note,
            "read_on": self.source.read_on.isoformat(),
            "assumed": self.assumed,
        }


EC2_ON_DEMAND_LIST = Source(
    "EC2 On-Demand, Linux, from instances.vantage.sh's copy of the AWS Price List (data of "
    "2026-01-21, in github.com/tsaol/aws-gpu data/all_gpu_instances.js at 77fcd9f)",
    "https://github.com/tsaol/aws-gpu/blob/77fcd9fe1d0652fd07b830e5ed030d61da87923e/data/"
    "all_gpu_instances.js",
    "AWS publishes it at https://aws.amazon.com/ec2/pricing/on-demand/ (not reachable here). "
    "SkyPilot's catalogue below gives the same figures for p5, p4d and g5",
)
EC2_SPOT_HISTORY = Source(
    "EC2 Spot, Linux, per Availability Zone, from SkyPilot's AWS catalogue "
    "(catalogs/v8/aws/vms.csv at e385a0d, SpotPrice column)",
    "https://github.com/skypilot-org/skypilot-catalog/blob/"
    "e385a0d348eda9cefd9806423e7725944dc249e4/catalogs/v8/aws/vms.csv",
    "the median over the region's Availability Zones as the catalogue fetched them; spot "
    "prices move with supply and demand (https://aws.amazon.com/ec2/spot/pricing/)",
)
CAPACITY_BLOCK_LIST = Source(
    "Amazon EC2 Capacity Blocks for ML pricing: the effective instance hourly rate",
    "https://aws.amazon.com/ec2/capacityblocks/pricing/",
    "read in a copy of the page (http://sibshop.uat.jiralog.com/ec2/capacityblocks/pricing) "
    "that says its rates were to be updated on 2025-01-01: late-2024 rates, the latest "
    "found. A block is paid up front for every hour reserved, used or not",
)
HYPERPOD_NOT_FOUND = Source(
    "no published SageMaker HyperPod price found",
    "https://aws.amazon.com/sagemaker/ai/pricing/",
    "the SageMaker pricing page was not reachable and no copy of its HyperPod table was "
    "found; the figure is the one this project has carried since D79",
)

HYPERPOD_ASSUMPTION = (
    "HyperPod's on-demand price, not found in any source read on 2026-11-26; this is the "
    "project's figure since D79, kept so that HyperPod is not priced at nothing, assumed the "
    "same in every region. Store your own (PUT /policies/burst)"
)

_ON_DEMAND: Mapping[str, Mapping[str, float]] = {
    "p5.48xlarge": {"us-east-1": 55.04, "us-east-2": 55.04, "us-west-2": 55.04},
    "p4d.24xlarge": {"us-east-1": 21.957642, "us-east-2": 21.95764, "us-west-2": 21.95764},
    "g5.48xlarge": {"us-east-1": 16.288, "us-east-2": 16.288, "us-west-2": 16.288},
    "g5.12xlarge": {"us-east-1": 5.672, "us-east-2": 5.672, "us-west-2": 5.672},
    "trn1.32xlarge": {"us-east-1": 21.5, "us-east-2": 21.5, "us-west-2": 21.5},
}
_SPOT_BY_ZONE: Mapping[str, Mapping[str, tuple[float, ...]]] = {
    "p5.48xlarge": {
        "us-east-1": (55.04, 47.2054, 14.582, 55.04, 14.246, 14.8686),
        "us-east-2": (17.2949, 15.5483, 15.06),
        "us-west-2": (21.6229, 21.7123, 21.7228, 22.7293),
    },
    "p4d.24xlarge": {
        "us-east-1": (6.289, 14.1051, 12.4991),
        "us-east-2": (8.6699, 6.6618),
        "us-west-2": (9.118, 9.9817, 9.53),
    },
    "g5.48xlarge": {
        "us-east-1": (4.3302, 5.8705, 5.2151, 5.1074, 4.9062),
        "us-east-2": (4.8189, 4.9058, 4.8347),
        "us-west-2": (6.5517, 6.6466, 6.4989),
    },
    "g5.12xlarge": {
        "us-east-1": (1.9046, 2.0049, 1.9859, 2.3243, 2.4982),
        "us-east-2": (2.2036, 2.3206, 2.3512),
    },
}
"""Each zone's spot price in the catalogue; the rows not listed (trn1.32xlarge, g5.12xlarge
in us-west-2) were not read."""
_CAPACITY_BLOCK: Mapping[str, Mapping[str, float]] = {
    "p5.48xlarge": {"us-east-1": 39.33, "us-east-2": 39.33},
    "p4d.24xlarge": {"us-east-2": 14.75, "us-west-2": 14.75},
}
_HYPERPOD_ASSUMED: Mapping[str, float] = {
    "ml.p5.48xlarge": 98.32,
    "ml.p4d.24xlarge": 37.69,
    "ml.g5.48xlarge": 20.36,
    "ml.g5.12xlarge": 7.09,
    "ml.trn1.32xlarge": 25.78,
}

NOT_FOUND: Mapping[str, str] = {
    "SageMaker Savings Plans": "AWS states savings of up to 64 %, a ceiling, not the rate of "
    "any instance type; no per-instance rate for ml.p5.48xlarge was found. Left out",
    "SageMaker flexible training plans": "priced per offering (SearchTrainingPlanOfferings "
    "returns each offering's UpfrontFee); no list price exists to read. Left out",
    "EC2 Savings Plans and Reserved Instances": "the copy of the price list gives no reserved "
    "price for p5.48xlarge, and does not say which term its other reserved figures are. "
    "Left out",
    "EC2 Spot for trn1.32xlarge": "its rows of the spot catalogue were not read. Left out",
}


def _table() -> tuple[Price, ...]:
    prices: list[Price] = []
    for itype, by_region in _ON_DEMAND.items():
        prices += [
            Price(PurchaseOption.EC2_ON_DEMAND, region, itype, usd, EC2_ON_DEMAND_LIST)
            for region, usd in by_region.items()
        ]
    for itype, zones_by_region in _SPOT_BY_ZONE.items():
        prices += [
            Price(PurchaseOption.EC2_SPOT, region, itype, round(median(zones), 4), EC2_SPOT_HISTORY)
            for region, zones in zones_by_region.items()
        ]
    for itype, by_region in _CAPACITY_BLOCK.items():
        prices += [
            Price(PurchaseOption.EC2_CAPACITY_BLOCK, region, itype, usd, CAPACITY_BLOCK_LIST)
            for region, usd in by_region.items()
        ]
    for itype, usd in _HYPERPOD_ASSUMED.items():
        prices += [
            Price(
                PurchaseOption.HYPERPOD_ON_DEMAND,
                region,
                itype,
                usd,
                HYPERPOD_NOT_FOUND,
                assumed=HYPERPOD_ASSUMPTION,
            )
            for region in REGIONS
        ]
    return tuple(prices)


PRICES: tuple[Price, ...] = _table()
_INDEX = {(p.option, p.region, p.instance_type): p for p in PRICES}


def price_of(
    option: PurchaseOption, instance_type: str, region: str = DEFAULT_REGION
) -> Price | None:
    """The price of `instance_type` (HyperPod's `ml.` name for HyperPod, the EC2 name
    otherwise) bought as `option` in `region`; None when no source gave one."""
    return _INDEX.get((option, region, instance_type))


def in_region(region: str = DEFAULT_REGION) -> tuple[Price, ...]:
    return tuple(p for p in PRICES if p.region == region)
