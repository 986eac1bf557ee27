"""/incidents, /nodes/reliability and /nodes/{nodeId}/actions: what recovery did, how each
node fares, and what operators ask of it."""

from __future__ import annotations

from typing import Annotated, Any

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Body, Path, Query

from hyperguard.api.auth import Caller
from hyperguard.api.deps import ApiDependencies
from hyperguard.api.errors import NodeActionRejectedError, NotFoundError
from hyperguard.api.models import (
    INSTANCE_ID,
    IncidentList,
    IncidentView,
    NodeActionRequest,
    NodeActionResult,
)
from hyperguard.api.reliability import (
    DEFAULT_NODES,
    MAX_NODES,
    NodeReliabilityView,
    read_node_reliability,
)
from hyperguard.api.routes.common import CallerOf, Limit, new_router, ok, responses
from hyperguard.models import Incident

TOKENS = {"task_token", "wait_token"}
"""Step Functions task tokens: whoever holds one can resume a paused recovery."""


def _shown(
    incident: Incident, who: Caller, signals: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """The incident as `who` may see it: never its task tokens; a team member only the
    jobs of their own team (another team's job ids and checkpoint locations stay hidden,
    as GET /jobs/{id} hides them)."""
    shown = incident.model_dump(mode="json", exclude=TOKENS | {"jobs"})
    shown["jobs"] = [
        job.model_dump(mode="json")
        for job in incident.jobs
        if who.admin or (job.team is not None and who.may_see_team(job.team))
    ]
    if signals is not None:
        shown["signals"] = signals
    return shown


def visible(incident: Incident, who: Caller) -> bool:
    """Whether `who` may see the incident at all: a node's, everyone (the cluster's health
    is every team's to see); one about a job (a stall, D117), only the job's team and
    admins, as GET /jobs/{id} shows the job."""
    if who.admin or not incident.about_job:
        return True
    return any(job.team is not None and who.may_see_team(job.team) for job in incident.jobs)


def routes(deps: ApiDependencies, caller: CallerOf) -> Router:
    router = new_router()

    @router.get(
        "/incidents",
        summary="Incidents, newest first",
        tags=["incidents"],
        responses=responses(200, IncidentList),
    )
    def list_incidents(limit: Limit = 50) -> Response[IncidentList]:
        who = caller()
        shown = [_shown(i, who) for i in deps.incidents.recent(limit) if visible(i, who)]
        return ok({"incidents": shown})

    @router.get(
        "/incidents/<incidentId>",
        summary="An incident with timings",
        tags=["incidents"],
        responses=responses(200, IncidentView, 404),
    )
    def get_incident(
        incidentId: Annotated[str, Path(min_length=1, max_length=128)],
    ) -> Response[IncidentView]:
        who = caller()
        incident = deps.incidents.get(incidentId)
        if incident is None or not visible(incident, who):
            raise NotFoundError(f"no incident {incidentId}", "incidentId")
        return ok(_shown(incident, who, deps.incidents.signals(incidentId)))

    @router.get(
        "/nodes/reliability",
        summary="Each node's faults, causes and MTBF over the lemon window, repeat offenders "
        "first (admin)",
        tags=["nodes"],
        responses=responses(200, NodeReliabilityView),
    )
    def node_reliability(
        limit: Annotated[int, Query(ge=1, le=MAX_NODES)] = DEFAULT_NODES,
    ) -> Response[NodeReliabilityView]:
        caller().require_admin()
        view = read_node_reliability(
            deps.incidents, deps.nodes, deps.policies.get(), deps.clock(), limit
        )
        return ok(view)

    @router.post(
        "/nodes/<nodeId>/actions",
        summary="Operator action on a node",
        tags=["nodes"],
        responses=responses(202, NodeActionResult, 400, 404, 409, 413, 501),
    )
    def node_action(
        nodeId: Annotated[str, Path(pattern=INSTANCE_ID)],
        request: Annotated[NodeActionRequest, Body()],
    ) -> Response[NodeActionResult]:
        caller().require_admin()
        actions = deps.node_actions
        match request.action:
            case "veto":
                result = actions.veto(nodeId, request.reason or "")
            case "approve":
                incident_id = request.incident_id
                if incident_id is None:
                    node = deps.nodes.get(nodeId)
                    incident_id = node.open_incident_id if node else None
                if incident_id is None:
                    raise NodeActionRejectedError(
                        f"node {nodeId} has no open incident to approve", "incident_id"
                    )
                result = actions.approve(incident_id)
            case "cordon":
                result = actions.cordon(nodeId)
            case "uncordon":
                result = actions.uncordon(nodeId)
            case "reboot":
                result = actions.reboot(nodeId)
            case _:
                result = actions.replace(nodeId)
        return ok(NodeActionResult(node_id=nodeId, action=request.action, result=result), 202)

    return router
