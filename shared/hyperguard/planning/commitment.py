"""How many instances to commit for a demand profile, burst paying for the rest.

The prices are inputs; `hyperguard plan commitment` defaults them to published ones
(hyperguard.policies.prices, D146): a commitment priced as one, paid every hour of the span.

The model (docs/decisions.md has why):
- demand is a step function of GPUs over time; in instances, n(t) = ceil(gpus(t) / GPUs per
  instance): an instance is the unit bought, and a job's GPUs do not share one with another's
  in this model;
- k committed instances are paid every hour of the profile's span T, used or not, at the
  committed price c per instance-hour;
- what is above them, max(0, n(t) - k), is bought as burst while it is needed, at b per
  instance-hour: cost(k) = k c T + b * integral of max(0, n(t) - k) dt;
- on spot, an interruption loses the work since the last checkpoint, bought again: a spot
  instance-hour does 1 - r * L hours of work (r interruptions per instance-hour, L hours lost
  each), so its effective price is spot / (1 - r * L).

The k-th instance costs c T and saves b * hours(n >= k): it pays for itself where demand
reaches it more than c / b of the time (the break-even utilisation). hours(n >= k) falls as k
grows, so cost(k) is convex and beyond the peak it only rises by c T per instance.

Not modelled: which template may run where (placement keeps production on HyperPod and
research on spot), the time a burst node takes to launch, capacity that is not there to buy,
and queueing (demand above what is bought waits in life; here it is always bought).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import pairwise

MAX_SAMPLES = 100_000
"""Rows of a demand file: a year at 5-minute steps fits."""
MAX_FILE_BYTES = 8 * 1024 * 1024
MAX_SPAN = timedelta(days=366)
MAX_PEAK_INSTANCES = 10_000
"""The curve has one row per commitment size up to the peak: a table people read."""
MAX_GPUS_PER_INSTANCE = 64
MAX_PRICE = 10_000.0
"""USD per instance-hour."""
MAX_SPOT_LOSS = 0.9
"""Interruptions x hours lost per instance-hour: above it spot does almost no work."""
HEADER = ("timestamp", "gpus")


class DemandInputError(ValueError):
    """A demand file or price the model cannot use; the message is one line, with the line
    number where there is one."""


@dataclass(frozen=True)
class DemandSample:
    at: datetime
    gpus: int
    """GPUs demanded from `at` until the next sample."""


@dataclass(frozen=True)
class Prices:
    """USD per instance-hour, and spot's interruption risk."""

    committed: float
    on_demand: float
    spot: float
    spot_interruptions_per_hour: float
    spot_lost_hours: float
    """Work lost per interruption: since the last checkpoint, plus the restart."""

    def __post_init__(self) -> None:
        for name in ("committed", "on_demand", "spot"):
            value = getattr(self, name)
            if not (math.isfinite(value) and 0 <= value <= MAX_PRICE):
                raise DemandInputError(f"{name} price {value} is not in [0, {MAX_PRICE:g}]")
        loss = self.spot_interruptions_per_hour * self.spot_lost_hours
        if not (
            self.spot_interruptions_per_hour >= 0
            and self.spot_lost_hours >= 0
            and 0 <= loss <= MAX_SPOT_LOSS
        ):
            raise DemandInputError(
                "spot interruptions per hour x hours lost each must be in "
                f"[0, {MAX_SPOT_LOSS:g}] (both >= 0), not {loss}"
            )

    @property
    def effective_spot(self) -> float:
        """What a spot instance-hour of useful work costs, the lost work bought again."""
        return self.spot / (1 - self.spot_interruptions_per_hour * self.spot_lost_hours)


@dataclass(frozen=True)
class CommitmentPoint:
    """One commitment size and what the demand then costs, per burst kind."""

    committed_instances: int
    committed_usd: float
    burst_instance_hours: float
    """Instance-hours bought as burst: the integral of max(0, n(t) - k)."""
    burst_hours: float
    """Hours during which any burst is needed (n(t) > k)."""
    total_on_demand_usd: float
    total_spot_usd: float


@dataclass(frozen=True)
class CommitmentPlan:
    span_hours: float
    peak_instances: int
    gpus_per_instance: int
    demanded_instance_hours: float
    prices: Prices
    curve: tuple[CommitmentPoint, ...]
    """k = 0 .. peak_instances."""
    best_on_demand: CommitmentPoint
    best_spot: CommitmentPoint


