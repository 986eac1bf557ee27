"""The scheduling pass's decisions (governance.decide), pure: snapshots in memory, intents
out, in milliseconds. Then its invariants over random snapshots (hypothesis)."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st
from tests.unit.governance.pass_builders import (
    CATALOGUE,
    CLASSES,
    NOW,
    P5,
    SUBMITTED,
    eks_node,
    hyperpod_node,
    job_with,
    live_run,
    pending,
    plan,
    quota,
    running,
    snapshot,
)

from hyperguard.governance.intents import (
    Admission,
    AdmissionPlan,
    CapacityPlan,
    NoteOperatorRestarts,
    Preemption,
    Relocate,
    Shrink,
    StopCancelled,
    StopRuns,
    Verdict,
)
from hyperguard.governance.occupancy import usable
from hyperguard.governance.snapshot import InstanceGroups, PassSnapshot
from hyperguard.governance.state import TeamPolicy
from hyperguard.models import JobStatus, Node
from hyperguard.models.cluster import BurstClaim, InstanceGroupSize, RunKind, RunPhase
from hyperguard.models.jobs import HOLDING_STATUSES, WAITING_STATUSES, OperatorRestarts
from hyperguard.models.records import JobRecord
from hyperguard.policies.burst import BurstPolicy
from hyperguard.policies.repair import NodeRepairConfig

# -- reconciliation ---------------------------------------------------------------------------


def test_a_succeeded_run_ends_its_job_and_a_failed_one_waits_out_the_grace() -> None:
    nodes = [hyperpod_node(0), hyperpod_node(1)]
    done = running(pending("done", "a"), ["i-hp00"])
    broken = running(pending("broken", "a"), ["i-hp01"])
    runs = [
        live_run(done, RunPhase.SUCCEEDED, reason="Completed"),
        live_run(broken, RunPhase.FAILED, reason="BackoffLimitExceeded", since=NOW),
    ]
    reconciled, *_ = plan(snapshot([done, broken], nodes, [quota("a", 16)], runs=runs))
    assert [(v.verdict, v.job_id) for v in reconciled.verdicts] == [(Verdict.SUCCEEDED, "done")]
    assert reconciled.verdicts[0].reason == "completed: HyperPodPyTorchJob done-run-0 Completed"
    assert not reconciled.verdicts[0].stops_runs

    runs[1] = runs[1].model_copy(update={"since": NOW - timedelta(seconds=181)})
    reconciled, *_ = plan(snapshot([done, broken], nodes, [quota("a", 16)], runs=runs))
    failed = reconciled.verdicts[0]
    assert (failed.verdict, failed.job_id) == (Verdict.FAILED, "broken")
    assert failed.reason == "failed: BackoffLimitExceeded" and failed.stops_runs


def test_a_lost_run_is_requeued_unless_its_node_is_unhealthy_or_recovery_has_it() -> None:
    lost = running(pending("lost", "a"), ["i-hp00"])
    protected = running(pending("protected", "a"), ["i-hp01"]).model_copy(
        update={"protected_by": "incident-1"}
    )
    on_sick = running(pending("on-sick", "a"), ["i-hp02"])
    # Its node was replaced and the recovery that did it let the job go: nobody else will.
    on_gone = running(pending("on-gone", "a"), ["i-hp09"])
    nodes = [hyperpod_node(0), hyperpod_node(1), hyperpod_node(2, healthy=False)]
    jobs = [lost, protected, on_sick, on_gone]
    reconciled, *_ = plan(snapshot(jobs, nodes, [quota("a", 32)], runs=[]))
    assert [(v.verdict, v.job_id) for v in reconciled.verdicts] == [
        (Verdict.LOST, "lost"),
        (Verdict.LOST, "on-gone"),
    ]
    assert reconciled.verdicts[0].reason == (
        "requeued to resume from its checkpoint: run 0 is no longer on the cluster"
    )


def test_a_run_that_failed_with_a_node_gone_from_under_it_is_requeued_not_failed() -> None:
    """HyperPod's automatic recovery can replace a node before any incident holds its job:
    the run fails with it, for want of a node, not for its code (D167)."""
    long_ago = NOW - timedelta(seconds=181)
    orphaned = running(pending("orphaned", "a"), ["i-hp00", "i-hp09"])  # i-hp09 was replaced
    broken = running(pending("broken", "a"), ["i-hp01"])
    nodes = [hyperpod_node(0), hyperpod_node(1)]
    runs = [
        live_run(orphaned, RunPhase.FAILED, reason="PodFailed", since=long_ago),
        live_run(broken, RunPhase.FAILED, reason="BackoffLimitExceeded", since=long_ago),
    ]
    reconciled, *_ = plan(snapshot([orphaned, broken], nodes, [quota("a", 32)], runs=runs))
    verdicts = {v.job_id: v for v in reconciled.verdicts}
    assert {j: v.verdict for j, v in verdicts.items()} == {
        "orphaned": Verdict.LOST,
        "broken": Verdict.FAILED,
    }
    assert verdicts["orphaned"].reason == (
        "requeued to resume from its checkpoint: HyperPodPyTorchJob orphaned-run-0 failed "
        "after i-hp09 left the cluster (PodFailed)"
    )


def test_an_auto_resume_job_is_recorded_where_hyperpod_restarted_its_pods() -> None:
    """HyperPod's auto-resume restarts a run on whichever free node of its group kube-scheduler
    binds its pods to: the pass records the job there (D136), and the admissions that follow
    see the node it left free."""
    moved = running(pending("moved", "a", replicas=2), ["i-hp00", "i-hp09"])
    moved = job_with(moved, auto_resume=True)
    same = running(pending("same", "a"), ["i-hp02"])
    protected = running(pending("protected", "a"), ["i-hp03"]).model_copy(
        update={"protected_by": "incident-1"}
    )
    nodes = [hyperpod_node(i) for i in range(5)]  # i-hp09 was replaced: it is gone
    snap = snapshot(
        [moved, same, protected],
        nodes,
        [quota("a", 40)],
        placed={"moved": ("i-hp00", "i-hp04"), "same": ("i-hp02",), "protected": ("i-hp01",)},
    )
    reconciled, *_ = plan(snap)
    assert reconciled.relocations == (Relocate(moved, ("i-hp00", "i-hp04")),)
    # Pods still coming up (fewer found than the job has nodes) are left for a later pass.
    snap = snapshot([moved], nodes, [quota("a", 40)], placed={"moved": ("i-hp00",)})
    assert plan(snap)[0].relocations == ()


def test_the_operators_restarts_are_noted_once_per_new_count_and_run() -> None:
    """A HyperPodPyTorchJob's restartCount going up is noted for the job's history (D155);
    the same count again is not, and a new run's restarts count afresh."""
    restarted = running(pending("restarted", "a"), ["i-hp00"])
    quiet = running(pending("quiet", "a"), ["i-hp01"])
    nodes = [hyperpod_node(i) for i in range(2)]
    runs = [live_run(restarted, restarts=2), live_run(quiet)]
    snap = snapshot([restarted, quiet], nodes, [quota("a", 40)], runs=runs)
    assert plan(snap)[0].restarts == (NoteOperatorRestarts(restarted, 0, 2, RunKind.HYPERPOD),)
    recorded = restarted.model_copy(update={"operator_restarts": OperatorRestarts(run=0, count=2)})
    snap = snapshot([recorded], nodes[:1], [quota("a", 40)], runs=[live_run(recorded, restarts=2)])
    assert plan(snap)[0].restarts == ()
    # A new run (run 1) restarted once: noted, though the old run's count was higher.
    rerun = job_with(recorded, run=1)
    snap = snapshot([rerun], nodes[:1], [quota("a", 40)], runs=[live_run(rerun, restarts=1)])
    assert plan(snap)[0].restarts == (NoteOperatorRestarts(rerun, 1, 1, RunKind.HYPERPOD),)
    # A team's own Job is one object over its runs (D179): its failed pods counted in run 0
    # are no news in run 1; one more is, noted as its kind.
    for failed, noted in ((2, ()), (3, (NoteOperatorRestarts(rerun, 1, 3, RunKind.BATCH),))):
        batch = live_run(rerun, restarts=failed).model_copy(update={"kind": RunKind.BATCH})
        snap = snapshot([rerun], nodes[:1], [quota("a", 40)], runs=[batch])
        assert plan(snap)[0].restarts == noted


