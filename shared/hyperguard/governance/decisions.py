"""What a scheduling pass decides. Plain data: the caller applies each action with a
conditional write, in list order (victims are listed before the job that needed their
capacity)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum


class DecisionKind(StrEnum):
    ADMIT = "Admit"
    PREEMPT = "Preempt"
    SHRINK = "Shrink"
    GROW = "Grow"


@dataclass(frozen=True, slots=True)
class Decision:
    kind: DecisionKind
    job_id: str
    team: str
    instance_type: str
    replicas: int
    """Replicas the job holds after this action (0 for a preemption)."""
    reason: str
    for_job: str | None = None
    """The job whose admission caused this preemption or shrink."""


@dataclass(frozen=True, slots=True)
class PendingGroup:
    """Jobs that stay pending for the same reason (one queue shape of one team)."""

    reason: str
    job_ids: tuple[str, ...]
    short_of_capacity: tuple[str, ...] = ()
    """Those of `job_ids` that only installed capacity holds back: their team's quota (and
    the lending pool) would take them. Burst capacity would let them run."""


@dataclass(slots=True)
class Decisions:
    actions: list[Decision] = field(default_factory=list)
    pending: list[PendingGroup] = field(default_factory=list)

    def of_kind(self, kind: DecisionKind) -> list[Decision]:
        return [action for action in self.actions if action.kind is kind]

    @property
    def admitted(self) -> list[Decision]:
        return self.of_kind(DecisionKind.ADMIT)

    @property
    def preempted(self) -> list[Decision]:
        return self.of_kind(DecisionKind.PREEMPT)

    @property
    def pending_reasons(self) -> dict[str, str]:
        return {job_id: group.reason for group in self.pending for job_id in group.job_ids}

    @property
    def short_of_capacity(self) -> list[str]:
        """Pending jobs that only installed capacity holds back, in admission order."""
        return [job_id for group in self.pending for job_id in group.short_of_capacity]

    @property
    def write_count(self) -> int:
        """Conditional writes the caller must make to apply the actions."""
        return len(self.actions)
