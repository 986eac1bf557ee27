"""/plan: what failures cost a training run (hyperguard.planning), as `hyperguard plan` prints
it. Computed from the body alone: nothing is read or written."""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Body
from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt

from hyperguard import planning
from hyperguard.api.deps import ApiDependencies
from hyperguard.api.errors import InvalidRequestError
from hyperguard.api.routes.common import CallerOf, new_router, ok, responses


class PlanRequest(BaseModel):
    """One training run on one cluster; the ranges are hyperguard.planning's."""

    model_config = ConfigDict(extra="forbid")

    instances: StrictInt = Field(
        ge=1, le=planning.MAX_INSTANCES, description="instances in the cluster"
    )
    gpus_per_instance: StrictInt = Field(
        ge=1, le=planning.MAX_GPUS, description="ml.p5.48xlarge: 8"
    )
    failure_rate: StrictFloat = Field(
        ge=planning.MIN_RATE,
        le=1,
        description="failures per instance-hour, a fraction: 0.0005 is 0.05 %",
    )
    gpu_hours: StrictFloat = Field(
        ge=planning.MIN_GPU_HOURS, le=planning.MAX_GPU_HOURS, description="GPU-hours to train"
    )
    downtime_min: StrictFloat = Field(
        ge=0, le=planning.MAX_DOWNTIME_MIN, description="minutes lost per failure (HyperPod: 40)"
    )
    baseline_downtime_min: StrictFloat = Field(
        ge=0,
        le=planning.MAX_DOWNTIME_MIN,
        description="minutes lost per failure without fast recovery (published: 280)",
    )
    gpu_hour_cost: StrictFloat = Field(
        ge=0, le=planning.MAX_GPU_HOUR_COST, description="price of one GPU-hour, USD"
    )
    replacement_min: StrictFloat = Field(
        default=planning.PUBLISHED_REPLACEMENT_MIN,
        gt=0,
        le=planning.MAX_DOWNTIME_MIN,
        description="minutes to replace a failed node (HyperPod's published time)",
    )
    target: StrictFloat = Field(
        default=planning.DEFAULT_SPARE_TARGET,
        ge=planning.MIN_TARGET,
        le=0.5,
        description="acceptable chance of running out of hot spares during one replacement",
    )


class StrategyPlan(BaseModel):
    downtime_min: float = Field(
        description="whole-job downtime per failure: published component times plus "
        "HyperGuard's measured overhead (hyperguard.planning.strategy_downtimes)"
    )
    days_lost: float
    improvement_pct: float = Field(description="% less training time than the baseline")


class PlanResult(BaseModel):
    compute_days: float = Field(description="days of training if nothing failed")
    failures_per_hour: float
    expected_failures: float = Field(description="failures over the run")
    mtbf_hours: float = Field(description="the cluster's mean time between failures")
    days_lost: float
    days_lost_baseline: float
    days_to_train: float
    days_to_train_baseline: float
    improvement_pct: float = Field(description="% less training time (negative: more)")
    days_saved: float
    cost_saved_usd: float
    hot_spares: int = Field(
        description="the fewest spares that keep the chance of more failures during one "
        "replacement than spares below `target`"
    )
    hot_spares_shortfall_probability: float
    strategies: dict[str, StrategyPlan] = Field(
        description="the run under each HyperGuard strategy: wait_for_repair, hot_spare, "
        "elastic_shrink (two instances at least), move"
    )


def routes(deps: ApiDependencies, caller: CallerOf) -> Router:
    router = new_router()

    @router.post(
        "/plan",
        summary="What failures cost a training run, with and without fast recovery",
        tags=["plan"],
        responses=responses(200, PlanResult, 400, 413),
    )
    def plan(request: Annotated[PlanRequest, Body()]) -> Response[PlanResult]:
        caller()
        try:
            inputs = planning.PlanInputs(**request.model_dump())
        except planning.PlanInputError as exc:  # the model's ranges are the planner's: a guard
            raise InvalidRequestError(exc.message, exc.field) from exc
        return ok(PlanResult.model_validate(planning.plan(inputs)))

    return router
