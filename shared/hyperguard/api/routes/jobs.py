"""/jobs: submit, list, read, cancel, report a checkpoint. The rules a job's life follows
are the lifecycle's (hyperguard.governance.jobs); this router checks access and shapes."""

from __future__ import annotations

import hashlib
import uuid
from typing import Annotated

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Body, Header, Query

from hyperguard.api.auth import Caller
from hyperguard.api.deps import ApiDependencies
from hyperguard.api.errors import ConflictError, InvalidRequestError, NotFoundError
from hyperguard.api.models import (
    ACCELERATOR_INSTANCE,
    IDEMPOTENCY_KEY,
    DryRunObjectView,
    JobDryRun,
    JobLog,
    JobPage,
    JobSubmission,
    JobView,
)
from hyperguard.api.routes.common import (
    CallerOf,
    JobId,
    Limit,
    NextToken,
    new_router,
    ok,
    responses,
    visible_job,
)
from hyperguard.catalogue import InstanceCatalogue, UnknownInstanceTypeError, ml_name
from hyperguard.governance.jobs import JobRejectedError, SubmissionRules, check_submission
from hyperguard.models import Job, JobStatus
from hyperguard.models.governance import TEAM_NAME_PATTERN
from hyperguard.models.records import JobRecord
from hyperguard.policies.burst import allows_burst, allows_hyperpod
from hyperguard.store.checkpoints import split_s3_uri


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
    return ml_name(name), accelerators


def _readable_location(location: str | None, deps: ApiDependencies) -> None:
    """A checkpoint location in a bucket the deployment's roles may not read is refused: the
    scheduler could never see the job's progress, nor recovery resume it from there (D139)."""
    if not location or not deps.checkpoint_bucket:
        return
    bucket, _ = split_s3_uri(location)
    if bucket == deps.checkpoint_bucket:
        return
    readers = ", ".join(deps.checkpoint_readers) or "the scheduler's and recovery's roles"
    raise InvalidRequestError(
        f"bucket {bucket!r} is not readable by this deployment: {readers} may read "
        f"checkpoints only in {deps.checkpoint_bucket!r} (the stack's CheckpointBucketName); "
        f"write checkpoints there, or deploy with that parameter naming {bucket!r}",
        "checkpoint_location",
    )


MAX_TAIL_LINES = 1_000
MAX_REPLICA_INDEX = 9_999
LOG_LIMIT_BYTES = 256 * 1024
"""A log answer's cap: far inside API Gateway's and Lambda's 6 MB."""


def run_paths(template: str) -> list[str]:
    """Where a job of this template may run: HyperPod nodes, EKS burst nodes, or both."""
    return [
        path
        for path, allowed in (
            ("hyperpod", allows_hyperpod(template)),
            ("burst", allows_burst(template)),
        )
        if allowed
    ]


def checked(
    deps: ApiDependencies, submission: JobSubmission, who: Caller
) -> tuple[Job, SubmissionRules]:
    """The job a submission asks for and the rules it passed: what POST /jobs stores and
    a dry run shows."""
    team = submission.team or who.team
    if team is None:
        raise InvalidRequestError("name the team the job runs for", "team")
    who.require_team(team)
    if submission.pod_template is None and submission.image is None:
        raise InvalidRequestError("give image (and command), or pod_template", "image")
    if submission.pod_template is not None and (submission.image or submission.command):
        raise InvalidRequestError(
            "give image and command, or pod_template (its first container), not both",
            "pod_template",
        )
    instance_type, per_instance = _instance_type(submission, deps.catalogue)
    _readable_location(submission.checkpoint_location, deps)
    config, _ = deps.teams.scheduler_config()
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
        elastic_policy=submission.elastic_policy,
        log_monitoring_configuration=submission.log_monitoring_configuration,
        recovery=submission.recovery,
        max_steps=submission.max_steps,
        image=submission.image or "",
        command=submission.command,
        pod_template=submission.pod_template,
        checkpoint_location=submission.checkpoint_location,
        auto_resume=submission.auto_resume,
        max_retries=submission.max_retries,
        submitted_at=now,
    )
    rules = SubmissionRules(
        team_has_quota=deps.teams.get_quota(team) is not None,
        priority_classes=frozenset(pc.name for pc in config.priority_classes),
        accelerators_per_instance=per_instance,
    )
    try:
        check_submission(job, rules)
    except JobRejectedError as exc:
        raise InvalidRequestError(exc.message, exc.field) from None
    return job, rules


