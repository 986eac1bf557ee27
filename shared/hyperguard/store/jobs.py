"""JobsTable: one item per job (pk `job_id`), GSI `ByTeam` (pk `team`, sk `submitted_at`)."""

from __future__ import annotations

from typing import Any

from hyperguard.aws import dynamodb_table
from hyperguard.models import Checkpoint, Job
from hyperguard.store.codec import plain, scan_all, to_item


class JobStore:
    def __init__(self, table_name: str, table: Any | None = None) -> None:
        self.table_name = table_name
        self._table = table

    @property
    def table(self) -> Any:
        if self._table is None:
            self._table = dynamodb_table(self.table_name)
        return self._table

    def put(self, job: Job) -> None:
        self.table.put_item(Item=to_item(job))

    def get(self, job_id: str) -> Job | None:
        item = self.table.get_item(Key={"job_id": job_id}, ConsistentRead=True).get("Item")
        return Job.model_validate(plain(item)) if item else None

    def on_node(self, instance_id: str) -> list[Job]:
        """Jobs whose placement includes the node (scan with a filter: rare, operator-scale)."""
        return [j for j in self.all() if instance_id in j.nodes]

    def all(self) -> list[Job]:
        return sorted((Job.model_validate(i) for i in scan_all(self.table)), key=lambda j: j.job_id)

    def record_checkpoint(self, job_id: str, checkpoint: Checkpoint) -> bool:
        """Keep the newest complete checkpoint; an older or equal step never overwrites."""
        from botocore.exceptions import ClientError

        try:
            self.table.update_item(
                Key={"job_id": job_id},
                UpdateExpression="SET last_checkpoint = :c",
                ConditionExpression="attribute_exists(job_id) AND "
                "(attribute_not_exists(last_checkpoint) OR last_checkpoint.step < :s)",
                ExpressionAttributeValues={":c": to_item(checkpoint), ":s": checkpoint.step},
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] == "ConditionalCheckFailedException":
                return False
            raise
        return True
