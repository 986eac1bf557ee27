"""Table-driven tests of each admission rule of the engine."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypedDict

import pytest
from tests.unit.governance.governance_builders import (
    CATALOGUE,
    P5,
    cluster,
    gpus_used,
    job,
    quota,
    running,
)

from hyperguard.governance import DecisionKind, Decisions, GovernanceState, schedule
from hyperguard.governance.state import Workload
from hyperguard.models.governance import ComputeQuota


def admitted(decisions: Decisions) -> dict[str, int]:
    return {d.job_id: d.replicas for d in decisions.admitted}


def preempted(decisions: Decisions) -> set[str]:
    return {d.job_id for d in decisions.preempted}


class ClusterOptions(TypedDict, total=False):
    """The scheduler settings a case gives `cluster` beyond its defaults."""

    fair_share: str
    idle: str


@dataclass
class Case:
    name: str
    quotas: list[ComputeQuota]
    instances: int
    jobs: list[Workload]
    admit: dict[str, int]
    preempt: set[str] = field(default_factory=set)
    pending_reason: dict[str, str] = field(default_factory=dict)
    kwargs: ClusterOptions = field(default_factory=lambda: ClusterOptions())


CASES = [
    Case(
        "within nominal admits",
        [quota("a", 16)],
        2,
        [job("j1", "a", 8, replicas=2)],
        {"j1": 2},
    ),
    Case(
        "borrow limit percent caps borrowing",
        [quota("a", 16, borrow=50), quota("b", 16)],
        4,
        [job("j1", "a", 8, replicas=2, at=1), job("j2", "a", 8, replicas=2, at=2)],
        {"j1": 2},
        pending_reason={
            "j2": "team a's nominal 16 and borrow limit 8 GPUs of ml.p5.48xlarge cannot "
            "take 16 more"
        },
    ),
    Case(
        "absolute borrow limit replaces the percentage",
        [quota("a", 16, borrow=500, absolute=8), quota("b", 32)],
        6,
        [job("j1", "a", 8, replicas=2, at=1), job("j2", "a", 8, replicas=2, at=2)],
        {"j1": 2},
        pending_reason={"j2": "nominal 16 and borrow limit 8 GPUs of ml.p5.48xlarge"},
    ),
    Case(
        "Lend strategy does not borrow",
        [quota("a", 8, strategy="Lend"), quota("b", 16)],
        3,
        [job("j1", "a", 8, at=1), job("j2", "a", 8, at=2)],
        {"j1": 1},
        pending_reason={"j2": "strategy Lend does not borrow"},
    ),
    Case(
        "DontLend quota is not borrowable by others",
        [quota("a", 16, strategy="DontLend"), quota("b", 8, borrow=200)],
        3,
        [job("j1", "b", 8, replicas=2)],
        {},
        pending_reason={"j1": "exceeds the 8 GPUs of ml.p5.48xlarge team b can ever use"},
    ),
    Case(
        "Lend quota is borrowable",
        [quota("a", 16, strategy="Lend"), quota("b", 8, borrow=200)],
        3,
        [job("j1", "b", 8, replicas=3)],
        {"j1": 3},
    ),
    Case(
        "IdleResourceSharing Enabled lends unallocated capacity",
        [quota("a", 8, borrow=100)],
        2,
        [job("j1", "a", 8, replicas=2)],
        {"j1": 2},
    ),
    Case(
        "IdleResourceSharing Disabled keeps unallocated capacity out of the pool",
        [quota("a", 8, borrow=100)],
        2,
        [job("j1", "a", 8, replicas=2)],
        {},
        pending_reason={"j1": "exceeds the 8 GPUs of ml.p5.48xlarge team a can ever use"},
        kwargs={"idle": "Disabled"},
    ),
    Case(
        "quota above installed capacity waits with a capacity reason",
        [quota("a", 16, strategy="DontLend"), quota("b", 16, strategy="DontLend")],
        3,
        [running(job("r1", "a", 8, replicas=2)), job("j1", "b", 8, replicas=2)],
        {},
        pending_reason={
            "j1": "installed capacity of ml.p5.48xlarge exhausted: its 24 GPUs cannot take "
            "16 more (team quotas total 32: quota exceeds installed capacity)"
        },
    ),
    Case(
        "request larger than the team limit is structural",
        [quota("a", 8, borrow=0)],
        4,
        [job("j1", "a", 8, replicas=2)],
        {},
        pending_reason={"j1": "exceeds team a's limit 8"},
    ),
    Case(
        "team without an enabled quota waits",
        [quota("a", 8, active="Disabled")],
        4,
        [job("j1", "a", 8)],
        {},
        pending_reason={"j1": "team a has no enabled compute quota"},
    ),
    Case(
        "priority order within the team, FIFO within a class",
        [quota("a", 16, borrow=0)],
        2,
        [
            job("old-low", "a", 8, cls="low", at=1),
            job("new-high", "a", 8, cls="high", at=3),
            job("old-high", "a", 8, cls="high", at=2),
        ],
        {"old-high": 1, "new-high": 1},
    ),
    Case(
        "a job naming no class ranks below every class",
        [quota("a", 8, borrow=0)],
        1,
        [job("none", "a", 8, cls=None, at=1), job("weight0", "a", 8, cls="low", at=2)],
        {"weight0": 1},
    ),
    Case(
        "best effort: a blocked big job does not block a smaller one",
        [quota("a", 16, borrow=0)],
        2,
        [
            running(job("r1", "a", 8)),
            job("big", "a", 16, cls="high", at=1),
            job("small", "a", 8, at=2),
        ],
        {"small": 1},
    ),
    Case(
        "in-quota jobs are admitted before borrowers",
        [quota("a", 8, borrow=100), quota("b", 8, borrow=100)],
        2,
        [job("borrow", "a", 8, replicas=2, cls="high", at=1), job("own", "b", 8, at=2)],
        {"own": 1},
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_admission_rules(case: Case) -> None:
    state = cluster(case.quotas, case.instances, case.jobs, **case.kwargs)
    decisions = schedule(state)
    assert admitted(decisions) == case.admit
    assert preempted(decisions) == case.preempt
    reasons = decisions.pending_reasons
    for job_id, fragment in case.pending_reason.items():
        assert fragment in reasons[job_id], reasons[job_id]
    for action in decisions.actions:
        assert action.reason


@dataclass
class PreemptCase:
    name: str
    quotas: list[ComputeQuota]
    instances: int
    jobs: list[Workload]
    admit: dict[str, int]
    preempt: set[str]
    shrink: dict[str, int] = field(default_factory=dict)
    reason: str = ""
    min_runtime: int = 0


PREEMPT_CASES = [
    PreemptCase(
        "higher priority preempts own lower priority, newest first",
        [quota("a", 16, borrow=0)],
        2,
        [
            running(job("low-old", "a", 8, at=1), since=10),
            running(job("low-new", "a", 8, at=2), since=20),
            job("high", "a", 8, cls="high", at=3),
        ],
        {"high": 1},
        {"low-new"},
        reason="for higher-priority job high of the same team",
    ),
    PreemptCase(
        "PreemptTeamTasks Never keeps lower-priority jobs",
        [quota("a", 16, borrow=0, preempt="Never")],
        2,
        [running(job("low", "a", 8, replicas=2)), job("high", "a", 8, cls="high")],
        {},
        set(),
        reason="no job may be preempted",
    ),
    PreemptCase(
        "equal priority is never preempted within the team",
        [quota("a", 8, borrow=0)],
        1,
        [running(job("first", "a", 8, cls="mid")), job("second", "a", 8, cls="mid")],
        {},
        set(),
    ),
    PreemptCase(
        "lender reclaims from a borrower regardless of priority",
        [quota("a", 8), quota("b", 8, borrow=100)],
        2,
        [
            running(job("b-own", "b", 8, cls="high", at=1)),
            running(job("b-borrow", "b", 8, cls="high", at=2), since=5),
            job("a1", "a", 8, cls="low", at=3),
        ],
        {"a1": 1},
        {"b-borrow"},
        reason="to reclaim lent quota: team b was borrowing",
    ),
    PreemptCase(
        "reclaim stops once the borrower is back at nominal",
        [quota("a", 16), quota("b", 8, borrow=100)],
        3,
        [
            running(job("b1", "b", 8, at=1), since=1),
            running(job("b2", "b", 8, at=2), since=2),
            job("a1", "a", 8, replicas=2, at=3),
        ],
        {"a1": 2},
        {"b2"},
    ),
    PreemptCase(
        "no reclaim from a team within its nominal when capacity falls short of quotas",
        [quota("a", 16), quota("b", 16)],
        2,
        [running(job("b1", "b", 8, replicas=2)), job("a1", "a", 8)],
        {},
        set(),
        reason="installed capacity of ml.p5.48xlarge exhausted",
    ),
    PreemptCase(
        "a borrowing job never preempts another team",
        [quota("a", 8, borrow=100), quota("b", 8, borrow=100)],
        2,
        [
            running(job("b-borrow", "b", 8, cls="low"), 2),
            job("a-big", "a", 8, replicas=2, cls="high"),
        ],
        {},
        set(),
    ),
    PreemptCase(
        "minimum run time protects young jobs",
        [quota("a", 8), quota("b", 8, borrow=100)],
        2,
        [running(job("b1", "b", 8, replicas=2), since=950), job("a1", "a", 8)],
        {},
        set(),
        reason="minimum run time 600s",
        min_runtime=600,
    ),
    PreemptCase(
        "minimum run time elapsed allows reclaim",
        [quota("a", 8), quota("b", 8, borrow=100)],
        2,
        [
            running(job("b1", "b", 8), since=100),
            running(job("b2", "b", 8), since=200),
            job("a1", "a", 8),
        ],
        {"a1": 1},
        {"b2"},
        min_runtime=600,
    ),
    PreemptCase(
        "minimum run time protects young jobs from a higher priority in the team",
        [quota("a", 8, borrow=0)],
        1,
        [running(job("low", "a", 8), since=950), job("high", "a", 8, cls="high")],
        {},
        set(),
        reason="not enough to preempt: candidate jobs have run less than the minimum run time 600s",
        min_runtime=600,
    ),
    PreemptCase(
        "a young job is passed over for an older one of the same priority",
        [quota("a", 16, borrow=0)],
        2,
        [
            running(job("low-old", "a", 8, at=1), since=100),
            running(job("low-new", "a", 8, at=2), since=950),
            job("high", "a", 8, cls="high", at=3),
        ],
        {"high": 1},
        {"low-old"},
        min_runtime=600,
    ),
    PreemptCase(
        "a job exactly the minimum old may be preempted",
        [quota("a", 8, borrow=0)],
        1,
        [running(job("low", "a", 8), since=400), job("high", "a", 8, cls="high")],
        {"high": 1},
        {"low"},
        min_runtime=600,
    ),
    PreemptCase(
        "elastic jobs shrink before anyone is preempted",
        [quota("a", 16, borrow=0)],
        2,
        [
            running(job("el", "a", 8, replicas=2, min_replicas=1, max_replicas=2)),
            job("high", "a", 8, cls="high"),
        ],
        {"high": 1},
        set(),
        shrink={"el": 1},
        reason="shrunk from 2 to 1",
    ),
    PreemptCase(
        "shrinking is allowed for jobs inside the minimum run time",
        [quota("a", 8), quota("b", 8, borrow=100)],
        2,
        [
            running(job("el", "b", 8, replicas=2, min_replicas=1, max_replicas=2), since=999),
            job("a1", "a", 8),
        ],
        {"a1": 1},
        set(),
        shrink={"el": 1},
        min_runtime=600,
    ),
    PreemptCase(
        "only as many victims as needed",
        [quota("a", 24, borrow=0)],
        3,
        [running(job(f"low{i}", "a", 8, at=i), since=i) for i in range(3)]
        + [job("high", "a", 8, cls="high", at=9)],
        {"high": 1},
        {"low2"},
    ),
]


@pytest.mark.parametrize("case", PREEMPT_CASES, ids=lambda c: c.name)
def test_preemption_rules(case: PreemptCase) -> None:
    state = cluster(case.quotas, case.instances, case.jobs, min_runtime=case.min_runtime)
    decisions = schedule(state)
    assert admitted(decisions) == case.admit
    assert preempted(decisions) == case.preempt
    assert {d.job_id: d.replicas for d in decisions.of_kind(DecisionKind.SHRINK)} == case.shrink
    if case.reason:
        texts = [a.reason for a in decisions.actions] + [p.reason for p in decisions.pending]
        assert any(case.reason in text for text in texts), texts
    victims_first = [a.kind for a in decisions.actions]
    if DecisionKind.ADMIT in victims_first and case.preempt:
        assert victims_first.index(DecisionKind.PREEMPT) < victims_first.index(DecisionKind.ADMIT)


@pytest.mark.parametrize(
    ("fair_share", "admitted_by_team"),
    [
        # Idle capacity goes to the lower weighted share: b's weight 3 earns it 3 of 4 loans.
        ("Enabled", {"a": 2, "b": 4}),
        # Without fair share, first come (all of a's jobs) is first served.
        ("Disabled", {"a": 4, "b": 2}),
    ],
)
def test_fair_share_decides_who_borrows_idle_capacity(
    fair_share: str, admitted_by_team: dict[str, int]
) -> None:
    quotas = [
        quota("a", 8, borrow=1000, weight=1),
        quota("b", 8, borrow=1000, weight=3),
        quota("idle", 32, strategy="Lend"),
    ]
    jobs = [job(f"a{i}", "a", 8, at=i) for i in range(4)]
    jobs += [job(f"b{i}", "b", 8, at=10 + i) for i in range(4)]
    decisions = schedule(cluster(quotas, 6, jobs, fair_share=fair_share))
    counts = {t: sum(1 for d in decisions.admitted if d.team == t) for t in ("a", "b")}
    assert counts == admitted_by_team


def test_weight_zero_is_not_an_infinite_share() -> None:
    """Kueue would never let a weight-0 queue borrow while others want to; HyperPod's
    default weight 0 must share like weight 1."""
    quotas = [
        quota("zero", 8, borrow=200, weight=0),
        quota("one", 8, borrow=200, weight=1),
        quota("idle", 16, strategy="Lend"),
    ]
    jobs = [job(f"z{i}", "zero", 8, at=i) for i in range(3)]
    jobs += [job(f"o{i}", "one", 8, at=10 + i) for i in range(3)]
    decisions = schedule(cluster(quotas, 4, jobs))
    counts = {t: sum(1 for d in decisions.admitted if d.team == t) for t in ("zero", "one")}
    assert counts == {"zero": 2, "one": 2}


def test_elastic_job_admitted_with_fewer_replicas_when_that_is_all_that_fits() -> None:
    state = cluster(
        [quota("a", 24, borrow=0)],
        3,
        [running(job("r", "a", 8)), job("el", "a", 8, replicas=3, min_replicas=1)],
    )
    assert admitted(schedule(state)) == {"el": 2}


def test_elastic_job_grows_into_idle_capacity_only_when_nobody_waits() -> None:
    state = cluster(
        [quota("a", 32, borrow=0)],
        4,
        [running(job("el", "a", 8, replicas=1, min_replicas=1, max_replicas=4))],
    )
    grown = schedule(state).of_kind(DecisionKind.GROW)
    assert [(d.job_id, d.replicas) for d in grown] == [("el", 4)]

    state = cluster(
        [quota("a", 32, borrow=0)],
        4,
        [
            running(job("el", "a", 8, replicas=1, min_replicas=1, max_replicas=4)),
            running(job("r", "a", 8, replicas=2)),
            job("wait", "a", 16, cls="low"),
        ],
    )
    decisions = schedule(state)
    assert decisions.of_kind(DecisionKind.GROW) == []
    assert "wait" in decisions.pending_reasons


def test_apply_moves_usage_and_queues() -> None:
    state = cluster(
        [quota("a", 8), quota("b", 8, borrow=100)],
        2,
        [
            running(job("b1", "b", 8), since=1),
            running(job("b2", "b", 8), since=2),
            job("a1", "a", 8),
        ],
    )
    decisions = schedule(state)
    state.apply(decisions)
    assert gpus_used(state, "a") == 8
    assert gpus_used(state, "b") == 8
    assert state.workloads["b2"].admitted == 0
    assert [w.job_id for q in state.pending.values() for w in q] == ["b2"]
    again = schedule(state)
    assert again.actions == []
    assert "b2" in again.pending_reasons


def test_remove_releases_quota() -> None:
    state = cluster([quota("a", 8, borrow=0)], 1, [running(job("r", "a", 8)), job("p", "a", 8)])
    state.remove("r")
    assert gpus_used(state, "a") == 0
    assert admitted(schedule(state)) == {"p": 1}


def test_from_jobs_builds_the_snapshot_from_job_records() -> None:
    from datetime import UTC, datetime

    from hyperguard.models.jobs import Job, JobStatus

    jobs = [
        Job(
            job_id="run",
            team="a",
            replicas=1,
            status=JobStatus.RUNNING,
            submitted_at=datetime(2025, 1, 1, tzinfo=UTC),
        ),
        Job(
            job_id="wait",
            team="a",
            replicas=1,
            status=JobStatus.PENDING,
            submitted_at=datetime(2025, 1, 2, tzinfo=UTC),
        ),
        Job(job_id="gone", team="a", replicas=1, status=JobStatus.SUCCEEDED),
    ]
    state = GovernanceState.from_jobs(
        jobs,
        quotas=[quota("a", 8, borrow=0)],
        scheduler=cluster([], 0).scheduler,
        capacity={P5: 2},
        catalogue=CATALOGUE,
    )
    assert set(state.workloads) == {"run", "wait"}
    assert gpus_used(state, "a") == 8
    assert "team a's nominal 8 and borrow limit 0 GPUs" in schedule(state).pending_reasons["wait"]


def test_elastic_steps_shrink_and_grow_by_the_policys_sizes() -> None:
    # increment step 2 from 2: sizes 2, 4, 6 — a job at 6 gives up 2 replicas at a time
    state = cluster(
        [quota("a", 56, borrow=0)],
        7,
        [
            running(job("el", "a", 8, replicas=6, min_replicas=2, max_replicas=6, step=2)),
            job("high", "a", 8, cls="high"),
        ],
    )
    decisions = schedule(state)
    assert admitted(decisions) == {"high": 1}
    assert decisions.of_kind(DecisionKind.SHRINK) == []  # a free node was enough

    state = cluster(
        [quota("a", 48, borrow=0)],
        6,
        [
            running(job("el", "a", 8, replicas=6, min_replicas=2, max_replicas=6, step=2)),
            job("high", "a", 8, cls="high"),
        ],
    )
    decisions = schedule(state)
    assert admitted(decisions) == {"high": 1}
    assert {d.job_id: d.replicas for d in decisions.of_kind(DecisionKind.SHRINK)} == {"el": 4}


def test_elastic_growth_takes_only_allowed_sizes() -> None:
    state = cluster(
        [quota("a", 56, borrow=0)],
        7,
        [running(job("el", "a", 8, replicas=2, discrete=[2, 4, 8]))],
    )
    grown = schedule(state).of_kind(DecisionKind.GROW)
    assert [(d.job_id, d.replicas) for d in grown] == [("el", 4)]  # 8 would not fit in 7


def test_elastic_growth_waits_out_the_scaling_timeout() -> None:
    def grown(scaled_at: float) -> list[tuple[str, int]]:
        workload = running(job("el", "a", 8, replicas=1, min_replicas=1, max_replicas=2))
        workload.scaling_timeout_s = 60.0
        workload.scaled_at = scaled_at
        state = cluster([quota("a", 16, borrow=0)], 2, [workload], now=1000.0)
        return [(d.job_id, d.replicas) for d in schedule(state).of_kind(DecisionKind.GROW)]

    assert grown(scaled_at=990.0) == []  # shrunk 10 s ago: not yet
    assert grown(scaled_at=900.0) == [("el", 2)]


def test_idle_capacity_goes_to_elastic_jobs_by_priority_then_fair_share() -> None:
    quotas = [
        quota("a", 8, borrow=1000, weight=1),
        quota("b", 8, borrow=1000, weight=1),
        quota("idle", 16, strategy="Lend"),
    ]
    jobs = [
        running(job("a-big", "a", 8, replicas=2, min_replicas=1, max_replicas=4, at=1)),
        running(job("b-small", "b", 8, replicas=1, min_replicas=1, max_replicas=4, at=2)),
    ]
    grown = {
        d.job_id: d.replicas for d in schedule(cluster(quotas, 4, jobs)).of_kind(DecisionKind.GROW)
    }
    # one idle node: the team with the smaller share (b: 8 of 32) gets it before a (16)
    assert grown == {"b-small": 2}

    jobs = [
        running(
            job("a-high", "a", 8, replicas=2, min_replicas=1, max_replicas=4, cls="high", at=1)
        ),
        running(job("b-low", "b", 8, replicas=1, min_replicas=1, max_replicas=4, at=2)),
    ]
    grown = {
        d.job_id: d.replicas for d in schedule(cluster(quotas, 4, jobs)).of_kind(DecisionKind.GROW)
    }
    assert grown == {"a-high": 3}  # priority first


def test_jobs_only_installed_capacity_holds_back_are_short_of_capacity() -> None:
    # Team a may use 32 GPUs (16 nominal + 16 borrowed); the cluster has 2 instances (16),
    # and with IdleResourceSharing the shared pool grows with the installed capacity.
    quotas = [quota("a", 16, borrow=100, strategy="LendAndBorrow")]
    jobs = [job(f"j{i}", "a", 8, replicas=1, at=float(i)) for i in range(5)]
    decisions = schedule(cluster(quotas, 2, jobs))
    assert admitted(decisions) == {"j0": 1, "j1": 1}
    # j2 and j3 fit the team's limit (32 GPUs), j4 would not: only the first two would run
    # on burst capacity.
    assert decisions.short_of_capacity == ["j2", "j3"]
    assert "exhausted" in decisions.pending_reasons["j2"]


def test_quotas_above_the_installed_capacity_leave_jobs_short_of_capacity() -> None:
    quotas = [quota("a", 32, strategy="DontLend", borrow=None)]
    jobs = [job(f"j{i}", "a", 8, at=float(i)) for i in range(5)]
    decisions = schedule(cluster(quotas, 2, jobs))
    assert decisions.short_of_capacity == ["j2", "j3"]
    assert "installed capacity of ml.p5.48xlarge exhausted" in decisions.pending_reasons["j2"]


def test_jobs_their_team_quota_holds_back_are_not_short_of_capacity() -> None:
    quotas = [quota("a", 8, strategy="DontLend", borrow=None), quota("b", 64, strategy="Lend")]
    jobs = [job("j0", "a", 8), job("j1", "a", 8, at=1.0)]
    decisions = schedule(cluster(quotas, 8, jobs))
    assert admitted(decisions) == {"j0": 1}
    assert decisions.short_of_capacity == []


def test_without_idle_sharing_a_full_lending_pool_is_not_short_of_capacity() -> None:
    # The pool is what lending teams lend; more instances would not enlarge it.
    quotas = [quota("a", 16, borrow=100, strategy="LendAndBorrow")]
    jobs = [job(f"j{i}", "a", 8, at=float(i)) for i in range(3)]
    decisions = schedule(cluster(quotas, 2, jobs, idle="Disabled"))
    assert admitted(decisions) == {"j0": 1, "j1": 1}
    assert decisions.short_of_capacity == []


def test_a_job_that_may_burst_does_not_preempt_its_own_team_but_waits_for_a_burst() -> None:
    # Team a's quota (24 GPUs) is larger than the cluster (16): capacity holds it back.
    quotas = [quota("a", 24, strategy="DontLend", borrow=None)]

    def jobs(may_burst: bool) -> list[Workload]:
        urgent = job("urgent", "a", 8, cls="high", at=2.0)
        urgent.may_burst = may_burst
        return [
            running(job("low", "a", 8, cls="low")),
            running(job("other", "a", 8, cls="low", at=1.0), since=1.0),
            urgent,
        ]

    decisions = schedule(cluster(quotas, 2, jobs(may_burst=False)))
    assert preempted(decisions) == {"other"}  # the newest lower-priority job gives way
    decisions = schedule(cluster(quotas, 2, jobs(may_burst=True)))
    assert preempted(decisions) == set()
    assert decisions.short_of_capacity == ["urgent"]


def production(workload: Workload) -> Workload:
    """A job whose template runs on HyperPod only."""
    workload.hyperpod_only = True
    return workload


def on_eks(workload: Workload) -> Workload:
    """A running job placed on EKS burst capacity."""
    workload.on_hyperpod = False
    return workload


def test_a_hyperpod_only_job_is_not_admitted_against_burst_capacity() -> None:
    """D21: HyperPod full, an EKS burst node idle: the production job waits for HyperPod
    capacity (and is short of it, so a burst may grow HyperPod); a development job of the
    same shape takes the EKS node."""
    state = cluster(
        [quota("a", 24, borrow=0)],
        3,
        [
            running(job("dev-running", "a", 8, replicas=2), since=1),
            production(job("prod", "a", 8, at=2)),
            job("dev", "a", 8, at=3),
        ],
        hyperpod=2,
    )
    decisions = schedule(state)
    assert admitted(decisions) == {"dev": 1}
    reason = decisions.pending_reasons["prod"]
    assert "HyperPod capacity of ml.p5.48xlarge exhausted: its 16 GPUs cannot take 8 more" in reason
    assert decisions.short_of_capacity == ["prod"]


def test_burst_capacity_in_use_leaves_hyperpod_room_to_a_hyperpod_only_job() -> None:
    state = cluster(
        [quota("a", 24, borrow=0)],
        3,
        [
            on_eks(running(job("dev-on-eks", "a", 8), since=1)),
            running(job("dev-on-hyperpod", "a", 8), since=1),
            production(job("prod", "a", 8, at=2)),
        ],
        hyperpod=2,
    )
    assert admitted(schedule(state)) == {"prod": 1}


def test_reclaim_for_a_hyperpod_only_job_takes_a_borrower_on_hyperpod() -> None:
    """The newest borrower would go first, but it runs on EKS, where the reclaiming job
    cannot: the one on HyperPod is preempted, and only it."""
    state = cluster(
        [quota("a", 8), quota("b", 8, borrow=200)],
        3,
        [
            running(job("b-own", "b", 8, at=1), since=1),
            running(job("b-hyperpod", "b", 8, at=2), since=2),
            on_eks(running(job("b-eks", "b", 8, at=3), since=3)),
            production(job("a-prod", "a", 8, cls="low", at=4)),
        ],
        hyperpod=2,
    )
    decisions = schedule(state)
    assert admitted(decisions) == {"a-prod": 1}
    assert preempted(decisions) == {"b-hyperpod"}


def test_without_a_hyperpod_split_every_installed_instance_counts() -> None:
    state = cluster(
        [quota("a", 24, borrow=0)],
        3,
        [running(job("dev", "a", 8, replicas=2)), production(job("prod", "a", 8))],
    )
    assert admitted(schedule(state)) == {"prod": 1}


def test_an_elastic_job_shrunk_then_preempted_for_one_admission_is_one_preemption() -> None:
    """Shrinking the elastic job to its minimum frees too little, so it is preempted whole:
    the decisions hold the preemption alone. Both a shrink to 0 and a preemption made the
    planner give the job's nodes back twice, and place 9 GPUs on an 8-GPU node (found by
    tests/unit/governance/test_pass_decide.py's node property)."""
    elastic = running(job("elastic", "a", 8, replicas=2, min_replicas=1))
    state = cluster([quota("a", 16)], 2, [elastic, job("high", "a", 8, replicas=2, cls="high")])
    decisions = schedule(state)
    assert admitted(decisions) == {"high": 2}
    assert preempted(decisions) == {"elastic"}
    assert [d.kind for d in decisions.actions if d.job_id == "elastic"] == [DecisionKind.PREEMPT]


