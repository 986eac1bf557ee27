"""The read-only views, computed from stored quotas, jobs and nodes (pure functions).

What each figure means is written down in docs/api.md (Views); the inputs are what the
deployed service keeps: quotas (TeamsTable, the API), jobs and their histories (JobsTable,
the job lifecycle), nodes (NodesTable, the inventory sync and recovery), incidents
(IncidentsTable, recovery).

Goodput (`/views/goodput`), split as the ML goodput literature splits it, per job over a
window (the jobs active now and those that ended since its start):
- wall time — from the job's submission (or the window's start, if later) to its end (or
  now);
- holding time — of the wall time, the time the job held all its resources: in a holding
  status (Admitted or Running) at its admitted size (the replicas of its last admission or
  restart; a shrink below that size stops the clock until it grows back), read from the
  status changes and resizes of its history;
- scheduling goodput = holding / wall;
- lost time — work lost at faults: at each node fault (a `protected` entry: recovery took
  the job off a failed node) and each lost run (`lost`: the reconciler found the run gone),
  the holding time from the job's last checkpoint before it (a `checkpoint` history entry,
  or `last_checkpoint.completed_at`; with none, from its submission) until it ran again
  (its next restart, relocation, release or resize, or until it stopped holding). The
  overlapping spans of several faults count once. This is an approximation: a checkpoint
  is taken as complete when it was reported, the time since it as entirely wasted (as if
  the job had made progress at a steady rate and resumes from exactly that checkpoint),
  recovery downtime while the job keeps its nodes (waiting for a repair) is lost too, and
  preemptions and resizes are not charged work lost;
- productive time = holding - lost; runtime goodput = productive / holding;
- goodput = scheduling x runtime = productive / wall;
- badput per incident — for each incident that protected the job in the window, its
  recovery phases (from its `timings`, seconds from the first signal): detect (signal →
  detected), cordon/drain (detected → repair requested; a drain without repair: →
  resumed), repair (repair requested → healthy), resume (healthy → resumed), each x the
  job's GPUs, in GPU-minutes; a phase whose milestones are missing is absent (null). The
  phases are the incident's, not the job's own: a job moved to a hot spare early is still
  charged the incident's repair.
Per team, every job weighted by its GPUs (replicas asked for x GPUs per replica): Σ wall,
holding and productive GPU-time, and the same three ratios of the sums."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta

from hyperguard.api.models import (
    ClusterView,
    ComputeQuotaView,
    GoodputView,
    IncidentBadput,
    InstanceHealth,
    JobGoodput,
    PoolView,
    PriorityClassView,
    PriorityClassViews,
    TeamGoodput,
    TeamView,
    resolved,
)
from hyperguard.catalogue import InstanceCatalogue, UnknownInstanceTypeError, ml_name
from hyperguard.governance.placement import pool_of
from hyperguard.governance.state import TeamPolicy
from hyperguard.models import Incident, Job, JobStatus, Node, NodeStatus
from hyperguard.models.governance import (
    ZERO,
    ComputeQuota,
    ResourceAmount,
    SchedulerConfig,
    accelerator_share,
    instance_amount,
)
from hyperguard.models.incidents import PHASES, incident_phases
from hyperguard.models.jobs import TERMINAL_STATUSES
from hyperguard.models.records import JobEvent, JobHistoryEntry, JobRecord
from hyperguard.policies.burst import BurstPolicy, added_by_burst, is_burst, price_key
from hyperguard.store import IncidentStore, JobStore, NodeStore, TeamStore
from hyperguard.store.policy import BurstPolicyStore

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


def burst_held(
    record: JobRecord, catalogue: InstanceCatalogue, burst: BurstPolicy, added: Collection[str]
) -> tuple[float, float]:
    """What a job holding burst capacity (an EKS pool, or HyperPod nodes a burst added: the
    instance ids in `added`) costs per hour at the policy's prices, and its GPUs there; (0, 0)
    for any other job, or one placed before pool kinds were recorded."""
    job = record.job
    if job.status not in HOLDING:
        return 0.0, 0.0
    return burst.held_on_burst(
        record.pool_kind,
        job.pool,
        job.instance_type,
        job.nodes,
        held(record, catalogue).accelerators,
        catalogue.spec(job.instance_type).accelerators,
        added.__contains__,
    )


def team_views(
    quotas: Iterable[ComputeQuota],
    records: Iterable[JobRecord],
    catalogue: InstanceCatalogue,
    burst: BurstPolicy,
    now: datetime | None = None,
    added: Collection[str] = (),
) -> list[TeamView]:
    """Per team, of `records` (the jobs active now, and with `now` those that ended today):
    quota use, job counts, burst spend and GPUs (`added`: the HyperPod nodes bursts added),
    and GPU-hours held today."""
    records = list(records)
    gpu_hours_today: dict[str, float] = {}
    if now is not None:
        of_team: dict[str, list[JobRecord]] = defaultdict(list)
        for record in records:
            of_team[record.job.team].append(record)
        gpu_hours_today = {
            team: round(gpu_hours(_job_steps(jobs, catalogue), day_start(now), now)[1], 2)
            for team, jobs in of_team.items()
        }
    used: dict[str, Counter[str]] = defaultdict(Counter)
    running: Counter[str] = Counter()
    pending: Counter[str] = Counter()
    spend: dict[str, float] = defaultdict(float)
    on_burst: dict[str, float] = defaultdict(float)
    for record in records:
        job = record.job
        if job.status in HOLDING:
            gpus = held(record, catalogue).accelerators
            used[job.team][ml_name(job.instance_type)] += gpus
            running[job.team] += 1
            usd, burst_gpus = burst_held(record, catalogue, burst, added)
            spend[job.team] += usd
            on_burst[job.team] += burst_gpus
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
                burst_usd_per_hour=round(spend[team], 2),
                burst_gpus=round(on_burst[team]),
                gpu_hours_today=gpu_hours_today.get(team, 0.0),
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


def pool_views(
    nodes: Sequence[Node],
    jobs: Sequence[JobRecord],
    catalogue: InstanceCatalogue,
    burst: BurstPolicy,
    start: datetime,
    now: datetime,
) -> list[PoolView]:
    """Per pool of the nodes: GPUs, GPUs in use, what its present instances cost per hour
    and GPU-hours today (a job counts in its current pool)."""
    prices = burst.price_table()
    by_pool: dict[str, list[Node]] = defaultdict(list)
    for node in nodes:
        by_pool[pool_of(node)[0]].append(node)
    views = []
    for name, members in sorted(by_pool.items()):
        kind = pool_of(members[0])[1]
        present = [n for n in members if n.status is not NodeStatus.NOT_FOUND]
        mine = [r for r in jobs if r.job.pool == name]
        instance_type = members[0].instance_type
        committed = name in burst.committed_pools
        price = 0.0 if committed else prices.get(price_key(kind, instance_type))
        installed_h, used_h, _ = gpu_hours(
            [*_node_steps(members, start, now), *_job_steps(mine, catalogue)], start, now
        )
        views.append(
            PoolView(
                pool=name,
                kind=kind.value,
                instance_type=instance_type,
                committed=committed,
                instances=len(present),
                gpus=sum(n.accelerators for n in present),
                gpus_in_use=sum(held(r, catalogue).accelerators for r in mine),
                usd_per_hour=None if price is None else round(price * len(present), 2),
                gpu_hours_installed_today=round(installed_h, 2),
                gpu_hours_in_use_today=round(used_h, 2),
            )
        )
    return views


def cluster_view(
    nodes: Iterable[Node],
    records: Iterable[JobRecord],
    catalogue: InstanceCatalogue,
    now: datetime,
    burst: BurstPolicy,
) -> ClusterView:
    """`nodes`: every node NodesTable holds (retired ones too, for today's figures);
    `records`: the jobs active now and those that ended today; `burst`: the prices and
    committed pools the pools' costs are figured at."""
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
        pools=pool_views(nodes, jobs, catalogue, burst, start, now),
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


# -- goodput (the module docstring says what each figure means) ----------------------------
GOODPUT_WINDOW_HOURS = (1, 720)
"""The window's allowed length, in hours (1 hour to 30 days)."""
DEFAULT_GOODPUT_WINDOW_HOURS = 24
FAULTS = frozenset({JobEvent.PROTECTED, JobEvent.LOST, JobEvent.STALLED})
"""Where work is lost: recovery took the job off a failed node; the reconciler found its run
gone."""
RUNS_AGAIN = frozenset(
    {JobEvent.RESTARTED, JobEvent.RELOCATED, JobEvent.RELEASED, JobEvent.SHRUNK, JobEvent.GROWN}
)
"""After a fault, the job runs again (or recovery is done with it) at the first of these."""

Interval = tuple[datetime, datetime]


def _union(intervals: Iterable[Interval]) -> list[Interval]:
    """Sorted, disjoint intervals covering the same time (empty ones dropped)."""
    merged: list[Interval] = []
    for begin, end in sorted(i for i in intervals if i[1] > i[0]):
        if merged and begin <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((begin, end))
    return merged


def _clip(intervals: Iterable[Interval], start: datetime, end: datetime) -> list[Interval]:
    return _union((max(b, start), min(e, end)) for b, e in intervals)


def _seconds(intervals: Iterable[Interval]) -> float:
    return sum((e - b).total_seconds() for b, e in intervals)


def _common_s(a: Sequence[Interval], b: Sequence[Interval]) -> float:
    """Seconds in both `a` and `b` (each sorted and disjoint)."""
    total, i, j = 0.0, 0, 0
    while i < len(a) and j < len(b):
        begin, end = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if end > begin:
            total += (end - begin).total_seconds()
        if a[i][1] <= b[j][1]:
            i += 1
        else:
            j += 1
    return total


def holding_intervals(
    record: JobRecord, history: Sequence[JobHistoryEntry], end: datetime
) -> list[Interval]:
    """When the job held all its resources: a holding status at its admitted size (the
    replicas of its last admission or restart that names them); a shrink below that size
    stops the clock until a growth reaches it again. A job whose history overflowed
    (`history_dropped`) is taken to hold what its current status says from its last start,
    resize or end on."""
    status: JobStatus | None = None
    size = current = record.job.replicas
    since: datetime | None = None
    intervals: list[Interval] = []
    last: datetime | None = None

    def holds_all() -> bool:
        return status in HOLDING and current >= size

    def mark(at: datetime, full: bool) -> None:
        nonlocal since
        if full and since is None:
            since = at
        elif not full and since is not None:
            intervals.append((since, at))
            since = None

    for entry in history:
        if entry.status is not None:
            status = entry.status
        replicas = entry.details.get("replicas")
        if isinstance(replicas, int | float):
            if entry.status in HOLDING:
                size = current = int(replicas)
            elif entry.event in (JobEvent.SHRUNK, JobEvent.GROWN):
                current = int(replicas)
        mark(entry.at, holds_all())
        last = entry.at
    if record.history_dropped or not history:
        marks = [t for t in (record.started_at, record.scaled_at, record.ended_at, last) if t]
        if marks:
            mark(max(marks), record.job.status in HOLDING)
    if since is not None and end > since:
        intervals.append((since, end))
    return intervals


def lost_intervals(
    record: JobRecord, history: Sequence[JobHistoryEntry], origin: datetime, end: datetime
) -> list[Interval]:
    """At each fault: from the last checkpoint before it (with none, `origin`: the job's
    submission) until the job runs again, stops holding, or `end`. Only their holding time
    counts (the caller intersects)."""
    checkpoints = [e.at for e in history if e.event is JobEvent.CHECKPOINT]
    if record.job.last_checkpoint is not None:
        checkpoints.append(record.job.last_checkpoint.completed_at)
    lost: list[Interval] = []
    for index, entry in enumerate(history):
        if entry.event not in FAULTS:
            continue
        before = [c for c in checkpoints if c <= entry.at]
        since = max(before) if before else min(origin, entry.at)
        until = entry.at
        if entry.event is JobEvent.PROTECTED:
            until = next(
                (
                    e.at
                    for e in history[index + 1 :]
                    if e.event in RUNS_AGAIN or (e.status is not None and e.status not in HOLDING)
                ),
                max(end, entry.at),
            )
        lost.append((since, until))
    return _union(lost)


def _gpu_min(seconds: float | None, gpus: int) -> float | None:
    return None if seconds is None else round(seconds * gpus / 60, 2)


def _pct(part: float, whole: float) -> float | None:
    return round(100 * part / whole, 1) if whole > 0 else None


def _badput(
    job_id: str, at: datetime, incident_id: str, incident: Incident | None, gpus: int
) -> IncidentBadput:
    phases = incident_phases(incident.timings if incident else {})
    plans = [p for p in (incident.jobs if incident else []) if p.job_id == job_id]
    minutes = {name: _gpu_min(phases[name], gpus) for name in PHASES}
    return IncidentBadput(
        incident_id=incident_id,
        protected_at=at,
        strategy=plans[-1].strategy if plans else None,
        detect_gpu_min=minutes["detect"],
        cordon_drain_gpu_min=minutes["cordon_drain"],
        repair_gpu_min=minutes["repair"],
        resume_gpu_min=minutes["resume"],
        total_gpu_min=round(sum(v for v in minutes.values() if v is not None), 2),
    )


def _job_end(record: JobRecord, now: datetime) -> datetime:
    if record.job.status in TERMINAL_STATUSES and record.ended_at is not None:
        return min(record.ended_at, now)
    return now


def job_goodput(
    record: JobRecord,
    incidents: Mapping[str, Incident],
    catalogue: InstanceCatalogue,
    window_start: datetime,
    now: datetime,
) -> JobGoodput:
    """One job's goodput over [window_start, now]; `incidents`: by id, those that protected
    it (a missing one leaves its phases null)."""
    job = record.job
    history = sorted(record.history, key=lambda e: e.at)
    submitted = job.submitted_at or (history[0].at if history else window_start)
    start = max(submitted, window_start)
    end = max(_job_end(record, now), start)
    gpus = job.replicas * _replica_gpus(job, catalogue)
    holding = _clip(holding_intervals(record, history, end), start, end)
    lost = _clip(lost_intervals(record, history, submitted, end), start, end)
    wall_s = (end - start).total_seconds()
    holding_s = _seconds(holding)
    lost_s = _common_s(holding, lost)
    productive_s = holding_s - lost_s
    badput: dict[str, IncidentBadput] = {}
    faults = 0
    for entry in history:
        if entry.event not in FAULTS or not start <= entry.at <= end:
            continue
        faults += 1
        incident_id = entry.details.get("incident_id")
        if (
            entry.event is JobEvent.PROTECTED
            and isinstance(incident_id, str)
            and incident_id not in badput
        ):
            badput[incident_id] = _badput(
                job.job_id, entry.at, incident_id, incidents.get(incident_id), gpus
            )
    return JobGoodput(
        job_id=job.job_id,
        name=job.name,
        team=job.team,
        status=job.status,
        gpus=gpus,
        wall_s=round(wall_s, 3),
        holding_s=round(holding_s, 3),
        lost_s=round(lost_s, 3),
        productive_s=round(productive_s, 3),
        faults=faults,
        scheduling_goodput_pct=_pct(holding_s, wall_s),
        runtime_goodput_pct=_pct(productive_s, holding_s),
        goodput_pct=_pct(productive_s, wall_s),
        badput=list(badput.values()),
    )


def team_goodput(jobs: Iterable[JobGoodput]) -> list[TeamGoodput]:
    """Per team: the jobs' wall, holding and productive GPU-time summed (each job weighted by
    its GPUs), the ratios of the sums, and the incident badput by phase."""
    sums: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for job in jobs:
        team = sums[job.team]
        team["jobs"] += 1
        team["wall"] += job.wall_s * job.gpus
        team["holding"] += job.holding_s * job.gpus
        team["productive"] += job.productive_s * job.gpus
        for badput in job.badput:
            for name in PHASES:
                team[name] += getattr(badput, f"{name}_gpu_min") or 0.0
    return [
        TeamGoodput(
            team=name,
            jobs=int(s["jobs"]),
            wall_gpu_hours=round(s["wall"] / 3600, 2),
            holding_gpu_hours=round(s["holding"] / 3600, 2),
            productive_gpu_hours=round(s["productive"] / 3600, 2),
            scheduling_goodput_pct=_pct(s["holding"], s["wall"]),
            runtime_goodput_pct=_pct(s["productive"], s["holding"]),
            goodput_pct=_pct(s["productive"], s["wall"]),
            detect_gpu_min=round(s["detect"], 2),
            cordon_drain_gpu_min=round(s["cordon_drain"], 2),
            repair_gpu_min=round(s["repair"], 2),
            resume_gpu_min=round(s["resume"], 2),
        )
        for name, s in sorted(sums.items())
    ]


def in_window(record: JobRecord, window_start: datetime) -> bool:
    """Not a job that ended before the window (a cancelled job whose pods are still being
    stopped is active, whenever it ended)."""
    return not (
        record.job.status in TERMINAL_STATUSES
        and record.ended_at is not None
        and record.ended_at < window_start
    )


def protecting_incidents(records: Iterable[JobRecord], window_start: datetime) -> list[str]:
    """The incidents that protected these jobs in the window (their `protected` entries)."""
    ids: dict[str, None] = {}
    for record in records:
        for entry in record.history:
            incident_id = entry.details.get("incident_id")
            if (
                entry.event is JobEvent.PROTECTED
                and entry.at >= window_start
                and isinstance(incident_id, str)
            ):
                ids[incident_id] = None
    return list(ids)


def goodput_view(
    records: Iterable[JobRecord],
    incidents: Iterable[Incident],
    catalogue: InstanceCatalogue,
    window_start: datetime,
    now: datetime,
) -> GoodputView:
    """`records`: the jobs active now and those that ended since `window_start`;
    `incidents`: those that protected them."""
    by_id = {i.incident_id: i for i in incidents}
    jobs = sorted(
        (
            job_goodput(r, by_id, catalogue, window_start, now)
            for r in records
            if in_window(r, window_start)
        ),
        key=lambda j: (j.team, j.job_id),
    )
    return GoodputView(window_start=window_start, jobs=jobs, teams=team_goodput(jobs))


# -- the views read from the stores (the API's routes and the CLI) -------------------------
def read_team_views(
    teams: TeamStore,
    jobs: JobStore,
    nodes: NodeStore,
    catalogue: InstanceCatalogue,
    now: datetime,
) -> list[TeamView]:
    """Quotas, the jobs active now or ended today (the `Live` index), the burst policy
    (TeamsTable), and which HyperPod nodes the holding jobs run on a burst added (one
    BatchGetItem per 100 of their nodes)."""
    burst = BurstPolicyStore(teams.table_name, teams.table).get()
    records = jobs.active_or_ended_since(day_start(now), now)
    on_hyperpod = [
        instance_id
        for record in records
        if record.job.status in HOLDING and not is_burst(record.pool_kind)
        for instance_id in record.job.nodes
    ]
    added = {n.instance_id for n in nodes.many(on_hyperpod) if added_by_burst(n)}
    return team_views(teams.quotas(), records, catalogue, burst, now, added)


def read_priority_class_views(
    teams: TeamStore, jobs: JobStore, now: datetime
) -> PriorityClassViews:
    """The classes of the scheduler config; jobs active now or ended in the last 24 hours."""
    config, _ = teams.scheduler_config()
    since = now - CLASS_WINDOW
    views = priority_class_views(config, jobs.active_or_ended_since(since, now), now)
    return PriorityClassViews(since=since, priority_classes=views)


def read_cluster_view(
    teams: TeamStore,
    nodes: NodeStore,
    jobs: JobStore,
    catalogue: InstanceCatalogue,
    now: datetime,
) -> ClusterView:
    """NodesTable is scanned: it holds one item per instance ever seen (the inventory sync
    reads it whole every 5 minutes too), and today's retired instances count until they
    left. Jobs: active now or ended today. The burst policy: from TeamsTable."""
    start = day_start(now)
    burst = BurstPolicyStore(teams.table_name, teams.table).get()
    return cluster_view(nodes.all(), jobs.active_or_ended_since(start, now), catalogue, now, burst)


def read_goodput_view(
    jobs: JobStore,
    incidents: IncidentStore,
    catalogue: InstanceCatalogue,
    now: datetime,
    window_hours: int = DEFAULT_GOODPUT_WINDOW_HOURS,
    visible: Callable[[str], bool] = lambda _team: True,
) -> GoodputView:
    """Jobs active now or ended in the last `window_hours` (the `Live` index, never a scan)
    of the teams `visible` admits, and the incidents that protected them (by key)."""
    low, high = GOODPUT_WINDOW_HOURS
    if not low <= window_hours <= high:
        raise ValueError(f"window_hours must be from {low} to {high}, not {window_hours}")
    start = now - timedelta(hours=window_hours)
    records = [r for r in jobs.active_or_ended_since(start, now) if visible(r.job.team)]
    ids = protecting_incidents(records, start)
    found = incidents.many(ids) if ids else []
    return goodput_view(records, found, catalogue, start, now)
