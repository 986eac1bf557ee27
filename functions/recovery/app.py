"""NodeRecovery's Lambda tasks: {"step": <name>, ...payload} → the step's result."""

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from hyperguard.messaging import Escalator, EventPublisher
from hyperguard.observability import logger, metrics, tracer
from hyperguard.recovery.steps import RecoverySteps
from hyperguard.settings import load_settings
from hyperguard.store import IncidentStore

settings = load_settings()
steps = RecoverySteps(
    incidents=IncidentStore(settings.incidents_table, settings.nodes_table),
    publisher=EventPublisher(settings.event_bus_name),
    escalator=Escalator(settings.escalation_topic_arn),
)


@logger.inject_lambda_context(correlation_id_path="incident_id")
@metrics.log_metrics
@tracer.capture_lambda_handler
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    result = steps.run(str(event.get("step")), event)
    metrics.add_metric(name=f"RecoveryStep_{event.get('step')}", unit="Count", value=1)
    return result
