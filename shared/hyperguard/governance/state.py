"""The in-memory snapshot the admission engine reads: one cluster (a Kueue cohort), its
teams' quotas, its installed capacity, and its pending and running workloads.

The snapshot keeps per-team usage and per-shape pending queues up to date as workloads are
added, removed and decisions applied, so a scheduling pass costs in proportion to the number
of queue shapes and decisions, not to the number of jobs.
"""

from __future__ import annotations

import bisect
import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from hyperguard.catalogue import InstanceCatalogue
from hyperguard.governance.decisions import Decision, DecisionKind, Decisions
from hyperguard.models.governance import (
    ZERO,
    ComputeQuota,
    PreemptTeamTasks,
    ResourceAmount,
    SchedulerConfig,
    SharingStrategy,
    Toggle,
    accelerator_share,
    instance_amount,
    resolve_quota_resources,
)
from hyperguard.models.jobs import HOLDING_STATUSES, WAITING_STATUSES, Job
from hyperguard.policies.burst import PoolKind, allows_burst

DEFAULT_BORROW_LIMIT_PERCENT = 50
"""SageMaker's default when ResourceSharingConfig omits BorrowLimit."""

ZERO_WEIGHT_AS = 1.0
"""FairShareWeight 0 is HyperPod's default ("not set"), so most teams carry it. Kueue reads a
weight of 0 as an infinite share: such a queue never borrows and is preempted first. Mapping
HyperPod's 0 onto that would starve every team that kept the default. 0 is therefore treated
as the smallest positive weight the API accepts (1): teams that all keep the default share
idle capacity equally, and a team given a higher weight still gets proportionally more."""

NO_CLASS_PRIORITY = -1
"""Priority of a job that names no priority class (or an unknown one): below every class,
whose weights are 0..100."""


@dataclass(slots=True)
class Workload:
    """One job as the engine sees it. Times are epoch seconds (floats keep the hot loop
    cheap); `admitted` is the number of replicas currently holding quota (0 = pending).
    An elastic workload runs with one of `sizes` replicas (ascending); others only with
    `replicas`."""

    job_id: str
    team: str
    instance_type: str
    per_replica: ResourceAmount
    replicas: int = 1
    priority_class: str | None = None
    submitted_at: float = 0.0
    sizes: tuple[int, ...] | None = None
    admitted: int = 0
    started_at: float | None = None
    scaled_at: float | None = None
    scaling_timeout_s: float = 0.0
    """An elastic job grows only this long after it last changed size."""
    priority: int = NO_CLASS_PRIORITY
    seq: int = 0
    may_burst: bool = False
    """Burst capacity could take it (its template allows EKS and bursting is on): it then
    does not preempt its own team's lower-priority jobs, but waits for a burst (Kueue's
    flavorFungibility whenCanPreempt: TryNextFlavor). Reclaiming lent quota still applies."""
    hyperpod_only: bool = False
    """Its template runs on HyperPod only (production): only HyperPod's capacity holds it,
    whatever EKS burst capacity is installed (D89)."""
    on_hyperpod: bool = True
    """A running job's nodes are HyperPod's (False: EKS burst capacity)."""

    @property
    def is_elastic(self) -> bool:
        return self.sizes is not None

    @property
    def floor(self) -> int:
        """Fewest replicas the job can run with."""
        return self.sizes[0] if self.sizes else self.replicas

    @property
    def ceiling(self) -> int:
        """Most replicas the job may grow to."""
        return self.sizes[-1] if self.sizes else self.replicas

    def at_most(self, replicas: int) -> int:
        """The largest size the job may run with that is ≤ `replicas` (0: none)."""
        if self.sizes is None:
            return self.replicas if replicas >= self.replicas else 0
        return max((s for s in self.sizes if s <= replicas), default=0)

    def below(self, replicas: int) -> int:
        """The next size down from `replicas` (0: none)."""
        return self.at_most(replicas - 1) if self.sizes else 0

    def above(self, replicas: int) -> int:
        """The next size up from `replicas` (`replicas` itself: none)."""
        if not self.sizes:
            return replicas
        return min((s for s in self.sizes if s > replicas), default=replicas)

    @classmethod
    def from_job(
        cls,
        job: Job,
        catalogue: InstanceCatalogue,
        *,
        started_at: datetime | None = None,
        scaled_at: datetime | None = None,
        may_burst: bool = False,
        pool_kind: str | None = None,
    ) -> Workload:
        """`pool_kind`: where a running job was placed (placement's PoolKind value; None:
        HyperPod, as before burst capacity existed). Made for every job of every pass (a
        large pass: thousands), so the few shapes a replica can have are made once each."""
        spec = catalogue.spec(job.instance_type)
        accelerators = job.accelerators_per_replica
        per_replica = _share(spec, accelerators) if accelerators > 0 else _whole(spec)
        running = job.status in HOLDING_STATUSES
        policy = job.elastic_policy
        submitted = job.submitted_at
        return cls(
            job_id=job.job_id,
            team=job.team,
            instance_type=job.instance_type,
            per_replica=per_replica,
            replicas=job.replicas,
            priority_class=job.priority_class,
            submitted_at=submitted.timestamp() if submitted else _NEVER,
            sizes=tuple(policy.sizes()) if policy else None,
            admitted=(len(job.nodes) or job.replicas) if running else 0,
            started_at=started_at.timestamp() if running and started_at else None,
            scaled_at=scaled_at.timestamp() if running and scaled_at else None,
            scaling_timeout_s=float(policy.scaling_timeout_in_seconds or 0) if policy else 0.0,
            may_burst=may_burst,
            hyperpod_only=not allows_burst(job.template),
            on_hyperpod=pool_kind in _ON_HYPERPOD,
        )


