"""The admission pass: which pending jobs start, which running jobs shrink or are preempted,
and why. Pure: reads a GovernanceState, returns Decisions, touches nothing else.

Rules (HyperPod task governance over Kueue semantics):

* Three constraints per instance type (four for a HyperPod-only job), each over
  accelerators, vCPU and memory:
  team  — usage ≤ nominal + borrow allowance (allowance 0 unless LendAndBorrow);
  pool  — lending teams (Lend, LendAndBorrow) together use at most what they lend plus,
          with IdleResourceSharing, the capacity no quota covers; DontLend teams stay on
          their own quota and are outside the pool;
  capacity — all teams together use at most the installed instances (quotas may promise
          more than is installed: such jobs wait with a capacity reason).
  HyperPod — a job whose template runs on HyperPod only (production) also fits HyperPod's
          part of the installed instances: jobs running on HyperPod and HyperPod-only jobs
          admitted in the pass use at most it; EKS burst nodes cannot hold such a job (D89).
* Order: jobs that fit their team's nominal quota first; then jobs that need to borrow. Within
  each group by priority-class weight, then submission time. With FairShare Enabled borrowing
  jobs are ordered first by their team's dominant share above nominal divided by its weight
  (lowest first; the team's, not what a job's own request would make it, so inside a team
  priority then age decide: D124); with FairShare Disabled borrowing is
  first-come-first-serve. An elastic job is placed in this order by its smallest size.
* Jobs with the same team, instance type, priority, request and pools (HyperPod only or not)
  form one queue shape; when the oldest of a shape cannot be admitted, the rest of the shape
  waits with the same reason, and other shapes are still tried (Kueue's BestEffortFIFO).
* Preemption, only when a job cannot fit without it, and only of jobs that have run at least
  the scheduler config's MinRuntimeSeconds in their current run (a younger job may still be
  shrunk: it keeps running): (1) reclaim — a team that fits its own nominal quota after
  admission takes back capacity from teams above their nominal, whatever their priority,
  lowest priority and newest first, and only while the victim's team is still above
  nominal; (2) within the team — with PreemptTeamTasks LowerPriority, jobs of strictly lower
  priority, except for a job burst capacity could take (`may_burst`), which waits for a
  burst instead (Kueue's flavorFungibility whenCanPreempt: TryNextFlavor). Elastic jobs are
  shrunk toward their minimum replicas before anyone is preempted; the smallest set of
  victims that makes room is kept. A job that could only start by preempting jobs still
  inside the minimum waits with a reason that says so.
* A job that would have to borrow never preempts another team's job. That is the guard against
  the Kueue loop (fair sharing plus borrow-within-cohort preemption: two borrowers preempting
  each other forever). Every preemption therefore either returns capacity to its owner or
  raises the priority running inside one team, so repeated passes over a stable state reach a
  fixed point.
* Elastic jobs grow toward max replicas only into capacity no pending job of that instance type
  is waiting for, so growth never takes room a queued job will then have to preempt back.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from hyperguard.governance.decisions import Decision, DecisionKind, Decisions, PendingGroup
from hyperguard.governance.state import GovernanceState, TeamPolicy, Workload
from hyperguard.models.governance import ZERO, ResourceAmount, Toggle

_TEAM = "team"
_POOL = "pool"
_CAPACITY = "capacity"
_HYPERPOD = "hyperpod"
_UNBOUNDED = 1 << 62

Key = tuple[int, float, int, float, int]


def schedule(state: GovernanceState) -> Decisions:
    """One admission pass over `state` as of `state.now`."""
    return _Pass(state).run()


@dataclass(slots=True)
class _Bucket:
    jobs: list[Workload]
    policy: TeamPolicy
    pos: int = 0


def _unit(instance_type: str) -> str:
    return "accelerators" if "trn" in instance_type else "GPUs"


def _show(amount: Sequence[int], per_replica: ResourceAmount) -> str:
    """The amount in the job's dominant unit: accelerators if it asks for any, else vCPU."""
    if per_replica.accelerators:
        return str(amount[0])
    return f"{amount[1] / 1000:g}"


