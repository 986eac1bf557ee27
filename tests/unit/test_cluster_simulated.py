"""The simulated HyperPod + EKS cluster the local twin runs against."""

from __future__ import annotations

import json
import re
import sys
import threading
from datetime import UTC, datetime, timedelta

import pytest

from hyperguard.cluster import NodeNotFoundError
from hyperguard.cluster.clock import ManualClock, ScaledClock
from hyperguard.cluster.simulated import (
    HEALTH_LABEL,
    INCIDENT_TAINT,
    REASON_LABEL,
    SimTimings,
    SimulatedCluster,
)
from hyperguard.models import Checkpoint, Job, JobStatus, NodeStatus

INSTANCE_ID = re.compile(r"^i-[a-f0-9]{17}$")
UNKNOWN_ID = "i-0123456789abcdef0"


class Sink:
    def __init__(self) -> None:
        self.calls: list[tuple[str, int, str]] = []

    def __call__(self, job_id: str, step: int, uri: str) -> None:
        self.calls.append((job_id, step, uri))

    def steps(self, job_id: str) -> list[int]:
        return [step for job, step, _ in self.calls if job == job_id]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def sink() -> Sink:
    return Sink()


@pytest.fixture
def sim(clock: ManualClock, sink: Sink) -> SimulatedCluster:
    return SimulatedCluster(clock, checkpoint_sink=sink).seed_default()


def hyperpod_ids(sim: SimulatedCluster) -> list[str]:
    return [n.instance_id for n in sim.list_nodes() if n.platform == "hyperpod"]


def job_named(sim: SimulatedCluster, job_id: str) -> Job:
    return next(job for job in sim.jobs() if job.job_id == job_id)


def free_node(sim: SimulatedCluster) -> str:
    busy = {n for job in sim.jobs() for n in job.nodes}
    return next(n for n in hyperpod_ids(sim) if n not in busy)


def test_seed_builds_hyperpod_burst_pool_and_placed_jobs(sim: SimulatedCluster) -> None:
    nodes = sim.list_nodes()
    hyperpod = [n for n in nodes if n.platform == "hyperpod"]
    eks = [n for n in nodes if n.platform == "eks"]

    assert len(hyperpod) == 16
    assert {(n.cluster, n.pool, n.instance_type) for n in hyperpod} == {
        ("hyperguard-twin", "workers", "ml.p5.48xlarge")
    }
    assert len(eks) == 4
    assert {(n.cluster, n.pool, n.instance_type) for n in eks} == {
        ("hyperguard-burst", "gpu-burst", "p5.48xlarge")
    }
    assert {n.capacity_type for n in eks} == {"OnDemand", "Spot"}
    ids = [n.instance_id for n in nodes]
    assert len(set(ids)) == len(ids)
    assert all(INSTANCE_ID.match(i) for i in ids)
    assert all(n.node_name == f"hyperpod-{n.instance_id}" for n in hyperpod)
    assert all(n.status == NodeStatus.RUNNING and n.healthy and n.schedulable for n in nodes)

    jobs = sim.jobs()
    assert len(jobs) == 3
    assert {job.team for job in jobs} == {"nlp", "vision"}
    assert sum(job.auto_resume for job in jobs) == 1
    placed = [n for job in jobs for n in job.nodes]
    assert len(placed) == len(set(placed)), "no node carries two jobs"
    assert set(placed) <= set(hyperpod_ids(sim))
    for job in jobs:
        assert 2 <= len(job.nodes) <= 4
        assert job.status == JobStatus.RUNNING
        assert job.checkpoint_location == f"s3://hyperguard-twin-checkpoints/{job.job_id}/"


def test_seed_is_deterministic_for_a_seed(clock: ManualClock) -> None:
    first = SimulatedCluster(clock, seed=3).seed_default()
    second = SimulatedCluster(clock, seed=3).seed_default()
    other = SimulatedCluster(clock, seed=4).seed_default()

    assert hyperpod_ids(first) == hyperpod_ids(second)
    assert hyperpod_ids(first) != hyperpod_ids(other)


def test_node_status_of_unknown_instance_raises(sim: SimulatedCluster) -> None:
    with pytest.raises(NodeNotFoundError):
        sim.node_status(UNKNOWN_ID)
    assert sim.node_for_instance(UNKNOWN_ID) is None


