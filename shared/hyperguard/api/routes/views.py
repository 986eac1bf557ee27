"""/views: what task governance's dashboards show, computed from the tables."""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Query

from hyperguard.api.deps import ApiDependencies
from hyperguard.api.models import ClusterView, GoodputView, PriorityClassViews, TeamViews
from hyperguard.api.routes.common import CallerOf, new_router, ok, responses
from hyperguard.api.views import (
    DEFAULT_GOODPUT_WINDOW_HOURS,
    GOODPUT_WINDOW_HOURS,
    read_cluster_view,
    read_goodput_view,
    read_priority_class_views,
    read_team_views,
)

WindowHours = Annotated[
    int,
    Query(
        ge=GOODPUT_WINDOW_HOURS[0],
        le=GOODPUT_WINDOW_HOURS[1],
        description="the window: the last N hours (1-720)",
    ),
]


def routes(deps: ApiDependencies, caller: CallerOf) -> Router:
    router = new_router()

    @router.get(
        "/views/teams",
        summary="GPUs allocated, allocated to tasks, borrowed, utilisation %, burst $/h and "
        "GPUs, GPU-hours today per team",
        tags=["views"],
        responses=responses(200, TeamViews),
    )
    def view_teams() -> Response[TeamViews]:
        who = caller()
        views = read_team_views(deps.teams, deps.jobs, deps.nodes, deps.catalogue, deps.clock())
        return ok(TeamViews(teams=[v for v in views if who.may_see_team(v.team)]))

    @router.get(
        "/views/priority-classes",
        summary="Jobs running, pending, preempted; run and wait times per class (24 h)",
        tags=["views"],
        responses=responses(200, PriorityClassViews),
    )
    def view_priority_classes() -> Response[PriorityClassViews]:
        caller()
        return ok(read_priority_class_views(deps.teams, deps.jobs, deps.clock()))

    @router.get(
        "/views/cluster",
        summary="Instances by health, GPUs installed / in use / idle, idle GPU-hours today, "
        "cost and GPU-hours per pool",
        tags=["views"],
        responses=responses(200, ClusterView),
    )
    def view_cluster() -> Response[ClusterView]:
        caller()
        view = read_cluster_view(deps.teams, deps.nodes, deps.jobs, deps.catalogue, deps.clock())
        return ok(view)

    @router.get(
        "/views/goodput",
        summary="Scheduling, runtime and overall goodput per job and team; badput per incident",
        tags=["views"],
        responses=responses(200, GoodputView),
    )
    def view_goodput(
        window_hours: WindowHours = DEFAULT_GOODPUT_WINDOW_HOURS,
    ) -> Response[GoodputView]:
        who = caller()
        view = read_goodput_view(
            deps.jobs,
            deps.incidents,
            deps.catalogue,
            deps.clock(),
            window_hours,
            visible=who.may_see_team,
        )
        return ok(view)

    return router