# ---- the demand file ----------------------------------------------------------------------
def parse_demand(text: str) -> tuple[DemandSample, ...]:
    """CSV: a `timestamp,gpus` header, then one row per change of demand: an ISO 8601 time
    with its UTC offset (`2026-11-23T08:00:00Z`), strictly increasing, and the GPUs demanded
    from then on, a whole number >= 0. Blank lines and lines starting with `#` are skipped.
    At least two rows; the last holds as long as the interval before it (evenly spaced
    samples then cover their whole span)."""
    if len(text.encode()) > MAX_FILE_BYTES:
        raise DemandInputError(f"the file is larger than {MAX_FILE_BYTES // 1024 // 1024} MiB")
    rows = [
        (number, line.strip())
        for number, line in enumerate(text.splitlines(), start=1)
        if line.strip() and not line.lstrip().startswith("#")
    ]
    if not rows or tuple(c.strip().lower() for c in rows[0][1].split(",")) != HEADER:
        raise DemandInputError(f"the first line must be the header {','.join(HEADER)}")
    samples = tuple(_sample(number, line) for number, line in rows[1:])
    check_samples(samples, [number for number, _ in rows[1:]])
    return samples


def _sample(number: int, line: str) -> DemandSample:
    cells = [c.strip() for c in line.split(",")]
    if len(cells) != len(HEADER):
        raise DemandInputError(f"line {number}: expected timestamp,gpus, got {line!r}")
    try:
        at = datetime.fromisoformat(cells[0])
    except ValueError:
        raise DemandInputError(f"line {number}: {cells[0]!r} is not an ISO 8601 time") from None
    if at.utcoffset() is None:
        raise DemandInputError(f"line {number}: {cells[0]!r} has no UTC offset (add Z)")
    try:
        gpus = int(cells[1])
    except ValueError:
        raise DemandInputError(f"line {number}: {cells[1]!r} is not a whole number") from None
    return DemandSample(at, gpus)


def check_samples(samples: Sequence[DemandSample], lines: Sequence[int] | None = None) -> None:
    """2 to MAX_SAMPLES samples, strictly increasing in time over at most MAX_SPAN, each
    demanding 0 or more GPUs (the peak is checked with the GPUs per instance)."""
    if not 2 <= len(samples) <= MAX_SAMPLES:
        raise DemandInputError(f"give 2 to {MAX_SAMPLES} rows of demand, not {len(samples)}")
    where = lines or [i + 1 for i in range(len(samples))]
    for index, sample in enumerate(samples):
        label = f"line {where[index]}" if lines else f"sample {where[index]}"
        if sample.gpus < 0:
            raise DemandInputError(f"{label}: {sample.gpus} GPUs is negative")
        if index and sample.at <= samples[index - 1].at:
            raise DemandInputError(f"{label}: {sample.at.isoformat()} is not after the row before")
    if samples[-1].at - samples[0].at > MAX_SPAN:
        raise DemandInputError(f"the profile spans more than {MAX_SPAN.days} days")


def intervals(samples: Sequence[DemandSample]) -> list[tuple[float, int]]:
    """(hours, GPUs) of each step; the last lasts as long as the one before it."""
    hours = [(later.at - earlier.at).total_seconds() / 3600 for earlier, later in pairwise(samples)]
    return list(zip([*hours, hours[-1]], [s.gpus for s in samples], strict=True))


