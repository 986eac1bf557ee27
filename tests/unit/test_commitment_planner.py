"""The commitment planner (hyperguard.planning.commitment): the demand file's format and limits,
and the cost curve's properties checked against a direct computation of the model."""

from __future__ import annotations

import math
import re
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hyperguard.planning.commitment import (
    MAX_SAMPLES,
    DemandInputError,
    DemandSample,
    Prices,
    hours_at_least,
    instances_needed,
    intervals,
    parse_demand,
    plan_commitment,
    point,
    to_json,
)

T0 = datetime(2026, 11, 23, tzinfo=UTC)
PUBLISHED = Prices(
    committed=39.33,
    on_demand=55.04,
    spot=31.037,
    spot_interruptions_per_hour=0.01,
    spot_lost_hours=0.5,
)
"""`plan commitment`'s defaults for ml.p5.48xlarge in us-east-1: an EC2 Capacity Block's
effective hourly rate committed, EC2 on-demand and spot burst (hyperguard.policies.prices)."""
HYPERPOD_HELD = replace(PUBLISHED, committed=98.32)
"""HyperPod's assumed on-demand price held all the time as the commitment."""
CHEAP_COMMITMENT = Prices(
    committed=40.0,
    on_demand=55.04,
    spot=45.0,
    spot_interruptions_per_hour=0.0,
    spot_lost_hours=0.0,
)


def hourly(gpus: list[int]) -> list[DemandSample]:
    return [DemandSample(T0 + timedelta(hours=h), g) for h, g in enumerate(gpus)]


def direct_cost(gpus: list[int], per: int, k: int, committed: float, burst: float) -> float:
    """The model written out step by step, one hour per sample."""
    return sum(committed * k + burst * max(0, instances_needed(g, per) - k) for g in gpus)


# ---- the demand file ----------------------------------------------------------------------
def test_a_demand_file_is_read_as_steps_the_last_as_long_as_the_one_before() -> None:
    samples = parse_demand(
        "# exported from the dashboard\n"
        "timestamp,gpus\n"
        "2026-11-23T00:00:00Z,8\n"
        "\n"
        "2026-11-23T02:00:00+00:00,24\n"
        "2026-11-23T03:30:00+01:00,0\n"  # 02:30 UTC
    )
    assert [s.gpus for s in samples] == [8, 24, 0]
    assert intervals(samples) == [(2.0, 8), (0.5, 24), (0.5, 0)]


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        ("", "the first line must be the header timestamp,gpus"),
        ("time,gpus\n2026-11-23T00:00:00Z,8\n", "the first line must be the header"),
        ("timestamp,gpus\n2026-11-23T00:00:00Z,8\n", "give 2 to 100000 rows of demand, not 1"),
        ("timestamp,gpus\n2026-11-23T00:00:00Z,8\n2026-11-23T01:00:00Z", "line 3: expected"),
        ("timestamp,gpus\nyesterday,8\n2026-11-23T01:00:00Z,8\n", "line 2: 'yesterday' is not"),
        ("timestamp,gpus\n2026-11-23T00:00:00,8\n2026-11-23T01:00:00Z,8\n", "has no UTC offset"),
        ("timestamp,gpus\n2026-11-23T00:00:00Z,8.5\n2026-11-23T01:00:00Z,8\n", "'8.5' is not"),
        ("timestamp,gpus\n2026-11-23T00:00:00Z,-8\n2026-11-23T01:00:00Z,8\n", "line 2: -8 GPUs"),
        (
            "timestamp,gpus\n2026-11-23T01:00:00Z,8\n2026-11-23T01:00:00Z,8\n",
            "line 3: 2026-11-23T01:00:00+00:00 is not after the row before",
        ),
        ("timestamp,gpus\n2025-01-01T00:00:00Z,8\n2026-11-23T01:00:00Z,8\n", "more than 366"),
    ],
)
def test_a_bad_demand_file_is_one_clear_line(text: str, complaint: str) -> None:
    with pytest.raises(DemandInputError) as caught:
        parse_demand(text)
    assert complaint in str(caught.value) and "\n" not in str(caught.value)


