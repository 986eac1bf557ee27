"""SQS HealthQueue → normalised signals and incidents (partial batch responses)."""

from typing import Any

from aws_lambda_powertools.utilities.batch import (
    BatchProcessor,
    EventType,
    process_partial_response,
)
from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from hyperguard.cluster.catalogue import Ec2InstanceCatalogue
from hyperguard.cluster.factory import gateway_for
from hyperguard.events import ClassifyConfig
from hyperguard.ingestion import HealthIngestor
from hyperguard.lookup import NodeLookup
from hyperguard.messaging import Escalator, EventPublisher, RecoveryWorkflows
from hyperguard.observability import logger, metrics, tracer
from hyperguard.sandbox import init_done
from hyperguard.settings import load_settings
from hyperguard.store import IdempotencyStore, IncidentStore, NodeStore

settings = load_settings("recovery_state_machine_arn")
nodes = NodeStore(settings.nodes_table)
ingestor = HealthIngestor(
    nodes=nodes,
    lookup=NodeLookup(nodes, gateway_for(settings, Ec2InstanceCatalogue())),
    incidents=IncidentStore(settings.incidents_table, settings.nodes_table),
    idempotency=IdempotencyStore(settings.idempotency_table, settings.idempotency_ttl_s),
    workflows=RecoveryWorkflows(settings.recovery_state_machine_arn),
    escalator=Escalator(settings.escalation_topic_arn),
    publisher=EventPublisher(settings.event_bus_name),
    config=ClassifyConfig(rebalance_action=settings.rebalance_action),
    orchestrator=settings.eks_cluster_name,
    reopen_window_s=settings.reopen_window_s,
)
processor = BatchProcessor(event_type=EventType.SQS)


def record_handler(record: SQSRecord) -> None:
    clamped = ingestor.clamped
    for outcome in ingestor.ingest_body(record.body):
        metrics.add_metric(name=f"Signals_{outcome.value}", unit="Count", value=1)
    if ingestor.clamped > clamped:
        metrics.add_metric(
            name="Signals_time_clamped", unit="Count", value=ingestor.clamped - clamped
        )


init_done()


@logger.inject_lambda_context(correlation_id_path="Records[0].messageId")
@metrics.log_metrics
@tracer.capture_lambda_handler
def handler(event: dict[str, Any], context: LambdaContext) -> PartialItemFailureResponse:
    return process_partial_response(event, record_handler, processor, context)
