"""The proactive-move scenario: a fault announced ahead costs its job no unplanned downtime.

An elastic job (min 2, max 4 replicas of 8 GPUs, recovery strategy `auto`) trains on the
twin's HyperPod nodes. AWS Health announces the retirement of one of its nodes: the
published sample event (tests/events/aws-health-ec2-retirement.json), aimed at that node,
with its `startTime` moved to `lead + margin` seconds ahead (the sample's own start is in
the past). At `startTime` the simulated world retires the instance if it is still in
service (a persistent fault: what an unannounced failure would have been).

HyperGuard's deployed code does the rest: ingestion opens a scheduled incident; NodeRecovery
waits until `scheduledChangeLeadMins` before the start, cordons the node, chooses the job's
strategy, moves the job off (an elastic job shrinks gracefully: it checkpoints, then
restarts at the smaller size on the healthy nodes) and repairs the empty node.

Measured from the simulated cluster's own timeline of the job:
- `moved_before_deadline`: the job no longer ran on the node when the start came;
- `unplanned_downtime_s`: seconds of virtual time the job did not train because the node
  was retired under it (0 when it was moved in time);
- `job_steps_lost`: steps the job trained and then had to redo (its progress beyond the
  checkpoint it resumed from), summed over every restart after the announcement;
- `planned_pause_s`: seconds of virtual time the job did not train while it was moved;
- `incident_status`: the incident's status when the scenario ends.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from datetime import datetime, timedelta
from email.utils import format_datetime
from pathlib import Path
from typing import Any

from hyperguard_twin.cloud.training_run import interruptions
from hyperguard_twin.config import TwinError
from hyperguard_twin.inject import put_entry, retarget
from hyperguard_twin.runtime import Twin
from hyperguard_twin.scenarios import FULL, back_at_full_size, configure, ok, submit, wait_for

STRATEGY = "auto"
TRAINED_STEPS = 15
"""Steps the job trains before the announcement (past its first checkpoint)."""
LEAD_MINS = 60.0
"""The repair policy's `scheduledChangeLeadMins` (the published default), on the twin's
clock like the rest of its policy."""
MARGIN_S = 20.0
"""Wall seconds between the move starting and the announced start."""


def proactive_move(twin: Twin, events_dir: Path, *, timeout_s: float = 240.0) -> dict[str, Any]:
    """Run the scenario on a twin started with 6 HyperPod nodes and no seeded jobs."""
    assert twin.deployment is not None
    configure(twin, [STRATEGY])
    lead_s = LEAD_MINS * 60 / twin.config.time_scale
    subject = submit(twin, STRATEGY)
    deadline = time.monotonic() + timeout_s
    wait_for(
        lambda: twin.cluster.step_of(subject.job_id) >= TRAINED_STEPS,
        deadline,
        "the job never trained",
    )
    node = twin.cluster.job_instances(subject.job_id)[-1]
    announced_at = twin.cluster.clock.now()
    start_wall = twin.cluster.clock.wall(announced_at) + timedelta(seconds=lead_s + MARGIN_S)
    sample = json.loads((events_dir / "aws-health-ec2-retirement.json").read_text())
    event = retarget(sample, node)
    event["detail"]["startTime"] = format_datetime(start_wall, usegmt=True)
    bus = twin.deployment.outputs["EventBusName"]
    twin.client("events").put_events(Entries=[put_entry(event, bus)])

    wait_for(
        lambda: twin.cluster.clock.wall(twin.cluster.clock.now()) >= start_wall,
        deadline,
        "the announced start never came",
    )
    start = twin.cluster.clock.now()
    still_on_node = node in twin.cluster.job_instances(subject.job_id)
    if any(i.instance_id == node for i in twin.cluster.instances()):
        twin.cluster.inject_fault(node, "persistent")  # AWS retires the instance
    moved = replace(subject, node=node, fault_at=announced_at)
    wait_for(
        lambda: back_at_full_size(twin, moved) is not None and _incident(twin, node),
        deadline,
        "the job never trained at full size again",
    )
    incident = _incident(twin, node)
    assert incident is not None
    return {
        "moved_before_deadline": not still_on_node,
        **_measure(twin, subject.job_id, announced_at, start, still_on_node),
        "incident_status": incident["status"],
        "strategy_applied": _strategy(twin, incident["incident_id"], subject.job_id),
        "node": node,
        "lead_s": LEAD_MINS * 60,
        "time_scale": twin.config.time_scale,
        "modelled": twin.cluster.timings.model_dump(),
    }


def _incident(twin: Twin, node: str) -> dict[str, Any] | None:
    """The node's incident once it has ended (resolved or escalated)."""
    listed = ok(twin, "GET", "/incidents")["incidents"]
    for incident in listed:
        if incident["instance_id"] == node and incident["status"] in ("resolved", "escalated"):
            return dict(incident)
    return None


def _strategy(twin: Twin, incident_id: str, job_id: str) -> str | None:
    """What recovery did with the job, as the incident records it."""
    incident = ok(twin, "GET", f"/incidents/{incident_id}")
    jobs = incident.get("jobs") or []
    return next((j.get("strategy") for j in jobs if j.get("job_id") == job_id), None)


def _measure(
    twin: Twin, job_id: str, announced: datetime, start: datetime, still_on_node: bool
) -> dict[str, Any]:
    timeline = [p for p in twin.cluster.timeline(job_id) if p.at >= announced]
    stops = [i for i in interruptions(timeline, training=True) if i.resumed is not None]
    lost_steps = sum(i.steps_lost for i in stops)
    paused_s = sum(i.seconds_down(announced) for i in stops)
    unplanned = 0.0
    if still_on_node:
        resumed = next((p for p in timeline if p.at > start and p.replicas > 0), None)
        if resumed is None:
            raise TwinError("the job never trained again after the retirement")
        unplanned = (resumed.at - start).total_seconds()
    return {
        "unplanned_downtime_s": round(unplanned, 1),
        "job_steps_lost": lost_steps,
        "planned_pause_s": round(paused_s - unplanned, 1),
        "replicas_end": FULL if twin.cluster.job_instances(job_id) else 0,
    }