def test_cordon_is_an_ensure_per_incident(sim: SimulatedCluster) -> None:
    node_id = hyperpod_ids(sim)[0]

    assert sim.cordon(node_id, incident_id="inc-1", reason="NvidiaXID79Error") is True
    assert sim.cordon(node_id, incident_id="inc-1", reason="NvidiaXID79Error") is False

    node = sim.node_status(node_id)
    assert node.schedulable is False
    assert node.taints == [{"key": INCIDENT_TAINT, "value": "inc-1", "effect": "NoSchedule"}]
    assert node.labels[REASON_LABEL] == "NvidiaXID79Error"
    assert node.open_incident_id == "inc-1"

    assert sim.cordon(node_id, incident_id="inc-2", reason="gpu fault: xid 48!") is True
    node = sim.node_status(node_id)
    assert [t["value"] for t in node.taints] == ["inc-2"]
    assert node.labels[REASON_LABEL] == "gpu-fault-xid-48"


def test_uncordon_clears_our_marks_once(sim: SimulatedCluster) -> None:
    node_id = hyperpod_ids(sim)[0]
    sim.cordon(node_id, incident_id="inc-1", reason="xid")

    assert sim.uncordon(node_id) is True
    assert sim.uncordon(node_id) is False
    node = sim.node_status(node_id)
    assert node.schedulable and node.taints == [] and REASON_LABEL not in node.labels


def test_drain_suspends_the_jobs_on_the_node_and_names_their_pods(
    sim: SimulatedCluster,
) -> None:
    job = next(j for j in sim.jobs() if not j.auto_resume)
    node_id = job.nodes[1]

    result = sim.drain(node_id, deadline_s=120)

    assert result.evicted == [f"{job.job_id}-worker-1"]
    assert result.complete
    assert job_named(sim, job.job_id).status == JobStatus.SUSPENDED
    assert sim.drain(node_id, deadline_s=120).evicted == []


def test_reboot_keeps_node_pending_until_reboot_time(
    sim: SimulatedCluster, clock: ManualClock
) -> None:
    node_id = free_node(sim)

    outcome = sim.reboot([node_id])

    assert outcome.successful == [node_id] and outcome.failed == []
    assert sim.node_status(node_id).status == NodeStatus.PENDING
    clock.advance(299)
    node = sim.node_status(node_id)
    assert node.status == NodeStatus.PENDING and not node.healthy
    assert node.labels[HEALTH_LABEL] == "UnschedulablePendingReboot"
    clock.advance(1)
    node = sim.node_status(node_id)
    assert node.status == NodeStatus.RUNNING and node.healthy
    assert node.labels[HEALTH_LABEL] == "Schedulable"


def test_replace_brings_a_new_instance_into_the_group(
    sim: SimulatedCluster, clock: ManualClock
) -> None:
    old_id = free_node(sim)

    outcome = sim.replace([old_id])

    assert outcome.successful == [old_id]
    assert sim.node_status(old_id).status == NodeStatus.SHUTTING_DOWN
    clock.advance(939)
    new_id = sim.replacement_of(old_id)
    assert new_id is not None and new_id != old_id and INSTANCE_ID.match(new_id)
    assert sim.node_status(new_id).status == NodeStatus.PENDING
    with pytest.raises(NodeNotFoundError):
        sim.node_status(old_id)

    clock.advance(1)
    new = sim.node_status(new_id)
    assert new.status == NodeStatus.RUNNING and new.healthy
    assert (new.pool, new.cluster, new.node_name) == (
        "workers",
        "hyperguard-twin",
        f"hyperpod-{new_id}",
    )
    assert len(hyperpod_ids(sim)) == 16
    assert sim.snapshot()["pending_repairs"] == []


def test_replaced_burst_node_is_a_new_kubernetes_node_in_its_nodepool(
    sim: SimulatedCluster, clock: ManualClock
) -> None:
    old = next(n for n in sim.list_nodes() if n.capacity_type == "Spot")
    sim.replace([old.instance_id])
    clock.advance(940)

    new_id = sim.replacement_of(old.instance_id)
    assert new_id is not None
    new = sim.node_status(new_id)
    assert (new.pool, new.capacity_type, new.platform) == ("gpu-burst", "Spot", "eks")
    assert new.node_name != old.node_name
    assert (new.node_name or "").endswith(".ec2.internal")
    assert HEALTH_LABEL not in new.labels


def test_replacement_runs_deep_health_check_when_configured(clock: ManualClock) -> None:
    timings = SimTimings(deep_health_check_s=600)
    sim = SimulatedCluster(clock, timings).seed_default()
    old_id = free_node(sim)
    sim.replace([old_id])

    clock.advance(940)
    new_id = sim.replacement_of(old_id)
    assert new_id is not None
    assert sim.node_status(new_id).status == NodeStatus.DEEP_HEALTH_CHECK_IN_PROGRESS
    clock.advance(600)
    assert sim.node_status(new_id).status == NodeStatus.RUNNING


