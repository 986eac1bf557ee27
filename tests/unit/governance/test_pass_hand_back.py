"""D121, pure: an urgent job that may burst preempts lower-priority work of its team at once
(`whenCanPreempt` Preempt, the default), burst capacity is asked for it, and when that
capacity is Ready it moves there at a fresh checkpoint so that the work it preempted takes
its HyperPod node back. `TryNextFlavor` keeps D52: no preemption, a burst for the urgent job."""

from __future__ import annotations

from datetime import timedelta

from tests.unit.governance.pass_builders import (
    NOW,
    eks_node,
    hyperpod_node,
    job_with,
    pending,
    plan,
    quota,
    running,
    snapshot,
)
from tests.unit.governance.test_pass_decide import claim

from hyperguard.governance.intents import HandBack, Preemption
from hyperguard.models import Checkpoint, JobStatus
from hyperguard.models.records import JobRecord
from hyperguard.policies.burst import BurstPolicy, WhenCanPreempt


def policy(when: str | None = None) -> BurstPolicy:
    capacity: dict[str, object] = {"maxNodes": 4, "scaleInAfterS": 60}
    if when is not None:
        capacity["whenCanPreempt"] = when
    return BurstPolicy.model_validate({"capacity": capacity})


def urgent(*, prefer_burst: bool = False) -> JobRecord:
    """The urgent development job, pending; it writes checkpoints under s3://ckpt/urgent/."""
    record = pending("urgent", "a", template="development", cls="high", prefer_burst=prefer_burst)
    return job_with(record, checkpoint_location="s3://ckpt/urgent/")


def without_checkpoints(record: JobRecord) -> JobRecord:
    return job_with(record, checkpoint_location=None)


def urgent_running(checkpoint_s_ago: float | None) -> JobRecord:
    """The urgent development job, running on the HyperPod node it preempted `day` from."""
    record = running(urgent(), ["i-hp01"])
    if checkpoint_s_ago is None:
        return record
    done = Checkpoint(
        step=40, uri="s3://ckpt/urgent/40", completed_at=NOW - timedelta(seconds=checkpoint_s_ago)
    )
    return job_with(record, last_checkpoint=done)


def preempted_day() -> JobRecord:
    day = pending("day", "a", reason="preempted for higher-priority job urgent")
    return job_with(day, status=JobStatus.PREEMPTED)


TRAINING = running(pending("training", "a", cls="mid"), ["i-hp00"])
"""A job of the team's that neither gives way (it outranks `day`) nor moves (production)."""


def test_the_default_policy_preempts_at_once_and_says_how_the_victim_gets_its_node_back() -> None:
    assert BurstPolicy().capacity.when_can_preempt is WhenCanPreempt.PREEMPT
    day = running(pending("day", "a"), ["i-hp01"])
    nodes = [hyperpod_node(0), hyperpod_node(1)]
    snap = snapshot(
        [TRAINING, day, urgent()], nodes, [quota("a", 16)], bursting=True, claims=(), burst=policy()
    )
    _, admission, _, capacity = plan(snap)
    (admitted,) = admission.admissions
    assert (admitted.job.job_id, admitted.job.nodes) == ("urgent", ["i-hp01"])
    (victim,) = admitted.victims
    assert isinstance(victim, Preemption) and victim.job_id == "day"
    assert victim.reason.endswith(
        "; burst capacity is asked for so that job urgent moves there at its next checkpoint "
        "and this job resumes on HyperPod"
    )
    assert capacity.bursts == ()  # the victim still runs in this snapshot: next pass

    # TryNextFlavor (D52): the urgent job preempts nothing and waits for a burst of its own.
    snap = snapshot(
        [TRAINING, day, urgent()],
        nodes,
        [quota("a", 16)],
        bursting=True,
        claims=(),
        burst=policy("TryNextFlavor"),
    )
    _, admission, _, capacity = plan(snap)
    assert admission.admissions == ()
    (start,) = capacity.bursts
    assert [j.job_id for j in start.request.jobs] == ["urgent"]


