"""The HyperGuard REST API: one powertools resolver with validation, built by `create_app`
from one router per resource (hyperguard.api.routes).

Every route authenticates the caller (hyperguard.api.auth), validates its input before it
touches anything (pydantic through `enable_validation`, then the semantic checks of the
route or of the job lifecycle), and only then writes. Errors are raised as typed errors and
mapped in hyperguard.api.errors.
"""

from __future__ import annotations

from aws_lambda_powertools.event_handler import APIGatewayRestResolver

from hyperguard.api.auth import Caller, resolve_caller
from hyperguard.api.deps import ApiDependencies
from hyperguard.api.errors import register_error_handlers
from hyperguard.api.routes import incidents, jobs, policy, teams, views

TITLE = "HyperGuard API"
VERSION = "1.0.0"


def create_app(deps: ApiDependencies) -> APIGatewayRestResolver:
    app = APIGatewayRestResolver(enable_validation=True)
    register_error_handlers(app)

    def caller() -> Caller:
        identity = app.current_event.request_context.identity
        return resolve_caller(identity.user_arn, deps.teams, deps.admin_principals)

    for module in (jobs, teams, policy, views, incidents):
        app.include_router(module.routes(deps, caller))
    return app


def openapi_json(app: APIGatewayRestResolver | None = None) -> str:
    """The spec committed as docs/openapi.json (`python -m hyperguard.api > docs/openapi.json`).
    Without an app, one is built on stores that are never called (nothing connects until a
    request is served)."""
    if app is None:
        from hyperguard.api.nodes import UnavailableNodeActions
        from hyperguard.catalogue import StaticCatalogue
        from hyperguard.governance.service import NoWakeup
        from hyperguard.store import IncidentStore, JobStore, NodeStore, TeamStore
        from hyperguard.store.policy import RepairPolicyStore

        app = create_app(
            ApiDependencies(
                jobs=JobStore("-"),
                teams=TeamStore("-"),
                incidents=IncidentStore("-", "-"),
                nodes=NodeStore("-"),
                node_actions=UnavailableNodeActions(),
                wakeup=NoWakeup(),
                catalogue=StaticCatalogue({}),
                policies=RepairPolicyStore("-"),
            )
        )
    return str(
        app.get_openapi_json_schema(
            title=TITLE,
            version=VERSION,
            description="Jobs, team quotas, scheduler policy, node repair policy, views, "
            "incidents and node actions. Callers sign requests with SigV4 (API Gateway IAM "
            "authorization).",
        )
    )