def test_repair_of_unknown_id_fails_per_node_without_failing_the_batch(
    sim: SimulatedCluster,
) -> None:
    node_id = free_node(sim)

    outcome = sim.replace([UNKNOWN_ID, node_id])

    assert outcome.successful == [node_id]
    assert [(f.node_id, f.error_code) for f in outcome.failed] == [
        (UNKNOWN_ID, "InstanceIdNotFound")
    ]


def test_repair_of_a_node_already_in_repair_is_in_use(sim: SimulatedCluster) -> None:
    node_id = free_node(sim)
    sim.reboot([node_id])

    outcome = sim.replace([node_id])

    assert outcome.successful == []
    assert [(f.node_id, f.error_code) for f in outcome.failed] == [(node_id, "InstanceIdInUse")]
    assert sim.node_status(node_id).status == NodeStatus.PENDING, "still the reboot"
    assert [f.error_code for f in sim.reboot([node_id, node_id]).failed] == [
        "InstanceIdInUse",
        "InstanceIdInUse",
    ]


def test_injected_repair_failures_hit_the_next_nodes_only(sim: SimulatedCluster) -> None:
    first, second, third = [n for n in hyperpod_ids(sim) if n != free_node(sim)][:3]
    sim.fail_next_repairs("InternalServerError", count=1)

    outcome = sim.reboot([first, second])

    assert [(f.node_id, f.error_code) for f in outcome.failed] == [(first, "InternalServerError")]
    assert outcome.successful == [second]
    assert sim.node_status(first).status == NodeStatus.RUNNING
    assert sim.reboot([third]).successful == [third]


def test_gpu_fault_heals_on_reboot_but_persistent_fault_survives(
    sim: SimulatedCluster, clock: ManualClock
) -> None:
    gpu, persistent = [n for n in hyperpod_ids(sim)][-2:]
    sim.inject_fault(gpu, kind="gpu")
    sim.inject_fault(persistent, kind="persistent")
    for node_id in (gpu, persistent):
        node = sim.node_status(node_id)
        assert node.status == NodeStatus.FAILURE and not node.healthy

    sim.reboot([gpu, persistent])
    clock.advance(300)

    assert sim.node_status(gpu).status == NodeStatus.RUNNING
    assert sim.node_status(gpu).healthy
    assert sim.node_status(persistent).status == NodeStatus.FAILURE
    assert not sim.node_status(persistent).healthy


def test_gpu_fault_can_be_told_not_to_heal_on_reboot(
    sim: SimulatedCluster, clock: ManualClock
) -> None:
    node_id = free_node(sim)
    sim.inject_fault(node_id, kind="gpu", heal_on_reboot=False)
    sim.reboot([node_id])
    clock.advance(300)
    assert sim.node_status(node_id).status == NodeStatus.FAILURE


def test_replace_cures_a_persistent_fault_unless_replacement_never_healthy(
    sim: SimulatedCluster, clock: ManualClock
) -> None:
    cured, cursed = [n for n in hyperpod_ids(sim)][-2:]
    for node_id in (cured, cursed):
        sim.inject_fault(node_id, kind="persistent")
    sim.replacement_never_healthy(cursed)

    sim.replace([cured, cursed])
    clock.advance(940)

    cured_new, cursed_new = sim.replacement_of(cured), sim.replacement_of(cursed)
    assert cured_new is not None and cursed_new is not None
    assert sim.node_status(cured_new).healthy
    assert sim.node_status(cursed_new).status == NodeStatus.FAILURE
    assert not sim.node_status(cursed_new).healthy


def test_checkpoints_reach_the_sink_once_each_in_order(
    sim: SimulatedCluster, clock: ManualClock, sink: Sink
) -> None:
    start = {job.job_id: job.last_checkpoint.step for job in sim.jobs() if job.last_checkpoint}

    clock.advance(30 * 25)
    sim.advance()
    sim.list_nodes()
    sim.advance()

    for job_id, step in start.items():
        assert sink.steps(job_id) == [step + 10, step + 20]
    times_in_order = [step - start[job] for job, step, _ in sink.calls]
    assert times_in_order == sorted(times_in_order)
    job_id = "llama3-70b-pretrain"
    assert (job_id, 1210, f"s3://hyperguard-twin-checkpoints/{job_id}/step-00001210/") in sink.calls
    assert job_named(sim, job_id).last_checkpoint == Checkpoint(
        step=1220,
        uri=f"s3://hyperguard-twin-checkpoints/{job_id}/step-00001220/",
        completed_at=clock.now() - timedelta(seconds=150),
    )
    assert sim.progress()[job_id].step == 1225