def test_the_preempted_work_gets_a_burst_for_the_urgent_job_to_move_to() -> None:
    nodes = [hyperpod_node(0), hyperpod_node(1)]
    jobs = [TRAINING, urgent_running(None), preempted_day()]
    snap = snapshot(jobs, nodes, [quota("a", 16)], bursting=True, claims=(), burst=policy())
    _, admission, _, capacity = plan(snap)
    assert admission.admissions == () and capacity.hand_backs == ()
    (start,) = capacity.bursts
    request = start.request
    assert (request.template, request.instance_type) == ("development", "p5.48xlarge")
    assert [(j.job_id, j.nodes) for j in request.jobs] == [("day", 1)]
    (write,) = capacity.reasons
    assert write.job_id == "day" and write.reason.endswith(
        f"; burst capacity asked for ({request.burst_id}) for job(s) urgent to move to, "
        "giving HyperPod back"
    )
    # A mover of a lower priority than the waiting job, or of another team, moves nothing.
    other = urgent_running(None)
    other = job_with(other, team="b")
    snap = snapshot(
        [TRAINING, other, preempted_day()],
        nodes,
        [quota("a", 16), quota("b", 16)],
        bursting=True,
        claims=(),
        burst=policy(),
    )
    assert plan(snap)[3].bursts == ()


def test_an_urgent_job_that_writes_no_checkpoints_is_promised_as_no_mover() -> None:
    """It would never reach "its next checkpoint": its victim is told nothing of a move, no
    burst is raised for it, and a Ready burst node is not held for it."""
    day = running(pending("day", "a"), ["i-hp01"])
    nodes = [hyperpod_node(0), hyperpod_node(1)]
    snap = snapshot(
        [TRAINING, day, without_checkpoints(urgent())],
        nodes,
        [quota("a", 16)],
        bursting=True,
        claims=(),
        burst=policy(),
    )
    (admitted,) = plan(snap)[1].admissions
    (victim,) = admitted.victims
    assert isinstance(victim, Preemption) and victim.job_id == "day"
    assert "burst capacity" not in victim.reason

    mover = without_checkpoints(urgent_running(30))
    snap = snapshot(
        [TRAINING, mover, preempted_day()],
        nodes,
        [quota("a", 16)],
        bursting=True,
        claims=(),
        burst=policy(),
    )
    capacity = plan(snap)[3]
    assert capacity.bursts == () and capacity.hand_backs == ()
    (write,) = capacity.reasons  # it waits for HyperPod like any preempted job
    assert write.job_id == "day" and write.reason.endswith("no job may be preempted for it")
    idle = (claim("hg-a", "i-eks00", idle_since=NOW - timedelta(hours=1)),)
    snap = snapshot(
        [TRAINING, mover, preempted_day()],
        [*nodes, eks_node(0)],
        [quota("a", 16)],
        bursting=True,
        claims=idle,
        burst=policy(),
    )
    capacity = plan(snap)[3]
    assert capacity.hand_backs == () and [c.name for c in capacity.releases] == ["hg-a"]


def test_when_the_burst_is_ready_the_urgent_job_moves_there_at_a_fresh_checkpoint() -> None:
    nodes = [hyperpod_node(0), hyperpod_node(1), eks_node(0)]
    idle = (claim("hg-a", "i-eks00", idle_since=NOW - timedelta(hours=1)),)

    def capacity_with(checkpoint_s_ago: float | None):  # type: ignore[no-untyped-def]
        jobs = [TRAINING, urgent_running(checkpoint_s_ago), preempted_day()]
        snap = snapshot(jobs, nodes, [quota("a", 16)], bursting=True, claims=idle, burst=policy())
        return plan(snap)[3]

    # No fresh checkpoint yet: nothing moves, no second burst, the Ready node is kept.
    capacity = capacity_with(None)
    assert capacity.hand_backs == () and capacity.bursts == () and capacity.releases == ()
    (write,) = capacity.reasons
    assert write.reason.endswith(
        "; job(s) urgent move to burst capacity at their next checkpoint, giving HyperPod back"
    )
    # A checkpoint 30 s ago: the urgent job moves, and the idle node is not released under it.
    capacity = capacity_with(30)
    assert capacity.hand_backs == (
        HandBack(
            "urgent",
            "moving to burst capacity (gpu-burst-on-demand has room) from checkpoint step 40, "
            "giving HyperPod back to job day of team a it preempted",
            ("i-hp01",),
        ),
    )
    assert capacity.bursts == () and capacity.releases == ()
    # Under TryNextFlavor nothing is handed back: the node idles out as before.
    jobs = [TRAINING, urgent_running(30), preempted_day()]
    snap = snapshot(
        jobs, nodes, [quota("a", 16)], bursting=True, claims=idle, burst=policy("TryNextFlavor")
    )
    capacity = plan(snap)[3]
    assert capacity.hand_backs == () and [c.name for c in capacity.releases] == ["hg-a"]


