"""EC2 calls on the instances behind EKS burst nodes, which SageMaker does not own.

Karpenter has no reboot, so an EKS node is rebooted with EC2 RebootInstances. That call is
all-or-nothing: one unknown id fails the whole request with InvalidInstanceID.NotFound and
names the ids only in its message text. Instances are therefore rebooted one per call (a
repair names one or a few), so each gets its own outcome without reading messages.
"""

from __future__ import annotations

from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from hyperguard.aws import client
from hyperguard.cluster.conventions import INSTANCE_ID_NOT_FOUND, INVALID_INSTANCE_STATUS
from hyperguard.models import RepairFailure, RepairOutcome

# EC2 error codes, in the vocabulary of BatchReboot/ReplaceClusterNodes' per-node ErrorCode.
ERROR_CODES = {
    "InvalidInstanceID.NotFound": INSTANCE_ID_NOT_FOUND,
    "InvalidInstanceID.Malformed": INSTANCE_ID_NOT_FOUND,
    "IncorrectInstanceState": INVALID_INSTANCE_STATUS,
}


class Ec2Adapter:
    """Reboots EC2 instances, reporting each instance's outcome like SageMaker does."""

    def __init__(self, *, client: Any | None = None) -> None:
        self._client = client

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = client("ec2")
        return self._client

    def reboot(self, instance_ids: list[str]) -> RepairOutcome:
        outcome = RepairOutcome()
        for instance_id in dict.fromkeys(instance_ids):
            failure = self._reboot_one(instance_id)
            if failure is None:
                outcome.successful.append(instance_id)
            else:
                outcome.failed.append(failure)
        return outcome

    def _reboot_one(self, instance_id: str) -> RepairFailure | None:
        try:
            self.client.reboot_instances(InstanceIds=[instance_id])
        except ClientError as error:
            code = error.response["Error"]["Code"]
            message = error.response["Error"].get("Message", "")
            return RepairFailure(
                node_id=instance_id, error_code=ERROR_CODES.get(code, code), message=message
            )
        except BotoCoreError as error:
            return RepairFailure(
                node_id=instance_id, error_code=type(error).__name__, message=str(error)
            )
        return None
