"""Scenarios that compare what HyperGuard does, measured on the twin's simulated cluster.

`elastic_fault`: the same node fault under two identical elastic jobs (min 2, max 4
replicas of 8 GPUs), one asking for `elastic_shrink`, the other for `wait_for_repair`, in
one twin run. Both faults are injected at the same simulated instant; each job's loss is
read from the simulated cluster's own timeline of its training (when it stepped, at what
size, from which step):

    lost GPU-minutes = G * (T_full - T_fault) - G * step * (S_full - S_fault)

G is the job's GPUs at full size, `step` a step's duration at full size, T_full the first
moment after the fault the job trains at full size again, from step S_full, and S_fault its
step at the fault. Idle GPUs, slower training at a smaller size and work redone after
rolling back to a checkpoint all count. What is modelled (reboot, health check and restart
durations, step time) is the simulator's input, SimTimings; what is measured is what
HyperGuard's deployed code did with those: when it detected, what it decided, when it
shrank, restarted and grew the jobs.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from hyperguard.policies.repair import NodeRepairConfig
from hyperguard_twin.cluster import Progress
from hyperguard_twin.config import INSTANCE_TYPE, TwinError
from hyperguard_twin.runtime import Twin
from hyperguard_twin.service_users import fast_policy, team_role

GPUS_PER_REPLICA = 8
FULL = 4
POOL = "workers"
"""The twin's HyperPod instance group."""
STRATEGIES = ("elastic_shrink", "wait_for_repair")
TRAINED_STEPS = 25
"""Steps each job trains before the fault (two checkpoints written)."""


@dataclass(frozen=True)
class Subject:
    strategy: str
    team: str
    job_id: str
    node: str = ""
    fault_at: datetime | None = None
    step_at_fault: int = 0
    checkpoint_at_fault: int | None = None


def elastic_fault(twin: Twin, *, timeout_s: float = 240.0) -> dict[str, Any]:
    """Run the scenario on a twin started with 8 HyperPod nodes and no seeded jobs."""
    configure(twin, STRATEGIES)
    subjects = [submit(twin, strategy) for strategy in STRATEGIES]
    deadline = time.monotonic() + timeout_s
    wait_for(
        lambda: all(twin.cluster.step_of(s.job_id) >= TRAINED_STEPS for s in subjects),
        deadline,
        "the jobs never trained",
    )
    faulted = []
    for subject in subjects:
        node = twin.cluster.job_instances(subject.job_id)[-1]
        faulted.append(
            Subject(
                subject.strategy,
                subject.team,
                subject.job_id,
                node,
                twin.cluster.clock.now(),
                twin.cluster.step_of(subject.job_id),
                twin.cluster.checkpoint_step(subject.job_id),
            )
        )
    for subject in faulted:
        twin.cluster.inject_fault(subject.node, "gpu")
    wait_for(
        lambda: all(back_at_full_size(twin, s) is not None for s in faulted),
        deadline,
        "a job never trained at full size again",
    )
    step_s = twin.cluster.timings.step_duration_s
    return {
        "strategies": {s.strategy: _measure(twin, s, step_s) for s in faulted},
        "modelled": twin.cluster.timings.model_dump(),
        "time_scale": twin.config.time_scale,
    }


def configure(twin: Twin, strategies: Sequence[str], hot_spares: int = 0) -> None:
    """A team per strategy with a quota of FULL nodes, fair share, and the twin's repair
    policy (`hot_spares` idle nodes kept in the pool)."""
    policy = fast_policy(twin.config.time_scale).model_copy(
        update={
            # a fault in each team's job at once is the scenario, not a reason to brake
            "max_unhealthy_node_threshold_percentage": 50,
            "max_parallel_nodes_repaired_percentage": 50,
            "hot_spares": {POOL: hot_spares} if hot_spares else {},
        }
    )
    ok(twin, "PUT", "/policies/node-repair", NodeRepairConfig.model_dump(policy, mode="json"))
    ok(
        twin,
        "PUT",
        "/scheduler-config",
        {"PriorityClasses": [{"Name": "training", "Weight": 50}], "FairShare": "Enabled"},
    )
    for strategy in strategies:
        add_team(twin, team_of(strategy), FULL, {"Strategy": "DontLend"}, preempt="Never")


