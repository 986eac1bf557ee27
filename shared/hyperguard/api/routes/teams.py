"""/teams: compute quotas in SageMaker's shapes (CreateComputeQuota / UpdateComputeQuota)."""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Body, Query

from hyperguard.api.deps import ApiDependencies
from hyperguard.api.errors import InvalidRequestError, NotFoundError
from hyperguard.api.models import (
    MAX_VERSION,
    ComputeQuotaList,
    ComputeQuotaRequest,
    ComputeQuotaView,
)
from hyperguard.api.routes.common import (
    CallerOf,
    Limit,
    NextToken,
    TeamName,
    new_router,
    no_content,
    ok,
    responses,
)
from hyperguard.api.views import quota_view
from hyperguard.catalogue import UnknownInstanceTypeError
from hyperguard.models.governance import PARTITIONS_REFUSED, resolve_quota_resources
from hyperguard.store.jobs import decode_cursor, encode_cursor


def routes(deps: ApiDependencies, caller: CallerOf) -> Router:
    router = new_router()

    @router.put(
        "/teams/<team>/compute-quota",
        summary="Create or update",
        tags=["teams"],
        responses=responses(
            201,
            ComputeQuotaView,
            400,
            404,
            409,
            413,
            description="Created",
            also={200: "Updated (TargetVersion given)"},
        ),
    )
    def put_quota(
        team: TeamName, request: Annotated[ComputeQuotaRequest, Body()]
    ) -> Response[ComputeQuotaView]:
        caller().require_admin()
        if request.compute_quota_target.team_name != team:
            raise InvalidRequestError(
                f"ComputeQuotaTarget.TeamName must be the path's team {team!r}",
                "ComputeQuotaTarget.TeamName",
            )
        config = request.compute_quota_config
        for index, resources in (
            *(
                (f"ComputeQuotaResources[{i}]", [r])
                for i, r in enumerate(config.compute_quota_resources)
            ),
            *(
                (f"ResourceSharingConfig.AbsoluteBorrowLimits[{i}]", [r])
                for i, r in enumerate(config.resource_sharing_config.absolute_borrow_limits or [])
            ),
        ):
            if resources[0].accelerator_partition is not None:
                raise InvalidRequestError(
                    PARTITIONS_REFUSED, f"ComputeQuotaConfig.{index}.AcceleratorPartition"
                )
            try:
                resolve_quota_resources(resources, deps.catalogue)
            except (UnknownInstanceTypeError, ValueError):
                raise InvalidRequestError(
                    f"unknown or accelerator-less instance type {resources[0].instance_type!r}",
                    f"ComputeQuotaConfig.{index}.InstanceType",
                ) from None
        stored = deps.teams.put_quota(request.quota(), target_version=request.target_version)
        deps.wakeup.wake("quota changed")
        return ok(
            quota_view(stored, deps.catalogue), 201 if request.target_version is None else 200
        )

    @router.get(
        "/teams/<team>/compute-quota",
        summary="A team's quota, resolved",
        tags=["teams"],
        responses=responses(200, ComputeQuotaView, 404),
    )
    def get_quota(team: TeamName) -> Response[ComputeQuotaView]:
        caller().require_team(team)
        quota = deps.teams.get_quota(team)
        if quota is None:
            raise NotFoundError(f"team {team} has no compute quota", "team")
        return ok(quota_view(quota, deps.catalogue))

    @router.delete(
        "/teams/<team>/compute-quota",
        summary="Delete a quota",
        tags=["teams"],
        responses=responses(204, None, 404, 409, description="Deleted"),
    )
    def delete_quota(
        team: TeamName,
        target_version: Annotated[
            int | None, Query(alias="TargetVersion", ge=1, le=MAX_VERSION)
        ] = None,
    ) -> Response[None]:
        caller().require_admin()
        deps.teams.delete_quota(team, target_version=target_version)
        deps.wakeup.wake("quota deleted")
        return no_content()

    @router.get(
        "/teams",
        summary="Teams and their quotas",
        tags=["teams"],
        responses=responses(200, ComputeQuotaList, 400),
    )
    def list_teams(limit: Limit = 50, next_token: NextToken = None) -> Response[ComputeQuotaList]:
        who = caller()
        if not who.admin:
            own = deps.teams.get_quota(who.team) if who.team else None
            return ok(
                ComputeQuotaList(compute_quotas=[quota_view(own, deps.catalogue)] if own else [])
            )
        after = decode_cursor(next_token, ("sk",))["sk"] if next_token else None
        quotas, last = deps.teams.quota_page(limit, after)
        return ok(
            ComputeQuotaList(
                compute_quotas=[quota_view(q, deps.catalogue) for q in quotas],
                next_token=encode_cursor({"sk": last}) if last else None,
            )
        )

    return router