def test_after_the_move_the_preempted_work_takes_hyperpod_and_the_urgent_job_the_burst() -> None:
    nodes = [hyperpod_node(0), hyperpod_node(1), eks_node(0)]
    moved = urgent(prefer_burst=True)
    moved = job_with(moved, status=JobStatus.PREEMPTED)
    jobs = [TRAINING, moved, preempted_day()]
    snap = snapshot(jobs, nodes, [quota("a", 16)], bursting=True, claims=(), burst=policy())
    _, admission, _, capacity = plan(snap)
    assert {a.job.job_id: a.job.pool for a in admission.admissions} == {
        "day": "workers",
        "urgent": "gpu-burst-on-demand",
    }
    assert all(a.victims == () for a in admission.admissions)
    assert capacity.bursts == () and capacity.hand_backs == ()


def test_another_teams_job_reclaimed_for_lent_quota_is_promised_nothing_back() -> None:
    """Team b borrows a's lent node; a's urgent job reclaims it. No hand-back serves b (it
    moves nothing across teams), so its reason promises none."""
    borrower = running(pending("borrower", "b"), ["i-hp01"])
    nodes = [hyperpod_node(0), hyperpod_node(1)]
    snap = snapshot(
        [running(pending("b-own", "b"), ["i-hp00"]), borrower, urgent()],
        nodes,
        [quota("a", 8), quota("b", 8)],
        bursting=True,
        claims=(),
        burst=policy(),
    )
    _, admission, _, _ = plan(snap)
    (admitted,) = admission.admissions
    (victim,) = admitted.victims
    assert isinstance(victim, Preemption) and victim.job_id == "borrower"
    assert victim.reason.startswith("preempted to reclaim lent quota")
    assert "burst capacity" not in victim.reason


def test_a_claim_ready_after_the_nodes_were_read_is_capacity_launching_not_a_second_burst() -> None:
    """A pass reads the nodes, then the claims, then the bursts in flight: a NodeClaim that
    turns Ready in between (its node registered after the nodes were read) and the burst
    that raised it, ended by then, are no reason to raise another."""
    nodes = [hyperpod_node(0), hyperpod_node(1)]  # i-eks00 registered after this read
    ready = (claim("hg-a", "i-eks00", idle_since=None),)
    jobs = [TRAINING, urgent_running(30), preempted_day()]
    snap = snapshot(jobs, nodes, [quota("a", 16)], bursting=True, claims=ready, burst=policy())
    capacity = plan(snap)[3]
    assert capacity.bursts == () and capacity.hand_backs == () and capacity.releases == ()
    (write,) = capacity.reasons
    assert write.job_id == "day" and write.reason.endswith("; burst capacity launching")
    # A development job waiting for its own burst, the same.
    waiting = pending("dev", "a", template="development")
    snap = snapshot(
        [running(pending("full", "a"), ["i-hp00", "i-hp01"]), waiting],
        nodes,
        [quota("a", 24)],
        bursting=True,
        claims=ready,
        burst=policy(),
    )
    capacity = plan(snap)[3]
    assert capacity.bursts == ()
    assert [(w.job_id, w.reason.rsplit("; ", 1)[-1]) for w in capacity.reasons] == [
        ("dev", "burst capacity launching")
    ]