def add_team(
    twin: Twin, team: str, instances: int, sharing: dict[str, Any], *, preempt: str
) -> None:
    """A team whose members call as its role, with a quota of `instances` nodes."""
    ok(twin, "PUT", "/principals", {"principal_arn": team_role(team), "team": team})
    ok(
        twin,
        "PUT",
        f"/teams/{team}/compute-quota",
        {
            "Name": f"{team}-quota",
            "ClusterArn": twin.config.cluster_arn,
            "ComputeQuotaConfig": {
                "ComputeQuotaResources": [{"InstanceType": INSTANCE_TYPE, "Count": instances}],
                "ResourceSharingConfig": sharing,
                "PreemptTeamTasks": preempt,
            },
            "ComputeQuotaTarget": {"TeamName": team, "FairShareWeight": 10},
            "ActivationState": "Enabled",
        },
    )


def team_of(strategy: str) -> str:
    return strategy.replace("_", "-")


def submit(twin: Twin, strategy: str) -> Subject:
    """An elastic job (min 2, max FULL replicas) asking for `strategy`, in its own team."""
    team = team_of(strategy)
    job = ok(
        twin,
        "POST",
        "/jobs",
        {
            "name": f"elastic-{team}",
            "priority_class": "training",
            "instance_type": INSTANCE_TYPE,
            "replicas": FULL,
            "elastic_policy": {
                "minReplicas": 2,
                "maxReplicas": FULL,
                "replicaIncrementStep": 1,
                "gracefulShutdownTimeoutInSeconds": 600,
                "scalingTimeoutInSeconds": 1,
                "faultyScaleDownTimeoutInSeconds": 30,
            },
            "recovery": {"strategy": strategy},
            "image": "hyperguard/trainer:twin",
            "command": ["hyperpodrun", "train.py"],
            "checkpoint_location": f"s3://{twin.config.parameters['CheckpointBucketName']}/{team}/",
        },
        principal=team_role(team),
    )
    return Subject(strategy, team, job["job_id"])


def back_at_full_size(twin: Twin, subject: Subject) -> Progress | None:
    assert subject.fault_at is not None
    return next(
        (
            p
            for p in twin.cluster.timeline(subject.job_id)
            if p.at > subject.fault_at and p.replicas == FULL
        ),
        None,
    )


def _measure(twin: Twin, subject: Subject, step_s: float) -> dict[str, Any]:
    assert subject.fault_at is not None
    full = back_at_full_size(twin, subject)
    assert full is not None
    after = [p for p in twin.cluster.timeline(subject.job_id) if p.at > subject.fault_at]
    training = [p for p in after if p.replicas > 0]
    gpus = FULL * GPUS_PER_REPLICA
    idle_s = (full.at - subject.fault_at).total_seconds()
    lost = gpus * idle_s - gpus * step_s * (full.step - subject.step_at_fault)
    resumed_from = training[0].step if training else None
    kept = subject.checkpoint_at_fault
    view = ok(twin, "GET", f"/jobs/{subject.job_id}")
    return {
        "lost_gpu_minutes": round(lost / 60, 1),
        "replicas_min_seen": min((p.replicas for p in training), default=0),
        "replicas_end": len(view["nodes"]),
        "checkpoint_step_kept": kept is not None
        and resumed_from is not None
        and resumed_from >= kept,
        "fault_step": subject.step_at_fault,
        "resumed_from_step": resumed_from,
        "full_size_again_after_s": round(idle_s, 1),
        "job_status": view["status"],
    }


THROTTLED_TRIES = 5
"""Tries of a call the API answers 429 (nothing was done), a second apart: its Retry-After,
as every limit's window is a second (D147)."""


def ok(twin: Twin, method: str, path: str, body: Any = None, **kwargs: Any) -> Any:
    for _ in range(THROTTLED_TRIES):
        status, answer = twin.api(method, path, body, **kwargs)
        if status != 429:
            break
        time.sleep(1.0)
    if status >= 300:
        raise TwinError(f"{method} {path} answered {status}: {answer}")
    return answer


def wait_for(condition: Any, deadline: float, what: str) -> None:
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    raise TwinError(f"{what} within the scenario's time limit")


def told(job: dict[str, Any]) -> dict[str, Any]:
    """A job as GET /jobs/{id} tells it: its status, the reason for it, its last five events."""
    history = [h.get("event") for h in job.get("history", [])]
    return {"status": job.get("status"), "reason": job.get("reason"), "last": history[-5:]}
