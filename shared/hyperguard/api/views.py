"""The read-only views, computed from stored quotas, jobs and nodes (pure functions).

What each figure means is written down in docs/api.md (Views); the inputs are what the
deployed service keeps: quotas (TeamsTable, the API), jobs and their histories (JobsTable,
the job lifecycle), nodes (NodesTable, the inventory sync and recovery)."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta

from hyperguard.api.models import (
    ClusterView,
    ComputeQuotaView,
    InstanceHealth,
    PriorityClassView,
    PriorityClassViews,
    TeamView,
    resolved,
)
from hyperguard.catalogue import InstanceCatalogue, UnknownInstanceTypeError, ml_name
from hyperguard.governance.state import TeamPolicy
from hyperguard.models import Job, JobStatus, Node, NodeStatus
from hyperguard.models.governance import (
    ZERO,
    ComputeQuota,
    ResourceAmount,
    SchedulerConfig,
    accelerator_share,
    instance_amount,
)
from hyperguard.store import JobStore, NodeStore, TeamStore
from hyperguard.store.jobs import JobEvent, JobRecord

HOLDING = frozenset({JobStatus.ADMITTED, JobStatus.RUNNING})
WAITING = frozenset({JobStatus.PENDING, JobStatus.SUSPENDED})
CLASS_WINDOW = timedelta(hours=24)
"""How far back the priority-class view's run and wait times look (jobs that ended)."""


def day_start(now: datetime) -> datetime:
    """00:00 UTC of `now`'s day."""
    return now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)


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
                utilisation_pct=round(100 * in_use / allocated, 1) if allocated else None,
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


def _health(node: Node) -> str:
    if node.open_incident_id is not None:
        return "pending_recovery"
    if node.schedulable and node.healthy and node.status is NodeStatus.RUNNING:
        return "schedulable"
    return "unschedulable"


def cluster_view(
    nodes: Iterable[Node],
    records: Iterable[JobRecord],
    catalogue: InstanceCatalogue,
    now: datetime,
) -> ClusterView:
    """`nodes`: every node NodesTable holds (retired ones too, for today's figures);
    `records`: the jobs active now and those that ended today."""
    nodes = list(nodes)
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
    in_use = sum(held(r, catalogue).accelerators for r in jobs)
    health = Counter(_health(n) for n in present)
    start = day_start(now)
    installed_h, used_h, idle_h = gpu_hours(
        [*_node_steps(nodes, start, now), *_job_steps(jobs, catalogue)], start, now
    )
    return ClusterView(
        instances=len(present),
        instances_by_status=dict(Counter(n.status.value for n in present)),
        instances_by_health=InstanceHealth(
            schedulable=health["schedulable"],
            pending_recovery=health["pending_recovery"],
            unschedulable=health["unschedulable"],
        ),
        running_jobs=sum(r.job.status in HOLDING for r in jobs),
        pending_jobs=sum(
            r.job.status in WAITING or r.job.status is JobStatus.PREEMPTED for r in jobs
        ),
        gpus=gpus,
        gpus_in_use=in_use,
        idle_gpus=max(0, gpus - in_use),
        vcpus=vcpus,
        memory_gib=memory,
        day_start=start,
        gpu_hours_installed_today=round(installed_h, 2),
        gpu_hours_in_use_today=round(used_h, 2),
        idle_gpu_hours_today=round(idle_h, 2),
    )


Step = tuple[datetime, int, int]
"""(when, change of GPUs installed, change of GPUs in use)."""


def _node_steps(nodes: Iterable[Node], start: datetime, now: datetime) -> list[Step]:
    """Each node's GPUs are installed from its launch to its retirement. A node retired
    without a recorded time (before `retired_at` existed) is left out."""
    steps: list[Step] = []
    for node in nodes:
        if node.status is NodeStatus.NOT_FOUND:
            if node.retired_at is None:
                continue
            end = node.retired_at
        else:
            end = now
        begin = node.launch_time or start
        if node.accelerators and end > begin:
            steps += [(begin, node.accelerators, 0), (end, -node.accelerators, 0)]
    return steps


