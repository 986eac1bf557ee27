"""The HyperGuard REST API: one powertools resolver with validation, built by `create_app`.

Every route authenticates the caller (hyperguard.api.auth), validates its input before it
touches anything (pydantic through `enable_validation`, then the semantic checks here), and
only then writes. Errors are raised as typed errors and mapped in hyperguard.api.errors.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any

from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response, content_types
from aws_lambda_powertools.event_handler.openapi.params import Body, Header, Path, Query

from hyperguard.api.auth import Caller, resolve_caller
from hyperguard.api.errors import (
    ConflictError,
    InvalidRequestError,
    NodeActionRejectedError,
    NotFoundError,
    register_error_handlers,
)
from hyperguard.api.models import (
    ACCELERATOR_INSTANCE,
    IDEMPOTENCY_KEY,
    INSTANCE_ID,
    CheckpointReport,
    ClusterView,
    ComputeQuotaList,
    ComputeQuotaRequest,
    ComputeQuotaView,
    IncidentList,
    JobPage,
    JobSubmission,
    JobView,
    NodeActionRequest,
    NodeActionResult,
    PrincipalGrantBody,
    PrincipalList,
    PriorityClassViews,
    SchedulerConfigRequest,
    SchedulerConfigView,
    TeamViews,
)
from hyperguard.api.nodes import NodeActions
from hyperguard.api.views import cluster_view, priority_class_views, quota_view, team_views
from hyperguard.catalogue import InstanceCatalogue, UnknownInstanceTypeError, ml_name
from hyperguard.governance.service import SchedulerWakeup, wakeup_for
from hyperguard.models import Checkpoint, Job, JobStatus, utcnow
from hyperguard.models.governance import TEAM_NAME_PATTERN, resolve_quota_resources
from hyperguard.recovery.policy import NodeRepairConfig
from hyperguard.settings import Settings
from hyperguard.store import IncidentStore, JobStore, NodeStore, TeamStore
from hyperguard.store.jobs import (
    TERMINAL_STATUSES,
    JobEvent,
    JobHistoryEntry,
    JobRecord,
    TransitionOutcome,
    decode_cursor,
    encode_cursor,
)
from hyperguard.store.policy import RepairPolicyStore

TITLE = "HyperGuard API"
VERSION = "1.0.0"
_JSON = content_types.APPLICATION_JSON
_CANCEL_ATTEMPTS = 3

TeamName = Annotated[str, Path(pattern=TEAM_NAME_PATTERN, min_length=1, max_length=63)]
JobId = Annotated[str, Path(min_length=1, max_length=128)]
Limit = Annotated[int, Query(ge=1, le=100)]
NextToken = Annotated[str | None, Query(max_length=2048)]


@dataclass
class ApiDependencies:
    jobs: JobStore
    teams: TeamStore
    incidents: IncidentStore
    nodes: NodeStore
    node_actions: NodeActions
    wakeup: SchedulerWakeup
    catalogue: InstanceCatalogue
    policies: RepairPolicyStore
    admin_principals: frozenset[str] = frozenset()
    clock: Callable[[], datetime] = utcnow

    @classmethod
    def from_settings(
        cls, settings: Settings, node_actions: NodeActions, catalogue: InstanceCatalogue
    ) -> ApiDependencies:
        """The deployed wiring: stores on the stack's tables, the scheduler's queue."""
        return cls(
            jobs=JobStore(
                settings.jobs_table,
                idempotency_table_name=settings.idempotency_table,
                idempotency_ttl_s=settings.idempotency_ttl_s,
            ),
            teams=TeamStore(settings.teams_table),
            incidents=IncidentStore(settings.incidents_table, settings.nodes_table),
            nodes=NodeStore(settings.nodes_table),
            node_actions=node_actions,
            wakeup=wakeup_for(settings),
            catalogue=catalogue,
            policies=RepairPolicyStore(settings.teams_table),
            admin_principals=frozenset(
                arn.strip() for arn in settings.admin_principal_arns.split(",") if arn.strip()
            ),
        )


def _ok(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response[Any]:
    return Response(status_code=status, content_type=_JSON, body=body, headers=headers)


def _instance_type(submission: JobSubmission, catalogue: InstanceCatalogue) -> tuple[str, int]:
    """HyperPod's name of the job's instance type and its accelerators per instance."""
    name = (
        ACCELERATOR_INSTANCE[submission.accelerator]
        if submission.accelerator is not None
        else submission.instance_type or ""
    )
    try:
        accelerators = catalogue.spec(name).accelerators
    except UnknownInstanceTypeError:
        raise InvalidRequestError(f"unknown instance type {name!r}", "instance_type") from None
    if accelerators == 0:
        raise InvalidRequestError(f"{name} has no accelerators", "instance_type")
    return ml_name(name), accelerators


def create_app(deps: ApiDependencies) -> APIGatewayRestResolver:
    app = APIGatewayRestResolver(enable_validation=True)
    register_error_handlers(app)

    def caller() -> Caller:
        identity = app.current_event.request_context.identity
        return resolve_caller(identity.user_arn, deps.teams, deps.admin_principals)

    def visible(job_id: str, who: Caller) -> JobRecord:
        """The job, if the caller may see it; otherwise the same 404 as a missing job."""
        record = deps.jobs.record(job_id)
        if record is None or not who.may_see_team(record.job.team):
            raise NotFoundError(f"no job {job_id}", "jobId")
        return record

    def entry(
        event: JobEvent, status: JobStatus | None, reason: str, **details: Any
    ) -> JobHistoryEntry:
        return JobHistoryEntry(
            at=deps.clock(), event=event, status=status, reason=reason, details=details
        )

    # -- jobs ---------------------------------------------------------------------------
    @app.post("/jobs", summary="Submit a job", tags=["jobs"])
    def submit_job(
        submission: Annotated[JobSubmission, Body()],
        idempotency_key: Annotated[
            str | None, Header(alias="Idempotency-Key", pattern=IDEMPOTENCY_KEY)
        ] = None,
    ) -> Response[JobView]:
        who = caller()
        team = submission.team or who.team
        if team is None:
            raise InvalidRequestError("name the team the job runs for", "team")
        who.require_team(team)
        if deps.teams.get_quota(team) is None:
            raise InvalidRequestError(f"team {team} has no compute quota", "team")
        config, _ = deps.teams.scheduler_config()
        classes = {pc.name for pc in config.priority_classes}
        if submission.priority_class is not None and submission.priority_class not in classes:
            raise InvalidRequestError(
                f"unknown priority class {submission.priority_class!r} "
                f"(defined: {', '.join(sorted(classes)) or 'none'})",
                "priority_class",
            )
        instance_type, per_instance = _instance_type(submission, deps.catalogue)
        if submission.accelerators_per_replica > per_instance:
            raise InvalidRequestError(
                f"{instance_type} has {per_instance} accelerators; a replica cannot ask "
                f"for {submission.accelerators_per_replica}",
                "accelerators_per_replica",
            )
        now = deps.clock()
        job = Job(
            job_id=f"{team}-{now:%Y%m%d%H%M%S}-{uuid.uuid4().hex[:6]}",
            name=submission.name,
            team=team,
            priority_class=submission.priority_class,
            template=submission.template.value,
            instance_type=instance_type,
            accelerators_per_replica=submission.accelerators_per_replica,
            replicas=submission.replicas,
            min_replicas=submission.min_replicas,
            max_replicas=submission.max_replicas,
            image=submission.image,
            command=submission.command,
            checkpoint_location=submission.checkpoint_location,
            auto_resume=submission.auto_resume,
            submitted_at=now,
        )
        reason = "pending: waiting for the next scheduling pass"
        record = JobRecord(
            job=job,
            reason=reason,
            history=[entry(JobEvent.SUBMITTED, JobStatus.PENDING, reason, by=who.principal)],
            principal=who.principal,
        )
        key = None
        if idempotency_key is not None:
            scope = hashlib.sha256(who.principal.encode()).hexdigest()[:16]
            key = f"api#submit#{scope}#{idempotency_key}"
        request_hash = hashlib.sha256(
            f"{team}\n{submission.model_dump_json()}".encode()
        ).hexdigest()
        stored, created = deps.jobs.submit(record, idempotency_key=key, request_hash=request_hash)
        if created:
            deps.wakeup.wake("job submitted")
        view = JobView.of(stored, with_history=True)
        if created:
            return _ok(view, 201)
        return _ok(view, 200, {"Idempotent-Replayed": "true"})

    @app.get("/jobs", summary="List jobs (newest first within a team)", tags=["jobs"])
    def list_jobs(
        team: Annotated[str | None, Query(pattern=TEAM_NAME_PATTERN)] = None,
        status: Annotated[JobStatus | None, Query()] = None,
        priority_class: Annotated[str | None, Query(max_length=63)] = None,
        limit: Limit = 50,
        next_token: NextToken = None,
    ) -> Response[JobPage]:
        who = caller()
        if team is None and not who.admin:
            team = who.team
        if team is not None:
            who.require_team(team)
        records, token = deps.jobs.page(
            team=team, status=status, priority_class=priority_class, limit=limit, cursor=next_token
        )
        return _ok(JobPage(jobs=[JobView.of(r) for r in records], next_token=token))

    @app.get("/jobs/<jobId>", summary="A job with its history", tags=["jobs"])
    def get_job(jobId: JobId) -> Response[JobView]:
        return _ok(JobView.of(visible(jobId, caller()), with_history=True))

    @app.delete("/jobs/<jobId>", summary="Cancel a job", tags=["jobs"])
    def cancel_job(jobId: JobId) -> Response[JobView]:
        who = caller()
        for _ in range(_CANCEL_ATTEMPTS):
            record = visible(jobId, who)
            status = record.job.status
            if status in TERMINAL_STATUSES:
                raise ConflictError(f"job {jobId} is already {status.value}", "jobId")
            sets: dict[str, Any] = {"ended_at": deps.clock().isoformat()}
            if record.job.nodes:
                sets["stop_pending"] = True
            outcome = deps.jobs.transition(
                jobId,
                expect={status},
                status=JobStatus.CANCELLED,
                entry=entry(
                    JobEvent.CANCELLED,
                    JobStatus.CANCELLED,
                    f"cancelled by {who.principal}",
                    was=status.value,
                ),
                sets=sets,
            )
            if outcome is TransitionOutcome.APPLIED:
                deps.wakeup.wake("job cancelled")
                return _ok(JobView.of(visible(jobId, who), with_history=True))
        raise ConflictError(f"job {jobId} keeps changing; retry", "jobId")

    @app.post("/jobs/<jobId>/checkpoints", summary="Report a checkpoint", tags=["jobs"])
    def report_checkpoint(
        jobId: JobId,
        report: Annotated[CheckpointReport, Body()],
    ) -> Response[JobView]:
        who = caller()
        record = visible(jobId, who)
        now = deps.clock()
        checkpoint = Checkpoint(
            step=report.step, uri=report.uri, completed_at=report.completed_at or now
        )
        if not deps.jobs.report_checkpoint(jobId, checkpoint, now):
            last = record.job.last_checkpoint
            raise ConflictError(
                f"step {report.step} is not newer than the last checkpoint "
                f"(step {last.step if last else '?'})",
                "step",
            )
        return _ok(JobView.of(visible(jobId, who), with_history=True), 201)

    # -- teams and quotas ---------------------------------------------------------------
    @app.put("/teams/<team>/compute-quota", summary="Create or update", tags=["teams"])
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
            try:
                resolve_quota_resources(resources, deps.catalogue)
            except (UnknownInstanceTypeError, ValueError):
                raise InvalidRequestError(
                    f"unknown or accelerator-less instance type {resources[0].instance_type!r}",
                    f"ComputeQuotaConfig.{index}.InstanceType",
                ) from None
        stored = deps.teams.put_quota(request.quota(), target_version=request.target_version)
        deps.wakeup.wake("quota changed")
        return _ok(
            quota_view(stored, deps.catalogue), 201 if request.target_version is None else 200
        )

    @app.get("/teams/<team>/compute-quota", summary="A team's quota, resolved", tags=["teams"])
    def get_quota(team: TeamName) -> Response[ComputeQuotaView]:
        caller().require_team(team)
        quota = deps.teams.get_quota(team)
        if quota is None:
            raise NotFoundError(f"team {team} has no compute quota", "team")
        return _ok(quota_view(quota, deps.catalogue))

    @app.delete("/teams/<team>/compute-quota", summary="Delete a quota", tags=["teams"])
    def delete_quota(
        team: TeamName,
        target_version: Annotated[int | None, Query(alias="TargetVersion", ge=1)] = None,
    ) -> Response[None]:
        caller().require_admin()
        deps.teams.delete_quota(team, target_version=target_version)
        deps.wakeup.wake("quota deleted")
        return Response(status_code=204, content_type=_JSON, body=None)

    @app.get("/teams", summary="Teams and their quotas", tags=["teams"])
    def list_teams(limit: Limit = 50, next_token: NextToken = None) -> Response[ComputeQuotaList]:
        who = caller()
        if not who.admin:
            own = deps.teams.get_quota(who.team) if who.team else None
            return _ok(
                ComputeQuotaList(compute_quotas=[quota_view(own, deps.catalogue)] if own else [])
            )
        after = decode_cursor(next_token, ("sk",))["sk"] if next_token else None
        quotas, last = deps.teams.quota_page(limit, after)
        return _ok(
            ComputeQuotaList(
                compute_quotas=[quota_view(q, deps.catalogue) for q in quotas],
                next_token=encode_cursor({"sk": last}) if last else None,
            )
        )

    # -- cluster policy -----------------------------------------------------------------
    @app.put("/scheduler-config", summary="Set the cluster policy", tags=["policy"])
    def put_scheduler_config(
        request: Annotated[SchedulerConfigRequest, Body()],
    ) -> Response[SchedulerConfigView]:
        caller().require_admin()
        config = request.config()
        version = deps.teams.put_scheduler_config(config, target_version=request.target_version)
        deps.wakeup.wake("scheduler config changed")
        return _ok(SchedulerConfigView(scheduler_config=config, version=version))

    @app.get("/scheduler-config", summary="The cluster policy", tags=["policy"])
    def get_scheduler_config() -> Response[SchedulerConfigView]:
        caller()
        config, version = deps.teams.scheduler_config()
        return _ok(SchedulerConfigView(scheduler_config=config, version=version))

    @app.put("/policies/node-repair", summary="Set the node repair policy", tags=["policy"])
    def put_repair_policy(
        policy: Annotated[NodeRepairConfig, Body()],
    ) -> Response[NodeRepairConfig]:
        caller().require_admin()
        deps.policies.put(policy)
        return _ok(policy)

    @app.get("/policies/node-repair", summary="The node repair policy", tags=["policy"])
    def get_repair_policy() -> Response[NodeRepairConfig]:
        caller()
        return _ok(deps.policies.get())

    @app.put("/principals", summary="Map an IAM principal to a team / admin", tags=["access"])
    def put_principal(grant: Annotated[PrincipalGrantBody, Body()]) -> Response[PrincipalGrantBody]:
        caller().require_admin()
        if grant.team is None and not grant.admin:
            raise InvalidRequestError("a principal needs a team or the admin role", "team")
        deps.teams.grant(grant.principal_arn, team=grant.team, admin=grant.admin)
        return _ok(grant)

    @app.get("/principals", summary="The principal mappings", tags=["access"])
    def list_principals() -> Response[PrincipalList]:
        caller().require_admin()
        grants = [
            PrincipalGrantBody(principal_arn=g.principal_arn, team=g.team, admin=g.admin)
            for g in deps.teams.principals()
        ]
        return _ok(PrincipalList(principals=grants))

    # -- views --------------------------------------------------------------------------
    @app.get("/views/teams", summary="GPUs allocated, in use, borrowed per team", tags=["views"])
    def view_teams() -> Response[TeamViews]:
        who = caller()
        views = team_views(deps.teams.quotas(), deps.jobs.records(), deps.catalogue)
        return _ok(TeamViews(teams=[v for v in views if who.may_see_team(v.team)]))

    @app.get("/views/priority-classes", summary="Run and wait times per class", tags=["views"])
    def view_priority_classes() -> Response[PriorityClassViews]:
        caller()
        config, _ = deps.teams.scheduler_config()
        views = priority_class_views(config, deps.jobs.records(), deps.clock())
        return _ok(PriorityClassViews(priority_classes=views))

    @app.get("/views/cluster", summary="Instances, jobs and capacity", tags=["views"])
    def view_cluster() -> Response[ClusterView]:
        caller()
        return _ok(cluster_view(deps.nodes.all(), deps.jobs.records(), deps.catalogue))

    # -- incidents and node actions -----------------------------------------------------
    @app.get("/incidents", summary="Incidents, newest first", tags=["incidents"])
    def list_incidents(limit: Limit = 50) -> Response[IncidentList]:
        caller()
        incidents = [i.model_dump(mode="json") for i in deps.incidents.recent(limit)]
        return _ok(IncidentList(incidents=incidents))

    @app.get("/incidents/<incidentId>", summary="An incident with timings", tags=["incidents"])
    def get_incident(
        incidentId: Annotated[str, Path(min_length=1, max_length=128)],
    ) -> Response[dict[str, Any]]:
        caller()
        incident = deps.incidents.get(incidentId)
        if incident is None:
            raise NotFoundError(f"no incident {incidentId}", "incidentId")
        detail = incident.model_dump(mode="json")
        detail["signals"] = deps.incidents.signals(incidentId)
        return _ok(detail)

    @app.post("/nodes/<nodeId>/actions", summary="Operator action on a node", tags=["nodes"])
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
        return _ok(NodeActionResult(node_id=nodeId, action=request.action, result=result), 202)

    return app


def openapi_json(app: APIGatewayRestResolver | None = None) -> str:
    """The spec committed as docs/openapi.json (`python -m hyperguard.api > docs/openapi.json`).
    Without an app, one is built on placeholder stores, which connect to nothing."""
    if app is None:
        from hyperguard.api.nodes import UnavailableNodeActions
        from hyperguard.catalogue import StaticCatalogue
        from hyperguard.governance.service import NoWakeup

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
            description="Jobs, team quotas, scheduler policy, views, incidents and node "
            "actions. Callers sign requests with SigV4 (API Gateway IAM authorization).",
        )
    )
