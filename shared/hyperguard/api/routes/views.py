"""/views: what task governance's dashboards show, computed from the tables."""

from __future__ import annotations

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router

from hyperguard.api.deps import ApiDependencies
from hyperguard.api.models import ClusterView, PriorityClassViews, TeamViews
from hyperguard.api.routes.common import CallerOf, new_router, ok, responses
from hyperguard.api.views import cluster_view, priority_class_views, team_views


def routes(deps: ApiDependencies, caller: CallerOf) -> Router:
    router = new_router()

    @router.get(
        "/views/teams",
        summary="GPUs allocated, in use, borrowed per team",
        tags=["views"],
        responses=responses(200, TeamViews),
    )
    def view_teams() -> Response[TeamViews]:
        who = caller()
        views = team_views(deps.teams.quotas(), deps.jobs.active(), deps.catalogue)
        return ok(TeamViews(teams=[v for v in views if who.may_see_team(v.team)]))

    @router.get(
        "/views/priority-classes",
        summary="Run and wait times per class",
        tags=["views"],
        responses=responses(200, PriorityClassViews),
    )
    def view_priority_classes() -> Response[PriorityClassViews]:
        caller()
        config, _ = deps.teams.scheduler_config()
        views = priority_class_views(config, deps.jobs.records(), deps.clock())
        return ok(PriorityClassViews(priority_classes=views))

    @router.get(
        "/views/cluster",
        summary="Instances, jobs and capacity",
        tags=["views"],
        responses=responses(200, ClusterView),
    )
    def view_cluster() -> Response[ClusterView]:
        caller()
        return ok(cluster_view(deps.nodes.all(), deps.jobs.active(), deps.catalogue))

    return router