def _replica_gpus(job: Job, catalogue: InstanceCatalogue) -> int:
    return job.accelerators_per_replica or catalogue.spec(job.instance_type).accelerators


def _job_steps(records: Iterable[JobRecord], catalogue: InstanceCatalogue) -> list[Step]:
    """GPUs a job held over time, from its history: an entry with a holding status
    (admitted, dispatched, restarted) holds its replicas, any other status none, a resize
    changes the replicas. When entries were dropped (a full history), the job's current
    holding counts from its last start, resize or end."""
    steps: list[Step] = []
    for record in records:
        per_replica = _replica_gpus(record.job, catalogue)
        replicas, holding, last = record.job.replicas, 0, None
        for entry in sorted(record.history, key=lambda e: e.at):
            resized = entry.event in (JobEvent.SHRUNK, JobEvent.GROWN)
            if entry.status is None and not resized:
                continue  # protected, released, relocated, stopped, a checkpoint
            if entry.status in HOLDING or resized:
                replicas = int(entry.details.get("replicas", replicas))
            level = replicas * per_replica if entry.status in HOLDING or holding else 0
            if entry.status is not None and entry.status not in HOLDING:
                level = 0
            if level != holding:
                steps.append((entry.at, 0, level - holding))
                holding = level
            last = entry.at
        current = held(record, catalogue).accelerators
        if record.history_dropped and current != holding:
            marks = [t for t in (record.started_at, record.scaled_at, record.ended_at, last) if t]
            steps.append((max(marks), 0, current - holding))
    return steps


def gpu_hours(steps: list[Step], start: datetime, end: datetime) -> tuple[float, float, float]:
    """∫ installed, ∫ in use and ∫ max(0, installed - in use) over [start, end], in GPU-hours,
    of the step functions `steps` describe (changes before `start` set the level at it)."""
    installed = used = 0
    installed_s = used_s = idle_s = 0.0
    at = start
    for when, d_installed, d_used in sorted(steps, key=lambda s: s[0]):
        if when > end:
            break
        if when > at:
            span = (when - at).total_seconds()
            installed_s += installed * span
            used_s += used * span
            idle_s += max(0, installed - used) * span
            at = when
        installed += d_installed
        used += d_used
    span = max((end - at).total_seconds(), 0.0)
    installed_s += installed * span
    used_s += used * span
    idle_s += max(0, installed - used) * span
    return installed_s / 3600, used_s / 3600, idle_s / 3600


# -- the views read from the stores (the API's routes and the CLI) -------------------------
def read_team_views(
    teams: TeamStore, jobs: JobStore, catalogue: InstanceCatalogue
) -> list[TeamView]:
    """Quotas and the jobs active now (the `Live` index)."""
    return team_views(teams.quotas(), jobs.active(), catalogue)


def read_priority_class_views(
    teams: TeamStore, jobs: JobStore, now: datetime
) -> PriorityClassViews:
    """The classes of the scheduler config; jobs active now or ended in the last 24 hours."""
    config, _ = teams.scheduler_config()
    since = now - CLASS_WINDOW
    views = priority_class_views(config, jobs.active_or_ended_since(since, now), now)
    return PriorityClassViews(since=since, priority_classes=views)


def read_cluster_view(
    nodes: NodeStore, jobs: JobStore, catalogue: InstanceCatalogue, now: datetime
) -> ClusterView:
    """NodesTable is scanned: it holds one item per instance ever seen (the inventory sync
    reads it whole every 5 minutes too), and today's retired instances count until they
    left. Jobs: active now or ended today."""
    start = day_start(now)
    return cluster_view(nodes.all(), jobs.active_or_ended_since(start, now), catalogue, now)
