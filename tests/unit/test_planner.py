"""The planner against the published HyperPod reliability analysis, formula by formula.

The reference (/work/shared/reference/burst-elastic.md, aws-interfaces.md) publishes the
example's inputs, 40 / 280 minutes per failure and 0.02-0.07 % per instance-hour, but not
its results; the expected figures below are worked by hand from the published formulas.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable

import pytest

from hyperguard import planning
from hyperguard.planning import PlanInputError, PlanInputs

PUBLISHED = PlanInputs(
    instances=256,  # ml.p5.48xlarge
    gpus_per_instance=8,
    failure_rate=0.0005,  # 0.05 % per instance-hour
    gpu_hours=10_000_000,
    downtime_min=40,
    baseline_downtime_min=280,
    gpu_hour_cost=5,
)


def test_the_published_example() -> None:
    """Worked by hand:
    failures per hour = 256 * 0.0005 = 0.128; MTBF = 1 / 0.128 = 7.8125 h.
    compute days = 10,000,000 / (256 * 8) / 24 = 4,882.8125 h / 24 = 203.4505 days,
      so 4,882.8125 * 0.128 = 625 failures over the run.
    days lost = 625 * 40 min = 25,000 min = 17.3611 days (280 min: 121.5278 days).
    days to train = 203.4505 + 17.3611 = 220.8116 (baseline 324.9783).
    improvement = 1 - 220.8116 / 324.9783 = 32.0534 %; days saved = 104.1667 = 2,500 h.
    cost saved = 2,500 h * 2,048 GPUs * $5 = $25,600,000.
    """
    result = planning.plan(PUBLISHED)
    assert result["mtbf_hours"] == 7.8125
    assert result["expected_failures"] == 625
    assert result["compute_days"] == pytest.approx(203.4505, abs=1e-4)
    assert result["days_lost"] == pytest.approx(17.3611, abs=1e-4)
    assert result["days_lost_baseline"] == pytest.approx(121.5278, abs=1e-4)
    assert result["days_to_train"] == pytest.approx(220.8116, abs=1e-4)
    assert result["days_to_train_baseline"] == pytest.approx(324.9783, abs=1e-4)
    assert result["improvement_pct"] == pytest.approx(32.0534, abs=1e-4)
    assert result["days_saved"] == pytest.approx(104.1667, abs=1e-4)
    assert result["cost_saved_usd"] == pytest.approx(25_600_000, abs=0.01)


def test_each_strategys_downtime_is_the_published_components_plus_the_measured_overhead() -> None:
    """Worked by hand from 90 s detection + 2.4 s HyperGuard overhead = 92.4 s:
    wait_for_repair 92.4 + 900 + 1,410 = 2,402.4 s = 40.04 min (the published 40 min),
    hot_spare 92.4 + 1,410 = 25.04 min, move 92.4 + 300 + 1,410 = 30.04 min,
    elastic_shrink 92.4 + 2 * 300 + 900 / 256 = 696.9156 s = 11.599 min."""
    strategies = planning.plan(PUBLISHED)["strategies"]
    assert {name: s["downtime_min"] for name, s in strategies.items()} == {
        "wait_for_repair": 40.04,
        "hot_spare": 25.04,
        "elastic_shrink": 11.599,
        "move": 30.04,
    }
    # 625 failures * 25.04 min = 15,650 min = 10.8681 days; 1 - 214.3186 / 324.9783
    assert strategies["hot_spare"]["days_lost"] == pytest.approx(10.8681, abs=1e-4)
    assert strategies["hot_spare"]["improvement_pct"] == pytest.approx(34.0514, abs=1e-3)
    assert "elastic_shrink" not in planning.strategy_downtimes(1)  # nothing keeps training


def test_the_tradeoff_is_the_share_of_time_lost_per_size() -> None:
    curves = planning.tradeoff([16, 256], 0.0005)["strategies"]
    assert isinstance(curves, dict)
    # 16 * 0.0005 failures/h * 40.04/60 h = 0.005339 of compute time lost; / (1 + it)
    assert curves["wait_for_repair"]["pct_time_lost"][0] == pytest.approx(0.5310, abs=1e-3)
    at_256 = {name: c["pct_time_lost"][1] for name, c in curves.items()}
    assert sorted(at_256, key=at_256.__getitem__) == [
        "elastic_shrink",
        "hot_spare",
        "move",
        "wait_for_repair",
    ]


def test_each_formula() -> None:
    assert planning.failures_per_hour(256, 0.0005) == pytest.approx(0.128)
    assert planning.mtbf_hours(16, 0.001) == pytest.approx(62.5)
    assert planning.compute_days(48_000, 10, 8) == pytest.approx(25)
    assert planning.days_lost(25, 0.5, 30) == pytest.approx(6.25)  # 25 * 0.5 * 0.5 h
    assert planning.improvement(75, 100) == pytest.approx(0.25)
    assert planning.cost_saved(2, 80, 3) == pytest.approx(2 * 24 * 80 * 3)


def test_a_downtime_above_the_baseline_is_a_negative_improvement() -> None:
    slower = PlanInputs(16, 8, 0.001, 10_000, 60, 30, 2)
    result = planning.plan(slower)
    assert result["improvement_pct"] < 0 and result["days_saved"] < 0


def test_mtbf_grid_rounds_up_without_float_noise() -> None:
    grid = planning.mtbf_grid([4, 8, 256, 2048], [0.0001, 0.0005, 0.00001])
    assert grid["sizes"] == [4, 8, 256, 2048]
    # 1 / (4 * 0.0001) is 2499.9999999999995 in floating point: still 2500, not 2501
    assert grid["grid"] == {
        "0.0001": [2500, 1250, 40, 5],
        "0.0005": [500, 250, 8, 1],
        "0.00001": [25000, 12500, 391, 49],
    }


def test_reduction_grid_is_the_improvement_whatever_the_gpu_hours() -> None:
    grid = planning.reduction_grid([16, 256], [0.0005], 40, 280)
    assert grid == {"sizes": [16, 256], "grid": {"0.0005": [3.08, 32.05]}}
    rows = grid["grid"]
    assert isinstance(rows, dict)
    assert rows["0.0005"][1] == round(planning.plan(PUBLISHED)["improvement_pct"], 2)


def test_hot_spares_keep_the_shortfall_below_the_target() -> None:
    # the example: λ = 256 * 0.0005 * 15 / 60 = 0.032; P(N > 0) = 3.1 % > 1 %,
    # P(N > 1) = 1 - e^-λ (1 + λ) = 0.050 % < 1 %
    assert planning.hot_spares(256, 0.0005, 15, 0.01) == 1
    assert planning.shortfall_probability(0, 0.032) == pytest.approx(1 - math.exp(-0.032))
    assert planning.shortfall_probability(1, 0.032) == pytest.approx(0.000501, abs=1e-6)
    result = planning.plan(PUBLISHED)
    assert result["hot_spares"] == 1
    assert result["hot_spares_shortfall_probability"] == pytest.approx(0.000501)
    assert planning.hot_spares(256, 0.0005, 15, 0.0001) == 2
    assert planning.hot_spares(1, 0.0001, 1, 0.5) == 0


def test_hot_spares_for_a_huge_expected_count_neither_underflow_nor_exceed_the_cluster() -> None:
    # λ = 2,000 (e^-λ underflows to 0): about λ + 2.33 √λ spares for 1 %
    spares = planning.hot_spares(20_000, 0.1, 60, 0.01)
    assert 2_000 + 2.2 * math.sqrt(2_000) < spares < 2_000 + 2.5 * math.sqrt(2_000)
    assert planning.hot_spares(4, 1.0, 600, 0.01) == 4


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"instances": 0}, "instances"),
        ({"instances": planning.MAX_INSTANCES + 1}, "instances"),
        ({"gpus_per_instance": 0}, "gpus_per_instance"),
        ({"gpus_per_instance": planning.MAX_GPUS + 1}, "gpus_per_instance"),
        ({"failure_rate": 0}, "failure_rate"),
        ({"failure_rate": 1.01}, "failure_rate"),
        ({"failure_rate": math.nan}, "failure_rate"),
        ({"gpu_hours": 0}, "gpu_hours"),
        ({"gpu_hours": math.inf}, "gpu_hours"),
        ({"downtime_min": -1}, "downtime_min"),
        ({"baseline_downtime_min": -0.5}, "baseline_downtime_min"),
        ({"gpu_hour_cost": -1}, "gpu_hour_cost"),
        ({"replacement_min": 0}, "replacement_min"),
        ({"target": 0}, "target"),
        ({"target": 0.6}, "target"),
    ],
)
def test_inputs_out_of_range_name_their_field(fields: dict[str, float], field: str) -> None:
    values = {**PUBLISHED.__dict__, **fields}
    with pytest.raises(PlanInputError) as caught:
        PlanInputs(**values)
    assert caught.value.field == field


@pytest.mark.parametrize(
    ("sizes", "rates", "field"),
    [
        ([], [0.001], "sizes"),
        (list(range(1, planning.MAX_GRID + 2)), [0.001], "sizes"),
        ([4, 4], [0.001], "sizes"),
        ([0], [0.001], "sizes"),
        ([4], [0.001, 0.001], "rates"),
        ([4], [2.0], "rates"),
    ],
)
def test_grids_refuse_bad_lists(sizes: list[int], rates: list[float], field: str) -> None:
    grids: tuple[Callable[[], object], ...] = (
        lambda: planning.mtbf_grid(sizes, rates),
        lambda: planning.reduction_grid(sizes, rates, 40, 280),
    )
    for grid in grids:
        with pytest.raises(PlanInputError) as caught:
            grid()
        assert caught.value.field == field


def test_the_planner_imports_nothing_heavy() -> None:
    import subprocess
    import sys

    code = "import sys, hyperguard.planning; print(sorted(m for m in sys.modules if 'boto' in m))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# ---- the same figures through the API -----------------------------------------------------
ADMIN = "arn:aws:iam::123456789012:role/admin"


class NoGrants:
    """A TeamStore with no principals mapped: only the bootstrap admin gets in."""

    def principal(self, _arn: str) -> None:
        return None


def _post_plan(body: str, principal: str = ADMIN) -> tuple[int, dict[str, object]]:
    from hyperguard.api.app import create_app, offline_dependencies
    from hyperguard_twin.api_gateway import ApiGatewayProxy

    app = create_app(offline_dependencies(teams=NoGrants(), admin_principals=frozenset({ADMIN})))
    event = ApiGatewayProxy(lambda e: e, ["/plan"]).event(
        "POST",
        "/plan",
        headers=[("X-HyperGuard-Principal", principal), ("Content-Type", "application/json")],
        body=body.encode(),
    )
    assert event is not None
    result = app.resolve(event, None)  # type: ignore[arg-type]
    return result["statusCode"], json.loads(result["body"])


def test_post_plan_answers_what_the_cli_prints() -> None:
    status, body = _post_plan(json.dumps(PUBLISHED.__dict__))
    assert status == 200
    assert body == planning.plan(PUBLISHED)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"failure_rate": 0}, "failure_rate"),
        ({"instances": 0}, "instances"),
        ({"downtime_min": -1}, "downtime_min"),
        ({"target": 0.9}, "target"),
        ({"surprise": 1}, "surprise"),
    ],
)
def test_post_plan_refuses_what_the_planner_refuses(change: dict[str, float], field: str) -> None:
    status, body = _post_plan(json.dumps({**PUBLISHED.__dict__, **change}))
    assert status == 422
    assert body["field"] == field and body["error"]


def test_post_plan_errors_have_the_error_body() -> None:
    status, body = _post_plan("{not json")
    assert status == 400 and set(body) >= {"error", "field"}
    stranger = "arn:aws:iam::123456789012:role/stranger"
    status, body = _post_plan(json.dumps(PUBLISHED.__dict__), principal=stranger)
    assert status == 403 and set(body) >= {"error", "field"}