def test_too_many_rows_are_refused_before_the_model_runs() -> None:
    rows = "\n".join(f"{(T0 + timedelta(minutes=m)).isoformat()},8" for m in range(MAX_SAMPLES + 1))
    with pytest.raises(DemandInputError, match="give 2 to 100000 rows"):
        parse_demand("timestamp,gpus\n" + rows)


def test_a_peak_beyond_the_curve_limit_is_refused() -> None:
    with pytest.raises(DemandInputError, match="the peak demand is 10001 instances"):
        plan_commitment(hourly([0, 80_008]), 8, PUBLISHED)


@pytest.mark.parametrize(
    ("fields", "complaint"),
    [
        ({"committed": -1.0}, "committed price -1.0 is not in"),
        ({"spot": math.nan}, "spot price nan"),
        ({"spot_interruptions_per_hour": 1.0, "spot_lost_hours": 1.0}, "must be in [0, 0.9]"),
        ({"spot_lost_hours": -1.0}, "both >= 0"),
    ],
)
def test_prices_out_of_range_are_refused(fields: dict[str, float], complaint: str) -> None:
    with pytest.raises(DemandInputError, match=re.escape(complaint)):
        Prices(**({**PUBLISHED.__dict__, **fields}))


# ---- the model ----------------------------------------------------------------------------
def test_a_commitment_dearer_than_bursting_never_pays() -> None:
    """HyperPod's assumed on-demand price held as a commitment is above EC2 on-demand's: a
    committed instance then never pays, however busy (break-even above 100 %)."""
    day = [64] * 8 + [104] * 3 + [152] * 2 + [104] * 7 + [64] * 4
    result = to_json(plan_commitment(hourly(day), 8, HYPERPOD_HELD))
    assert result["peak_instances"] == 19
    assert result["demanded_instance_hours"] == 264
    best = result["best_on_demand"]
    assert isinstance(best, dict)
    assert best["committed_instances"] == 0
    assert best["total_usd"] == round(264 * 55.04, 2)
    assert best["break_even_utilisation"] == round(98.32 / 55.04, 4)
    assert result["peak_committed_usd"] == round(19 * 24 * 98.32, 2)


def test_at_published_prices_the_day_commits_its_all_day_base() -> None:
    """A Capacity Block at 39.33 against 55.04 on demand pays where demand reaches an
    instance more than 71.5 % of the time: the day's 8 instances busy all day, not the 5
    busy half of it."""
    day = [64] * 8 + [104] * 3 + [152] * 2 + [104] * 7 + [64] * 4
    plan = plan_commitment(hourly(day), 8, PUBLISHED)
    assert plan.best_on_demand.committed_instances == 8
    assert plan.best_on_demand.total_on_demand_usd == pytest.approx(8 * 24 * 39.33 + 72 * 55.04)
    assert plan.best_on_demand.burst_hours == 12


def test_a_steady_base_with_weekday_peaks_commits_the_base_and_bursts_the_peaks() -> None:
    """A week: 8 instances all the time, 13 on weekdays from 08:00 to 20:00 (60 of 168 hours,
    35.7 %). At published prices the base is committed and the peaks are bought on demand."""
    monday = datetime(2026, 11, 23, tzinfo=UTC)
    week = [
        104 if (monday + timedelta(hours=h)).weekday() < 5 and 8 <= h % 24 < 20 else 64
        for h in range(7 * 24)
    ]
    plan = plan_commitment(hourly(week), 8, PUBLISHED)
    best = plan.best_on_demand
    assert best.committed_instances == 8
    assert (best.burst_instance_hours, best.burst_hours) == (5 * 60, 60)
    assert best.total_on_demand_usd == pytest.approx(8 * 168 * 39.33 + 300 * 55.04)
    assert best.total_on_demand_usd < min(
        plan.curve[0].total_on_demand_usd, plan.curve[-1].total_on_demand_usd
    )