def admitted(record: JobRecord, nodes: list[str]) -> JobRecord:
    """`record` as a killed pass left it: Admitted onto `nodes`, never marked Running."""
    placed = running(record, nodes)
    return placed.model_copy(
        update={"job": placed.job.model_copy(update={"status": JobStatus.ADMITTED})}
    )


def test_jobs_a_killed_pass_left_admitted_are_picked_up_by_whether_their_run_is_there() -> None:
    dispatched = admitted(pending("dispatched", "a"), ["i-hp00"])
    lost = admitted(pending("lost", "a"), ["i-hp01"])
    guarded = admitted(pending("guarded", "a"), ["i-hp02"]).model_copy(
        update={"protected_by": "incident-1"}
    )
    snap = snapshot(
        [dispatched, lost, guarded, running(pending("on", "a"), ["i-hp03"])],
        [hyperpod_node(i) for i in range(4)],
        [quota("a", 32)],
        runs=[live_run(dispatched, RunPhase.PENDING), live_run(guarded)],
    )
    reconciled, *_ = plan(snap)
    assert [(left.record.job.job_id, left.dispatched) for left in reconciled.leftovers] == [
        ("dispatched", True),
        ("lost", False),
    ]
    assert reconciled.orphans == ()  # an Admitted job's run is its own, not an orphan


