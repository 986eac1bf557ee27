"""The NodeRecovery workflow's state: the one JSON object (`recovery`) every step receives and
returns (D17), typed.

The state machine reads it by name: the Choice states `verdict`, `action` and `health`, the
WaitForRepair state `poll_s`, WaitBeforeRepair's timeout `wait_s`, the RecoveryEscalated
state `cause`; a Catch writes `error`, AwaitOperatorApproval `approval`, WaitBeforeRepair
`woken`. A step's state is parsed from that JSON and dumped back to the same JSON plus what
the step changed: a key never set stays absent (`exclude_unset`), a key `forget` removes goes,
and keys no step reads (`woken`, `escalation_error`, anything a later ASL adds) pass through
as they came.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PlainSerializer

from hyperguard.models import Repair
from hyperguard.models.incidents import RepairedBy

Verdict = Literal["recovered", "wait", "repair", "hold", "proceed", "rediagnose", "close", "closed"]
"""What a step concluded, for the Choice state after it (RouteDiagnosis, RouteGuard,
RouteClose)."""
Health = Literal["pending", "healthy", "escalate_replace"]
"""CheckHealth's conclusion, for RouteHealth."""

IsoTime = Annotated[datetime, PlainSerializer(lambda when: when.isoformat(), return_type=str)]
"""A time the steps wrote with `isoformat()`, read back and written again unchanged."""


class CaughtError(BaseModel):
    """What a Catch puts in `error` (`ResultPath $.error`): the failed state's error name and
    its cause."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    error: str | None = Field(default="unknown error", alias="Error")
    cause: str | None = Field(default="", alias="Cause")

    def summary(self) -> str:
        """The error in one line for a person: the name and the message, never the stack
        frames a Lambda function's failure carries in its Cause (its JSON `errorMessage`,
        `errorType`, `stackTrace`); the whole cause stays in the function's log."""
        cause = self.cause or ""
        try:
            parsed = json.loads(cause)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict) and "errorMessage" in parsed:
            cause = str(parsed["errorMessage"])
        first = next((line.strip() for line in cause.splitlines() if line.strip()), "")
        return f"{self.error}: {first}" if first else str(self.error)


class Drained(BaseModel):
    evicted: int
    forced: int


class Recovery(BaseModel):
    """The workflow's state. Every key is optional: the execution starts with its input
    alone, and each step adds what it found."""

    model_config = ConfigDict(extra="allow")

    # The execution's input (ingestion, or an operator's re-drive or node action), which
    # `hyperguard executions` shows.
    incident_id: str | None = None
    instance_id: str | None = None
    cluster: str | None = None
    repair: str | None = None
    kind: str | None = None
    redrive: int | None = None
    # From the context object, taken by the step they are for.
    execution_arn: str | None = None
    task_token: str | None = None
    # Diagnose (and the waits it asks for).
    round: int | None = Field(default=None, description="the incident's diagnoses so far")
    urgency: int | None = Field(default=None, description="the incident's urgency diagnosed")
    poll_s: int | None = Field(default=None, description="WaitForRepair's seconds")
    verdict: Verdict | None = None
    action: Repair | None = Field(default=None, description="the repair decided or under way")
    reason: str | None = None
    resolution: str | None = None
    wait_until: str | None = None
    wait_s: int | None = Field(default=None, description="WaitBeforeRepair's timeout")
    signals_seen: int | None = Field(
        default=None, description="the incident's signals when the node was last found healthy"
    )
    # GuardBlastRadius and AwaitOperatorApproval.
    hold_reasons: list[str] | None = None
    approval: dict[str, Any] | None = None
    # ProtectJobs, Drain, ResumeJobs: job ids.
    jobs: list[str] | None = None
    drain: Drained | None = None
    drain_until: IsoTime | None = Field(
        default=None, description="while a drain goes on: when what is left is deleted"
    )
    drain_pending: bool | None = Field(
        default=None, description="pods are left that a PodDisruptionBudget protects"
    )
    drain_retry_s: int | None = Field(default=None, description="WaitForDrain's seconds")
    moved: list[str] | None = None
    resumed: list[str] | None = None
    # Repair and CheckHealth.
    repaired_by: RepairedBy | None = Field(
        default=None,
        description="who repairs: hyperguard, or the repairer deferred to (D142, D148)",
    )
    pool_before: list[str] | None = None
    logical_ids_before: dict[str, str] | None = None
    repair_requested_at: IsoTime | None = None
    health_deadline: IsoTime | None = None
    health: Health | None = None
    replacement: str | None = None
    deep_health_check: Literal["started", "running"] | None = None
    saw_repairing: bool | None = None
    # Escalate.
    error: CaughtError | None = None
    status: str | None = None
    cause: str | None = None

    @property
    def this_round(self) -> int:
        """The diagnosis the jobs' plans belong to (the first, before any diagnosis)."""
        return 1 if self.round is None else self.round

    @property
    def repairing(self) -> Repair:
        """The repair under way: the steps after Repair read it (a KeyError without one, as
        for every key a step needs and an earlier one writes)."""
        if self.action is None:
            raise KeyError("action")
        return self.action

    @property
    def deadline(self) -> datetime:
        """When the repaired node must be healthy by (written by Repair)."""
        if self.health_deadline is None:
            raise KeyError("health_deadline")
        return self.health_deadline

    def forget(self, *keys: str) -> None:
        """Remove `keys` from the state, as if never set."""
        for key in keys:
            setattr(self, key, None)
            self.__pydantic_fields_set__.discard(key)

    def take_task_token(self) -> str:
        """The task token the context object passed to this step: read and removed (a
        KeyError without one, as a Task that passes none is wired wrong)."""
        token = self.task_token
        if token is None:
            raise KeyError("task_token")
        self.forget("task_token")
        return token

    def dump(self) -> dict[str, Any]:
        """The JSON object the state machine passes on."""
        return self.model_dump(mode="json", by_alias=True, exclude_unset=True)
