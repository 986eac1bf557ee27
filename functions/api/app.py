"""API Gateway REST (IAM authorization) → the HyperGuard governance API."""

from typing import Any

from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.utilities.typing import LambdaContext

from hyperguard.api import ApiDependencies, create_app
from hyperguard.api.cluster import GatewayCluster
from hyperguard.cluster.catalogue import Ec2InstanceCatalogue
from hyperguard.cluster.factory import gateway_for
from hyperguard.messaging import RecoveryWorkflows
from hyperguard.observability import logger, metrics, tracer
from hyperguard.recovery.operator import OperatorNodeActions, RecoveryOperator
from hyperguard.sandbox import init_done
from hyperguard.settings import load_settings
from hyperguard.store import IncidentStore, NodeStore

settings = load_settings("recovery_state_machine_arn", "rate_limit_table")
catalogue = Ec2InstanceCatalogue()
operator = RecoveryOperator(
    IncidentStore(settings.incidents_table, settings.nodes_table),
    NodeStore(settings.nodes_table),
    RecoveryWorkflows(settings.recovery_state_machine_arn),
)
gateway = gateway_for(settings, catalogue)
node_actions = OperatorNodeActions(operator, gateway)
app = create_app(
    ApiDependencies.from_settings(
        settings, node_actions, catalogue, cluster=GatewayCluster(gateway)
    )
)
init_done()


@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_REST)
@metrics.log_metrics
@tracer.capture_lambda_handler
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return app.resolve(event, context)
