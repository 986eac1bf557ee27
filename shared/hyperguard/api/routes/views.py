"""/views: what task governance's dashboards show, computed from the tables."""

from __future__ import annotations

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router

from hyperguard.api.deps import ApiDependencies
from hyperguard.api.models import ClusterView, PriorityClassViews, TeamViews
from hyperguard.api.routes.common import CallerOf, new_router, ok, responses
from hyperguard.api.views import read_cluster_view, read_priority_class_views, read_team_views


def routes(deps: ApiDependencies, caller: CallerOf) -> Router:
    router = new_router()

    @router.get(
        "/views/teams",
        summary="GPUs allocated, allocated to tasks, borrowed, utilisation % per team",
        tags=["views"],
        responses=responses(200, TeamViews),
    )
    def view_teams() -> Response[TeamViews]:
        who = caller()
        views = read_team_views(deps.teams, deps.jobs, deps.catalogue)
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
        summary="Instances by health, GPUs installed / in use / idle, idle GPU-hours today",
        tags=["views"],
        responses=responses(200, ClusterView),
    )
    def view_cluster() -> Response[ClusterView]:
        caller()
        return ok(read_cluster_view(deps.nodes, deps.jobs, deps.catalogue, deps.clock()))

    return router