_share = functools.lru_cache(maxsize=256)(accelerator_share)
_whole = functools.lru_cache(maxsize=256)(instance_amount)
_NEVER = float("inf")
_ON_HYPERPOD = (None, PoolKind.HYPERPOD)


@dataclass(frozen=True, slots=True)
class TeamPolicy:
    """A ComputeQuota reduced to what the engine needs."""

    team: str
    nominal: Mapping[str, ResourceAmount]
    limit: Mapping[str, ResourceAmount]
    """nominal + borrow allowance, per instance type."""
    lends: bool
    borrows: bool
    preempt_lower_priority: bool
    weight: float
    strategy: SharingStrategy

    @classmethod
    def from_quota(cls, quota: ComputeQuota, catalogue: InstanceCatalogue) -> TeamPolicy:
        """Only LendAndBorrow borrows; Lend lends only; DontLend neither lends nor borrows.
        BorrowLimit is a percent of the team's own quota per instance type; an
        AbsoluteBorrowLimits entry replaces the percentage for its instance type."""
        config = quota.compute_quota_config
        sharing = config.resource_sharing_config
        nominal = resolve_quota_resources(config.compute_quota_resources, catalogue)
        borrows = sharing.strategy is SharingStrategy.LEND_AND_BORROW
        percent = (
            sharing.borrow_limit
            if sharing.borrow_limit is not None
            else DEFAULT_BORROW_LIMIT_PERCENT
        )
        absolute = resolve_quota_resources(sharing.absolute_borrow_limits or [], catalogue)
        limit: dict[str, ResourceAmount] = {}
        for flavor in nominal.keys() | absolute.keys():
            own = nominal.get(flavor, ZERO)
            if not borrows:
                allowance = ZERO
            elif flavor in absolute:
                allowance = absolute[flavor]
            else:
                allowance = ResourceAmount(*(amount * percent // 100 for amount in own))
            limit[flavor] = own + allowance
        weight = quota.compute_quota_target.fair_share_weight
        return cls(
            team=quota.compute_quota_target.team_name,
            nominal=nominal,
            limit=limit,
            lends=sharing.strategy is not SharingStrategy.DONT_LEND,
            borrows=borrows,
            preempt_lower_priority=config.preempt_team_tasks is PreemptTeamTasks.LOWER_PRIORITY,
            weight=float(weight) if weight > 0 else ZERO_WEIGHT_AS,
            strategy=sharing.strategy,
        )


@dataclass(slots=True)
class FlavorTotals:
    """Cluster-wide figures for one instance type (static for a snapshot)."""

    capacity: ResourceAmount
    nominal_total: ResourceAmount
    unallocated: ResourceAmount
    pool: ResourceAmount
    """What lenders and borrowers share: lenders' quotas plus, with IdleResourceSharing,
    the unallocated capacity. IdleResourceSharing governs only that unallocated part
    (installed but in no team's quota); teams still borrow each other's lent quota when it
    is Disabled."""
    hyperpod: ResourceAmount
    """The part of `capacity` on HyperPod: all that can hold a HyperPod-only job."""


BucketKey = tuple[str, str, int, ResourceAmount, int, bool]
"""(team, instance type, priority, per-replica request, fewest replicas, HyperPod only): jobs
with the same key are interchangeable for admission, so if the first one does not fit none
does."""


def _bucket_key(workload: Workload) -> BucketKey:
    return (
        workload.team,
        workload.instance_type,
        workload.priority,
        workload.per_replica,
        workload.floor,
        workload.hyperpod_only,
    )


def _queue_order(workload: Workload) -> tuple[float, int]:
    return (workload.submitted_at, workload.seq)


@dataclass
class GovernanceState:
    """One cluster's governance snapshot. `now` is the clock the pass judges the scheduler
    config's MinRuntimeSeconds against; the caller sets it before calling `schedule`."""

    quotas: Iterable[ComputeQuota]
    scheduler: SchedulerConfig
    capacity: Mapping[str, int]
    """Installed instances per instance type (HyperPod's `ml.` names), HyperPod and EKS."""
    catalogue: InstanceCatalogue
    now: float = 0.0
    hyperpod_capacity: Mapping[str, int] | None = None
    """The part of `capacity` on HyperPod (None: all of it)."""
    teams: dict[str, TeamPolicy] = field(init=False)
    flavors: dict[str, FlavorTotals] = field(init=False)
    class_weights: dict[str, int] = field(init=False)
    workloads: dict[str, Workload] = field(init=False, default_factory=dict)
    pending: dict[BucketKey, list[Workload]] = field(init=False, default_factory=dict)
    running: dict[tuple[str, str], dict[str, Workload]] = field(init=False, default_factory=dict)
    usage: dict[tuple[str, str], list[int]] = field(init=False, default_factory=dict)
    elastic: set[str] = field(init=False, default_factory=set)
    _seq: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        self.quotas = list(self.quotas)
        idle_sharing = self.scheduler.idle_resource_sharing is Toggle.ENABLED
        self.teams = {}
        for quota in self.quotas:
            if quota.activation_state is Toggle.ENABLED:
                policy = TeamPolicy.from_quota(quota, self.catalogue)
                self.teams[policy.team] = policy
        self.class_weights = {pc.name: pc.weight for pc in self.scheduler.priority_classes}
        names = set(self.capacity)
        for policy in self.teams.values():
            names |= policy.limit.keys()
        self.flavors = {}
        for name in names:
            spec = self.catalogue.spec(name)
            capacity = instance_amount(spec, self.capacity.get(name, 0))
            hyperpod = (
                capacity
                if self.hyperpod_capacity is None
                else instance_amount(spec, self.hyperpod_capacity.get(name, 0))
            )
            nominal_total = _sum(p.nominal.get(name, ZERO) for p in self.teams.values())
            lent = _sum(p.nominal.get(name, ZERO) for p in self.teams.values() if p.lends)
            unallocated = ResourceAmount(
                *(max(0, c - n) for c, n in zip(capacity, nominal_total, strict=True))
            )
            pool = lent + unallocated if idle_sharing else lent
            self.flavors[name] = FlavorTotals(capacity, nominal_total, unallocated, pool, hyperpod)

    @classmethod
    def from_jobs(
        cls,
        jobs: Iterable[Job],
        *,
        quotas: Iterable[ComputeQuota],
        scheduler: SchedulerConfig,
        capacity: Mapping[str, int],
        catalogue: InstanceCatalogue,
        started_at: Mapping[str, datetime] | None = None,
        now: float = 0.0,
    ) -> GovernanceState:
        """Build from Job records; terminal jobs are ignored."""
        state = cls(quotas, scheduler, capacity, catalogue, now)
        starts = started_at or {}
        for job in jobs:
            if job.status in HOLDING_STATUSES or job.status in WAITING_STATUSES:
                state.add(Workload.from_job(job, catalogue, started_at=starts.get(job.job_id)))
        return state

    def priority_of(self, priority_class: str | None) -> int:
        if priority_class is None:
            return NO_CLASS_PRIORITY
        return self.class_weights.get(priority_class, NO_CLASS_PRIORITY)

    def add(self, workload: Workload) -> None:
        """Track a new pending (admitted == 0) or running workload."""
        if workload.job_id in self.workloads:
            raise ValueError(f"workload {workload.job_id} already tracked")
        workload.priority = self.priority_of(workload.priority_class)
        workload.seq = self._seq
        self._seq += 1
        self.workloads[workload.job_id] = workload
        if workload.is_elastic:
            self.elastic.add(workload.job_id)
        if workload.admitted:
            started = workload.started_at if workload.started_at is not None else self.now
            self._start(workload, workload.admitted, started)
        else:
            self._enqueue(workload)

    def remove(self, job_id: str) -> Workload:
        """Forget a workload that finished or was cancelled, releasing its quota."""
        workload = self.workloads.pop(job_id)
        self.elastic.discard(job_id)
        if workload.admitted:
            self._release(workload)
        else:
            self._dequeue(workload)
        return workload

    def apply(self, decisions: Decisions) -> None:
        """Apply a pass's decisions in order (what the caller does once its conditional
        writes succeed). An admitted job lands where placement puts it: on HyperPod
        (committed capacity, placed first) while HyperPod has room for it, else on burst
        capacity; a HyperPod-only job always on HyperPod."""
        for decision in decisions.actions:
            self.apply_one(decision)

    def apply_one(self, decision: Decision) -> None:
        workload = self.workloads[decision.job_id]
        if decision.kind is DecisionKind.ADMIT:
            self._dequeue(workload)
            workload.on_hyperpod = workload.hyperpod_only or self._hyperpod_has_room(
                workload, decision.replicas
            )
            self._start(workload, decision.replicas, self.now)
        elif decision.kind is DecisionKind.PREEMPT:
            self._release(workload)
            self._enqueue(workload)
        else:
            self._resize(workload, decision.replicas)

    def team_usage(self, team: str, instance_type: str) -> ResourceAmount:
        return ResourceAmount(*self.usage.get((team, instance_type), (0, 0, 0)))

    def _hyperpod_has_room(self, workload: Workload, replicas: int) -> bool:
        """Whether HyperPod's part of the capacity holds `replicas` of `workload` beside
        every job already on HyperPod."""
        flavor = workload.instance_type
        on_hyperpod = _sum(
            w.per_replica.scaled(w.admitted)
            for (_, running_flavor), jobs in self.running.items()
            if running_flavor == flavor
            for w in jobs.values()
            if w.hyperpod_only or w.on_hyperpod
        )
        total = on_hyperpod + workload.per_replica.scaled(replicas)
        return all(t <= c for t, c in zip(total, self.flavors[flavor].hyperpod, strict=True))

    def _enqueue(self, workload: Workload) -> None:
        workload.admitted = 0
        workload.started_at = None
        bisect.insort(
            self.pending.setdefault(_bucket_key(workload), []), workload, key=_queue_order
        )

    def _dequeue(self, workload: Workload) -> None:
        key = _bucket_key(workload)
        bucket = self.pending[key]
        bucket.pop(bisect.bisect_left(bucket, _queue_order(workload), key=_queue_order))
        if not bucket:
            del self.pending[key]

    def _start(self, workload: Workload, replicas: int, started_at: float) -> None:
        workload.admitted = 0
        workload.started_at = started_at
        self.running.setdefault((workload.team, workload.instance_type), {})[workload.job_id] = (
            workload
        )
        self._resize(workload, replicas)

    def _release(self, workload: Workload) -> None:
        self._resize(workload, 0)
        del self.running[(workload.team, workload.instance_type)][workload.job_id]

    def _resize(self, workload: Workload, replicas: int) -> None:
        delta = replicas - workload.admitted
        used = self.usage.setdefault((workload.team, workload.instance_type), [0, 0, 0])
        for index, amount in enumerate(workload.per_replica):
            used[index] += amount * delta
        workload.admitted = replicas


def _sum(amounts: Iterable[ResourceAmount]) -> ResourceAmount:
    total = ZERO
    for amount in amounts:
        total = total + amount
    return total