def test_checkpoints_are_emitted_lazily_when_the_clock_moved(
    sim: SimulatedCluster, clock: ManualClock, sink: Sink
) -> None:
    clock.advance(30 * 10)
    assert sink.calls == []
    sim.node_status(hyperpod_ids(sim)[0])
    assert len(sink.calls) == 3


def test_dispatch_resumes_from_the_checkpoint_after_restart_overhead(
    sim: SimulatedCluster, clock: ManualClock, sink: Sink
) -> None:
    job = next(j for j in sim.jobs() if not j.auto_resume)
    sim.drain(job.nodes[0], deadline_s=60)
    clock.advance(30 * 7)
    stale = job.model_copy(
        update={
            "last_checkpoint": Checkpoint(
                step=1200, uri="s3://x/step-00001200/", completed_at=clock.now()
            )
        }
    )
    targets = [n for n in hyperpod_ids(sim) if n not in {x for j in sim.jobs() for x in j.nodes}]

    assert sim.dispatch(stale, targets[: len(job.nodes)]) is True
    assert sim.dispatch(stale, targets[: len(job.nodes)]) is False

    progress = sim.progress()[job.job_id]
    assert progress.step == 1200 and progress.job.status == JobStatus.RUNNING
    assert progress.job.restart_count == 1
    clock.advance(59)
    assert sim.progress()[job.job_id].step == 1200
    clock.advance(1 + 30 * 10)
    assert sim.progress()[job.job_id].step == 1210
    assert sink.steps(job.job_id)[-1] == 1210


def test_dispatch_of_a_new_job_starts_at_step_zero_without_a_restart(
    sim: SimulatedCluster, clock: ManualClock
) -> None:
    job = Job(job_id="fresh", team="vision", checkpoint_location="s3://ckpt/fresh/")
    sim.dispatch(job, [free_node(sim)])
    clock.advance(60 + 30 * 3)

    progress = sim.progress()["fresh"]
    assert progress.step == 3 and progress.job.restart_count == 0


def test_dispatch_keeps_a_restart_count_the_caller_already_raised(
    sim: SimulatedCluster, clock: ManualClock
) -> None:
    checkpoint = Checkpoint(step=50, uri="s3://ckpt/moved/step-00000050/", completed_at=clock.now())
    job = Job(job_id="moved", team="nlp", restart_count=2, last_checkpoint=checkpoint)
    sim.dispatch(job, [free_node(sim)])

    progress = sim.progress()["moved"]
    assert progress.step == 50 and progress.job.restart_count == 2
    # re-dispatching with the same count elsewhere is one more restart, counted here
    sim.dispatch(job, [free_node(sim)])
    assert sim.progress()["moved"].job.restart_count == 3


def test_dispatch_to_unknown_node_raises(sim: SimulatedCluster) -> None:
    with pytest.raises(NodeNotFoundError):
        sim.dispatch(Job(job_id="j", team="nlp"), [UNKNOWN_ID])
    assert "j" not in sim.progress()


def test_job_on_a_faulty_node_hangs_while_others_progress(
    sim: SimulatedCluster, clock: ManualClock, sink: Sink
) -> None:
    hung = "vit-h14-pretrain"
    other = "llama3-70b-pretrain"
    clock.advance(30 * 5 + 10)
    before = sim.progress()
    sim.inject_fault(job_named(sim, hung).nodes[2])

    clock.advance(30 * 40)
    after = sim.progress()

    assert after[hung].step == before[hung].step == 645
    assert not after[hung].progressing
    assert after[hung].waiting_for == [job_named(sim, hung).nodes[2]]
    assert sink.steps(hung) == []
    assert after[other].step == before[other].step + 40


def test_reboot_under_a_running_job_fails_it(sim: SimulatedCluster) -> None:
    job = next(j for j in sim.jobs() if not j.auto_resume)
    sim.reboot([job.nodes[0]])
    assert job_named(sim, job.job_id).status == JobStatus.FAILED