def test_cancelled_jobs_pods_and_orphaned_runs_are_stopped() -> None:
    cancelled = running(pending("cancelled", "a"), ["i-hp00"]).model_copy(
        update={"stop_pending": True}
    )
    cancelled = cancelled.model_copy(
        update={"job": cancelled.job.model_copy(update={"status": JobStatus.CANCELLED})}
    )
    waiting = pending("waiting", "a")
    restarted = running(pending("restarted", "a"), ["i-hp01"])
    restarted = job_with(restarted, run=1)
    runs = [
        live_run(cancelled),
        live_run(job_with(waiting, run=0)),
        live_run(job_with(restarted, run=0)),
        live_run(restarted),
    ]
    snap = snapshot(
        [cancelled, waiting, restarted],
        [hyperpod_node(0), hyperpod_node(1)],
        [quota("a", 16)],
        runs=runs,
    )
    reconciled, *_ = plan(snap)
    assert reconciled.cancelled == (StopCancelled("cancelled", ("i-hp00",)),)
    assert reconciled.orphans == (StopRuns("restarted", 1), StopRuns("waiting", None))


def test_a_job_on_a_group_about_to_be_patched_pauses_at_a_checkpoint_and_the_group_is_fenced() -> (
    None
):
    job = running(pending("job", "a"), ["i-hp00"]).model_copy(
        update={"progress_at": NOW - timedelta(minutes=5)}
    )
    job = job.model_copy(
        update={"job": job.job.model_copy(update={"checkpoint_location": "s3://ckpt/job/"})}
    )
    groups = InstanceGroups(
        True,
        (
            InstanceGroupSize(
                name="workers",
                instance_type=P5,
                target_count=2,
                current_count=2,
                next_patch_at=NOW + timedelta(minutes=30),
            ),
        ),
    )
    nodes = [hyperpod_node(0), hyperpod_node(1)]
    snap = snapshot([job, pending("new", "a")], nodes, [quota("a", 16)], groups=groups)
    reconciled, admission, _, capacity = plan(snap)
    assert reconciled.fenced_nodes == {"i-hp00", "i-hp01"}
    assert [(p.verdict, p.job_id) for p in reconciled.pauses] == [(Verdict.PAUSED, "job")]
    assert admission.admissions == ()  # the idle fenced node is no capacity
    (write,) = capacity.reasons
    assert write.job_id == "new" and "HyperPod patches instance group workers at" in write.reason


