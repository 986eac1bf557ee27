"""One scheduling pass per invocation: a batch from the FIFO wake-up queue, or the tick."""

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from hyperguard.cluster.catalogue import Ec2InstanceCatalogue
from hyperguard.cluster.factory import gateway_for
from hyperguard.events.kubernetes import woken_held
from hyperguard.governance.service import SchedulerBusyError, SchedulerService
from hyperguard.messaging import EventPublisher, Workflows, woken_jobs
from hyperguard.observability import NAMESPACE, MetricUnit, logger, metrics, single_metric, tracer
from hyperguard.sandbox import init_done
from hyperguard.settings import load_settings
from hyperguard.store import IncidentStore, JobStore, NodeStore, TeamStore

settings = load_settings()
catalogue = Ec2InstanceCatalogue()
service = SchedulerService(
    jobs=JobStore(settings.jobs_table),
    teams=TeamStore(settings.teams_table),
    gateway=gateway_for(settings, catalogue),
    catalogue=catalogue,
    cluster=settings.hyperpod_cluster_name,
    bursts=Workflows(settings.burst_state_machine_arn)
    if settings.burst_state_machine_arn
    else None,
    nodes=NodeStore(settings.nodes_table),
    incidents=IncidentStore(settings.incidents_table, settings.nodes_table),
    publisher=EventPublisher(settings.event_bus_name),
    lease_ttl_s=settings.scheduler_lease_s,
)
init_done()


@logger.inject_lambda_context(correlation_id_path="Records[0].messageId")
@metrics.log_metrics
@tracer.capture_lambda_handler
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    records = event.get("Records", [])
    bodies = [r["body"] for r in records]
    result = service.run_pass(job_ids=woken_jobs(bodies), held=woken_held(bodies))
    if not result.acquired and records:
        # Another pass holds the lease: fail the batch so SQS delivers the wake-up again.
        raise SchedulerBusyError(settings.hyperpod_cluster_name)
    for name, count in result.counts().items():
        metrics.add_metric(name=f"Scheduler_{name}", unit="Count", value=count)
    metrics.add_metric(name="SchedulerPassMs", unit="Milliseconds", value=result.duration_s * 1e3)
    for team, count in result.pending_by_team.items():
        with single_metric(
            name="TeamPendingJobs", unit=MetricUnit.Count, value=count, namespace=NAMESPACE
        ) as metric:
            metric.add_dimension(name="team", value=team)
    return {"acquired": result.acquired, **result.counts()}
