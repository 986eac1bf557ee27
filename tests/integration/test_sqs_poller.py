"""The twin's SQS poller keeps the Lambda service's contract (moto SQS)."""

from __future__ import annotations

import json
from collections.abc import Set as AbstractSet
from typing import Any

import boto3
from tests.conftest import REGION

from hyperguard_twin.poller import SqsMapping, SqsPoller


class RecordingInvoker:
    def __init__(self, fail_bodies: AbstractSet[str] = frozenset(), crash: bool = False) -> None:
        self.fail_bodies = fail_bodies
        self.crash = crash
        self.batches: list[list[dict[str, Any]]] = []

    def invoke(self, function_name: str, event: Any) -> tuple[str, bool, str]:
        self.batches.append(event["Records"])
        if self.crash:
            return json.dumps({"errorMessage": "boom", "errorType": "RuntimeError"}), True, ""
        failures = [
            {"itemIdentifier": r["messageId"]}
            for r in event["Records"]
            if r["body"] in self.fail_bodies
        ]
        return json.dumps({"batchItemFailures": failures}), False, ""


def queues(max_receive: int = 2) -> tuple[Any, str, str, str]:
    sqs = boto3.client("sqs", region_name=REGION)
    dlq = sqs.create_queue(QueueName="dlq")["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    url = sqs.create_queue(
        QueueName="health",
        Attributes={
            "RedrivePolicy": json.dumps(
                {"deadLetterTargetArn": dlq_arn, "maxReceiveCount": max_receive}
            )
        },
    )["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    return sqs, url, arn, dlq


def depth(sqs: Any, url: str) -> int:
    attrs = sqs.get_queue_attributes(
        QueueUrl=url,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    return int(attrs["ApproximateNumberOfMessages"]) + int(
        attrs["ApproximateNumberOfMessagesNotVisible"]
    )


def test_batches_deliver_lambda_shaped_records_and_delete_successes(aws_env: None) -> None:
    sqs, url, arn, _ = queues()
    for i in range(12):
        sqs.send_message(QueueUrl=url, MessageBody=f"m{i}")
    invoker = RecordingInvoker()
    poller = SqsPoller(
        sqs, invoker, [SqsMapping(url, arn, "fn", batch_size=10, report_batch_item_failures=True)]
    )
    assert poller.poll_once() == 10
    assert poller.poll_once() == 2
    first = invoker.batches[0][0]
    assert first["eventSource"] == "aws:sqs" and first["eventSourceARN"] == arn
    assert first["attributes"]["ApproximateReceiveCount"] == "1"
    assert depth(sqs, url) == 0


def test_only_reported_failures_return_and_end_in_the_dlq(aws_env: None) -> None:
    sqs, url, arn, dlq = queues(max_receive=2)
    for body in ("good", "bad"):
        sqs.send_message(QueueUrl=url, MessageBody=body)
    invoker = RecordingInvoker(fail_bodies={"bad"})
    poller = SqsPoller(
        sqs,
        invoker,
        [SqsMapping(url, arn, "fn", report_batch_item_failures=True)],
        retry_visibility_s=0,
    )
    # Until the source queue is empty: however the receives split the messages, "bad"
    # is delivered maxReceiveCount times, then redriven on the next receive.
    for _ in range(50):
        poller.poll_once()
        if depth(sqs, url) == 0:
            break
    delivered = [r["body"] for batch in invoker.batches for r in batch]
    assert delivered.count("good") == 1
    assert delivered.count("bad") == 2  # maxReceiveCount deliveries, then redriven
    assert depth(sqs, url) == 0
    moved = sqs.receive_message(QueueUrl=dlq)["Messages"]
    assert [m["Body"] for m in moved] == ["bad"]
    assert poller.stats["failed_records"] == 2


def test_a_crashed_invocation_fails_the_whole_batch(aws_env: None) -> None:
    sqs, url, arn, _ = queues(max_receive=5)
    sqs.send_message(QueueUrl=url, MessageBody="x")
    poller = SqsPoller(
        sqs,
        RecordingInvoker(crash=True),
        [SqsMapping(url, arn, "fn", report_batch_item_failures=True)],
    )
    poller.poll_once()
    assert depth(sqs, url) == 1
    assert poller.stats["failed_records"] == 1