# -- admission --------------------------------------------------------------------------------


def test_a_pending_job_is_placed_best_fit_and_fenced_on_its_teams_quota_version() -> None:
    half = running(pending("half", "a", 4), ["i-hp01"])
    snap = snapshot(
        [half, pending("new", "a", 4)],
        [hyperpod_node(0), hyperpod_node(1)],
        [quota("a", 16).model_copy(update={"version": 7})],
    )
    _, admission, _, capacity = plan(snap)
    (admitted,) = admission.admissions
    assert admitted.job.nodes == ["i-hp01"]  # the fuller node first
    assert admitted.job.status is JobStatus.ADMITTED and admitted.job.pool == "workers"
    assert admitted.quota_version == 7 and admitted.pool_kind == "hyperpod"
    assert admitted.reason.endswith("placed: production → hyperpod: workers at $49.16/h")
    assert capacity.reasons == () and capacity.pending == 0


def test_a_preemption_comes_with_the_admission_it_serves_and_young_jobs_are_spared() -> None:
    low = running(pending("low", "a", cls="low"), ["i-hp00"], started_s_ago=30)
    high = pending("high", "a", cls="high")
    nodes = [hyperpod_node(0)]
    snap = snapshot([low, high], nodes, [quota("a", 8, borrow=0)], min_runtime=60)
    _, admission, _, capacity = plan(snap)
    assert admission.admissions == ()
    (write,) = capacity.reasons
    assert "candidate jobs have run less than the minimum run time 60s" in write.reason

    low = running(pending("low", "a", cls="low"), ["i-hp00"], started_s_ago=61)
    _, admission, _, _ = plan(
        snapshot([low, high], nodes, [quota("a", 8, borrow=0)], min_runtime=60)
    )
    (admitted,) = admission.admissions
    assert admitted.job.job_id == "high" and admitted.job.nodes == ["i-hp00"]
    (victim,) = admitted.victims
    assert isinstance(victim, Preemption) and victim.job_id == "low"
    assert victim.nodes == ("i-hp00",) and victim.for_job == "high"
    # its run objects as the snapshot read them, for the stop to delete without a list (D177)
    assert victim.runs == (live_run(low),)


def test_hot_spares_are_held_back_but_never_a_lemon() -> None:
    nodes = [hyperpod_node(0), hyperpod_node(1)]
    repair = NodeRepairConfig.model_validate({"hotSpares": {"workers": 1}})
    jobs = [pending("a1", "a"), pending("a2", "a", at=1)]
    _, admission, *_ = plan(snapshot(jobs, nodes, [quota("a", 16)], repair=repair))
    assert admission.spares == 1
    assert [a.job.nodes for a in admission.admissions] == [["i-hp01"]]
    lemon = snapshot(jobs, nodes, [quota("a", 16)], repair=repair, lemons=frozenset({"i-hp00"}))
    _, admission, *_ = plan(lemon)
    assert [a.job.nodes for a in admission.admissions] == [["i-hp00"]]


def test_a_job_no_pool_can_place_waits_with_placements_reason() -> None:
    nodes = [hyperpod_node(0), eks_node(0, "Spot")]
    jobs = [pending("prod", "a"), pending("research", "a", template="research", at=1)]
    research_only = snapshot(jobs[1:], [hyperpod_node(0)], [quota("a", 16)])
    _, admission, _, capacity = plan(research_only)
    assert admission.unplaced == ("research",)
    assert capacity.reasons[0].reason == (
        "admissible but not placeable: waiting: no eks-spot pool of p5.48xlarge has 8 free "
        "accelerators"
    )
    _, admission, _, _ = plan(snapshot(jobs, nodes, [quota("a", 16)]))
    assert {a.job.job_id: a.job.pool for a in admission.admissions} == {
        "prod": "workers",
        "research": "gpu-burst-spot",
    }


