"""NodeRecovery's Lambda tasks: {"step": <name>, "recovery": <state>} → the new state."""

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from hyperguard.cluster.catalogue import Ec2InstanceCatalogue
from hyperguard.cluster.factory import gateway_for
from hyperguard.messaging import Escalator, EventPublisher
from hyperguard.observability import logger, metrics, tracer
from hyperguard.recovery.steps import RecoverySteps
from hyperguard.sandbox import init_done
from hyperguard.settings import load_settings
from hyperguard.store import IncidentStore, JobStore, NodeStore
from hyperguard.store.checkpoints import CheckpointStore
from hyperguard.store.policy import RepairersStore, RepairPolicyStore

settings = load_settings()
steps = RecoverySteps(
    incidents=IncidentStore(settings.incidents_table, settings.nodes_table),
    nodes=NodeStore(settings.nodes_table),
    jobs=JobStore(settings.jobs_table),
    policies=RepairPolicyStore(settings.teams_table),
    checkpoints=CheckpointStore(),
    gateway=gateway_for(settings, Ec2InstanceCatalogue()),
    publisher=EventPublisher(settings.event_bus_name),
    escalator=Escalator(settings.escalation_topic_arn),
    repairers=RepairersStore(settings.teams_table),
)
init_done()


@logger.inject_lambda_context(correlation_id_path="recovery.incident_id")
@metrics.log_metrics
@tracer.capture_lambda_handler
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    recovery = dict(event.get("recovery") or {})
    for passed in ("task_token", "execution_arn"):  # from the context object
        if passed in event:
            recovery[passed] = event[passed]
    return steps.run(str(event.get("step")), recovery)