def routes(deps: ApiDependencies, caller: CallerOf) -> Router:
    router = new_router()

    @router.post(
        "/jobs",
        summary="Submit a job",
        tags=["jobs"],
        responses=responses(
            201,
            JobView,
            400,
            413,
            description="Submitted",
            also={200: "A replay of an earlier request with the same Idempotency-Key"},
        ),
    )
    def submit_job(
        submission: Annotated[JobSubmission, Body()],
        idempotency_key: Annotated[
            str | None, Header(alias="Idempotency-Key", pattern=IDEMPOTENCY_KEY)
        ] = None,
    ) -> Response[JobView]:
        who = caller()
        job, rules = checked(deps, submission, who)
        team = job.team
        key = None
        if idempotency_key is not None:
            scope = hashlib.sha256(who.principal.encode()).hexdigest()[:16]
            key = f"api#submit#{scope}#{idempotency_key}"
        request_hash = hashlib.sha256(
            f"{team}\n{submission.model_dump_json()}".encode()
        ).hexdigest()
        try:
            stored, created = deps.lifecycle.submit(
                job,
                principal=who.principal,
                rules=rules,
                idempotency_key=key,
                request_hash=request_hash,
            )
        except JobRejectedError as exc:
            raise InvalidRequestError(exc.message, exc.field) from None
        view = JobView.of(stored, with_history=True)
        if not created:
            return ok(view, 200, {"Idempotent-Replayed": "true"})
        deps.wakeup.wake("job submitted", job_id=stored.job.job_id)
        return ok(view, 201)

    @router.post(
        "/jobs/dry-run",
        summary="Check a submission without submitting it",
        description="The body is POST /jobs' and is checked the same way (a refusal is the "
        "same 422). The job's run objects are then sent to the cluster's API server as a dry "
        "run (dryRun=All: authorization, admission webhooks and schema validation run, "
        "nothing is created). Nothing is stored.",
        tags=["jobs"],
        responses=responses(200, JobDryRun, 400, 413, 501, 502),
    )
    def dry_run_job(submission: Annotated[JobSubmission, Body()]) -> Response[JobDryRun]:
        job, _ = checked(deps, submission, caller())
        record = JobRecord(
            job=job.model_copy(update={"status": JobStatus.PENDING}),
            reason="dry run: not submitted",
            principal="",
        )
        objects = [
            DryRunObjectView(
                path=o.path, object=o.object, accepted=o.refused is None, refused=o.refused
            )
            for o in deps.cluster.dry_run(record.job, run_paths(job.template))
        ]
        return ok(
            JobDryRun(
                job=JobView.of(record),
                objects=objects,
                accepted=all(o.accepted for o in objects),
            )
        )

    @router.get(
        "/jobs",
        summary="List jobs (newest first within a team)",
        tags=["jobs"],
        responses=responses(200, JobPage, 400),
    )
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
        return ok(JobPage(jobs=[JobView.of(r) for r in records], next_token=token))

    @router.get(
        "/jobs/<jobId>",
        summary="A job with its history",
        tags=["jobs"],
        responses=responses(200, JobView, 404),
    )
    def get_job(jobId: JobId) -> Response[JobView]:
        return ok(JobView.of(visible_job(deps, jobId, caller()), with_history=True))

    @router.delete(
        "/jobs/<jobId>",
        summary="Cancel a job",
        tags=["jobs"],
        responses=responses(200, JobView, 404, 409),
    )
    def cancel_job(jobId: JobId) -> Response[JobView]:
        who = caller()
        visible_job(deps, jobId, who)
        outcome, record = deps.lifecycle.cancel(jobId, principal=who.principal)
        if not outcome or record is None:
            raise ConflictError(outcome.why, "jobId")
        deps.wakeup.wake("job cancelled")
        return ok(JobView.of(record, with_history=True))

    @router.get(
        "/jobs/<jobId>/logs",
        summary="The tail of a replica's log",
        description="Read through the cluster's API server (pods/log) from the job's newest "
        "pod of that replica: its latest run's, or, after the run ended, the last one's while "
        "Kubernetes keeps it (a day). 404 when the job has no pod of that replica.",
        tags=["jobs"],
        responses=responses(200, JobLog, 404, 501, 502),
    )
    def job_logs(
        jobId: JobId,
        replica: Annotated[int, Query(ge=0, le=MAX_REPLICA_INDEX)] = 0,
        tail: Annotated[int, Query(ge=1, le=MAX_TAIL_LINES)] = 100,
    ) -> Response[JobLog]:
        record = visible_job(deps, jobId, caller())
        found = deps.cluster.replica_log(
            record.job, replica, tail_lines=tail, limit_bytes=LOG_LIMIT_BYTES
        )
        if found is None:
            raise NotFoundError(
                f"job {jobId} has no pod of replica {replica} (it has not run, its runs are "
                f"gone, or it has fewer replicas)",
                "replica",
            )
        return ok(JobLog(job_id=jobId, **found.model_dump()))

    return router