def test_a_job_only_hyperpod_holds_is_placed_before_one_that_could_burst() -> None:
    """Seen on the twin's day, 2 runs of 5: a development job, first in the engine's order,
    took the last HyperPod node and the production job after it waited, with an EKS node
    free that the development job could have used (issue 19)."""
    nodes = [hyperpod_node(0), eks_node(0)]
    jobs = [pending("dev", "a", template="development", cls="high"), pending("prod", "a", at=1)]
    _, admission, _, capacity = plan(snapshot(jobs, nodes, [quota("a", 16)], bursting=True))
    assert {a.job.job_id: a.job.pool for a in admission.admissions} == {
        "prod": "workers",
        "dev": "gpu-burst-on-demand",
    }
    assert admission.unplaced == () and capacity.reasons == ()
    # Without bursting every job is HyperPod's, and the engine's order stands.
    _, admission, *_ = plan(snapshot(jobs, nodes, [quota("a", 16)]))
    assert [a.job.job_id for a in admission.admissions] == ["dev"]


def test_a_job_no_pool_places_gives_its_victims_back_and_nobody_takes_their_quota() -> None:
    """The engine preempted `low` for `research` and let `other` into the quota that freed;
    no spot pool can hold `research`, so `low` keeps running, and `other` must not be
    admitted on the strength of that preemption (the team would be at 12 of 8 GPUs). The
    engine decides again without `research`: `other` preempts `low` itself."""
    nodes = [hyperpod_node(0), hyperpod_node(1)]
    low = running(pending("low", "a", 8, cls="low"), ["i-hp00"])
    research = pending("research", "a", 4, template="research", cls="high", at=1)
    other = pending("other", "a", 4, cls="mid", at=2)
    snap = snapshot([low, research, other], nodes, [quota("a", 8, strategy="DontLend")])
    _, admission, _, capacity = plan(snap)
    (admitted,) = admission.admissions
    assert admitted.job.job_id == "other"
    assert [(type(v), v.job_id) for v in admitted.victims if isinstance(v, Preemption)] == [
        (Preemption, "low")
    ]
    assert admission.unplaced == ("research",)
    reasons = {w.job_id: w.reason for w in capacity.reasons}
    assert reasons["research"].startswith("admissible but not placeable: waiting: no eks-spot")


# -- capacity and reasons -----------------------------------------------------------------------


def claim(name: str, instance_id: str, **extra: object) -> BurstClaim:
    return BurstClaim.model_validate(
        {
            "name": name,
            "burst_id": "burst-0123456789abcdef",
            "attempt": 0,
            "node_pool": "gpu-burst",
            "instance_type": "p5.48xlarge",
            "capacity_type": "on-demand",
            "launched": True,
            "ready": True,
            "instance_id": instance_id,
        }
        | extra
    )


def test_scale_in_releases_an_idle_node_past_the_cooldown_and_unmarks_a_busy_one() -> None:
    nodes = [hyperpod_node(0), eks_node(0), eks_node(1), eks_node(2)]
    busy = running(
        pending("dev", "a", template="development"),
        ["i-eks00"],
        pool="gpu-burst-on-demand",
        pool_kind="eks-on-demand",
    )
    claims = (
        claim("hg-a", "i-eks00", idle_since=NOW - timedelta(hours=1)),
        claim("hg-b", "i-eks01", idle_since=NOW - timedelta(hours=1)),
        claim("hg-c", "i-eks02"),
    )
    snap = snapshot([busy], nodes, [quota("a", 16)], bursting=True, claims=claims)
    _, _, _, capacity = plan(snap)
    assert [c.name for c in capacity.releases] == ["hg-b"]
    assert [(m.claim.name, m.since) for m in capacity.marks] == [("hg-a", None), ("hg-c", NOW)]


