"""The service's outbound side effects: its EventBridge bus, SNS escalations, workflows, and
the scheduler's wake-up queue."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from pydantic import Field, ValidationError

from hyperguard.aws import ClientError, client
from hyperguard.models import Incident
from hyperguard.models.camel import CamelModel
from hyperguard.settings import Settings

EVENT_SOURCE = "hyperguard"


def announcement(incident: Incident) -> dict[str, Any]:
    """The fields every incident event carries (docs/events.md)."""
    return {
        "incident_id": incident.incident_id,
        "instance_id": incident.instance_id,
        "cluster": incident.cluster,
        "kind": incident.kind,
        "severity": incident.severity,
        "repair": incident.repair.value,
        "reason": incident.reason,
        "first_signal_at": incident.first_signal_at.isoformat(),
        "execution_arn": incident.execution_arn,
    }


def resolved(incident: Incident, resolution: str | None = None) -> dict[str, Any]:
    """IncidentResolved's detail: how it ended (`resolution`, else the incident's), its
    timings and the jobs it recovered."""
    return {
        **announcement(incident),
        "resolution": resolution or incident.resolution,
        "timings": incident.timings,
        "replacement_instance_id": incident.replacement_instance_id,
        "jobs": [j.model_dump(mode="json") for j in incident.jobs],
    }


def escalation(incident: Incident, note: str) -> dict[str, Any]:
    """IncidentEscalated's detail: the incident went to an operator, and why."""
    return {**announcement(incident), "note": note}


class PublishError(RuntimeError):
    """EventBridge rejected an entry; the caller's retry must redo the publish."""


class EventPublisher:
    """Puts HyperGuard's own events (past-tense detail-types) on the service bus."""

    def __init__(self, bus_name: str, events: Any | None = None) -> None:
        self.bus_name = bus_name
        self._events = events

    def publish(
        self, detail_type: str, detail: dict[str, Any], resources: Sequence[str] = ()
    ) -> None:
        events = self._events or client("events")
        result = events.put_events(
            Entries=[
                {
                    "Source": EVENT_SOURCE,
                    "DetailType": detail_type,
                    "Detail": json.dumps(detail, default=str),
                    "EventBusName": self.bus_name,
                    "Resources": list(resources),
                }
            ]
        )
        if result.get("FailedEntryCount"):
            entry = result["Entries"][0]
            raise PublishError(
                f"{detail_type}: {entry.get('ErrorCode')} {entry.get('ErrorMessage')}"
            )


SNS_MESSAGE_LIMIT = 262_144
"""SNS's limit for a message, in bytes."""
REFERENCE_KEYS = ("incident_id", "instance_id", "kind", "source", "dedupe_key", "observed_at")


