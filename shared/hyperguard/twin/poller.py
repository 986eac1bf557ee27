"""The Lambda service's SQS poller, for the twin: batches, partial batch responses, redrive.

Like the real poller it deletes only the records a batch reported as processed; failed
records become visible again (after `retry_visibility_s`, time-scaled for the twin instead
of the queue's visibility timeout) and the queue's redrive policy moves a record that keeps
failing to the DLQ.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Protocol


class Invoker(Protocol):
    def invoke(self, function_name: str, event: Any) -> tuple[str, bool, str]: ...


@dataclass
class SqsMapping:
    queue_url: str
    queue_arn: str
    function_name: str
    batch_size: int = 10
    report_batch_item_failures: bool = False


@dataclass
class SqsPoller:
    sqs: Any
    invoker: Invoker
    mappings: list[SqsMapping]
    region: str = "us-east-1"
    retry_visibility_s: int = 1
    stats: Counter[str] = field(default_factory=Counter)

    def poll_once(self) -> int:
        """One receive + invoke per mapping; returns how many records were delivered."""
        delivered = 0
        for mapping in self.mappings:
            messages = self.sqs.receive_message(
                QueueUrl=mapping.queue_url,
                MaxNumberOfMessages=min(mapping.batch_size, 10),
                AttributeNames=["All"],
                MessageAttributeNames=["All"],
                WaitTimeSeconds=0,
            ).get("Messages", [])
            if messages:
                delivered += len(messages)
                self._deliver(mapping, messages)
        return delivered

    def _deliver(self, mapping: SqsMapping, messages: list[dict[str, Any]]) -> None:
        event = {"Records": [self._record(mapping, m) for m in messages]}
        payload, errored, _ = self.invoker.invoke(mapping.function_name, event)
        self.stats["batches"] += 1
        self.stats["records"] += len(messages)
        failed: set[str] = {m["MessageId"] for m in messages} if errored else set()
        if not errored and mapping.report_batch_item_failures:
            response = json.loads(payload or "null") or {}
            failed = {f["itemIdentifier"] for f in response.get("batchItemFailures", [])}
        for message in messages:
            if message["MessageId"] in failed:
                self.stats["failed_records"] += 1
                self.sqs.change_message_visibility(
                    QueueUrl=mapping.queue_url,
                    ReceiptHandle=message["ReceiptHandle"],
                    VisibilityTimeout=self.retry_visibility_s,
                )
            else:
                self.sqs.delete_message(
                    QueueUrl=mapping.queue_url, ReceiptHandle=message["ReceiptHandle"]
                )

    def _record(self, mapping: SqsMapping, message: dict[str, Any]) -> dict[str, Any]:
        return {
            "messageId": message["MessageId"],
            "receiptHandle": message["ReceiptHandle"],
            "body": message["Body"],
            "attributes": message.get("Attributes", {}),
            "messageAttributes": message.get("MessageAttributes", {}),
            "md5OfBody": message.get("MD5OfBody", ""),
            "eventSource": "aws:sqs",
            "eventSourceARN": mapping.queue_arn,
            "awsRegion": self.region,
        }

    def run(self, stop: threading.Event, idle_sleep_s: float = 0.05) -> None:
        while not stop.is_set():
            try:
                if self.poll_once() == 0:
                    time.sleep(idle_sleep_s)
            except Exception:  # the poller outlives any one bad poll, like the real one
                self.stats["poll_errors"] += 1
                time.sleep(idle_sleep_s * 10)