def test_jobs_capacity_holds_back_get_one_burst_per_template_and_instance_type() -> None:
    nodes = [hyperpod_node(0)]
    holding = running(pending("prod", "a"), ["i-hp00"])
    dev = [pending(f"dev{i}", "a", template="development", at=i) for i in range(2)]
    burst = BurstPolicy.model_validate({"capacity": {"maxNodes": 4}})
    snap = snapshot([holding, *dev], nodes, [quota("a", 32)], bursting=True, claims=(), burst=burst)
    _, _, _, capacity = plan(snap)
    (start,) = capacity.bursts
    request = start.request
    assert (request.template, request.instance_type) == ("development", "p5.48xlarge")
    assert [(j.job_id, j.nodes) for j in request.jobs] == [("dev0", 1), ("dev1", 1)]
    reasons = {w.job_id: w.reason for w in capacity.reasons}
    assert all(
        r.endswith(f"; burst capacity asked for ({request.burst_id})") for r in reasons.values()
    )
    # If the start fails, the jobs keep the reason without the note.
    assert {w.job_id: w.reason for w in start.unstarted} == {
        job_id: reason.removesuffix(f"; burst capacity asked for ({request.burst_id})")
        for job_id, reason in reasons.items()
    }
    # A burst already serving the jobs: no second one, and the reason says which.
    _, _, _, capacity = plan(snap, in_flight={"dev0": "burst-00000000000000aa"})
    assert [j.job_id for b in capacity.bursts for j in b.request.jobs] == ["dev1"]
    reasons = {w.job_id: w.reason for w in capacity.reasons}
    assert reasons["dev0"].endswith("; burst capacity being raised (burst-00000000000000aa)")


def test_a_restart_waits_for_its_stopped_runs_pods_and_a_job_behind_it_is_admitted() -> None:
    """D210: a job that ran before waits while the pods of its stopped run are on Ready
    nodes (they may still save a checkpoint); the pass admits what else fits meanwhile,
    and the restart once they are gone."""
    preempted = job_with(
        pending("preempted", "a", cls="high", at=0).model_copy(update={"first_admitted_at": NOW}),
        status=JobStatus.PREEMPTED,
        run=2,
        checkpoint_location="s3://bucket/preempted/",
    )
    behind = pending("behind", "a", at=1)
    nodes, quotas = [hyperpod_node(0)], [quota("a", 16, borrow=0)]
    _, admission, _, capacity = plan(
        snapshot([preempted, behind], nodes, quotas, winding_down=frozenset({"preempted"}))
    )
    assert [a.job.job_id for a in admission.admissions] == ["behind"]
    (write,) = capacity.reasons
    assert write.job_id == "preempted"
    assert write.reason.startswith("waits for the pods of its run 2 to stop")
    _, admission, _, _ = plan(snapshot([preempted, behind], nodes, quotas))
    (restart,) = admission.admissions
    assert restart.job.job_id == "preempted" and restart.restart and restart.job.run == 3


def test_a_reason_is_written_only_when_it_changes() -> None:
    nodes = [hyperpod_node(0)]
    holding = running(pending("prod", "a"), ["i-hp00"])
    waiting = pending("waiting", "a", at=1)
    snap = snapshot([holding, waiting], nodes, [quota("a", 16, borrow=0)])
    _, _, _, capacity = plan(snap)
    (write,) = capacity.reasons
    assert (write.job_id, write.replacing) == ("waiting", SUBMITTED)
    assert capacity.pending == 1 and capacity.pending_by_team == {"a": 1}
    seen = waiting.model_copy(update={"reason": write.reason})
    _, _, _, again = plan(snapshot([holding, seen], nodes, [quota("a", 16, borrow=0)]))
    assert again.reasons == () and again.pending == 1


# -- invariants over random snapshots -----------------------------------------------------------

TEMPLATES = ("production", "development", "research")


