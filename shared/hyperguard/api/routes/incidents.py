"""/incidents and /nodes/{nodeId}/actions: what recovery did, and what operators ask of it."""

from __future__ import annotations

from typing import Annotated, Any

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Body, Path

from hyperguard.api.deps import ApiDependencies
from hyperguard.api.errors import NodeActionRejectedError, NotFoundError
from hyperguard.api.models import INSTANCE_ID, IncidentList, NodeActionRequest, NodeActionResult
from hyperguard.api.routes.common import CallerOf, Limit, new_router, ok

TOKENS = {"task_token", "wait_token"}
"""Step Functions task tokens: whoever holds one can resume a paused recovery."""


def routes(deps: ApiDependencies, caller: CallerOf) -> Router:
    router = new_router()

    @router.get("/incidents", summary="Incidents, newest first", tags=["incidents"])
    def list_incidents(limit: Limit = 50) -> Response[IncidentList]:
        caller()
        incidents = [
            i.model_dump(mode="json", exclude=TOKENS) for i in deps.incidents.recent(limit)
        ]
        return ok(IncidentList(incidents=incidents))

    @router.get("/incidents/<incidentId>", summary="An incident with timings", tags=["incidents"])
    def get_incident(
        incidentId: Annotated[str, Path(min_length=1, max_length=128)],
    ) -> Response[dict[str, Any]]:
        caller()
        incident = deps.incidents.get(incidentId)
        if incident is None:
            raise NotFoundError(f"no incident {incidentId}", "incidentId")
        detail = incident.model_dump(mode="json", exclude=TOKENS)
        detail["signals"] = deps.incidents.signals(incidentId)
        return ok(detail)

    @router.post("/nodes/<nodeId>/actions", summary="Operator action on a node", tags=["nodes"])
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
