"""Incidents: one per node fault, from first signal to closure; and one per stall of a job
(`job_stalled`), which is about the job, not a node (D117)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, Field

from hyperguard.models.signals import Repair

JOB_STALLED = "job_stalled"
"""A running job that stopped making progress, requeued to resume from its checkpoint (D94,
D117): no node is at fault and no node's lock is taken."""
JOB_KINDS = frozenset({JOB_STALLED})
"""Kinds of incident about a job: `instance_id` is empty, the job is `jobs[0]`."""


class IncidentStatus(StrEnum):
    OPEN = "open"
    DETECTED = "detected"
    WAITING = "waiting"
    AWAITING_APPROVAL = "awaiting_approval"
    RECOVERING = "recovering"
    RESOLVED = "resolved"
    NEEDS_OPERATOR = "needs_operator"


class ProtectedJob(BaseModel):
    """A job that was on the node when the incident began, and what recovery does with it."""

    job_id: str
    team: str | None = Field(default=None, description="the job's team (who may see it)")
    strategy: str = Field(
        description="wait_for_repair | hot_spare | elastic_shrink | move | "
        "hyperpod_auto_resume | requeue"
    )
    why: str = Field(default="", description="why this strategy (asked for, or the estimates)")
    lost_gpu_minutes: dict[str, float] = Field(
        default_factory=dict, description="expected lost GPU-minutes of each feasible strategy"
    )
    checkpoint_step: int | None = None
    checkpoint_uri: str | None = None
    nodes: list[str] = Field(default_factory=list, description="where it ran")
    spare: str | None = None
    run: int = Field(default=0, description="the job's run that was on the failed node")
    round: int = Field(default=0, description="which diagnosis of the incident planned it")
    resumed: bool = False
    outcome: str = Field(default="", description="what became of it (refusals say why)")


RepairedBy = Literal["hyperguard", "hyperpod", "karpenter", "eks", "nth"]
"""Who reboots or replaces a node, or drains it ahead of an interruption (D142, D148)."""


class Incident(BaseModel):
    incident_id: str
    instance_id: str = Field(description="the node; empty for an incident about a job")
    cluster: str
    status: IncidentStatus = IncidentStatus.OPEN
    kind: str
    severity: str
    repair: Repair
    reason: str
    opened_at: datetime
    first_signal_at: datetime
    not_before: datetime | None = None
    deadline: datetime | None = None
    execution_arn: str | None = None
    signal_count: int = 1
    sources: list[str] = Field(default_factory=list)
    facts: dict[str, Any] = Field(default_factory=dict, description="the first signal's facts")
    notes: list[str] = Field(default_factory=list)
    timings: dict[str, float] = Field(
        default_factory=dict, description="seconds from the first signal to each milestone"
    )
    action: str | None = Field(default=None, description="the repair being carried out")
    replacement_instance_id: str | None = None
    repaired_by: RepairedBy | None = Field(
        default=None,
        description="who reboots or replaces the node (or drains it ahead of an "
        "interruption): HyperGuard, or the repairer it deferred to: HyperPod's automatic node "
        "recovery (D142), Karpenter's node repair, EKS node auto-repair, the Node Termination "
        "Handler (D148)",
    )
    repair_events: list[str] = Field(
        default_factory=list,
        max_length=20,
        description="where HyperPod repairs the node: its cluster events about the node "
        "(ListClusterEvents), '<time> <level>: <description>', oldest first",
    )
    jobs: list[ProtectedJob] = Field(default_factory=list)
    resolution: str | None = None
    task_token: str | None = Field(default=None, description="set while awaiting approval")
    wait_token: str | None = Field(
        default=None, description="set while the repair waits; sent back to wake it early"
    )
    urgency: int = Field(
        default=0, description="bumped whenever a more urgent signal joins the incident"
    )
    redrives: int = 0

    @property
    def about_job(self) -> bool:
        """About a job (JOB_KINDS), not a node: never a node's fault, never its lock."""
        return self.kind in JOB_KINDS


PHASES = ("detect", "cordon_drain", "repair", "resume")
"""The phases of a recovery, as `incident_phases` splits an incident's timings."""


def incident_phases(timings: Mapping[str, float]) -> dict[str, float | None]:
    """Seconds of each recovery phase from an incident's `timings` (seconds from the first
    signal); None where a milestone is missing. Out-of-order milestones count 0."""
    detected, requested, healthy, resumed = (
        timings.get(f"signal_to_{m}_s")
        for m in ("detected", "repair_requested", "healthy", "resumed")
    )

    def span(begin: float | None, end: float | None) -> float | None:
        return None if begin is None or end is None else max(float(end) - float(begin), 0.0)

    if requested is None:  # a drain, or a node that came back on its own: no repair
        return {
            "detect": span(0.0, detected),
            "cordon_drain": span(detected, resumed),
            "repair": None,
            "resume": None,
        }
    return {
        "detect": span(0.0, detected),
        "cordon_drain": span(detected, requested),
        "repair": span(requested, healthy),
        "resume": span(healthy, resumed),
    }