@st.composite
def snapshots(draw: st.DrawFn) -> PassSnapshot:
    """A consistent snapshot: nodes of HyperPod and EKS (some unusable), teams with quotas,
    jobs running on nodes with room for them, jobs waiting."""
    nodes: list[Node] = [
        hyperpod_node(i, healthy=draw(st.booleans()) or i > 0)
        for i in range(draw(st.integers(0, 4)))
    ]
    nodes += [
        eks_node(i, draw(st.sampled_from(["OnDemand", "Spot"])))
        for i in range(draw(st.integers(0, 3)))
    ]
    teams = [f"t{i}" for i in range(draw(st.integers(1, 3)))]
    quotas = [
        quota(
            team,
            draw(st.sampled_from([0, 8, 16, 24])),
            strategy=draw(st.sampled_from(["Lend", "DontLend", "LendAndBorrow"])),
            borrow=draw(st.sampled_from([0, 50, 100])),
        )
        for team in teams
    ]
    free = {n.instance_id: n.accelerators for n in nodes if usable(n)}
    room_left = {
        q.compute_quota_target.team_name: TeamPolicy.from_quota(q, CATALOGUE).limit[P5].accelerators
        for q in quotas
    }
    jobs: list[JobRecord] = []
    for index in range(draw(st.integers(0, 10))):
        record = pending(
            f"j{index:02d}",
            draw(st.sampled_from(teams)),
            draw(st.sampled_from([1, 2, 4, 8])),
            replicas=draw(st.integers(1, 2)),
            template=draw(st.sampled_from(TEMPLATES)),
            cls=draw(st.sampled_from([None, *CLASSES])),
            at=float(index),
            elastic=draw(st.booleans()),
        )
        per = record.job.accelerators_per_replica
        room = [i for i, f in sorted(free.items()) for _ in range(f // per)]
        gpus = per * record.job.replicas
        fits = len(room) >= record.job.replicas and gpus <= room_left[record.job.team]
        if draw(st.booleans()) and fits:
            room_left[record.job.team] -= gpus
            placed = room[: record.job.replicas]
            for node in placed:
                free[node] -= per
            eks = placed[0].startswith("i-eks")
            record = running(
                record,
                placed,
                pool="gpu-burst-on-demand" if eks else "workers",
                pool_kind="eks-on-demand" if eks else "hyperpod",
                started_s_ago=draw(st.sampled_from([10.0, 100.0, 1000.0])),
            )
        jobs.append(record)
    return snapshot(
        jobs,
        nodes,
        quotas,
        min_runtime=draw(st.sampled_from([0, 60, 600])),
        repair=NodeRepairConfig.model_validate({"hotSpares": {"workers": draw(st.integers(0, 1))}}),
    )


def _holdings(snap: PassSnapshot) -> dict[str, tuple[list[str], int]]:
    return {
        r.job.job_id: (list(r.job.nodes), r.job.accelerators_per_replica)
        for r in snap.jobs
        if r.job.status in HOLDING_STATUSES
    }


def _after(snap: PassSnapshot, admission: AdmissionPlan) -> dict[str, tuple[list[str], int]]:
    """Each job's nodes once the plan is applied, in its order."""
    held = _holdings(snap)
    for admitted in admission.admissions:
        for victim in admitted.victims:
            if isinstance(victim, Preemption):
                held.pop(victim.job_id)
            else:
                held[victim.job.job_id] = (list(victim.job.nodes), held[victim.job.job_id][1])
        held[admitted.job.job_id] = (
            list(admitted.job.nodes),
            admitted.job.accelerators_per_replica,
        )
    for growth in admission.growths:
        held[growth.job.job_id] = (list(growth.job.nodes), growth.job.accelerators_per_replica)
    return held


@settings(max_examples=150, deadline=None)
@given(snapshots())
def test_no_node_takes_more_than_it_has_and_admissions_land_on_usable_free_nodes(
    snap: PassSnapshot,
) -> None:
    _, admission, *_ = plan(snap)
    usable_ids = {n.instance_id for n in snap.nodes if usable(n)}
    capacity = {n.instance_id: n.accelerators for n in snap.nodes}
    before = Counter[str]()
    for nodes, per in _holdings(snap).values():
        before.update({n: per for n in nodes})
    for admitted in admission.admissions:
        assert set(admitted.job.nodes) <= usable_ids, admitted
        assert len(admitted.job.nodes) == admitted.replicas
    for admitted in admission.admissions:  # one decision a victim of an admission
        victims = [
            v.job_id if isinstance(v, Preemption) else v.job.job_id for v in admitted.victims
        ]
        assert len(victims) == len(set(victims)), admitted
    after = Counter[str]()
    for nodes, per in _after(snap, admission).values():
        for node in nodes:
            after[node] += per
    for node, used in after.items():
        # A node only ever gets fuller where the plan put something: never past its size.
        if used > before[node]:
            assert used <= capacity[node], (node, used)


@settings(max_examples=150, deadline=None)
@given(snapshots())
def test_no_team_goes_above_its_quota_and_borrow_limit(snap: PassSnapshot) -> None:
    _, admission, *_ = plan(snap)
    teams = {r.job.job_id: r.job.team for r in snap.jobs}
    limits = {
        q.compute_quota_target.team_name: TeamPolicy.from_quota(q, CATALOGUE).limit[P5].accelerators
        for q in snap.quotas
    }

    def used(held: dict[str, tuple[list[str], int]]) -> Counter[str]:
        total = Counter[str]()
        for job_id, (nodes, per) in held.items():
            total[teams[job_id]] += per * len(nodes)
        return total

    before, after = used(_holdings(snap)), used(_after(snap, admission))
    for team, gpus in after.items():
        if gpus > before[team]:
            assert gpus <= limits[team], (team, gpus, limits[team])


@settings(max_examples=150, deadline=None)
@given(snapshots())
def test_victims_are_never_younger_than_the_minimum_run_time(snap: PassSnapshot) -> None:
    _, admission, *_ = plan(snap)
    records = {r.job.job_id: r for r in snap.jobs}
    minimum = timedelta(seconds=snap.config.min_runtime_seconds)
    for admitted in admission.admissions:
        for victim in admitted.victims:
            if isinstance(victim, Preemption):
                started = records[victim.job_id].started_at
                assert started is not None and snap.now - started >= minimum, victim
            else:
                assert isinstance(victim, Shrink)  # a shrink keeps it running: allowed


@settings(max_examples=150, deadline=None)
@given(snapshots())
def test_every_waiting_job_gets_a_reason_and_no_admitted_one_does(snap: PassSnapshot) -> None:
    _, admission, _, capacity = plan(snap)
    admitted = {a.job.job_id for a in admission.admissions}
    waiting = {r.job.job_id for r in snap.jobs if r.job.status in WAITING_STATUSES} - admitted
    # Every waiting job read SUBMITTED, which no pass reason equals: each gets one.
    assert {w.job_id for w in capacity.reasons} == waiting
    assert capacity.pending == len(waiting)
    assert all(w.replacing == SUBMITTED and w.reason for w in capacity.reasons)


@settings(max_examples=150, deadline=None)
@given(snapshots())
def test_templates_keep_to_their_pools(snap: PassSnapshot) -> None:
    _, admission, *_ = plan(snap)
    for admitted in admission.admissions:
        kind = admitted.pool_kind
        template = admitted.job.template
        assert template != "production" or kind == "hyperpod", admitted
        assert template != "research" or kind == "eks-spot", admitted
        assert template != "development" or kind in ("hyperpod", "eks-on-demand"), admitted


@settings(max_examples=100, deadline=None)
@given(snapshots())
def test_the_plan_is_deterministic(snap: PassSnapshot) -> None:
    assert plan(snap) == plan(snap)


def test_an_admission_victim_is_never_admitted_in_the_same_plan() -> None:
    """(What the property tests take for granted, shown on the smallest case.)"""
    low = running(pending("low", "a", cls="low"), ["i-hp00"])
    high = pending("high", "a", cls="high")
    _, admission, *_ = plan(snapshot([low, high], [hyperpod_node(0)], [quota("a", 8, borrow=0)]))
    (admitted,) = admission.admissions
    assert isinstance(admitted, Admission)
    assert {v.job_id for v in admitted.victims if isinstance(v, Preemption)} == {"low"}
    assert isinstance(plan(snapshot([], [], []))[3], CapacityPlan)
