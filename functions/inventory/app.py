"""SQS InventoryQueue (schedule ticks, HyperPod cluster events) → one inventory sync.

Every message asks the same thing — look at the clusters again — so a batch is one sync, and
a failed sync fails the batch for SQS to deliver again (then the DLQ).
"""

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from hyperguard.cluster.catalogue import Ec2InstanceCatalogue
from hyperguard.cluster.factory import gateway_for
from hyperguard.inventory import InventorySync
from hyperguard.observability import logger, metrics, tracer
from hyperguard.sandbox import init_done
from hyperguard.settings import load_settings
from hyperguard.store import NodeStore
from hyperguard.store.policy import RepairersStore

settings = load_settings()
inventory = InventorySync(
    nodes=NodeStore(settings.nodes_table),
    gateway=gateway_for(settings, Ec2InstanceCatalogue()),
    clusters=frozenset({settings.hyperpod_cluster_name, settings.eks_cluster_name}),
    repairers=RepairersStore(settings.teams_table),
)
init_done()


@logger.inject_lambda_context(correlation_id_path="Records[0].messageId")
@metrics.log_metrics
@tracer.capture_lambda_handler
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    result = inventory.sync()
    metrics.add_metric(name="InventoryNodes", unit="Count", value=result.listed)
    metrics.add_metric(name="InventoryWritten", unit="Count", value=result.written)
    metrics.add_metric(name="InventoryRetired", unit="Count", value=result.retired)
    return {"listed": result.listed, "written": result.written, "retired": result.retired}
