"""What failures cost a training run: the published SageMaker HyperPod reliability analysis.

failures per hour = instances * failure rate per instance-hour; MTBF = 1 / that;
compute days = GPU-hours / (instances * GPUs per instance) / 24;
days lost = compute days * failures per hour * downtime per failure (hours);
days to train = compute days + days lost; improvement = 1 - days with / days without;
days saved = the difference; cost saved = days saved * 24 * GPUs * price per GPU-hour.

Beyond it: the hot spares that keep the chance of more nodes failing during one
replacement window than there are spares below a target (failures in the window are
Poisson with λ = instances * rate * replacement hours).

Pure functions on plain numbers: no AWS, no I/O, cheap to import (CLI and API share it).

The package is HyperGuard's one planner (the scheduling pass's own decisions are
`hyperguard.governance.decide`): this model, and beyond it the committed baseline to buy
(`planning.commitment`) and the deployment's own recovery figures (`planning.measured`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

MAX_INSTANCES = 100_000
MAX_GPUS = 64
"""Per instance."""
MIN_GPU_HOURS = 1.0
MAX_GPU_HOURS = 1e12
MIN_RATE = 1e-9
"""One failure per billion instance-hours: below it, MTBF overflows to no meaning."""
MAX_DOWNTIME_MIN = 525_600.0
"""A year: no single failure takes longer to cure."""
MAX_GPU_HOUR_COST = 10_000.0
MAX_GRID = 50
"""Sizes, and rates, in one grid: a table people read, not a bulk computation."""
MIN_TARGET = 1e-9
"""Below this the Poisson tail is lost in floating-point rounding."""

PUBLISHED_REPLACEMENT_MIN = 15.0
"""HyperPod's published typical time to replace a node (P90 903-981 s on p5.48xlarge)."""

# Component times of one recovery, seconds: HyperPod's published figures where AWS published
# one (root cause ≈ 1.5 min, replace ≈ 15 min, resume ≈ 23.5 min, p5.48xlarge), stated
# assumptions for the rest. The automatic strategy weighs the same numbers
# (hyperguard.policies.repair.ComponentTimes takes its defaults from here).
DETECT_S = 90.0
REPLACE_S = PUBLISHED_REPLACEMENT_MIN * 60
RESUME_S = 1410.0
REBOOT_S = 300.0
"""Assumed: a warm reboot of a GPU instance."""
RESCALE_S = 300.0
"""Assumed: an elastic job's checkpoint-and-restart at a new size, its pods kept."""
PROVISION_S = 300.0
"""Assumed: Karpenter launching a GPU node."""
HYPERGUARD_OVERHEAD_S = 2.4
"""Measured: HyperGuard's own work per failure, fault → recovered with the cluster's own
durations at zero (median, `bench/recovery.py --cluster-times zero`, BENCHMARKS.md,
2026-11-22): detection of the event, the workflow's steps and its health-poll interval."""
STRATEGIES = ("wait_for_repair", "hot_spare", "elastic_shrink", "move")
DEFAULT_SPARE_TARGET = 0.01
PUBLISHED_RATE = 0.0005
"""The published example's failures per instance-hour (0.05 %)."""
MIN_INCIDENTS = 3
"""A measured figure needs this many incidents behind it, as the recovery strategy's
MIN_SAMPLES: with fewer, one odd incident is the whole figure."""


class PlanInputError(ValueError):
    """An input outside the range the model makes sense for: `field` names it, `value` is
    what was given (None when the fault is the list as a whole), `reason` what is wrong."""

    def __init__(self, field: str, reason: str, value: object = None) -> None:
        self.field, self.reason, self.value = field, reason, value
        self.message = reason if value is None else f"{value} {reason}"
        super().__init__(f"{field}: {self.message}")


