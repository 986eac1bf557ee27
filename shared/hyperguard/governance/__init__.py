"""Task governance: the pure admission engine (quotas, lend/borrow, fair share, priorities,
preemption) and placement of admitted jobs onto pools."""

from hyperguard.governance.decisions import Decision, DecisionKind, Decisions, PendingGroup
from hyperguard.governance.engine import schedule
from hyperguard.governance.state import GovernanceState, TeamPolicy, Workload

__all__ = [
    "Decision",
    "DecisionKind",
    "Decisions",
    "GovernanceState",
    "PendingGroup",
    "TeamPolicy",
    "Workload",
    "schedule",
]
