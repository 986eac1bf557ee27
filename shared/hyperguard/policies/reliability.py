"""A node's reliability from its incidents: which nodes are lemons, and the per-node view.

A lemon is a node that keeps failing: `lemonIncidentThreshold` faults or more within the
last `lemonWindowDays` (NodeRepairConfig). Its reboots become replacements and the
recovery never takes it as a hot spare (D87). Faults are counted per slot: a HyperPod
node's NodeLogicalId, which HyperPod keeps across a replacement (D68), so a slot that keeps
failing is still recognised after its instance changed; a node without one (an EKS node)
is its own slot. Planned disruptions (PLANNED_KINDS) are not the node's faults and are not
counted, nor are incidents about a job (a stall, D117): they name no node.

The functions here are pure over the incidents and nodes they are given; the one read
the recovery, the scheduler and the API share is `hyperguard.store.history.read_history`.
A reboot of a lemon becomes a replacement in `hyperguard.recovery.policy.replace_lemon`.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta

from pydantic import BaseModel, Field

from hyperguard.models import Incident, Node, NodeStatus
from hyperguard.policies.repair import NodeRepairConfig

# Kinds whose incident is about a node that is fine now but will not be for long, or that
# an operator asked to repair: the node being healthy is no reason to close them, and none
# of them is the node failing.
PLANNED_KINDS = frozenset(
    {
        "spot_interruption",
        "capacity_reservation_interruption",
        "rebalance_recommendation",
        "health_scheduled_change",
        "operator_reboot",
        "operator_replace",
    }
)

WINDOW_INCIDENTS = 5000
"""Incidents of the lemon window read at most, newest first: a bound on the cost of a
diagnosis and of the view, far above what a fleet's month holds (Meta's 2,048 Llama 3 hosts
had 419 unexpected interruptions in 54 days)."""


def window_start(policy: NodeRepairConfig, now: datetime) -> datetime:
    return now - timedelta(days=policy.lemon_window_days)


def slot_of(instance_id: str, logical_ids: Mapping[str, str | None]) -> str:
    """The slot an instance fills: its NodeLogicalId where known, else the instance."""
    return logical_ids.get(instance_id) or instance_id


def faults(
    policy: NodeRepairConfig, incidents: Iterable[Incident], now: datetime
) -> list[Incident]:
    """The node faults among `incidents` opened within the window, each once, oldest first:
    neither planned disruptions nor incidents about a job."""
    since = window_start(policy, now)
    unique = {
        i.incident_id: i
        for i in incidents
        if i.kind not in PLANNED_KINDS and not i.about_job and i.opened_at >= since
    }
    return sorted(unique.values(), key=lambda i: (i.opened_at, i.incident_id))


def faults_by_slot(
    policy: NodeRepairConfig,
    incidents: Iterable[Incident],
    logical_ids: Mapping[str, str | None],
    now: datetime,
) -> dict[str, list[Incident]]:
    grouped: dict[str, list[Incident]] = defaultdict(list)
    for incident in faults(policy, incidents, now):
        grouped[slot_of(incident.instance_id, logical_ids)].append(incident)
    return dict(grouped)


def lemon_reason(policy: NodeRepairConfig, opened: Sequence[datetime], now: datetime) -> str | None:
    """Why a node whose faults were opened at `opened` is a lemon, or None if it is not."""
    threshold = policy.lemon_incident_threshold
    if not threshold:
        return None
    since = window_start(policy, now)
    count = sum(1 for at in opened if at >= since)
    if count < threshold:
        return None
    return f"lemon: {count} incidents in {policy.lemon_window_days} days"


def lemon_slots(
    policy: NodeRepairConfig,
    incidents: Iterable[Incident],
    logical_ids: Mapping[str, str | None],
    now: datetime,
) -> frozenset[str]:
    return frozenset(
        slot
        for slot, found in faults_by_slot(policy, incidents, logical_ids, now).items()
        if lemon_reason(policy, [i.opened_at for i in found], now)
    )


class NodeReliability(BaseModel):
    """One node (slot) with faults in the window."""

    instance_id: str = Field(
        description="the slot's instance in the cluster now, else the last one that failed"
    )
    logical_id: str | None = Field(description="HyperPod NodeLogicalId: the slot")
    pool: str | None = Field(description="its instance group or EKS pool, where known")
    instance_ids: list[str] = Field(description="the slot's instances that failed in the window")
    incidents: int = Field(description="node faults in the window (planned disruptions left out)")
    causes: dict[str, int] = Field(description="those faults by incident kind")
    mtbf_hours: float | None = Field(
        description="hours the slot was in the window (from its first instance's launch, if "
        "later) per fault; null when that time is not known to be positive"
    )
    last_incident_at: datetime
    lemon: bool = Field(description="replaced rather than rebooted, never a hot spare")


def _exposure_start(since: datetime, instances: Sequence[Node], first_fault: datetime) -> datetime:
    """Since when the slot was up in the window: from its first instance's launch if every
    one has a known launch time, else the window's start; never after its first fault."""
    launched = [n.launch_time for n in instances if n.launch_time is not None]
    start = max(since, min(launched)) if launched and len(launched) == len(instances) else since
    return min(start, first_fault)


def _row(
    policy: NodeRepairConfig,
    slot: str,
    found: list[Incident],
    nodes: Mapping[str, Node],
    present: Node | None,
    now: datetime,
) -> NodeReliability:
    instance_ids = list(dict.fromkeys(i.instance_id for i in found))
    known = [nodes[i] for i in instance_ids if i in nodes] + ([present] if present else [])
    start = _exposure_start(window_start(policy, now), known, found[0].opened_at)
    hours = (now - start).total_seconds() / 3600
    current = present or nodes.get(instance_ids[-1])
    return NodeReliability(
        instance_id=current.instance_id if current else instance_ids[-1],
        logical_id=next((n.logical_id for n in known if n.logical_id), None),
        pool=current.pool if current else None,
        instance_ids=instance_ids,
        incidents=len(found),
        causes=dict(sorted(Counter(i.kind for i in found).items())),
        mtbf_hours=round(hours / len(found), 2) if hours > 0 else None,
        last_incident_at=found[-1].opened_at,
        lemon=lemon_reason(policy, [i.opened_at for i in found], now) is not None,
    )


def reliability(
    policy: NodeRepairConfig, incidents: Iterable[Incident], nodes: Sequence[Node], now: datetime
) -> list[NodeReliability]:
    """Every slot with faults in the window, repeat offenders first (most faults, then the
    latest fault); `nodes` are the inventory's, retired instances included."""
    by_id = {n.instance_id: n for n in nodes}
    logical_ids = {n.instance_id: n.logical_id for n in nodes}
    present = {
        slot_of(n.instance_id, logical_ids): n
        for n in nodes
        if n.retired_at is None and n.status is not NodeStatus.NOT_FOUND
    }
    rows = [
        _row(policy, slot, found, by_id, present.get(slot), now)
        for slot, found in faults_by_slot(policy, incidents, logical_ids, now).items()
    ]
    return sorted(
        rows, key=lambda r: (-r.incidents, -r.last_incident_at.timestamp(), r.instance_id)
    )
