"""Builders of scheduling-pass snapshots for the tests of the pass's decisions
(governance.decide): nodes, job records, runs, and the snapshot itself, all in memory
(decide reads nothing)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from tests.unit.governance.governance_builders import CATALOGUE, CLASSES, P5, quota, scheduler

from hyperguard.governance.decide import (
    Ledger,
    plan_admission,
    plan_capacity,
    plan_reconcile,
)
from hyperguard.governance.intents import AdmissionPlan, CapacityPlan, ReconcilePlan
from hyperguard.governance.snapshot import PassSnapshot
from hyperguard.models import Job, JobStatus, Node
from hyperguard.models.cluster import RunKind, RunPhase, RunStatus
from hyperguard.models.governance import ComputeQuota
from hyperguard.models.jobs import ElasticPolicy
from hyperguard.models.records import JobRecord
from hyperguard.policies.burst import BurstPolicy
from hyperguard.policies.repair import NodeRepairConfig

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
SUBMITTED = "pending: waiting for the next scheduling pass"
"""The reason a job has until a pass has looked at it (what the API writes)."""
CLUSTER = "hyperguard-test"

__all__ = ["CATALOGUE", "CLASSES", "P5", "quota", "scheduler"]


def hyperpod_node(index: int, *, group: str = "workers", **extra: Any) -> Node:
    return Node(
        instance_id=f"i-hp{index:02d}",
        cluster=CLUSTER,
        pool=group,
        platform="hyperpod",
        instance_type=P5,
        accelerators=8,
        **extra,
    )


def eks_node(index: int, capacity: str = "OnDemand", **extra: Any) -> Node:
    return Node(
        instance_id=f"i-eks{index:02d}",
        cluster="hyperguard-burst",
        pool="gpu-burst",
        platform="eks",
        instance_type="p5.48xlarge",
        capacity_type=capacity,
        accelerators=8,
        **extra,
    )


def pending(
    job_id: str,
    team: str,
    gpus: int = 8,
    *,
    replicas: int = 1,
    template: str = "production",
    cls: str | None = "low",
    at: float = 0.0,
    reason: str = SUBMITTED,
    elastic: bool = False,
    **extra: Any,
) -> JobRecord:
    """A Pending job of `replicas` replicas of `gpus` GPUs, submitted `at` seconds after an
    hour before NOW; `elastic`: it may run at 1 to `replicas` + 2 replicas."""
    policy = ElasticPolicy(min_replicas=1, max_replicas=replicas + 2, scaling_timeout_in_seconds=0)
    job = Job(
        job_id=job_id,
        team=team,
        priority_class=cls,
        template=template,
        instance_type=P5,
        accelerators_per_replica=gpus,
        replicas=replicas,
        elastic_policy=policy if elastic else None,
        image="trainer:1",
        submitted_at=NOW - timedelta(seconds=3600 - at),
    )
    return JobRecord(job=job, reason=reason, **extra)


def running(
    record: JobRecord,
    nodes: Sequence[str],
    *,
    pool: str = "workers",
    pool_kind: str = "hyperpod",
    started_s_ago: float = 3600.0,
) -> JobRecord:
    """The job Running on `nodes` (one per replica), started `started_s_ago` seconds ago."""
    started = NOW - timedelta(seconds=started_s_ago)
    job = record.job.model_copy(
        update={"status": JobStatus.RUNNING, "nodes": list(nodes), "pool": pool}
    )
    return record.model_copy(
        update={
            "job": job,
            "reason": "running",
            "started_at": started,
            "first_admitted_at": started,
            "scaled_at": started,
            "admitted_replicas": len(nodes),
            "pool_kind": pool_kind,
        }
    )


def job_with(record: JobRecord, **fields: Any) -> JobRecord:
    """The record with these fields of its job changed."""
    return record.model_copy(update={"job": record.job.model_copy(update=fields)})


def live_run(record: JobRecord, phase: RunPhase = RunPhase.RUNNING, **extra: Any) -> RunStatus:
    job = record.job
    return RunStatus(
        job_id=job.job_id,
        run=job.run,
        kind=RunKind.HYPERPOD,
        namespace=f"hyperpod-ns-{job.team}",
        name=f"{job.job_id}-run-{job.run}",
        phase=phase,
        replicas=len(job.nodes),
        **extra,
    )


def snapshot(
    jobs: Sequence[JobRecord],
    nodes: Sequence[Node],
    quotas: Sequence[ComputeQuota],
    *,
    runs: Sequence[RunStatus] | None = None,
    min_runtime: int = 0,
    repair: NodeRepairConfig | None = None,
    burst: BurstPolicy | None = None,
    **extra: Any,
) -> PassSnapshot:
    """A snapshot of these jobs on these nodes; every job holding nodes has a live run
    unless `runs` says otherwise."""
    if runs is None:
        runs = [live_run(r) for r in jobs if r.job.status is JobStatus.RUNNING]
    return PassSnapshot(
        now=NOW,
        repair=repair or NodeRepairConfig(),
        burst=burst or BurstPolicy(),
        jobs=tuple(sorted(jobs, key=lambda r: r.job.job_id)),
        nodes=tuple(nodes),
        runs=tuple(runs),
        groups=extra.pop("groups", None),
        quotas=tuple(quotas),
        config=scheduler(min_runtime=min_runtime),
        **extra,
    )


def plan(
    snap: PassSnapshot, in_flight: dict[str, str] | None = None
) -> tuple[ReconcilePlan, AdmissionPlan, Ledger, CapacityPlan]:
    """The three phases on one snapshot (as if reconciliation moved nothing)."""
    reconciled = plan_reconcile(snap)
    admission, ledger = plan_admission(snap, reconciled, CATALOGUE)
    capacity = plan_capacity(
        snap, reconciled, ledger, catalogue=CATALOGUE, cluster=CLUSTER, in_flight=in_flight
    )
    return reconciled, admission, ledger, capacity
