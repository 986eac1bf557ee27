"""The read-only views, computed from stored quotas, jobs and nodes (pure functions)."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from datetime import datetime

from hyperguard.api.models import (
    ClusterView,
    ComputeQuotaView,
    PriorityClassView,
    TeamView,
    resolved,
)
from hyperguard.catalogue import InstanceCatalogue, UnknownInstanceTypeError, ml_name
from hyperguard.governance.state import TeamPolicy
from hyperguard.models import JobStatus, Node, NodeStatus
from hyperguard.models.governance import (
    ZERO,
    ComputeQuota,
    ResourceAmount,
    SchedulerConfig,
    accelerator_share,
    instance_amount,
)
from hyperguard.store.jobs import JobRecord

HOLDING = frozenset({JobStatus.ADMITTED, JobStatus.RUNNING})
WAITING = frozenset({JobStatus.PENDING, JobStatus.SUSPENDED})


def quota_view(quota: ComputeQuota, catalogue: InstanceCatalogue) -> ComputeQuotaView:
    policy = TeamPolicy.from_quota(quota, catalogue)
    return ComputeQuotaView(
        compute_quota_id=quota.compute_quota_target.team_name,
        name=quota.name,
        description=quota.description,
        cluster_arn=quota.cluster_arn,
        compute_quota_config=quota.compute_quota_config,
        compute_quota_target=quota.compute_quota_target,
        activation_state=quota.activation_state,
        compute_quota_version=quota.version,
        status=quota.status.value,
        resolved_resources=resolved(dict(policy.nominal)),
        resolved_limits=resolved(dict(policy.limit)),
    )


def held(record: JobRecord, catalogue: InstanceCatalogue) -> ResourceAmount:
    """What an admitted job holds (its admitted replicas of its per-replica request)."""
    job = record.job
    if job.status not in HOLDING:
        return ZERO
    replicas = record.admitted_replicas or job.replicas
    spec = catalogue.spec(job.instance_type)
    if job.accelerators_per_replica:
        return accelerator_share(spec, job.accelerators_per_replica).scaled(replicas)
    return instance_amount(spec, replicas)


def team_views(
    quotas: Iterable[ComputeQuota], records: Iterable[JobRecord], catalogue: InstanceCatalogue
) -> list[TeamView]:
    used: dict[str, Counter[str]] = defaultdict(Counter)
    running: Counter[str] = Counter()
    pending: Counter[str] = Counter()
    for record in records:
        job = record.job
        if job.status in HOLDING:
            used[job.team][ml_name(job.instance_type)] += held(record, catalogue).accelerators
            running[job.team] += 1
        elif job.status in WAITING or job.status is JobStatus.PREEMPTED:
            pending[job.team] += 1
    by_team = {q.compute_quota_target.team_name: q for q in quotas}
    views = []
    for team in sorted(by_team.keys() | used.keys() | pending.keys()):
        quota = by_team.get(team)
        policy = TeamPolicy.from_quota(quota, catalogue) if quota else None
        nominal = {k: v.accelerators for k, v in policy.nominal.items()} if policy else {}
        limit = sum(v.accelerators for v in policy.limit.values()) if policy else 0
        in_use = sum(used[team].values())
        allocated = sum(nominal.values())
        views.append(
            TeamView(
                team=team,
                activation_state=quota.activation_state if quota else None,
                fair_share_weight=quota.compute_quota_target.fair_share_weight if quota else None,
                allocated_gpus=allocated,
                limit_gpus=limit,
                gpus_in_use=in_use,
                borrowed_gpus=sum(
                    max(0, amount - nominal.get(flavor, 0)) for flavor, amount in used[team].items()
                ),
                utilisation=round(in_use / allocated, 4) if allocated else None,
                running_jobs=running[team],
                pending_jobs=pending[team],
            )
        )
    return views


def _stats(values: list[float]) -> tuple[float | None, float | None]:
    if not values:
        return None, None
    return round(sum(values) / len(values), 3), round(max(values), 3)


def priority_class_views(
    config: SchedulerConfig, records: Iterable[JobRecord], now: datetime
) -> list[PriorityClassView]:
    weights: dict[str | None, int | None] = {pc.name: pc.weight for pc in config.priority_classes}
    counts: dict[str | None, Counter[str]] = defaultdict(Counter)
    runs: dict[str | None, list[float]] = defaultdict(list)
    waits: dict[str | None, list[float]] = defaultdict(list)
    for record in records:
        job = record.job
        name = job.priority_class if job.priority_class in weights else None
        if job.status in HOLDING:
            counts[name]["running"] += 1
        elif job.status in WAITING:
            counts[name]["pending"] += 1
        elif job.status is JobStatus.PREEMPTED:
            counts[name]["preempted"] += 1
        if record.started_at is not None and (job.status in HOLDING or record.ended_at):
            end = record.ended_at if job.status not in HOLDING and record.ended_at else now
            runs[name].append((end - record.started_at).total_seconds())
        if job.submitted_at is not None:
            waited_until = record.first_admitted_at or (
                now if job.status in WAITING or job.status is JobStatus.PREEMPTED else None
            )
            if waited_until is not None:
                waits[name].append((waited_until - job.submitted_at).total_seconds())
    names: list[str | None] = [pc.name for pc in config.priority_classes]
    if None in counts or None in runs or None in waits:
        names.append(None)
    views = []
    for name in names:
        average_run, longest_run = _stats(runs[name])
        average_wait, longest_wait = _stats(waits[name])
        views.append(
            PriorityClassView(
                priority_class=name,
                weight=weights.get(name),
                running=counts[name]["running"],
                pending=counts[name]["pending"],
                preempted=counts[name]["preempted"],
                average_run_s=average_run,
                longest_run_s=longest_run,
                average_wait_s=average_wait,
                longest_wait_s=longest_wait,
            )
        )
    return views


def cluster_view(
    nodes: Iterable[Node], records: Iterable[JobRecord], catalogue: InstanceCatalogue
) -> ClusterView:
    present = [n for n in nodes if n.status is not NodeStatus.NOT_FOUND]
    gpus = vcpus = memory = 0
    for node in present:
        gpus += node.accelerators
        try:
            spec = catalogue.spec(node.instance_type)
        except UnknownInstanceTypeError:
            continue  # counted for its accelerators; EC2 has no figures for it
        vcpus += spec.vcpu
        memory += spec.memory_mib // 1024
    jobs = list(records)
    return ClusterView(
        instances=len(present),
        instances_by_status=dict(Counter(n.status.value for n in present)),
        schedulable_instances=sum(
            n.schedulable and n.healthy and n.status is NodeStatus.RUNNING for n in present
        ),
        pending_recovery=sum(n.open_incident_id is not None for n in present),
        running_jobs=sum(r.job.status in HOLDING for r in jobs),
        pending_jobs=sum(
            r.job.status in WAITING or r.job.status is JobStatus.PREEMPTED for r in jobs
        ),
        gpus=gpus,
        gpus_in_use=sum(held(r, catalogue).accelerators for r in jobs),
        vcpus=vcpus,
        memory_gib=memory,
    )