# ---- the model ----------------------------------------------------------------------------
def instances_needed(gpus: int, gpus_per_instance: int) -> int:
    return -(-gpus // gpus_per_instance)


def hours_at_least(steps: Iterable[tuple[float, int]], peak: int) -> list[float]:
    """[j] = hours during which at least j instances are demanded, j = 0 .. peak + 1."""
    at_level = [0.0] * (peak + 2)
    for hours, instances in steps:
        at_level[instances] += hours
    at_least = [0.0] * (peak + 2)
    for level in range(peak, -1, -1):
        at_least[level] = at_least[level + 1] + at_level[level]
    return at_least


def point(k: int, at_least: Sequence[float], span_hours: float, prices: Prices) -> CommitmentPoint:
    """The cost of committing `k` instances (any k >= 0, beyond the peak too)."""
    burst_instance_hours = sum(at_least[k + 1 :])
    committed_usd = k * prices.committed * span_hours
    return CommitmentPoint(
        committed_instances=k,
        committed_usd=committed_usd,
        burst_instance_hours=burst_instance_hours,
        burst_hours=at_least[k + 1] if k + 1 < len(at_least) else 0.0,
        total_on_demand_usd=committed_usd + prices.on_demand * burst_instance_hours,
        total_spot_usd=committed_usd + prices.effective_spot * burst_instance_hours,
    )


def plan_commitment(
    samples: Sequence[DemandSample], gpus_per_instance: int, prices: Prices
) -> CommitmentPlan:
    """The cost curve for k = 0 .. peak committed instances and its minimum per burst kind
    (the smallest k among equal costs: commit no more than pays)."""
    check_samples(samples)
    if not 1 <= gpus_per_instance <= MAX_GPUS_PER_INSTANCE:
        raise DemandInputError(
            f"GPUs per instance {gpus_per_instance} is not in 1..{MAX_GPUS_PER_INSTANCE}"
        )
    steps = [(h, instances_needed(g, gpus_per_instance)) for h, g in intervals(samples)]
    peak = max(n for _, n in steps)
    if peak > MAX_PEAK_INSTANCES:
        raise DemandInputError(
            f"the peak demand is {peak} instances, more than {MAX_PEAK_INSTANCES}"
        )
    span = sum(h for h, _ in steps)
    at_least = hours_at_least(steps, peak)
    curve = tuple(point(k, at_least, span, prices) for k in range(peak + 1))
    return CommitmentPlan(
        span_hours=span,
        peak_instances=peak,
        gpus_per_instance=gpus_per_instance,
        demanded_instance_hours=sum(h * n for h, n in steps),
        prices=prices,
        curve=curve,
        best_on_demand=min(curve, key=lambda p: (p.total_on_demand_usd, p.committed_instances)),
        best_spot=min(curve, key=lambda p: (p.total_spot_usd, p.committed_instances)),
    )


def break_even_utilisation(committed: float, burst: float) -> float | None:
    """The share of the span demand must reach an instance for committing it to pay;
    None when burst is free (commitment never pays)."""
    return committed / burst if burst > 0 else None


def to_json(plan: CommitmentPlan) -> dict[str, object]:
    """What `hyperguard plan commitment --json` prints (docs/cli.md lists the keys)."""
    p = plan.prices
    peak_sized = plan.curve[-1]

    def best(chosen: CommitmentPoint, total: float, burst_price: float) -> dict[str, object]:
        return {
            "committed_instances": chosen.committed_instances,
            "total_usd": round(total, 2),
            "committed_usd": round(chosen.committed_usd, 2),
            "burst_usd": round(total - chosen.committed_usd, 2),
            "burst_instance_hours": round(chosen.burst_instance_hours, 3),
            "burst_hours": round(chosen.burst_hours, 3),
            "break_even_utilisation": _rounded(break_even_utilisation(p.committed, burst_price)),
            "saving_vs_peak_committed_pct": _saving(total, peak_sized.committed_usd),
        }

    return {
        "span_hours": round(plan.span_hours, 3),
        "gpus_per_instance": plan.gpus_per_instance,
        "peak_instances": plan.peak_instances,
        "demanded_instance_hours": round(plan.demanded_instance_hours, 3),
        "mean_utilisation_of_peak": _rounded(
            plan.demanded_instance_hours / (plan.peak_instances * plan.span_hours)
            if plan.peak_instances and plan.span_hours
            else None
        ),
        "prices": {
            "committed_usd_per_hour": p.committed,
            "on_demand_usd_per_hour": p.on_demand,
            "spot_usd_per_hour": p.spot,
            "spot_interruptions_per_hour": p.spot_interruptions_per_hour,
            "spot_lost_hours": p.spot_lost_hours,
            "spot_effective_usd_per_hour": round(p.effective_spot, 4),
        },
        "peak_committed_usd": round(peak_sized.committed_usd, 2),
        "best_on_demand": best(
            plan.best_on_demand, plan.best_on_demand.total_on_demand_usd, p.on_demand
        ),
        "best_spot": best(plan.best_spot, plan.best_spot.total_spot_usd, p.effective_spot),
        "curve": [
            {
                "committed_instances": c.committed_instances,
                "committed_usd": round(c.committed_usd, 2),
                "burst_instance_hours": round(c.burst_instance_hours, 3),
                "burst_hours": round(c.burst_hours, 3),
                "total_on_demand_usd": round(c.total_on_demand_usd, 2),
                "total_spot_usd": round(c.total_spot_usd, 2),
            }
            for c in plan.curve
        ],
    }


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def _saving(total: float, peak_committed: float) -> float | None:
    """% less than committing the peak all the time (what a static cluster sized for its peak
    pays); None when that is 0."""
    return round(100 * (1 - total / peak_committed), 2) if peak_committed > 0 else None
