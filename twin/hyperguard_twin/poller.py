"""The Lambda service's SQS poller, for the twin: batches, partial batch responses, redrive.

Like the real poller it deletes only the records a batch reported as processed; failed
records become visible again (after `retry_visibility_s`, shortened for the twin instead
of the queue's visibility timeout) and the queue's redrive policy moves a record that keeps
failing to the DLQ. A throttled or failed invocation fails the whole batch. Each mapping has
its own polling thread, as each event source mapping has its own pollers: a slow function
never holds up another's queue.
"""

from __future__ import annotations

import json
import threading
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
    records: Counter[str] = field(default_factory=Counter)
    """Records delivered, by function."""
    threads: list[threading.Thread] = field(default_factory=list)

    def poll_once(self) -> int:
        """One receive + invoke per mapping; returns how many records were delivered."""
        return sum(self.poll_mapping(mapping) for mapping in self.mappings)

    def poll_mapping(self, mapping: SqsMapping, wait_s: int = 0) -> int:
        """One ReceiveMessage (a long poll of `wait_s` seconds, if any) and its delivery."""
        messages = self.sqs.receive_message(
            QueueUrl=mapping.queue_url,
            MaxNumberOfMessages=min(mapping.batch_size, 10),
            AttributeNames=["All"],
            MessageAttributeNames=["All"],
            WaitTimeSeconds=wait_s,
        ).get("Messages", [])
        if messages:
            self._deliver(mapping, messages)
        return len(messages)

    def _deliver(self, mapping: SqsMapping, messages: list[dict[str, Any]]) -> None:
        event = {"Records": [self._record(mapping, m) for m in messages]}
        try:
            payload, errored, _ = self.invoker.invoke(mapping.function_name, event)
        except Exception:  # throttled, or the Lambda service failed: the batch comes back
            self.stats["invoke_errors"] += 1
            payload, errored = "null", True
        self.stats["batches"] += 1
        self.stats["records"] += len(messages)
        self.records[mapping.function_name] += len(messages)
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

    def run(self, stop: threading.Event, long_poll_s: int = 20) -> None:
        """Start one polling thread per mapping; they stop when `stop` is set and their long
        poll ends. Each long-polls 20 s, as Lambda's pollers do: an idle queue costs a call
        every 20 s, and a message sent is received at once (BENCHMARKS.md, "An idle twin's
        cost"). The twin ends a poll waiting at its stop by closing the emulator's
        connections."""
        self.threads = [
            threading.Thread(
                target=self._poll_forever,
                args=(mapping, stop, long_poll_s),
                name=f"sqs-poller-{mapping.function_name}",
                daemon=True,
            )
            for mapping in self.mappings
        ]
        for thread in self.threads:
            thread.start()

    def join(self, timeout_s: float) -> None:
        """Until the polling threads have ended (each waits up to `timeout_s`), once `stop` is
        set: a long poll in flight ends with a message or with its connection."""
        for thread in self.threads:
            thread.join(timeout=timeout_s)

    def _poll_forever(self, mapping: SqsMapping, stop: threading.Event, wait_s: int) -> None:
        while not stop.is_set():
            try:
                self.poll_mapping(mapping, wait_s)
            except Exception:  # the poller outlives any one bad poll, like the real one
                self.stats["poll_errors"] += 1
                stop.wait(0.5)