def sns_message(message: dict[str, Any], limit: int = SNS_MESSAGE_LIMIT) -> str:
    """The message as JSON; if that is over `limit` bytes, a shorter JSON document that says
    so, names the record (incident, instance, event) and keeps the start of the original."""
    text = json.dumps(message, default=str, indent=2)
    size = len(text.encode())
    if size <= limit:
        return text
    head = {
        "truncated": True,
        "original_bytes": size,
        "refers_to": {k: message[k] for k in REFERENCE_KEYS if k in message},
    }
    room = limit - len(json.dumps({**head, "excerpt": ""}, default=str).encode()) - 64
    excerpt = text.encode()[: max(room // 2, 0)].decode("utf-8", "ignore")
    # json escaping can grow the excerpt; halving the room keeps the result under `limit`
    return json.dumps({**head, "excerpt": excerpt}, default=str)


class Escalator:
    """Tells operators, through the SNS escalation topic."""

    def __init__(self, topic_arn: str, sns: Any | None = None) -> None:
        self.topic_arn = topic_arn
        self._sns = sns

    def notify(self, subject: str, message: dict[str, Any]) -> None:
        sns = self._sns or client("sns")
        sns.publish(
            TopicArn=self.topic_arn, Subject=_subject(subject), Message=sns_message(message)
        )


def _subject(text: str) -> str:
    """SNS subjects: at most 100 printable ASCII characters, no line breaks."""
    printable = "".join(c if 32 <= ord(c) < 127 else "?" for c in text)
    return printable[:100] or "HyperGuard"


class Workflows:
    """Starts executions of one state machine, each named after what it is for (an
    incident, a burst), so that starting one twice starts it once."""

    def __init__(self, state_machine_arn: str, sfn: Any | None = None) -> None:
        self.state_machine_arn = state_machine_arn
        self._sfn = sfn

    def execution_arn(self, name: str) -> str:
        prefix, _, machine = self.state_machine_arn.rpartition(":stateMachine:")
        return f"{prefix}:execution:{machine}:{name}"

    def ensure_started(self, name: str, payload: dict[str, Any]) -> str:
        """StartExecution is idempotent for the same name and input; a closed execution
        of the same name (or one started with other input) means it already ran or runs."""
        sfn = self._sfn or client("stepfunctions")
        try:
            return str(
                sfn.start_execution(
                    stateMachineArn=self.state_machine_arn,
                    name=name,
                    input=json.dumps(payload, default=str, sort_keys=True),
                )["executionArn"]
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] == "ExecutionAlreadyExists":
                return self.execution_arn(name)
            raise

    def running_inputs(self, limit: int) -> dict[str, dict[str, Any]]:
        """The inputs of up to `limit` of the newest running executions, by name."""
        sfn = self._sfn or client("stepfunctions")
        pages = sfn.get_paginator("list_executions").paginate(
            stateMachineArn=self.state_machine_arn,
            statusFilter="RUNNING",
            PaginationConfig={"MaxItems": limit, "PageSize": min(limit, 100)},
        )
        inputs: dict[str, dict[str, Any]] = {}
        for page in pages:
            for execution in page["executions"]:
                described = sfn.describe_execution(executionArn=execution["executionArn"])
                try:
                    inputs[execution["name"]] = json.loads(described.get("input") or "{}")
                except ValueError:
                    continue
        return inputs

    def succeeded_output(self, name: str) -> dict[str, Any] | None:
        """The output of the execution `name` if it succeeded; None if it did not (yet), or
        there is no such execution (never started, or past Step Functions' 90 days)."""
        sfn = self._sfn or client("stepfunctions")
        try:
            described = sfn.describe_execution(executionArn=self.execution_arn(name))
        except ClientError as exc:
            if exc.response["Error"]["Code"] == "ExecutionDoesNotExist":
                return None
            raise
        if described["status"] != "SUCCEEDED":
            return None
        try:
            output = json.loads(described.get("output") or "null")
        except ValueError:
            return None
        return output if isinstance(output, dict) else None


class RecoveryWorkflows(Workflows):
    """NodeRecovery executions, one per incident, named after it; and the calls that end
    a recovery's wait for an operator or a signal."""

    def resume(self, task_token: str, output: dict[str, Any]) -> None:
        """An operator approved a paused recovery."""
        sfn = self._sfn or client("stepfunctions")
        sfn.send_task_success(taskToken=task_token, output=json.dumps(output, default=str))

    def wake(self, task_token: str, output: dict[str, Any]) -> bool:
        """End a recovery's wait early (a more urgent signal joined its incident). False
        when the wait had already ended (the token is spent)."""
        sfn = self._sfn or client("stepfunctions")
        try:
            sfn.send_task_success(taskToken=task_token, output=json.dumps(output, default=str))
        except ClientError as exc:
            if exc.response["Error"]["Code"] in (
                "TaskTimedOut",
                "TaskDoesNotExist",
                "InvalidToken",
            ):
                return False
            raise
        return True

    def refuse(self, task_token: str, error: str, cause: str) -> None:
        """An operator vetoed a paused recovery: the workflow escalates."""
        sfn = self._sfn or client("stepfunctions")
        sfn.send_task_failure(taskToken=task_token, error=error, cause=cause[:32768])


class WakeupMessage(CamelModel):
    """The body of the API's wake-up (docs/events.md): why, and the job just submitted."""

    reason: str = Field(max_length=200)
    job_id: str | None = Field(default=None, min_length=1, max_length=128)


def woken_jobs(bodies: Iterable[str]) -> list[str]:
    """The jobs the API's wake-ups among these message bodies name. The other bodies on
    the queue (EventBridge's tick and job-status events) name none."""
    named = []
    for body in bodies:
        try:
            message = WakeupMessage.model_validate_json(body)
        except ValidationError:
            continue
        if message.job_id is not None:
            named.append(message.job_id)
    return named


class SchedulerWakeup(Protocol):
    def wake(self, reason: str, job_id: str | None = None) -> None: ...


class NoWakeup:
    """No queue configured: the periodic tick runs the next pass."""

    def wake(self, reason: str, job_id: str | None = None) -> None:
        return None


class SqsWakeup:
    """One message on the scheduler's FIFO queue, in its single message group, so passes
    run one at a time in order. A fresh deduplication id per wake: two wakes for different
    changes must not be merged by FIFO deduplication (the later one's change would wait for
    the tick, and its job id would be lost). `job_id`: a job just written, which the pass
    reads by key because the index it lists jobs from may not have it yet."""

    GROUP = "scheduler"

    def __init__(self, queue_url: str, sqs: Any | None = None) -> None:
        self.queue_url = queue_url
        self._sqs = sqs

    def wake(self, reason: str, job_id: str | None = None) -> None:
        sqs = self._sqs or client("sqs")
        sqs.send_message(
            QueueUrl=self.queue_url,
            MessageBody=WakeupMessage(reason=reason, job_id=job_id).model_dump_json(
                exclude_none=True
            ),
            MessageGroupId=self.GROUP,
            MessageDeduplicationId=uuid.uuid4().hex,
        )


class WakeupLedger(Protocol):
    """Where pending wake-ups are noted (the lease item: `store.teams.TeamStore`)."""

    def note_wakeup(self, cluster: str, job_id: str | None, now: float) -> bool: ...


class CoalescedWakeup:
    """At most one wake-up pending at a time (D169): each change is noted on the lease item
    (naming its job), and a message is sent only when none was pending, so a burst of
    submissions queues one wake-up, not one each, and a run's end is never queued behind
    thousands of them. The pass takes the note with the lease and reads the jobs it names."""

    def __init__(self, queue: SchedulerWakeup, ledger: WakeupLedger, cluster: str) -> None:
        self.queue = queue
        self.ledger = ledger
        self.cluster = cluster

    def wake(self, reason: str, job_id: str | None = None) -> None:
        if self.ledger.note_wakeup(self.cluster, job_id, time.time()):
            self.queue.wake(reason, job_id)


def wakeup_for(settings: Settings, ledger: WakeupLedger | None = None) -> SchedulerWakeup:
    """The scheduler's queue, coalesced through `ledger` where one is given (the API's)."""
    if not settings.scheduler_queue_url:
        return NoWakeup()
    queue = SqsWakeup(settings.scheduler_queue_url)
    if ledger is None:
        return queue
    return CoalescedWakeup(queue, ledger, settings.hyperpod_cluster_name)
