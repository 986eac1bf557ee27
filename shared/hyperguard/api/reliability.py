"""GET /nodes/reliability: each node's faults over the repair policy's lemon window, repeat
offenders first (hyperguard.policies.reliability computes it; D87)."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from hyperguard.policies.reliability import (
    WINDOW_INCIDENTS,
    NodeReliability,
    reliability,
    window_start,
)
from hyperguard.policies.repair import NodeRepairConfig
from hyperguard.store import IncidentStore, NodeStore

MAX_NODES = 500
"""Rows a request may ask for: the fleet's worst offenders, not an export of the table."""
DEFAULT_NODES = 50


class NodeReliabilityView(BaseModel):
    window_days: int = Field(description="the policy's lemonWindowDays: faults counted since")
    lemon_incident_threshold: int = Field(
        description="the policy's lemonIncidentThreshold (0: lemons are off)"
    )
    since: datetime
    faults: int = Field(description="node faults in the window, over every node")
    nodes_with_faults: int = Field(description="nodes (slots) with a fault, before the limit")
    lemons: int = Field(description="of those, lemons")
    truncated: bool = Field(
        description=f"the window held more than {WINDOW_INCIDENTS} incidents; only the newest "
        "were counted"
    )
    nodes: list[NodeReliability] = Field(description="repeat offenders first, at most `limit`")


def read_node_reliability(
    incidents: IncidentStore,
    nodes: NodeStore,
    policy: NodeRepairConfig,
    now: datetime,
    limit: int,
) -> NodeReliabilityView:
    """One query of the incidents index over the window, one scan of the node inventory
    (replaced instances included: they name the slot of their past faults)."""
    since = window_start(policy, now)
    found, truncated = incidents.opened_since(since, WINDOW_INCIDENTS)
    rows = reliability(policy, found, nodes.all(), now)
    return NodeReliabilityView(
        window_days=policy.lemon_window_days,
        lemon_incident_threshold=policy.lemon_incident_threshold,
        since=since,
        faults=sum(r.incidents for r in rows),
        nodes_with_faults=len(rows),
        lemons=sum(r.lemon for r in rows),
        truncated=truncated,
        nodes=rows[:limit],
    )