def test_a_reclaimed_borrower_readmitted_while_hyperpod_is_full_lands_on_burst_capacity() -> None:
    """The state's model of placement (GovernanceState.apply): the borrower a HyperPod-only
    job reclaimed from HyperPod is admitted again into the burst capacity left, not back on
    HyperPod; had the model put it on HyperPod regardless (19 GPUs on a 16-GPU HyperPod in
    the property test's counterexample, seed 94), the next pass preempted it again."""
    state = cluster(
        [quota("a", 16, strategy="Lend", borrow=0), quota("b", 8, borrow=100)],
        3,
        [
            running(job("b-own", "b", 8, at=1), since=1),
            running(job("b-borrow", "b", 8, at=2), since=2),
            production(job("a-prod", "a", 8, at=3)),
            production(job("a-prod-2", "a", 1, at=4)),
        ],
        hyperpod=2,
    )
    first = schedule(state)
    assert preempted(first) == {"b-borrow"} and admitted(first) == {"a-prod": 1}
    state.apply(first)
    second = schedule(state)
    assert admitted(second) == {"b-borrow": 1}
    state.apply(second)
    assert not state.workloads["b-borrow"].on_hyperpod
    assert state.workloads["a-prod"].on_hyperpod
    assert schedule(state).actions == []


def test_an_elastic_job_whose_smallest_size_is_within_nominal_goes_before_lower_priority() -> None:
    """Its place in stage 1 comes from its smallest size: ranked by its full size (two
    replicas, beyond nominal), the high-priority elastic job was left to stage 2, behind a
    no-class job admitted in stage 1, and then preempted four small running jobs that the
    no-class job could not be taken from; the next passes preempted them again (the
    ping-pong property's counterexample, seed 186). Admitted at the size nominal takes, it
    grows only into capacity nobody waits for."""
    small = [
        running(job(f"small-{i}", "a", 1, cls=None if i < 3 else "low", at=i)) for i in range(4)
    ]
    elastic = job("elastic", "a", 8, cls="high", at=10, replicas=2, min_replicas=1)
    state = cluster(
        [quota("a", 16, strategy="Lend", borrow=0)],
        2,
        [*small, elastic, job("no-class", "a", 8, cls=None, at=11)],
    )
    decisions = schedule(state)
    assert admitted(decisions) == {"elastic": 1}
    assert preempted(decisions) == set()
    assert "within nominal" in decisions.admitted[0].reason


def test_a_teams_borrowing_jobs_go_by_priority_not_by_size() -> None:
    """Fair share orders teams by how far each is above its nominal quota; inside a team,
    priority then age. Ranked by the share each job's own request would make, four small
    no-class jobs borrowed the team's last GPUs ahead of a low-priority job, which then
    preempted them in the next pass (the ping-pong property's counterexample, seed 70)."""
    small = [job(f"small-{i}", "a", 1, cls=None, at=i) for i in range(4)]
    state = cluster(
        [quota("a", 8, borrow=50)],
        2,
        [running(job("own", "a", 8, cls="low", at=0)), *small, job("low", "a", 4, at=9)],
    )
    decisions = schedule(state)
    assert admitted(decisions) == {"low": 1}
    assert preempted(decisions) == set()
