"""Cluster policy: the scheduler config (SageMaker's ClusterSchedulerConfig shape), the node
repair policy (EKS's nodeRepairConfig shape plus HyperGuard's additions), the burst policy
(prices, committed pools, spend caps), and who may call."""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Body

from hyperguard.api.deps import ApiDependencies
from hyperguard.api.errors import InvalidRequestError
from hyperguard.api.models import (
    PrincipalGrantBody,
    PrincipalList,
    SchedulerConfigRequest,
    SchedulerConfigView,
)
from hyperguard.api.routes.common import CallerOf, new_router, ok, responses
from hyperguard.cluster.prerequisites import ClusterPrerequisites
from hyperguard.policies.burst import BurstPolicy
from hyperguard.policies.repair import NodeRepairConfig
from hyperguard.policies.repairers import Repairers, RepairOwners, owners


def routes(deps: ApiDependencies, caller: CallerOf) -> Router:
    router = new_router()

    @router.put(
        "/scheduler-config",
        summary="Set the cluster policy",
        tags=["policy"],
        responses=responses(200, SchedulerConfigView, 400, 409, 413),
    )
    def put_scheduler_config(
        request: Annotated[SchedulerConfigRequest, Body()],
    ) -> Response[SchedulerConfigView]:
        caller().require_admin()
        config = request.config()
        version = deps.teams.put_scheduler_config(config, target_version=request.target_version)
        deps.wakeup.wake("scheduler config changed")
        return ok(SchedulerConfigView(scheduler_config=config, version=version))

    @router.get(
        "/scheduler-config",
        summary="The cluster policy",
        tags=["policy"],
        responses=responses(200, SchedulerConfigView),
    )
    def get_scheduler_config() -> Response[SchedulerConfigView]:
        caller()
        config, version = deps.teams.scheduler_config()
        return ok(SchedulerConfigView(scheduler_config=config, version=version))

    @router.put(
        "/policies/node-repair",
        summary="Set the node repair policy",
        tags=["policy"],
        responses=responses(200, NodeRepairConfig, 400, 413),
    )
    def put_repair_policy(
        policy: Annotated[NodeRepairConfig, Body()],
    ) -> Response[NodeRepairConfig]:
        caller().require_admin()
        deps.policies.put(policy)
        deps.wakeup.wake("node repair policy changed")  # hot spares change capacity
        return ok(policy)

    @router.get(
        "/policies/node-repair",
        summary="The node repair policy",
        tags=["policy"],
        responses=responses(200, NodeRepairConfig),
    )
    def get_repair_policy() -> Response[NodeRepairConfig]:
        caller()
        return ok(deps.policies.get())

    @router.get(
        "/repairers",
        summary="Who repairs what",
        tags=["policy"],
        responses=responses(200, RepairOwners),
    )
    def get_repairers() -> Response[RepairOwners]:
        """The cluster's other repairers as the inventory last saw them (HyperPod's node
        recovery, Karpenter's node repair, EKS node auto-repair, the Node Termination
        Handler), and, per the repair policy, who repairs where (D148)."""
        caller()
        seen = deps.repairers.get() if deps.repairers is not None else Repairers()
        return ok(RepairOwners(owners=owners(seen, deps.policies.get()), seen=seen))

    @router.get(
        "/cluster/prerequisites",
        summary="What HyperGuard needs installed in the cluster (admin)",
        description="Read now from the cluster's API server with the API function's role: the "
        "versions served of Kueue's API (HyperGuard writes v1beta2) and of the HyperPod "
        "training operator's HyperPodPyTorchJob, and each Karpenter NodePool with its limits "
        "and node class. `hyperguard preflight` checks them.",
        tags=["policy"],
        responses=responses(200, ClusterPrerequisites, 501, 502),
    )
    def get_prerequisites() -> Response[ClusterPrerequisites]:
        caller().require_admin()
        return ok(deps.cluster.prerequisites())

    @router.put(
        "/policies/burst",
        summary="Set the burst policy: prices, committed pools, spend caps",
        tags=["policy"],
        responses=responses(200, BurstPolicy, 400, 413),
    )
    def put_burst_policy(policy: Annotated[BurstPolicy, Body()]) -> Response[BurstPolicy]:
        caller().require_admin()
        deps.burst_policies.put(policy)
        deps.wakeup.wake("burst policy changed")  # prices, committed pools, caps place jobs
        return ok(policy)

    @router.get(
        "/policies/burst",
        summary="The burst policy (the documented defaults until one is set); a team member "
        "sees only their own team's spend caps",
        tags=["policy"],
        responses=responses(200, BurstPolicy),
    )
    def get_burst_policy() -> Response[BurstPolicy]:
        who = caller()
        policy = deps.burst_policies.get()
        return ok(policy if who.admin else policy.seen_by_team(who.team))

    @router.put(
        "/principals",
        summary="Map an IAM principal to a team / admin",
        tags=["access"],
        responses=responses(200, PrincipalGrantBody, 400, 413),
    )
    def put_principal(grant: Annotated[PrincipalGrantBody, Body()]) -> Response[PrincipalGrantBody]:
        caller().require_admin()
        if grant.team is None and not grant.admin:
            raise InvalidRequestError("a principal needs a team or the admin role", "team")
        deps.teams.grant(grant.principal_arn, team=grant.team, admin=grant.admin)
        return ok(grant)

    @router.get(
        "/principals",
        summary="The principal mappings",
        tags=["access"],
        responses=responses(200, PrincipalList),
    )
    def list_principals() -> Response[PrincipalList]:
        caller().require_admin()
        grants = [
            PrincipalGrantBody(principal_arn=g.principal_arn, team=g.team, admin=g.admin)
            for g in deps.teams.principals()
        ]
        return ok(PrincipalList(principals=grants))

    return router
