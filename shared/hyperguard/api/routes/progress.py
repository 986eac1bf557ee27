"""How a running job reports its progress: completed checkpoints (D100) and heartbeats
between them (D165). Team members report their own team's jobs."""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Body

from hyperguard.api.deps import ApiDependencies
from hyperguard.api.errors import ConflictError
from hyperguard.api.models import CheckpointReport, JobView, ProgressReport
from hyperguard.api.routes.common import CallerOf, JobId, new_router, ok, responses, visible_job
from hyperguard.models import Checkpoint


def routes(deps: ApiDependencies, caller: CallerOf) -> Router:
    router = new_router()

    @router.post(
        "/jobs/<jobId>/checkpoints",
        summary="Report a checkpoint",
        tags=["jobs"],
        responses=responses(201, JobView, 400, 404, 409, 413),
    )
    def report_checkpoint(
        jobId: JobId,
        report: Annotated[CheckpointReport, Body()],
    ) -> Response[JobView]:
        who = caller()
        record = visible_job(deps, jobId, who)
        now = deps.clock()
        checkpoint = Checkpoint(
            step=report.step,
            uri=report.uri,
            completed_at=report.completed_at or now,
            node_step_seconds=report.node_step_seconds,
        )
        ratio = deps.policies.get().slow_job_ratio
        last = record.job.last_checkpoint
        if last is not None and last.step == report.step and last.uri == report.uri:
            # The scheduler found its marker in S3 first: the report is a repeat, and its
            # per-node timings are news.
            deps.lifecycle.record_timings(record, checkpoint, slow_ratio=ratio)
            return ok(JobView.of(visible_job(deps, jobId, who), with_history=True), 201)
        if not deps.lifecycle.record_checkpoint(
            jobId, checkpoint, history=True, record=record, slow_ratio=ratio
        ):
            last = record.job.last_checkpoint
            raise ConflictError(
                f"step {report.step} is not newer than the last checkpoint "
                f"(step {last.step if last else '?'})",
                "step",
            )
        return ok(JobView.of(visible_job(deps, jobId, who), with_history=True), 201)

    @router.post(
        "/jobs/<jobId>/progress",
        summary="Report the training's progress (a heartbeat)",
        tags=["jobs"],
        responses=responses(201, JobView, 400, 404, 409, 413),
    )
    def report_progress(
        jobId: JobId,
        report: Annotated[ProgressReport, Body()],
    ) -> Response[JobView]:
        """The running job's step now, with each node's compute seconds per step, from its
        current run (`HYPERGUARD_RUN`): its pace and the stall rule go by these from the
        run's first heartbeat on (D165). 409 for a job not running, another run (a stale
        writer) or a heartbeat not after the last."""
        who = caller()
        record = visible_job(deps, jobId, who)
        outcome = deps.lifecycle.record_heartbeat(
            record,
            run=report.run,
            step=report.step,
            at=report.at or deps.clock(),
            node_step_seconds=report.node_step_seconds,
            slow_ratio=deps.policies.get().slow_job_ratio,
        )
        if not outcome:
            raise ConflictError(f"heartbeat not recorded: {outcome.why}", "run")
        return ok(JobView.of(visible_job(deps, jobId, who)), 201)

    return router