# ---- input ranges -------------------------------------------------------------------------
def check_size(field: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_INSTANCES:
        raise PlanInputError(field, f"is not a whole number from 1 to {MAX_INSTANCES}", value)
    return value


def check_gpus_per_instance(field: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_GPUS:
        raise PlanInputError(field, f"is not a whole number from 1 to {MAX_GPUS}", value)
    return value


def check_rate(field: str, value: float) -> float:
    """A failure rate per instance-hour, as a fraction: 0.0005 is 0.05 %."""
    if not math.isfinite(value) or not MIN_RATE <= value <= 1:
        raise PlanInputError(
            field, f"is not a fraction in [{MIN_RATE:g}, 1] (0.0005 is 0.05 %)", value
        )
    return value


def check_range(field: str, value: float, low: float, high: float, *, low_open: bool) -> float:
    inside = (low < value if low_open else low <= value) and value <= high
    if not math.isfinite(value) or not inside:
        bracket = "(" if low_open else "["
        raise PlanInputError(field, f"is not in {bracket}{low:g}, {high:g}]", value)
    return value


def check_downtime(field: str, minutes: float) -> float:
    return check_range(field, minutes, 0, MAX_DOWNTIME_MIN, low_open=False)


def check_list[N: (int, float)](
    field: str, values: Sequence[N], check: Callable[[str, N], N]
) -> None:
    """1 to MAX_GRID values, none twice, each passing `check`."""
    if not 1 <= len(values) <= MAX_GRID:
        raise PlanInputError(field, f"give 1 to {MAX_GRID} values, not {len(values)}")
    if len(set(values)) != len(values):
        raise PlanInputError(field, "a value is given twice")
    for value in values:
        check(field, value)


def check_grid(sizes: Sequence[int], rates: Sequence[float]) -> None:
    check_list("sizes", sizes, check_size)
    check_list("rates", rates, check_rate)


# ---- the published model ------------------------------------------------------------------
def failures_per_hour(instances: int, rate: float) -> float:
    return instances * rate


def mtbf_hours(instances: int, rate: float) -> float:
    """Mean time between failures of the whole cluster."""
    return 1 / failures_per_hour(instances, rate)


def compute_days(gpu_hours: float, instances: int, gpus_per_instance: int) -> float:
    """How long the training takes if nothing ever fails."""
    return gpu_hours / (instances * gpus_per_instance) / 24


def days_lost(compute_days: float, failures_per_hour: float, downtime_min: float) -> float:
    return compute_days * failures_per_hour * downtime_min / 60


def improvement(days_with: float, days_without: float) -> float:
    """The fraction of training time saved (0.32: 32 % less)."""
    return 1 - days_with / days_without


def cost_saved(days_saved: float, gpus: int, gpu_hour_cost: float) -> float:
    return days_saved * 24 * gpus * gpu_hour_cost


# ---- HyperGuard's strategies --------------------------------------------------------------
def strategy_downtimes(instances: int) -> dict[str, float]:
    """Minutes of whole-job downtime one node failure costs a job spread over `instances`,
    per strategy: the lost GPU-time hyperguard.recovery.strategy estimates, divided by the
    job's GPUs, plus detection and HyperGuard's measured overhead (common to all).

        wait_for_repair  replace + resume
        hot_spare        resume
        elastic_shrink   rescale + replace / instances + rescale  (shrink, grow back)
        move             provision + resume   (burst capacity)

    elastic_shrink needs two instances at least (one keeps training)."""
    check_size("instances", instances)
    common = DETECT_S + HYPERGUARD_OVERHEAD_S
    seconds = {
        "wait_for_repair": REPLACE_S + RESUME_S,
        "hot_spare": RESUME_S,
        "elastic_shrink": 2 * RESCALE_S + REPLACE_S / instances if instances > 1 else None,
        "move": PROVISION_S + RESUME_S,
    }
    return {name: round((common + s) / 60, 3) for name, s in seconds.items() if s is not None}


def pct_time_lost(instances: int, rate: float, downtime_min: float) -> float:
    """The share of a run's wall time spent down: days lost / days to train."""
    lost = failures_per_hour(instances, rate) * downtime_min / 60
    return 100 * lost / (1 + lost)


def tradeoff(sizes: Sequence[int], rate: float) -> dict[str, object]:
    """% of training time lost per cluster size for each strategy, at one failure rate (the
    HTML report's trade-off chart; the same figures as `plan`'s `strategies`)."""
    check_list("sizes", sizes, check_size)
    check_rate("failure_rate", rate)
    curves: dict[str, dict[str, object]] = {}
    for name in STRATEGIES:
        downtimes = [strategy_downtimes(size).get(name) for size in sizes]
        curves[name] = {
            "downtime_min": downtimes,
            "pct_time_lost": [
                None if d is None else round(pct_time_lost(size, rate, d), 4)
                for size, d in zip(sizes, downtimes, strict=True)
            ],
        }
    return {"sizes": list(sizes), "failure_rate": rate, "strategies": curves}


# ---- hot spares ---------------------------------------------------------------------------
def _shortfalls(expected_failures: float, most: int) -> Iterator[float]:
    """P(more than k failures) for k = 0..most, failures Poisson with this mean."""
    # log space: e^-λ underflows for λ > 745, the terms near the mode do not
    log_term, cdf = -expected_failures, 0.0
    for k in range(most + 1):
        if k:
            log_term += math.log(expected_failures) - math.log(k)
        cdf += math.exp(log_term)
        yield max(0.0, 1 - cdf)


def shortfall_probability(spares: int, expected_failures: float) -> float:
    """P(more than `spares` failures) when failures are Poisson with this mean."""
    if expected_failures <= 0:
        return 0.0
    *_, last = _shortfalls(expected_failures, spares)
    return last


def hot_spares(instances: int, rate: float, replacement_min: float, target: float) -> int:
    """The fewest spares for which P(more nodes fail during one replacement window than
    there are spares) < target. Never more than the cluster: no more nodes than that fail."""
    expected = instances * rate * replacement_min / 60
    for spares, shortfall in enumerate(_shortfalls(expected, instances - 1)):
        if shortfall < target:
            return spares
    return instances


# ---- what the commands report -------------------------------------------------------------
@dataclass(frozen=True)
class PlanInputs:
    """One training run on one cluster, with and without fast recovery."""

    instances: int
    gpus_per_instance: int
    failure_rate: float
    gpu_hours: float
    downtime_min: float
    baseline_downtime_min: float
    gpu_hour_cost: float
    replacement_min: float = PUBLISHED_REPLACEMENT_MIN
    target: float = DEFAULT_SPARE_TARGET

    def __post_init__(self) -> None:
        check_size("instances", self.instances)
        check_gpus_per_instance("gpus_per_instance", self.gpus_per_instance)
        check_rate("failure_rate", self.failure_rate)
        check_range("gpu_hours", self.gpu_hours, MIN_GPU_HOURS, MAX_GPU_HOURS, low_open=False)
        check_downtime("downtime_min", self.downtime_min)
        check_downtime("baseline_downtime_min", self.baseline_downtime_min)
        check_range("gpu_hour_cost", self.gpu_hour_cost, 0, MAX_GPU_HOUR_COST, low_open=False)
        check_range("replacement_min", self.replacement_min, 0, MAX_DOWNTIME_MIN, low_open=True)
        check_range("target", self.target, MIN_TARGET, 0.5, low_open=False)


def plan(inputs: PlanInputs) -> dict[str, Any]:
    """The published figures for one run (days, %, USD, hours), plus the hot spares and,
    under `strategies`, the same run with each HyperGuard strategy's downtime per failure
    (strategy_downtimes) against the baseline. A downtime above the baseline gives a
    negative improvement: the run takes longer."""
    i = inputs
    per_hour = failures_per_hour(i.instances, i.failure_rate)
    days = compute_days(i.gpu_hours, i.instances, i.gpus_per_instance)
    lost = days_lost(days, per_hour, i.downtime_min)
    lost_baseline = days_lost(days, per_hour, i.baseline_downtime_min)
    to_train, to_train_baseline = days + lost, days + lost_baseline
    saved = to_train_baseline - to_train
    spares = hot_spares(i.instances, i.failure_rate, i.replacement_min, i.target)
    strategies = {
        name: {
            "downtime_min": minutes,
            "days_lost": round(days_lost(days, per_hour, minutes), 4),
            "improvement_pct": round(
                100 * improvement(days + days_lost(days, per_hour, minutes), to_train_baseline),
                4,
            ),
        }
        for name, minutes in strategy_downtimes(i.instances).items()
    }
    window_failures = i.instances * i.failure_rate * i.replacement_min / 60
    return {
        "compute_days": round(days, 4),
        "failures_per_hour": round(per_hour, 6),
        "expected_failures": round(per_hour * days * 24, 2),
        "mtbf_hours": round(1 / per_hour, 4),
        "days_lost": round(lost, 4),
        "days_lost_baseline": round(lost_baseline, 4),
        "days_to_train": round(to_train, 4),
        "days_to_train_baseline": round(to_train_baseline, 4),
        "improvement_pct": round(100 * improvement(to_train, to_train_baseline), 4),
        "days_saved": round(saved, 4),
        "cost_saved_usd": round(
            cost_saved(saved, i.instances * i.gpus_per_instance, i.gpu_hour_cost), 2
        ),
        "hot_spares": spares,
        "hot_spares_shortfall_probability": round(
            shortfall_probability(spares, window_failures) if spares < i.instances else 0.0, 6
        ),
        "strategies": strategies,
    }


def rate_key(rate: float) -> str:
    """A rate as the grid's key, in plain decimals: 1e-05 → "0.00001"."""
    return format(Decimal(repr(rate)).normalize(), "f")


def mtbf_grid(sizes: Sequence[int], rates: Sequence[float]) -> dict[str, object]:
    """MTBF in whole hours (rounded up) for each rate (a row) and cluster size (a column)."""
    check_grid(sizes, rates)
    # round first: 1 / (4 * 0.0001) is 2499.9999999999995 in binary floating point
    return {
        "sizes": list(sizes),
        "grid": {
            rate_key(r): [math.ceil(round(mtbf_hours(s, r), 6)) for s in sizes] for r in rates
        },
    }


def reduction_grid(
    sizes: Sequence[int], rates: Sequence[float], downtime_min: float, baseline_downtime_min: float
) -> dict[str, object]:
    """The % of training time saved for each rate and cluster size. It depends on neither
    the GPU-hours nor the GPUs per instance: compute days cancel out of the ratio."""
    check_grid(sizes, rates)
    check_downtime("downtime_min", downtime_min)
    check_downtime("baseline_downtime_min", baseline_downtime_min)

    def saved_pct(size: int, rate: float) -> float:
        per_hour = failures_per_hour(size, rate)
        with_, without = 1 + per_hour * downtime_min / 60, 1 + per_hour * baseline_downtime_min / 60
        return round(100 * improvement(with_, without), 2)

    return {
        "sizes": list(sizes),
        "grid": {rate_key(r): [saved_pct(s, r) for s in sizes] for r in rates},
    }
