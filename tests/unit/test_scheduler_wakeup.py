"""The scheduler's wake-up contract (docs/events.md): the API's message names the job it
submitted and the pass's handler reads the id back; the other bodies on the queue
(EventBridge's events) and anything malformed name no job."""

from __future__ import annotations

import json
from typing import Any

import pytest
from tests.conftest import SCHEDULER_TICK

from hyperguard.messaging import SqsWakeup, woken_jobs


class RecordingSqs:
    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    def send_message(self, **kwargs: Any) -> dict[str, Any]:
        self.sent.append(kwargs)
        return {"MessageId": str(len(self.sent))}


def test_the_apis_wake_up_names_the_job_and_the_handler_reads_it_back() -> None:
    sqs = RecordingSqs()
    wakeup = SqsWakeup("https://sqs.invalid/scheduler.fifo", sqs=sqs)
    wakeup.wake("job submitted", job_id="nlp-20261122090000-a1b2c3")
    wakeup.wake("quota changed")

    bodies = [m["MessageBody"] for m in sqs.sent]
    assert json.loads(bodies[0]) == {
        "reason": "job submitted",
        "jobId": "nlp-20261122090000-a1b2c3",
    }
    assert json.loads(bodies[1]) == {"reason": "quota changed"}
    assert woken_jobs(bodies) == ["nlp-20261122090000-a1b2c3"]
    assert {m["MessageGroupId"] for m in sqs.sent} == {"scheduler"}
    assert sqs.sent[0]["MessageDeduplicationId"] != sqs.sent[1]["MessageDeduplicationId"]


# Constructed: the in-cluster forwarder's event (JobStatusRule) as EventBridge puts it on
# the queue.
RUN_ENDED = SCHEDULER_TICK | {
    "detail-type": "Kubernetes Job Status Changed",
    "source": "hyperguard.node-forwarder",
    "detail": {"jobId": "nlp-1", "phase": "succeeded"},
}


@pytest.mark.parametrize(
    "body",
    [
        json.dumps(SCHEDULER_TICK),
        json.dumps(RUN_ENDED),
        "not json",
        json.dumps({"reason": "job submitted", "jobId": "x" * 129}),
        json.dumps({"reason": "job submitted", "jobId": ""}),
        json.dumps({"reason": "job submitted", "jobId": 7}),
        json.dumps({"jobId": "nlp-1"}),
    ],
    ids=["tick", "run-ended", "not-json", "long-id", "empty-id", "number-id", "no-reason"],
)
def test_other_bodies_name_no_job(body: str) -> None:
    assert woken_jobs([body]) == []
