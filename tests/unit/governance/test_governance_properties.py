"""Property tests of the engine's invariants over random clusters and job mixes."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st
from tests.unit.governance.governance_builders import CLASSES, P5, cluster, job, quota, running

from hyperguard.governance import DecisionKind, Decisions, GovernanceState, Workload, schedule
from hyperguard.models.governance import ZERO

MAX_PASSES = 40


@st.composite
def clusters(draw: st.DrawFn) -> tuple[GovernanceState, list[list[Workload]]]:
    teams = draw(st.integers(min_value=1, max_value=4))
    quotas = [
        quota(
            f"t{i}",
            draw(st.sampled_from([0, 8, 16, 24, 32])),
            strategy=draw(st.sampled_from(["Lend", "DontLend", "LendAndBorrow"])),
            borrow=draw(st.sampled_from([0, 50, 100, 300])),
            weight=draw(st.integers(min_value=0, max_value=100)),
            preempt=draw(st.sampled_from(["Never", "LowerPriority"])),
        )
        for i in range(teams)
    ]
    instances = draw(st.integers(min_value=0, max_value=12))
    state = cluster(
        quotas,
        instances,
        fair_share=draw(st.sampled_from(["Enabled", "Disabled"])),
        idle=draw(st.sampled_from(["Enabled", "Disabled"])),
        min_runtime=draw(st.sampled_from([0, 30, 150])),
        now=0.0,
        hyperpod=draw(st.one_of(st.none(), st.integers(min_value=0, max_value=instances))),
    )
    waves: list[list[Workload]] = []
    for wave in range(draw(st.integers(min_value=1, max_value=3))):
        jobs: list[Workload] = []
        for index in range(draw(st.integers(min_value=1, max_value=10))):
            elastic = draw(st.booleans())
            replicas = draw(st.integers(min_value=1, max_value=3))
            jobs.append(
                job(
                    f"w{wave}j{index}",
                    f"t{draw(st.integers(min_value=0, max_value=teams - 1))}",
                    draw(st.sampled_from([1, 2, 4, 8])),
                    cls=draw(st.sampled_from([None, *CLASSES])),
                    at=float(wave * 100 + index),
                    replicas=replicas,
                    min_replicas=1 if elastic else None,
                    max_replicas=replicas + 2 if elastic else None,
                    step=draw(st.sampled_from([None, 1, 2])) if elastic else None,
                )
            )
            jobs[-1].hyperpod_only = draw(st.booleans())
        waves.append(jobs)
    return state, waves


def check_limits(state: GovernanceState) -> None:
    totals = state.flavors[P5]
    used_total = [0, 0, 0]
    lent = [0, 0, 0]
    for (team, _), used in state.usage.items():
        policy = state.teams[team]
        limit = policy.limit.get(P5, ZERO)
        assert all(u <= q for u, q in zip(used, limit, strict=True)), (team, used, limit)
        for i in range(3):
            used_total[i] += used[i]
            if policy.lends:
                lent[i] += used[i]
    assert all(u <= c for u, c in zip(used_total, totals.capacity, strict=True))
    on_hyperpod = [0, 0, 0]
    for workload in state.workloads.values():
        if workload.hyperpod_only:
            for i, amount in enumerate(workload.per_replica.scaled(workload.admitted)):
                on_hyperpod[i] += amount
    assert all(u <= c for u, c in zip(on_hyperpod, totals.hyperpod, strict=True))
    assert all(u <= p for u, p in zip(lent, totals.pool, strict=True))


def check_preemptions_justified(state: GovernanceState, decisions: Decisions) -> None:
    borrowing_before = {
        team
        for (team, _), used in state.usage.items()
        if any(u > n for u, n in zip(used, state.teams[team].nominal.get(P5, ZERO), strict=True))
    }
    for action in decisions.actions:
        if action.kind not in (DecisionKind.PREEMPT, DecisionKind.SHRINK):
            continue
        assert action.for_job is not None, action
        victim = state.workloads[action.job_id]
        preemptor = state.workloads[action.for_job]
        if victim.team == preemptor.team:
            assert victim.priority < preemptor.priority, action.reason
        else:
            assert victim.team in borrowing_before, action.reason
            assert "reclaim" in action.reason
        if action.kind is DecisionKind.PREEMPT:
            assert victim.started_at is not None
            assert state.now - victim.started_at >= state.scheduler.min_runtime_seconds


def run_to_fixed_point(state: GovernanceState) -> int:
    for passes in range(1, MAX_PASSES + 1):
        decisions = schedule(state)
        check_preemptions_justified(state, decisions)
        state.apply(decisions)
        check_limits(state)
        if not decisions.actions:
            return passes
    raise AssertionError(f"no fixed point after {MAX_PASSES} passes: {decisions.actions}")


@settings(max_examples=300, deadline=None)
@given(clusters())
def test_invariants_hold_and_passes_reach_a_fixed_point(
    case: tuple[GovernanceState, list[list[Workload]]],
) -> None:
    state, waves = case
    for wave, jobs in enumerate(waves):
        state.now = wave * 100.0
        for workload in jobs:
            state.add(workload)
        run_to_fixed_point(state)
        again = schedule(state)
        assert again.actions == []
        pending = set(again.pending_reasons)
        assert pending == {w.job_id for w in state.workloads.values() if w.admitted == 0}
        assert all(reason.startswith("pending: ") for reason in again.pending_reasons.values())


@settings(max_examples=150, deadline=None)
@given(clusters(), st.data())
def test_finishing_jobs_never_cause_preemption_ping_pong(
    case: tuple[GovernanceState, list[list[Workload]]], data: st.DataObject
) -> None:
    """Jobs finish one by one; after each, passes settle without a job being preempted
    twice in a row on a state that no longer changes."""
    state, waves = case
    for workload in (w for jobs in waves for w in jobs):
        state.add(workload)
    run_to_fixed_point(state)
    while state.workloads:
        running = sorted(w.job_id for w in state.workloads.values() if w.admitted)
        if not running:
            break
        state.now += 50.0
        state.remove(data.draw(st.sampled_from(running)))
        preempted: list[str] = []
        for _ in range(MAX_PASSES):
            decisions = schedule(state)
            check_preemptions_justified(state, decisions)
            preempted += [d.job_id for d in decisions.preempted]
            state.apply(decisions)
            check_limits(state)
            if not decisions.actions:
                break
        else:
            raise AssertionError("no fixed point")
        assert len(preempted) == len(set(preempted)), preempted


@st.composite
def one_team_contention(draw: st.DrawFn) -> tuple[GovernanceState, str]:
    """A team at its quota, a mix of lower-priority running jobs (some elastic), and one
    high-priority job waiting for room."""
    nodes = draw(st.integers(min_value=2, max_value=10))
    jobs = []
    left = nodes
    index = 0
    while left > 0:
        size = draw(st.integers(min_value=1, max_value=left))
        elastic = draw(st.booleans())
        floor = draw(st.integers(min_value=1, max_value=size)) if elastic else None
        workload = job(
            f"r{index}",
            "a",
            8,
            cls=draw(st.sampled_from(["low", "mid"])),
            at=float(index),
            replicas=size,
            min_replicas=floor,
            max_replicas=size if elastic else None,
        )
        jobs.append(running(workload, since=0.0))
        left -= size
        index += 1
    wanted = draw(st.integers(min_value=1, max_value=nodes))
    jobs.append(job("urgent", "a", 8, cls="high", replicas=wanted, at=100.0))
    return cluster([quota("a", nodes * 8, borrow=0)], nodes, jobs), "urgent"


@settings(max_examples=300, deadline=None)
@given(one_team_contention())
def test_no_job_is_preempted_while_shrinking_elastic_jobs_would_make_room(
    case: tuple[GovernanceState, str],
) -> None:
    state, urgent = case
    workload = state.workloads[urgent]
    shrinkable = sum(
        w.admitted - w.floor
        for w in state.workloads.values()
        if w.is_elastic and w.admitted and w.priority < workload.priority
    )
    decisions = schedule(state)
    check_preemptions_justified(state, decisions)
    if shrinkable >= workload.floor:
        assert decisions.preempted == [], (shrinkable, decisions.actions)
        assert urgent in {d.job_id for d in decisions.admitted}
    for victim in decisions.preempted:
        assert victim.for_job == urgent
    state.apply(decisions)
    check_limits(state)


@st.composite
def young_and_old(draw: st.DrawFn) -> tuple[list[Workload], int, int]:
    """Team `a` and a borrowing team `b` on one cluster, their running jobs started at
    random times before `now` (1000), and waiting jobs of `a` that need room: lent quota
    to reclaim, or lower-priority jobs of its own to preempt. Also a minimum run time and
    the instance count."""
    instances = draw(st.integers(min_value=1, max_value=6))
    jobs: list[Workload] = []
    for index in range(draw(st.integers(min_value=1, max_value=instances))):
        workload = job(
            f"r{index}",
            draw(st.sampled_from(["a", "b"])),
            8,
            cls=draw(st.sampled_from(["low", "mid"])),
            at=float(index),
        )
        jobs.append(running(workload, since=float(draw(st.integers(0, 1000)))))
    for index in range(draw(st.integers(min_value=1, max_value=3))):
        jobs.append(job(f"p{index}", "a", 8, cls="high", at=100.0 + index))
    return jobs, draw(st.integers(min_value=0, max_value=1000)), instances


def _copies(jobs: list[Workload]) -> list[Workload]:
    return [replace(w) for w in jobs]


@settings(max_examples=300, deadline=None)
@given(young_and_old())
def test_no_job_is_preempted_before_the_minimum_run_time(
    case: tuple[list[Workload], int, int],
) -> None:
    """Every victim has run at least MinRuntimeSeconds, whether taken to reclaim lent quota
    or for priority; and the minimum changes a pass only where, without it, a younger job
    would have been preempted."""
    jobs, min_runtime, instances = case
    quotas = [quota("a", 8 * instances, borrow=0), quota("b", 0, borrow=100)]
    state = cluster(quotas, instances, _copies(jobs), min_runtime=min_runtime)
    decisions = schedule(state)
    check_preemptions_justified(state, decisions)
    for victim in decisions.preempted:
        started = state.workloads[victim.job_id].started_at
        assert started is not None and state.now - started >= min_runtime
    unrestricted = schedule(cluster(quotas, instances, _copies(jobs)))
    young = {
        w.job_id
        for w in jobs
        if w.started_at is not None and state.now - w.started_at < min_runtime
    }
    if decisions.actions != unrestricted.actions:
        assert young & {v.job_id for v in unrestricted.preempted}, "the minimum protected nobody"
    if any("minimum run time" in group.reason for group in decisions.pending):
        assert young
