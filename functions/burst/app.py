"""BurstCapacity's Lambda tasks: {"step": <name>, "burst": <state>} → the new state."""

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from hyperguard.cluster.catalogue import Ec2InstanceCatalogue
from hyperguard.cluster.factory import gateway_for
from hyperguard.messaging import EventPublisher, wakeup_for
from hyperguard.observability import logger, metrics, tracer
from hyperguard.sandbox import init_done
from hyperguard.scaling.steps import BurstSteps
from hyperguard.settings import load_settings
from hyperguard.store import JobStore, NodeStore
from hyperguard.store.policy import BurstPolicyStore

settings = load_settings("scheduler_queue_url")
steps = BurstSteps(
    gateway=gateway_for(settings, Ec2InstanceCatalogue()),
    jobs=JobStore(settings.jobs_table),
    policies=BurstPolicyStore(settings.teams_table),
    wakeup=wakeup_for(settings),
    publisher=EventPublisher(settings.event_bus_name),
    nodes=NodeStore(settings.nodes_table),
)
init_done()


@logger.inject_lambda_context(correlation_id_path="burst.request.burstId")
@metrics.log_metrics
@tracer.capture_lambda_handler
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return steps.run(str(event.get("step")), dict(event.get("burst") or {}))