def test_a_cheaper_commitment_covers_what_is_busy_most_of_the_time() -> None:
    """Committed at 40 against 55.04 on-demand, an instance pays where demand reaches it
    more than 72.7 % of the day: the 8 instances busy all day, not the 13 busy 12 hours."""
    day = [64] * 8 + [104] * 3 + [152] * 2 + [104] * 7 + [64] * 4
    plan = plan_commitment(hourly(day), 8, CHEAP_COMMITMENT)
    assert plan.best_on_demand.committed_instances == 8
    assert plan.best_on_demand.burst_instance_hours == 5 * 12 + 6 * 2
    assert plan.best_on_demand.burst_hours == 12


def test_a_gpu_over_a_whole_instance_needs_another_instance() -> None:
    assert [instances_needed(g, 8) for g in (0, 1, 8, 9, 16)] == [0, 1, 1, 2, 2]


def test_zero_demand_commits_nothing_and_costs_nothing() -> None:
    plan = plan_commitment(hourly([0] * 24), 8, CHEAP_COMMITMENT)
    assert plan.peak_instances == 0 and len(plan.curve) == 1
    assert plan.best_on_demand.committed_instances == 0
    assert plan.best_on_demand.total_on_demand_usd == 0


GPUS = st.integers(min_value=0, max_value=160)
PRICE = st.floats(min_value=0.5, max_value=200, allow_nan=False)


@settings(max_examples=200, deadline=None)
@given(st.lists(GPUS, min_size=2, max_size=48), st.sampled_from([1, 4, 8]), PRICE, PRICE)
def test_the_curve_is_the_model_and_its_minimum_is_the_cheapest_size(
    gpus: list[int], per: int, committed: float, burst: float
) -> None:
    prices = Prices(committed, burst, burst, 0.0, 0.0)
    plan = plan_commitment(hourly(gpus), per, prices)
    for k, row in enumerate(plan.curve):
        assert row.total_on_demand_usd == pytest.approx(direct_cost(gpus, per, k, committed, burst))
    best = plan.best_on_demand
    assert all(best.total_on_demand_usd <= row.total_on_demand_usd for row in plan.curve)
    # the smallest of the cheapest: nothing committed that does not pay
    assert all(
        row.total_on_demand_usd > best.total_on_demand_usd
        for row in plan.curve[: best.committed_instances]
    )


@settings(max_examples=200, deadline=None)
@given(st.lists(GPUS, min_size=2, max_size=48), PRICE, PRICE, st.integers(1, 20))
def test_a_commitment_beyond_the_peak_never_beats_the_peak(
    gpus: list[int], committed: float, burst: float, beyond: int
) -> None:
    prices = Prices(committed, burst, burst, 0.0, 0.0)
    plan = plan_commitment(hourly(gpus), 8, prices)
    at_least = hours_at_least(
        [(h, instances_needed(g, 8)) for h, g in intervals(hourly(gpus))], plan.peak_instances
    )
    over = point(plan.peak_instances + beyond, at_least, plan.span_hours, prices)
    assert over.total_on_demand_usd > plan.curve[-1].total_on_demand_usd
    assert over.burst_instance_hours == 0 and over.burst_hours == 0


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 50), st.integers(2, 48), PRICE, st.floats(1.01, 10))
def test_a_flat_demand_of_n_instances_commits_n_when_commitment_is_cheaper(
    n: int, hours: int, committed: float, markup: float
) -> None:
    prices = Prices(committed, committed * markup, committed * markup, 0.0, 0.0)
    plan = plan_commitment(hourly([8 * n] * hours), 8, prices)
    assert plan.best_on_demand.committed_instances == n
    assert plan.best_on_demand.burst_instance_hours == 0


@settings(max_examples=100, deadline=None)
@given(st.lists(GPUS, min_size=2, max_size=48), PRICE, st.floats(0.0, 0.9))
def test_spot_interruptions_only_make_spot_burst_dearer(
    gpus: list[int], spot: float, loss: float
) -> None:
    safe = plan_commitment(hourly(gpus), 8, Prices(50.0, 60.0, spot, 0.0, 0.0))
    risky = plan_commitment(hourly(gpus), 8, Prices(50.0, 60.0, spot, loss, 1.0))
    for calm, interrupted in zip(safe.curve, risky.curve, strict=True):
        assert interrupted.total_spot_usd >= calm.total_spot_usd
    assert risky.prices.effective_spot == pytest.approx(spot / (1 - loss))
