"""The lemon window's history: the one read of node incidents that the recovery, the
scheduler and the API share (the rules over it: `hyperguard.policies.reliability`)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from hyperguard.models import Incident, Node
from hyperguard.policies.reliability import WINDOW_INCIDENTS, window_start
from hyperguard.policies.repair import NodeRepairConfig
from hyperguard.store.incidents import IncidentStore
from hyperguard.store.nodes import NodeStore


@dataclass(frozen=True)
class History:
    """The lemon window's incidents, and the slot of every instance they name."""

    incidents: list[Incident]
    logical_ids: dict[str, str | None]
    truncated: bool = False


def read_history(
    incidents: IncidentStore,
    nodes: NodeStore,
    policy: NodeRepairConfig,
    now: datetime,
    known: Iterable[Node],
) -> History:
    """The window's node incidents (none read when lemons are off; those about a job left
    out, they name no instance) and the logical ids of their instances: from `known` nodes,
    the rest (replaced instances) in one batch read."""
    if not policy.lemon_incident_threshold:
        return History([], {})
    read, truncated = incidents.opened_since(window_start(policy, now), WINDOW_INCIDENTS)
    found = [i for i in read if not i.about_job]
    logical_ids = {n.instance_id: n.logical_id for n in known}
    missing = [i.instance_id for i in found if i.instance_id not in logical_ids]
    if missing:
        logical_ids |= {n.instance_id: n.logical_id for n in nodes.many(missing)}
    return History(found, logical_ids, truncated)
