"""What `hyperguard twin status` shows of the deployed stack as AWS's APIs answer it: what
the emulator could not create or does differently, the queues' depths, the recovery
executions by status."""

from __future__ import annotations

from collections import Counter
from typing import Any

from hyperguard_twin.deploy import EMULATOR_GAPS, Deployment


def emulator_gaps(deployment: Deployment) -> list[dict[str, Any]]:
    present = {r["type"] for r in deployment.resources.values()}
    skipped = set(deployment.skipped.values())
    return [
        {"type": kind, "created": kind not in skipped, "twin_does": what}
        for kind, what in EMULATOR_GAPS.items()
        if kind in present | skipped or not kind.startswith("AWS::")
    ]


def queue_depth(sqs: Any, outputs: dict[str, str]) -> dict[str, int]:
    """Each queue's and dead-letter queue's messages, visible or in flight."""
    depth: dict[str, int] = {}
    for key, url in outputs.items():
        if not key.endswith(("QueueUrl", "DLQUrl")):
            continue
        attrs = sqs.get_queue_attributes(
            QueueUrl=url,
            AttributeNames=[
                "ApproximateNumberOfMessages",
                "ApproximateNumberOfMessagesNotVisible",
            ],
        )["Attributes"]
        depth[key.removesuffix("Url")] = int(attrs["ApproximateNumberOfMessages"]) + int(
            attrs["ApproximateNumberOfMessagesNotVisible"]
        )
    return depth


def execution_counts(sfn: Any, state_machine_arn: str) -> dict[str, int]:
    executions: Counter[str] = Counter()
    for page in sfn.get_paginator("list_executions").paginate(stateMachineArn=state_machine_arn):
        executions.update(e["status"] for e in page["executions"])
    return dict(executions)