class _Pass:
    def __init__(self, state: GovernanceState) -> None:
        self.state = state
        self.fair_share = state.scheduler.fair_share is Toggle.ENABLED
        self.usage = {key: list(used) for key, used in state.usage.items()}
        self.total = {flavor: [0, 0, 0] for flavor in state.flavors}
        self.lent_used = {flavor: [0, 0, 0] for flavor in state.flavors}
        self.hyperpod_used = {flavor: [0, 0, 0] for flavor in state.flavors}
        for (_, flavor), running in state.running.items():
            for workload in running.values():
                if self._on_hyperpod(workload):
                    for index, amount in enumerate(workload.per_replica.scaled(workload.admitted)):
                        self.hyperpod_used[flavor][index] += amount
        for (team, flavor), used in self.usage.items():
            policy = state.teams.get(team)
            for index in range(3):
                self.total[flavor][index] += used[index]
                if policy is not None and policy.lends:
                    self.lent_used[flavor][index] += used[index]
        self.decisions = Decisions()
        self.replicas: dict[str, int] = {}
        self.victims: set[str] = set()
        self.shrunk: set[str] = set()
        self.admitted: dict[str, int] = {}
        self.contended: set[str] = set()
        self.failed: dict[tuple[str, str, bool], list[tuple[ResourceAmount, int, str]]] = {}
        self._last_block = ""
        self._last_binding = _TEAM

    # -- accounting ---------------------------------------------------------------------

    def _used(self, team: str, flavor: str) -> list[int]:
        used = self.usage.get((team, flavor))
        if used is None:
            used = self.usage[(team, flavor)] = [0, 0, 0]
        return used

    @staticmethod
    def _on_hyperpod(workload: Workload) -> bool:
        """Whether the workload's replicas take HyperPod capacity: a HyperPod-only job's
        always; another's only where it ran when the pass began (where a job admitted now
        lands is placement's choice, after the pass)."""
        return workload.hyperpod_only or (workload.admitted > 0 and workload.on_hyperpod)

    def _current(self, workload: Workload) -> int:
        return self.replicas.get(workload.job_id, workload.admitted)

    def _set_replicas(self, workload: Workload, replicas: int) -> None:
        delta = replicas - self._current(workload)
        self.replicas[workload.job_id] = replicas
        flavor = workload.instance_type
        used = self._used(workload.team, flavor)
        total = self.total[flavor]
        policy = self.state.teams.get(workload.team)
        lent = self.lent_used[flavor] if policy is not None and policy.lends else None
        hyperpod = self.hyperpod_used[flavor] if self._on_hyperpod(workload) else None
        for index, amount in enumerate(workload.per_replica):
            change = amount * delta
            used[index] += change
            total[index] += change
            if lent is not None:
                lent[index] += change
            if hyperpod is not None:
                hyperpod[index] += change

    def _room(
        self, policy: TeamPolicy, flavor: str, per: ResourceAmount, hyperpod_only: bool = False
    ) -> tuple[int, str]:
        """How many more replicas of `per` fit, and which constraint binds; a HyperPod-only
        job also within HyperPod's part of the capacity."""
        used = self.usage.get((policy.team, flavor)) or (0, 0, 0)
        limit = policy.limit.get(flavor, ZERO)
        totals = self.state.flavors[flavor]
        total = self.total[flavor]
        lent = self.lent_used[flavor]
        best, binding = _UNBOUNDED, _TEAM
        for index in range(3):
            amount = per[index]
            if amount == 0:
                continue
            room = (limit[index] - used[index]) // amount
            if room < best:
                best, binding = room, _TEAM
            if policy.lends:
                room = (totals.pool[index] - lent[index]) // amount
                if room < best:
                    best, binding = room, _POOL
            room = (totals.capacity[index] - total[index]) // amount
            if room < best:
                best, binding = room, _CAPACITY
            if hyperpod_only:
                room = (totals.hyperpod[index] - self.hyperpod_used[flavor][index]) // amount
                if room < best:
                    best, binding = room, _HYPERPOD
        return max(best, 0), binding

    def _is_borrowing(self, team: str, flavor: str) -> bool:
        policy = self.state.teams.get(team)
        nominal = policy.nominal.get(flavor, ZERO) if policy is not None else ZERO
        used = self.usage.get((team, flavor)) or (0, 0, 0)
        return any(u > n for u, n in zip(used, nominal, strict=True))

    def _within_nominal(self, policy: TeamPolicy, flavor: str, need: ResourceAmount) -> bool:
        used = self.usage.get((policy.team, flavor)) or (0, 0, 0)
        nominal = policy.nominal.get(flavor, ZERO)
        return all(u + n <= q for u, n, q in zip(used, need, nominal, strict=True))

    # -- ordering -----------------------------------------------------------------------

    def _key(self, bucket: _Bucket) -> Key:
        workload = bucket.jobs[bucket.pos]
        flavor = workload.instance_type
        need = workload.per_replica.scaled(workload.floor)
        head = (-workload.priority, workload.submitted_at, workload.seq)
        if self._within_nominal(bucket.policy, flavor, need):
            return (0, 0.0, *head)
        share = 0.0
        if self.fair_share:
            used = self.usage.get((bucket.policy.team, flavor)) or (0, 0, 0)
            nominal = bucket.policy.nominal.get(flavor, ZERO)
            pool = self.state.flavors[flavor].pool
            share = (
                max(
                    (max(used[i] - nominal[i], 0) / pool[i] for i in range(3) if pool[i] > 0),
                    default=0.0,
                )
                / bucket.policy.weight
            )
        return (1, share, *head)

    # -- the pass -----------------------------------------------------------------------

    def run(self) -> Decisions:
        """Stage 1 admits only what keeps each team within its nominal quota (reclaiming
        lent capacity if need be); stage 2 lends what is left to borrowers, who may preempt
        only their own team's lower-priority jobs. A borrower admitted in stage 2 can
        therefore never be reclaimed in the same pass, and every reclaim victim belongs to a
        team that was borrowing before the pass."""
        buckets: list[_Bucket] = []
        for jobs in self.state.pending.values():
            reason = self._structural_block(jobs[0])
            if reason is not None:
                self._wait(jobs, reason)
                continue
            buckets.append(_Bucket(jobs, self.state.teams[jobs[0].team]))
        deferred = self._admit_from(
            [(self._key(b), i) for i, b in enumerate(buckets)], buckets, in_quota=True
        )
        self._admit_from([(self._key(buckets[i]), i) for i in deferred], buckets, in_quota=False)
        self._grow_elastic()
        return self.decisions

    def _admit_from(
        self, heap: list[tuple[Key, int]], buckets: list[_Bucket], *, in_quota: bool
    ) -> list[int]:
        """Admit heads of `buckets` in key order; returns the buckets left for borrowing."""
        heapq.heapify(heap)
        deferred: list[int] = []
        while heap:
            key, index = heapq.heappop(heap)
            bucket = buckets[index]
            fresh = self._key(bucket)
            if in_quota and fresh[0] == 1:
                deferred.append(index)
                continue
            if fresh > key:
                heapq.heappush(heap, (fresh, index))
                continue
            if not self._try_admit(bucket.jobs[bucket.pos], bucket.policy, reclaim=in_quota):
                waiting = bucket.jobs[bucket.pos :]
                self._wait(waiting, self._last_block, self._short_of_capacity(waiting))
                self.contended.add(bucket.jobs[0].instance_type)
                continue
            bucket.pos += 1
            if bucket.pos < len(bucket.jobs):
                heapq.heappush(heap, (self._key(bucket), index))
        return deferred

    def _wait(self, jobs: list[Workload], reason: str, short: tuple[str, ...] = ()) -> None:
        self.decisions.pending.append(PendingGroup(reason, tuple(w.job_id for w in jobs), short))

    def _short_of_capacity(self, jobs: list[Workload]) -> tuple[str, ...]:
        """The first of `jobs` (one queue shape, oldest first) that their team's limit would
        still take, when installed capacity is what held the head back: the capacity itself,
        or the lending pool where IdleResourceSharing makes it grow with the capacity."""
        grows = self.state.scheduler.idle_resource_sharing is Toggle.ENABLED
        if not jobs or not (
            self._last_binding in (_CAPACITY, _HYPERPOD) or (self._last_binding == _POOL and grows)
        ):
            return ()
        policy = self.state.teams[jobs[0].team]
        flavor = jobs[0].instance_type
        used = list(self.usage.get((policy.team, flavor)) or (0, 0, 0))
        limit = policy.limit.get(flavor, ZERO)
        short: list[str] = []
        for workload in jobs:
            need = workload.per_replica.scaled(workload.floor)
            used = [u + n for u, n in zip(used, need, strict=True)]
            if any(u > q for u, q in zip(used, limit, strict=True)):
                break
            short.append(workload.job_id)
        return tuple(short)

    def _structural_block(self, workload: Workload) -> str | None:
        """Reasons no amount of waiting or preempting can fix."""
        team, flavor = workload.team, workload.instance_type
        policy = self.state.teams.get(team)
        if policy is None:
            return f"pending: team {team} has no enabled compute quota in this cluster"
        if flavor not in policy.limit:
            return f"pending: team {team} has no quota for {flavor}"
        need = workload.per_replica.scaled(workload.floor)
        unit, per = _unit(flavor), workload.per_replica
        limit = policy.limit[flavor]
        if any(n > q for n, q in zip(need, limit, strict=True)):
            nominal = policy.nominal.get(flavor, ZERO)
            return (
                f"pending: request of {_show(need, per)} {unit} of {flavor} exceeds team "
                f"{team}'s limit {_show(limit, per)} (nominal {_show(nominal, per)} plus "
                "borrow allowance)"
            )
        totals = self.state.flavors[flavor]
        ceiling = totals.pool if policy.lends else totals.capacity
        if any(n > c for n, c in zip(need, totals.capacity, strict=True)) or any(
            n > c for n, c in zip(need, ceiling, strict=True)
        ):
            return (
                f"pending: request of {_show(need, per)} {unit} exceeds the "
                f"{_show(ceiling, per)} {unit} of {flavor} team {team} can ever use "
                f"({_show(totals.capacity, per)} installed)"
            )
        return None

    def _try_admit(self, workload: Workload, policy: TeamPolicy, *, reclaim: bool) -> bool:
        flavor, hyperpod_only = workload.instance_type, workload.hyperpod_only
        room, binding = self._room(policy, flavor, workload.per_replica, hyperpod_only)
        self._last_binding = binding
        if room >= workload.floor:
            self._admit(workload, policy, self._size(workload, policy, room, reclaim), "")
            return True
        block = self._block_reason(workload, policy, binding)
        need = workload.per_replica.scaled(workload.floor)
        for failed_need, failed_priority, failed_reason in self.failed.get(
            (policy.team, flavor, hyperpod_only), ()
        ):
            if workload.priority <= failed_priority and all(
                n >= f for n, f in zip(need, failed_need, strict=True)
            ):
                self._last_block = f"{block}; {failed_reason}"
                return False
        outcome = self._preempt_for(workload, policy, reclaim=reclaim)
        if isinstance(outcome, str):
            self.failed.setdefault((policy.team, flavor, hyperpod_only), []).append(
                (need, workload.priority, outcome)
            )
            self._last_block = f"{block}; {outcome}"
            return False
        preempted, shrunk = outcome
        room, _ = self._room(policy, flavor, workload.per_replica, hyperpod_only)
        suffix = " after " + " and ".join(
            part
            for part in (
                f"preempting {preempted} job(s)" if preempted else "",
                f"shrinking {shrunk} elastic job(s)" if shrunk else "",
            )
            if part
        )
        self._admit(workload, policy, self._size(workload, policy, room, reclaim), suffix)
        return True

    def _size(self, workload: Workload, policy: TeamPolicy, room: int, in_quota: bool) -> int:
        """The size `workload` is admitted at with `room` replicas free: all of it, or an
        elastic job's largest size that fits; in stage 1 (within nominal quota) no larger
        than the team's nominal quota takes, since its place in the order came from its
        smallest size being within nominal (it grows into idle capacity after the pass's
        admissions)."""
        if in_quota:
            flavor, per = workload.instance_type, workload.per_replica
            used = self.usage.get((policy.team, flavor)) or (0, 0, 0)
            nominal = policy.nominal.get(flavor, ZERO)
            room = min((room, *((nominal[i] - used[i]) // per[i] for i in range(3) if per[i] > 0)))
        return workload.at_most(min(room, workload.replicas))

    def _admit(self, workload: Workload, policy: TeamPolicy, replicas: int, suffix: str) -> None:
        self.replicas[workload.job_id] = 0
        self._set_replicas(workload, replicas)
        flavor = workload.instance_type
        used = self.usage[(policy.team, flavor)]
        nominal = policy.nominal.get(flavor, ZERO)
        per, unit = workload.per_replica, _unit(flavor)
        how = (
            "within nominal"
            if all(u <= n for u, n in zip(used, nominal, strict=True))
            else f"borrowing (limit {_show(policy.limit[flavor], per)})"
        )
        reason = (
            f"admitted {replicas} replica(s) {how}: team {policy.team} uses "
            f"{_show(used, per)}/{_show(nominal, per)} {unit} of {flavor}{suffix}"
        )
        self.admitted[workload.job_id] = len(self.decisions.actions)
        self.decisions.actions.append(
            Decision(DecisionKind.ADMIT, workload.job_id, policy.team, flavor, replicas, reason)
        )

    def _block_reason(self, workload: Workload, policy: TeamPolicy, binding: str) -> str:
        """Why `workload` waits, in figures that hold while it waits (quotas, capacity, its
        own need), never the live usage: a reason is written again only when its meaning
        changes (issue 19), and the teams view shows the usage as it is."""
        flavor, per = workload.instance_type, workload.per_replica
        unit = _unit(flavor)
        totals = self.state.flavors[flavor]
        need = _show(per.scaled(workload.floor), per)
        if binding == _TEAM:
            nominal = policy.nominal.get(flavor, ZERO)
            limit = policy.limit[flavor]
            if not policy.borrows:
                return (
                    f"pending: team {policy.team}'s nominal {_show(nominal, per)} {unit} of "
                    f"{flavor} cannot take {need} more; strategy {policy.strategy.value} does "
                    "not borrow"
                )
            allowance = [q - n for q, n in zip(limit, nominal, strict=True)]
            return (
                f"pending: team {policy.team}'s nominal {_show(nominal, per)} and borrow limit "
                f"{_show(allowance, per)} {unit} of {flavor} cannot take {need} more"
            )
        if binding == _POOL:
            return (
                f"pending: shared {unit} of {flavor} exhausted: the {_show(totals.pool, per)} "
                f"lending teams share cannot take {need} more"
            )
        if binding == _HYPERPOD:
            return (
                f"pending: HyperPod capacity of {flavor} exhausted: its "
                f"{_show(totals.hyperpod, per)} {unit} cannot take {need} more (its template "
                "runs on HyperPod only; burst capacity cannot hold it)"
            )
        planned = (
            f" (team quotas total {_show(totals.nominal_total, per)}: quota exceeds "
            "installed capacity)"
            if any(n > c for n, c in zip(totals.nominal_total, totals.capacity, strict=True))
            else ""
        )
        return (
            f"pending: installed capacity of {flavor} exhausted: its "
            f"{_show(totals.capacity, per)} {unit} cannot take {need} more{planned}"
        )

    # -- preemption ---------------------------------------------------------------------

    def _candidates(
        self, workload: Workload, policy: TeamPolicy, *, reclaim: bool
    ) -> tuple[list[tuple[Workload, bool]], int]:
        """Running jobs that may give way to `workload`, in the order they are taken:
        reclaimable borrowers first, then the team's own lower-priority jobs; lowest
        priority and newest first within each. Also returns how many were passed over for
        being younger than the minimum run time (they may still be shrunk)."""
        flavor = workload.instance_type
        need = workload.per_replica.scaled(workload.floor)
        borrowers: list[Workload] = []
        own: list[Workload] = []
        if reclaim and self._within_nominal(policy, flavor, need):
            for (team, running_flavor), running in self.state.running.items():
                if (
                    running_flavor == flavor
                    and team != policy.team
                    and self._is_borrowing(team, flavor)
                ):
                    borrowers.extend(running.values())
        if policy.preempt_lower_priority and not workload.may_burst:
            own.extend(
                w
                for w in self.state.running.get((policy.team, flavor), {}).values()
                if w.priority < workload.priority
            )
        min_runtime = self.state.scheduler.min_runtime_seconds
        now = self.state.now
        young = 0
        ordered: list[tuple[Workload, bool]] = []
        for group in (borrowers, own):
            group.sort(key=lambda w: (w.priority, -(w.started_at or 0.0), -w.seq))
            for candidate in group:
                if candidate.job_id in self.victims or self._current(candidate) == 0:
                    continue
                is_young = (
                    min_runtime > 0
                    and candidate.started_at is not None
                    and now - candidate.started_at < min_runtime
                )
                young += is_young
                ordered.append((candidate, not is_young))
        return ordered, young

    def _preempt_for(
        self, workload: Workload, policy: TeamPolicy, *, reclaim: bool
    ) -> tuple[int, int] | str:
        """Free room for `workload` by shrinking, then preempting, candidates. Returns the
        number preempted and shrunk, or why it could not (nothing is changed then)."""
        candidates, young = self._candidates(workload, policy, reclaim=reclaim)
        if not candidates:
            return "no job may be preempted for it"
        flavor, per = workload.instance_type, workload.per_replica
        original = {c.job_id: self._current(c) for c, _ in candidates}
        own_team = policy.team

        def fits() -> bool:
            return self._room(policy, flavor, per, workload.hyperpod_only)[0] >= workload.floor

        def may_take(candidate: Workload) -> bool:
            return candidate.team == own_team or self._is_borrowing(candidate.team, flavor)

        shrunk: list[Workload] = []
        for candidate, _ in candidates:
            if fits():
                break
            while (
                candidate.is_elastic
                and self._current(candidate) > candidate.floor
                and may_take(candidate)
                and not fits()
            ):
                self._set_replicas(candidate, candidate.below(self._current(candidate)))
            if self._current(candidate) < original[candidate.job_id]:
                shrunk.append(candidate)
        preempted: list[Workload] = []
        for candidate, preemptable in candidates:
            if fits():
                break
            if preemptable and may_take(candidate):
                self._set_replicas(candidate, 0)
                preempted.append(candidate)
        if not fits():
            for candidate, _ in candidates:
                self._set_replicas(candidate, original[candidate.job_id])
            if young:
                return (
                    "not enough to preempt: candidate jobs have run less than the minimum "
                    f"run time {self.state.scheduler.min_runtime_seconds}s"
                )
            return "preempting every eligible job would still not make room"
        self._minimise(preempted, shrunk, original, fits)
        return self._record(workload, policy, preempted, shrunk, original)

    def _minimise(
        self,
        preempted: list[Workload],
        shrunk: list[Workload],
        original: dict[str, int],
        fits: Callable[[], bool],
    ) -> None:
        """Give back whatever the admission turns out not to need, last choice first: a
        victim is restored whole if possible, else kept at its minimum if it is elastic."""
        for victim in reversed(preempted[:]):
            self._set_replicas(victim, original[victim.job_id])
            if fits():
                preempted.remove(victim)
                if victim in shrunk:
                    shrunk.remove(victim)
                continue
            floor = victim.floor if victim.is_elastic else 0
            self._set_replicas(victim, floor)
            if floor and fits():
                preempted.remove(victim)
                if victim not in shrunk:
                    shrunk.append(victim)
            else:
                self._set_replicas(victim, 0)
        for victim in reversed(shrunk[:]):
            while self._current(victim) < original[victim.job_id]:
                before = self._current(victim)
                self._set_replicas(victim, min(victim.above(before), original[victim.job_id]))
                if not fits():
                    self._set_replicas(victim, before)
                    break
            if self._current(victim) == original[victim.job_id]:
                shrunk.remove(victim)

    def _record(
        self,
        workload: Workload,
        policy: TeamPolicy,
        preempted: list[Workload],
        shrunk: list[Workload],
        original: dict[str, int],
    ) -> tuple[int, int]:
        flavor, per = workload.instance_type, workload.per_replica
        need = _show(per.scaled(workload.floor), per)
        for victim in shrunk:
            if victim in preempted:
                continue  # shrunk first, then preempted whole: one decision, the preemption
            self.shrunk.add(victim.job_id)
            self.decisions.actions.append(
                Decision(
                    DecisionKind.SHRINK,
                    victim.job_id,
                    victim.team,
                    flavor,
                    self._current(victim),
                    f"shrunk from {original[victim.job_id]} to {self._current(victim)} "
                    f"replica(s) {self._why(victim, workload, policy, need)}",
                    for_job=workload.job_id,
                )
            )
        for victim in preempted:
            self.victims.add(victim.job_id)
            self.decisions.actions.append(
                Decision(
                    DecisionKind.PREEMPT,
                    victim.job_id,
                    victim.team,
                    flavor,
                    0,
                    f"preempted {self._why(victim, workload, policy, need)}",
                    for_job=workload.job_id,
                )
            )
        return len(preempted), len(shrunk)

    def _why(self, victim: Workload, workload: Workload, policy: TeamPolicy, need: str) -> str:
        unit = _unit(workload.instance_type)
        if victim.team != policy.team:
            return (
                f"to reclaim lent quota: team {victim.team} was borrowing "
                f"{workload.instance_type} and team {policy.team} needs {need} {unit} of its "
                f"own nominal quota for job {workload.job_id}"
            )
        return (
            f"for higher-priority job {workload.job_id} of the same team "
            f"({workload.priority_class or 'no class'} weight {workload.priority} > "
            f"{victim.priority_class or 'no class'} weight {victim.priority})"
        )

    # -- elastic growth -----------------------------------------------------------------

    def _grow_elastic(self) -> None:
        """Offer idle capacity to running elastic jobs: by priority, then (FairShare
        Enabled) the team's dominant share over its weight, lowest first, then age; each
        to the largest size that fits its team's limit (nominal plus borrow allowance), the
        pool and the installed capacity, once its scalingTimeoutInSeconds has passed."""
        now = self.state.now
        growable = [
            w
            for w in map(self.state.workloads.__getitem__, self.state.elastic)
            if 0 < self._current(w) < w.ceiling
            and w.instance_type not in self.contended
            and w.job_id not in self.victims
            and w.job_id not in self.shrunk
            and (w.scaled_at is None or now - w.scaled_at >= w.scaling_timeout_s)
        ]
        pending = list(growable)
        while pending:
            pending.sort(key=self._growth_order)
            workload = pending.pop(0)
            policy = self.state.teams.get(workload.team)
            if policy is None:
                continue
            room, _ = self._room(
                policy, workload.instance_type, workload.per_replica, workload.hyperpod_only
            )
            current = self._current(workload)
            replicas = workload.at_most(current + room)
            if replicas <= current:
                continue
            self._set_replicas(workload, replicas)
            reason = (
                f"grown from {current} to {replicas} replica(s) into idle capacity nobody "
                "is waiting for"
            )
            index = self.admitted.get(workload.job_id)
            if index is not None:
                admit = self.decisions.actions[index]
                self.decisions.actions[index] = replace(
                    admit, replicas=replicas, reason=f"{admit.reason}; {reason}"
                )
            else:
                self.decisions.actions.append(
                    Decision(
                        DecisionKind.GROW,
                        workload.job_id,
                        workload.team,
                        workload.instance_type,
                        replicas,
                        reason,
                    )
                )

    def _growth_order(self, workload: Workload) -> tuple[int, float, float, int]:
        share = 0.0
        if self.fair_share:
            policy = self.state.teams.get(workload.team)
            used = self.usage.get((workload.team, workload.instance_type)) or (0, 0, 0)
            pool = self.state.flavors[workload.instance_type].pool
            weight = policy.weight if policy is not None else 1.0
            share = max((used[i] / pool[i] for i in range(3) if pool[i] > 0), default=0.0)
            share /= weight
        return (-workload.priority, share, workload.submitted_at, workload.seq)
