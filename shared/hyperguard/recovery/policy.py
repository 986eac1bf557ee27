"""What the repair policy (`hyperguard.policies.repair.NodeRepairConfig`) decides about an
incident's node: the repair, and not before when."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from pydantic import BaseModel

from hyperguard.models import Incident, Node, Repair
from hyperguard.models.nodes import PLANNED_REPAIR
from hyperguard.policies.reliability import PLANNED_KINDS, lemon_reason
from hyperguard.policies.repair import NodeRepairConfig, RepairAction

ACCELERATOR_CONDITIONS = frozenset({"AcceleratedHardwareReady"})
ACCELERATOR_REASON_PREFIXES = ("Nvidia", "DCGM", "Neuron")


class RepairDecision(BaseModel):
    action: Repair
    not_before: datetime | None = None
    reason: str


def _is_accelerator_fault(facts: dict[str, object]) -> bool:
    reason = str(facts.get("reason", ""))
    return facts.get("condition_type") in ACCELERATOR_CONDITIONS or reason.startswith(
        ACCELERATOR_REASON_PREFIXES
    )


def decide(
    policy: NodeRepairConfig, incident: Incident, node: Node, now: datetime
) -> RepairDecision:
    """What to do about the incident's node, and not before when.

    Waits count from `incident.opened_at` — when HyperGuard first saw the fault, kept in
    DynamoDB — not from a condition's transition time, which resets when a fault repeats.
    """
    if incident.repair is Repair.DRAIN:
        return RepairDecision(action=Repair.DRAIN, reason=f"{incident.kind}: drain before it goes")
    if not policy.enabled:
        return RepairDecision(action=Repair.NONE, reason="node repair is disabled by policy")
    facts = incident.facts
    for override in policy.node_repair_config_overrides:
        if override.node_monitoring_condition == facts.get(
            "condition_type"
        ) and override.node_unhealthy_reason in (facts.get("reason"), "*"):
            action = {
                RepairAction.REPLACE: Repair.REPLACE,
                RepairAction.REBOOT: Repair.REBOOT,
                RepairAction.NO_ACTION: Repair.NONE,
            }[override.repair_action]
            return _ladder(
                policy,
                node,
                now,
                RepairDecision(
                    action=action,
                    not_before=incident.opened_at
                    + timedelta(minutes=override.min_repair_wait_time_mins),
                    reason=f"override for {override.node_monitoring_condition}/"
                    f"{override.node_unhealthy_reason}: {override.repair_action.value}",
                ),
            )
    action = (
        incident.repair if incident.repair in (Repair.REBOOT, Repair.REPLACE) else Repair.REPLACE
    )
    if incident.severity == "scheduled" and incident.not_before is not None:
        start = incident.not_before - timedelta(minutes=policy.scheduled_change_lead_mins)
        # Not up the ladder: a node announced for maintenance has not failed, and a
        # scheduled reboot is completed by a reboot, however recently it had one (D90).
        return RepairDecision(
            action=action,
            not_before=start,
            reason=f"scheduled change at {incident.not_before.isoformat()}: act "
            f"{policy.scheduled_change_lead_mins} min before",
        )
    if incident.severity == "degraded":
        wait = (
            policy.accelerator_fault_wait_mins
            if _is_accelerator_fault(facts)
            else policy.other_fault_wait_mins
        )
        decision = RepairDecision(
            action=action,
            not_before=incident.opened_at + timedelta(minutes=wait),
            reason=f"degraded: wait {wait} min from first seen before repairing",
        )
    else:
        decision = RepairDecision(action=action, reason=f"{incident.severity}: act at once")
    return _ladder(policy, node, now, decision)


def _ladder(
    policy: NodeRepairConfig, node: Node, now: datetime, decision: RepairDecision
) -> RepairDecision:
    """A node that needed a reboot again within the window gets replaced instead (a
    planned reboot, for a scheduled one, was not a need)."""
    if decision.action is not Repair.REBOOT:
        return decision
    window = timedelta(minutes=policy.repeat_fault_window_mins)
    recent = [
        r
        for r in node.repairs
        if r.get("action") == Repair.REBOOT.value
        and r.get("cause") != PLANNED_REPAIR
        and now - datetime.fromisoformat(r["at"]) < window
    ]
    if recent:
        return decision.model_copy(
            update={
                "action": Repair.REPLACE,
                "reason": f"{decision.reason}; rebooted {len(recent)}x within "
                f"{policy.repeat_fault_window_mins} min, so replace",
            }
        )
    return decision


def replace_lemon(
    policy: NodeRepairConfig,
    incident: Incident,
    decision: RepairDecision,
    opened: Sequence[datetime],
    now: datetime,
) -> RepairDecision:
    """A reboot of a lemon becomes its replacement: a reboot buys a node that keeps failing
    only a short reprieve, at the price of another disruption of the jobs placed on it. An
    operator's own request (a planned kind) is carried out as asked."""
    if decision.action is not Repair.REBOOT or incident.kind in PLANNED_KINDS:
        return decision
    reason = lemon_reason(policy, opened, now)
    if reason is None:
        return decision
    return decision.model_copy(
        update={"action": Repair.REPLACE, "reason": f"{decision.reason}; {reason}, so replace"}
    )