def test_hyperpod_auto_resumes_its_job_once_the_node_is_back_and_schedulable(
    sim: SimulatedCluster, clock: ManualClock
) -> None:
    job = next(j for j in sim.jobs() if j.auto_resume)
    node_id = job.nodes[0]
    clock.advance(30 * 12)
    sim.cordon(node_id, incident_id="inc-9", reason="xid")
    sim.drain(node_id, deadline_s=60)
    assert job_named(sim, job.job_id).status == JobStatus.PENDING

    sim.replace([node_id])
    clock.advance(940)
    new_id = sim.replacement_of(node_id)
    resumed = job_named(sim, job.job_id)
    assert resumed.status == JobStatus.RUNNING and resumed.restart_count == 1
    assert resumed.nodes == [new_id, job.nodes[1]]
    assert sim.progress()[job.job_id].step == 310, "from the step-310 checkpoint"
    clock.advance(60 + 30)
    assert sim.progress()[job.job_id].step == 311


def test_auto_resume_waits_for_uncordon_after_a_reboot(
    sim: SimulatedCluster, clock: ManualClock
) -> None:
    job = next(j for j in sim.jobs() if j.auto_resume)
    node_id = job.nodes[1]
    sim.cordon(node_id, incident_id="inc-3", reason="xid")
    sim.reboot([node_id])
    clock.advance(600)
    assert job_named(sim, job.job_id).status == JobStatus.PENDING

    assert sim.uncordon(node_id)
    assert job_named(sim, job.job_id).status == JobStatus.RUNNING


def test_stop_job_is_an_ensure(sim: SimulatedCluster, clock: ManualClock) -> None:
    assert sim.stop_job("vit-h14-pretrain") is True
    assert sim.stop_job("vit-h14-pretrain") is False
    assert sim.stop_job("no-such-job") is False
    clock.advance(3000)
    assert sim.progress()["vit-h14-pretrain"].step == 640


def test_snapshot_is_json_with_nodes_jobs_and_repairs(
    sim: SimulatedCluster, clock: ManualClock
) -> None:
    node_id = free_node(sim)
    sim.replace([node_id])
    clock.advance(30)

    snapshot = json.loads(json.dumps(sim.snapshot()))

    assert len(snapshot["nodes"]) == 20
    assert {job["job"]["job_id"] for job in snapshot["jobs"]} == {
        "llama3-70b-pretrain",
        "mistral-7b-sft",
        "vit-h14-pretrain",
    }
    assert all(job["step"] >= 300 for job in snapshot["jobs"])
    [repair] = snapshot["pending_repairs"]
    assert repair["action"] == "replace" and repair["instance_id"] == node_id
    assert repair["replacement_id"] and repair["replacement_id"] != node_id


def test_broken_sink_does_not_break_cluster_calls(clock: ManualClock) -> None:
    def sink(job_id: str, step: int, uri: str) -> None:
        raise RuntimeError("store down")

    sim = SimulatedCluster(clock, checkpoint_sink=sink).seed_default()
    clock.advance(30 * 10)
    assert len(sim.list_nodes()) == 20


def test_scaled_clock_runs_scale_times_faster_than_wall_time() -> None:
    wall = [100.0]
    start = datetime(2025, 1, 1, tzinfo=UTC)
    clock = ScaledClock(60, start=start, monotonic=lambda: wall[0])

    assert clock.now() == start
    wall[0] += 5
    assert clock.now() == start + timedelta(minutes=5)
    with pytest.raises(ValueError):
        ScaledClock(0)


def test_manual_clock_refuses_naive_times_and_going_back() -> None:
    with pytest.raises(ValueError):
        ManualClock(datetime(2025, 1, 1))
    with pytest.raises(ValueError):
        ManualClock().advance(-1)


def test_timings_reject_a_shutdown_longer_than_the_replacement() -> None:
    assert SimTimings().replace_s == 940
    with pytest.raises(ValueError):
        SimTimings(replace_s=100, replace_shutdown_s=200)


def race_cordons(sim: SimulatedCluster, node_id: str, incident_id: str) -> list[bool]:
    barrier = threading.Barrier(8)
    results: list[bool] = []

    def cordon() -> None:
        barrier.wait()
        results.append(sim.cordon(node_id, incident_id=incident_id, reason="xid"))

    threads = [threading.Thread(target=cordon) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def test_concurrent_cordons_change_the_node_exactly_once(sim: SimulatedCluster) -> None:
    node_id = hyperpod_ids(sim)[0]
    switch_interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads often, so an unguarded check-then-act shows
    try:
        for round_no in range(20):
            results = race_cordons(sim, node_id, f"inc-{round_no}")
            assert sorted(results) == [False] * 7 + [True], f"round {round_no}"
    finally:
        sys.setswitchinterval(switch_interval)
