"""The scheduling pass on moto tables and the simulated cluster: single writer, conditional
writes, placement and dispatch."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Collection, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from functools import partial
from typing import Any

import pytest
from botocore.exceptions import ClientError
from tests.deadlines import loaded
from tests.integration.api_harness import Api, member
from tests.integration.cluster_harness import BUCKET, HYPERPOD, ClusterApis, sagemaker
from tests.integration.scheduler_harness import (
    MakeSolo,
    Solo,
    job_pods,
    until_pods_gone,
    until_running,
)

from hyperguard.cluster.gateway import ClusterError
from hyperguard.cluster.hyperpod_eks import HyperPodEksGateway
from hyperguard.cluster.workloads import HPJOB_POD_LABEL
from hyperguard.governance.jobs import JobLifecycle, Outcome
from hyperguard.governance.service import SchedulerService
from hyperguard.models import Job, JobStatus, Node
from hyperguard.models.cluster import RunStatus
from hyperguard.models.records import JobRecord
from hyperguard.store import NodeStore
from hyperguard.store.codec import wire_client
from hyperguard.store.jobs import JobStore
from hyperguard_twin.plane.kube import (
    HYPERPOD_PYTORCH_JOBS,
    NODES,
    PODS,
    PRIORITY_CLASSES,
    wait_for,
)


def _holding_gpus(jobs: JobStore, team: str) -> int:
    return sum(
        r.job.accelerators_per_replica * (r.admitted_replicas or r.job.replicas)
        for r in jobs.records()
        if r.job.team == team and r.job.status in (JobStatus.ADMITTED, JobStatus.RUNNING)
    )


def test_fifty_concurrent_submissions_never_exceed_the_quota(solo: MakeSolo) -> None:
    team = solo(16, hyperpod_nodes=4, strategy="DontLend", borrow=None)  # 32 GPUs installed
    team.api.call("PUT", "/principals", {"principal_arn": member("solo"), "team": "solo"})
    services = [team.scheduler() for _ in range(4)]
    done = threading.Event()
    passes: list[Any] = []
    over: list[int] = []

    def keep_scheduling(index: int) -> None:
        while not done.is_set():
            passes.append(services[index].run_pass())
            used = _holding_gpus(team.api.jobs, "solo")
            if used > 16:
                over.append(used)

    def submit(_: int) -> int:
        return team.api.submit("solo", 1, principal=member("solo")).status

    with ThreadPoolExecutor(max_workers=54) as pool:
        schedulers = [pool.submit(keep_scheduling, i) for i in range(4)]
        statuses = list(pool.map(submit, range(50)))
        done.set()
        for future in schedulers:
            future.result()
    last = services[0].run_pass()

    assert statuses == [201] * 50
    assert last.pending_by_team == {"solo": 34}  # the TeamPendingJobs metric's values
    assert over == []
    assert _holding_gpus(team.api.jobs, "solo") == 16
    records = team.api.jobs.records()
    assert sum(r.job.status is JobStatus.RUNNING for r in records) == 16
    assert sum(r.job.status is JobStatus.PENDING for r in records) == 34
    assert any(not p.acquired for p in passes), "passes never contended for the lease"
    # kube-scheduler binds a pod it first refused at its retry, in wall time.
    wait_for(lambda: len(team.running()) == 16, loaded(60), "the 16 admitted jobs to run")


def test_a_pass_does_nothing_while_another_holds_the_lease(solo: MakeSolo) -> None:
    team = solo(16)
    job_id = team.submit(8)
    assert team.api.teams.acquire_lease("hyperguard-twin", "someone-else", 60) is not None
    result = team.scheduler().run_pass()
    assert not result.acquired
    assert team.job(job_id).status is JobStatus.PENDING
    assert job_id not in team.running()


def test_a_wake_up_naming_a_job_that_ended_or_never_existed_changes_nothing(solo: MakeSolo) -> None:
    team = solo(16)
    cancelled = team.submit(8)
    assert team.api.call("DELETE", f"/jobs/{cancelled}").status == 200
    result = team.scheduler().run_pass(job_ids=[cancelled, "no-such-job"])
    assert result.admitted == [] and result.pending == 0
    assert team.job(cancelled).status is JobStatus.CANCELLED


class CancelsDuringThePass(HyperPodEksGateway):
    """The runs are listed after the pass read the jobs (D193): a cancel arriving then makes
    the snapshot stale."""

    api: Api
    victim: str

    def job_runs(self) -> list[RunStatus]:
        assert self.api.call("DELETE", f"/jobs/{self.victim}").status == 200
        return super().job_runs()


def test_a_job_cancelled_after_the_snapshot_is_not_admitted(solo: MakeSolo) -> None:
    team = solo(16)
    victim = team.submit(8)
    gateway = team.gateway(CancelsDuringThePass)
    gateway.api, gateway.victim = team.api, victim
    result = team.scheduler(gateway).run_pass()
    assert result.admitted == [] and result.conflicts == 1
    record = team.api.jobs.record(victim)
    assert record is not None and record.job.status is JobStatus.CANCELLED
    assert record.job.nodes == [] and victim not in team.running()


class RollsBackDuringThePass(HyperPodEksGateway):
    """A burst rolls back after the pass read the jobs: it leaves its note on the job, as
    BurstSteps.rollback does, before the pass writes the reason it computed without it."""

    api: Api
    victim: str
    note = "waiting: burst burst-0123456789abcdef raised no capacity: spot: InsufficientCapacity"

    def job_runs(self) -> list[RunStatus]:
        assert JobLifecycle(self.api.jobs).set_reason(self.victim, self.note)
        return super().job_runs()


def test_a_pass_never_overwrites_a_reason_written_after_its_snapshot(solo: MakeSolo) -> None:
    team = solo(16, hyperpod_nodes=1, borrow=0)
    running = team.submit(8)
    team.scheduler().run_pass()
    waiting = team.submit(8)
    gateway = team.gateway(RollsBackDuringThePass)
    gateway.api, gateway.victim = team.api, waiting
    result = team.scheduler(gateway).run_pass()
    assert result.conflicts == 1 and team.running() == {running}
    assert team.api.call("GET", f"/jobs/{waiting}").body["reason"] == gateway.note
    team.scheduler().run_pass()  # the next pass reads the note and computes anew
    reason = team.api.call("GET", f"/jobs/{waiting}").body["reason"]
    assert reason.startswith(
        "pending: installed capacity of ml.p5.48xlarge exhausted: its 8 GPUs cannot take 8 more"
    )


@contextmanager
def quota_changed_after_the_snapshot(
    service: SchedulerService, change: Callable[[], Any]
) -> Iterator[None]:
    """Inside, each pass reads the teams' quotas and then `change` (an admin's quota update,
    which must be answered 200) lands, before the pass writes anything fenced on the team's
    quota version."""
    read = service.teams.quotas

    def then_change() -> Any:
        snapshot = read()
        assert change().status == 200
        return snapshot

    service.teams.quotas = then_change  # type: ignore[method-assign]
    try:
        yield
    finally:
        del service.teams.quotas


def test_a_stale_quota_version_stops_the_pass_before_it_admits(solo: MakeSolo) -> None:
    team = solo(16)
    job_id = team.submit(8)
    service = team.scheduler()
    with quota_changed_after_the_snapshot(service, lambda: team.api.quota("solo", 8, version=1)):
        result = service.run_pass()
    assert result.admitted == [] and result.conflicts == 1
    assert team.job(job_id).status is JobStatus.PENDING


def test_research_goes_to_eks_spot_and_production_waits_for_hyperpod(solo: MakeSolo) -> None:
    team = solo(64, hyperpod_nodes=1, burst_nodes=4, borrow=0)  # 2 of 4 are spot
    research = team.submit(8, template="research", replicas=2)
    first = team.submit(8)
    second = team.submit(8)
    result = team.scheduler().run_pass()
    assert sorted(result.dispatched) == sorted([research, first])
    assert team.running() == {research, first}
    placed = team.api.call("GET", f"/jobs/{research}").body
    assert placed["pool"] == "gpu-burst-spot" and len(set(placed["nodes"])) == 2
    assert team.api.call("GET", f"/jobs/{first}").body["pool"] == "workers"
    waiting = team.api.call("GET", f"/jobs/{second}").body
    assert waiting["status"] == "Pending"
    # The idle EKS on-demand nodes are not admissible for it (D21 closed, D89): the engine
    # holds it back for HyperPod's capacity, instead of admitting what placement cannot place.
    assert waiting["reason"].startswith(
        "pending: HyperPod capacity of ml.p5.48xlarge exhausted: its 8 GPUs cannot take 8 more"
    )
    assert result.unplaced == []


def test_fractional_jobs_share_a_node_best_fit(solo: MakeSolo) -> None:
    team = solo(16, hyperpod_nodes=2, borrow=0)
    ids = [team.submit(gpus) for gpus in (4, 2, 2, 8)]
    team.scheduler().run_pass()
    nodes = [team.job(i).nodes for i in ids]
    assert nodes[0] == nodes[1] == nodes[2] and nodes[3] != nodes[0]


class RefusesDispatch(HyperPodEksGateway):
    def dispatch(self, job: Job, nodes: list[str]) -> bool:
        raise ClusterError("admission webhook denied the job")


def test_a_refused_dispatch_puts_the_job_back_to_pending(solo: MakeSolo) -> None:
    team = solo(16, hyperpod_nodes=2)
    job_id = team.submit(8)
    gateway = team.gateway(RefusesDispatch)
    result = team.scheduler(gateway).run_pass()
    assert result.admitted == [job_id] and result.dispatched == []
    view = team.api.call("GET", f"/jobs/{job_id}").body
    assert view["status"] == "Pending" and view["nodes"] == []
    assert view["history"][-1]["reason"] == "dispatch failed: admission webhook denied the job"


@pytest.mark.parametrize(
    ("where", "refused"),
    [
        # The batch Job's pod template is validated with the Job.
        ("burst", "create Job hyperpod-ns-solo/"),
        # The HyperPodPyTorchJob's CRD leaves pods to the operator: they are validated first,
        # as a PodTemplate sent as a dry run.
        ("hyperpod", "pods of HyperPodPyTorchJob hyperpod-ns-solo/"),
    ],
)
def test_a_run_the_api_server_refuses_as_invalid_fails_the_job_instead_of_going_round(
    solo: MakeSolo, where: str, refused: str
) -> None:
    """A template that passes the schema but not kube-apiserver's validation (a mount of a
    volume the pod does not have): kube-apiserver answers 422, and the job fails with its
    words instead of being admitted and refused on every pass."""
    on_hyperpod = where == "hyperpod"
    team = solo(16, hyperpod_nodes=2 if on_hyperpod else 0, burst_nodes=0 if on_hyperpod else 2)
    template = {
        "spec": {
            "containers": [
                {
                    "name": "pytorch",
                    "image": "llama:1",
                    "volumeMounts": [{"name": "fsx", "mountPath": "/fsx"}],
                }
            ]
        }
    }
    placement = "production" if on_hyperpod else "research"
    reply = team.api.submit("solo", 8, image=None, template=placement, pod_template=template)
    assert reply.status == 201, reply.body
    job_id = reply.body["job_id"]
    result = team.scheduler().run_pass()
    assert result.admitted == [job_id] and result.dispatched == []
    view = team.api.call("GET", f"/jobs/{job_id}").body
    assert view["status"] == "Failed" and view["nodes"] == []
    reason = view["history"][-1]["reason"]
    assert reason.startswith(f"the cluster refused its run as invalid: {refused}"), reason
    assert "volumeMounts[0].name" in reason and "Not found" in reason, reason
    assert team.scheduler().run_pass().admitted == []


def test_cancelling_a_running_job_stops_its_pods_on_the_next_pass(solo: MakeSolo) -> None:
    team = solo(16)
    job_id = team.submit(8)
    service = team.scheduler()
    service.run_pass()
    assert team.running() == {job_id}
    assert team.api.call("DELETE", f"/jobs/{job_id}").body["status"] == "Cancelled"
    assert team.api.wakeup.reasons[-1] == "job cancelled"
    result = service.run_pass()
    assert result.stopped == [job_id]
    assert team.running() == set()
    assert team.apis.cluster.runs()[job_id].state == "stopped"
    record = team.api.jobs.record(job_id)
    assert record is not None and not record.stop_pending and record.job.nodes == []
    assert [h.event.value for h in record.history][-2:] == ["cancelled", "stopped"]


LOW_AND_HIGH = {"PriorityClasses": [{"Name": "low", "Weight": 1}, {"Name": "high", "Weight": 9}]}


def _low_priority_job(solo: MakeSolo) -> tuple[Solo, str]:
    """Priority classes low and high, team `solo` with its one node's quota, a low job in it."""
    team = solo(8, hyperpod_nodes=1, borrow=0)
    assert team.api.call("PUT", "/scheduler-config", LOW_AND_HIGH).status == 200
    return team, team.submit(8, priority_class="low")


def test_a_preempted_job_restarts_from_its_checkpoint(solo: MakeSolo) -> None:
    team, low = _low_priority_job(solo)
    service = team.scheduler()
    service.run_pass()
    checkpoint = {"step": 500, "uri": "s3://ckpt-bucket/low/step-00000500/"}
    assert team.api.call("POST", f"/jobs/{low}/checkpoints", checkpoint).status == 201
    high = team.submit(8, priority_class="high")
    assert service.run_pass().preempted == [low]
    assert team.api.call("DELETE", f"/jobs/{high}").status == 200
    result = service.run_pass()
    assert result.admitted == [low] and result.stopped == [high]
    view = team.api.call("GET", f"/jobs/{low}").body
    assert view["status"] == "Running" and view["restart_count"] == 1
    assert [h["event"] for h in view["history"]] == [
        "submitted",
        "admitted",
        "dispatched",
        "checkpoint",
        "preempted",
        "restarted",
        "dispatched",
    ]
    # The restarted run is told where to resume from, and does.
    until_running(team.apis, low)
    run = team.apis.cluster.runs()[low]
    assert run.state == "running" and run.name.endswith("-run-1")
    assert run.anchor_step == 500


class StopFailsOnce(HyperPodEksGateway):
    """The cluster refuses the first `stop_job` (an API server hiccup), then complies."""

    failures = 1

    def stop_job(
        self,
        job_id: str,
        *,
        before_run: int | None = None,
        runs: Sequence[RunStatus] | None = None,
    ) -> bool:
        if self.failures:
            self.failures -= 1
            raise ClusterError("the API server is unavailable")
        return super().stop_job(job_id, before_run=before_run, runs=runs)


def test_a_cancel_whose_stop_fails_keeps_stop_pending_and_is_stopped_on_the_next_pass(
    solo: MakeSolo,
) -> None:
    team = solo(16)
    job_id = team.submit(8)
    gateway = team.gateway(StopFailsOnce)
    service = team.scheduler(gateway)
    service.run_pass()
    assert team.api.call("DELETE", f"/jobs/{job_id}").status == 200
    assert service.run_pass().stopped == []
    record = team.api.jobs.record(job_id)
    assert record is not None and record.stop_pending and record.job.nodes  # still owed
    assert team.running() == {job_id}
    assert service.run_pass().stopped == [job_id]
    record = team.api.jobs.record(job_id)
    assert record is not None and not record.stop_pending and record.job.nodes == []
    assert team.running() == set()


def _unscheduled(apis: ClusterApis, job_id: str) -> list[str]:
    """Why kube-scheduler leaves the pods of the job's run unbound (PodScheduled False)."""
    run = apis.cluster.runs()[job_id]
    pods = apis.kube.list_objects(
        PODS, run.namespace, label_selector=f"{HPJOB_POD_LABEL}={run.name}"
    )
    return [
        str(c.get("message"))
        for pod in pods
        for c in (pod.get("status") or {}).get("conditions") or []
        if c.get("type") == "PodScheduled" and c.get("status") == "False"
    ]


def test_a_preemption_whose_stop_fails_is_stopped_on_the_next_pass(solo: MakeSolo) -> None:
    """The urgent job is admitted onto the node of the job it preempts. While that job's
    stop has failed, its pods keep the node's GPUs and the urgent job's pod waits for them
    (kube-scheduler: Insufficient nvidia.com/gpu); the next pass stops the old run, and the
    urgent job then runs there."""
    team, low = _low_priority_job(solo)
    gateway = team.gateway(StopFailsOnce)
    service = team.scheduler(gateway)
    service.run_pass()
    assert team.running() == {low}
    held = team.apis.cluster.job_instances(low)
    high = team.submit(8, priority_class="high")
    result = service.run_pass()
    assert result.preempted == [low] and result.stopped == []  # the stop failed
    assert result.dispatched == [high] and team.job(high).nodes == held
    assert team.running() == {low}  # the preempted job's pods still run
    (waits,) = _unscheduled(team.apis, high)
    assert "Insufficient nvidia.com/gpu" in waits
    result = service.run_pass()
    assert result.stopped == [low] and result.admitted == []
    until_running(team.apis, high)
    assert team.apis.cluster.job_instances(high) == held
    assert team.job(low).status is JobStatus.PREEMPTED


@contextmanager
def _grace_period(apis: ClusterApis, pod: dict[str, Any]) -> Iterator[None]:
    """The pod's deletion kept in progress while inside, as a kubelet running the pod's
    termination grace period does (KWOK, the twin's kubelet, ends a deleted pod at once): a
    finalizer, removed on the way out."""
    meta = pod["metadata"]
    finalizers = {"metadata": {"finalizers": ["hyperguard.io/test-grace"]}}
    apis.kube.patch(PODS, meta["name"], finalizers, meta["namespace"])
    try:
        yield
    finally:
        apis.kube.patch(PODS, meta["name"], {"metadata": {"finalizers": None}}, meta["namespace"])


def test_a_preempted_job_resumes_from_a_checkpoint_its_run_completed_after_the_preemption(
    solo: MakeSolo,
) -> None:
    """D209: the pass that preempts a job reads its checkpoints first; its run then trains on
    until its pods stop (here its stop fails once) and completes a newer checkpoint, which no
    pass reads (a job that is not Running is not read) and whose report may come late. Its
    next dispatch looks its checkpoint location up again, records what it finds and resumes
    from it: one interval lost, not two."""
    team = solo(8, hyperpod_nodes=1, borrow=0)
    assert team.api.call("PUT", "/scheduler-config", LOW_AND_HIGH).status == 200
    low = team.submit(8, priority_class="low", checkpoint_location=f"s3://{BUCKET}/low/")
    service = team.scheduler(team.gateway(StopFailsOnce))
    assert service.run_pass().dispatched == [low]
    team.apis.advance(60 + 30 * 15)  # its start, then 15 steps of 30 s: checkpoint 10
    high = team.submit(8, priority_class="high")
    result = service.run_pass()
    assert result.preempted == [low] and result.stopped == []  # the stop failed
    recorded = team.job(low).last_checkpoint
    assert recorded is not None and recorded.step == 10
    team.apis.advance(30 * 10)  # its pods still train: checkpoint 20, in S3
    assert service.run_pass().stopped == [low]
    recorded = team.job(low).last_checkpoint
    assert recorded is not None and recorded.step == 10  # not read: the job is Preempted
    assert team.api.call("DELETE", f"/jobs/{high}").status == 200
    until_pods_gone(team.apis, low)
    result = service.run_pass()
    assert result.admitted == [low] and result.dispatched == [low]
    view = team.api.call("GET", f"/jobs/{low}").body
    assert view["last_checkpoint"]["uri"] == f"s3://{BUCKET}/low/step-00000020/"
    assert [h["event"] for h in view["history"]][-3:] == ["restarted", "checkpoint", "dispatched"]
    until_running(team.apis, low)
    run = team.apis.cluster.runs()[low]
    assert run.name.endswith("-run-1") and run.anchor_step == 20


def test_a_restart_waits_until_the_pods_of_its_stopped_run_are_gone(solo: MakeSolo) -> None:
    """D210: a preempted job's pods may still be saving a checkpoint (on SIGTERM, within
    their grace period) when its quota frees again. Its restart waits for them, with a
    reason that says so, and is admitted by the first pass after they are gone; its dispatch
    then looks up what they saved (D209)."""
    team = solo(8, hyperpod_nodes=1, borrow=0)
    assert team.api.call("PUT", "/scheduler-config", LOW_AND_HIGH).status == 200
    low = team.submit(8, priority_class="low", checkpoint_location=f"s3://{BUCKET}/low/")
    service = team.scheduler()
    assert service.run_pass().dispatched == [low]
    until_running(team.apis, low)
    (pod,) = job_pods(team.apis, low)
    with _grace_period(team.apis, pod):
        high = team.submit(8, priority_class="high")
        result = service.run_pass()
        assert result.preempted == [low] and result.dispatched == [high]
        assert team.api.call("DELETE", f"/jobs/{high}").status == 200
        wait_for(
            lambda: all(p["metadata"].get("deletionTimestamp") for p in job_pods(team.apis, low)),
            loaded(30),
            "the preempted job's pod to be stopping",
        )
        result = service.run_pass()
        assert result.stopped == [high] and result.admitted == []
        assert team.job(low).status is JobStatus.PREEMPTED
        record = team.api.jobs.record(low)
        assert record is not None and record.reason.startswith("waits for the pods of its run 0")
    until_pods_gone(team.apis, low)
    result = service.run_pass()
    assert result.admitted == [low] and result.dispatched == [low]
    assert team.job(low).run == 1


def test_a_running_job_the_index_has_not_named_yet_still_holds_its_quota(
    solo: MakeSolo, monkeypatch: pytest.MonkeyPatch
) -> None:
    """D178: a job admitted a moment after its submission, by the pass its submission woke,
    may still be missing from the `Live` index (a keys-only GSI, eventually consistent) when
    the next pass reads the jobs. Its live run names it, the pass reads it by key, and what it
    holds counts: a job submitted after it waits instead of being placed on its nodes."""
    team = solo(16, hyperpod_nodes=2, strategy="DontLend", borrow=None)
    first = team.submit(8, replicas=2)
    service = team.scheduler()
    assert service.run_pass(job_ids=[first]).dispatched == [first]
    second = team.submit(8)
    indexed = JobStore.active

    def lagging(self: JobStore, also: Collection[str] = ()) -> list[JobRecord]:
        return [r for r in indexed(self, also) if r.job.job_id != first]

    monkeypatch.setattr(JobStore, "active", lagging)
    result = service.run_pass(job_ids=[second])
    assert result.admitted == [] and result.stopped == []
    assert team.job(second).status is JobStatus.PENDING
    assert team.job(first).status is JobStatus.RUNNING


def test_elastic_growth_is_fenced_on_the_teams_quota_version(solo: MakeSolo) -> None:
    team = solo(16, hyperpod_nodes=4, strategy="DontLend", borrow=None)
    elastic = {"minReplicas": 2, "maxReplicas": 4, "scalingTimeoutInSeconds": 0}
    job_id = team.submit(8, replicas=2, elastic_policy=elastic)
    service = team.scheduler()
    assert service.run_pass().admitted == [job_id]
    assert team.api.quota("solo", 32, strategy="DontLend", borrow=None, version=1).status == 200
    # the snapshot has 32 GPUs: the engine grows the job to 4 replicas
    cut = partial(team.api.quota, "solo", 16, strategy="DontLend", borrow=None, version=2)
    with quota_changed_after_the_snapshot(service, cut):
        result = service.run_pass()
    assert result.resized == [] and result.conflicts == 1
    record = team.api.jobs.record(job_id)
    assert record is not None and len(record.job.nodes) == 2 and record.admitted_replicas == 2


def test_a_node_replaced_under_a_job_is_held_for_it_until_its_recovery_moves_it(
    solo: MakeSolo,
) -> None:
    """A job waiting for its node's repair restarts on the replacement, the node that kept
    the NodeLogicalId. Until its recovery moves it there, the job holds that node: an
    elastic job does not grow into it, even where it is the only node with room, and grows
    into an idle node once there is one (taking the held node would leave the waiting job's
    pod Pending, Insufficient nvidia.com/gpu) (D84)."""
    team = solo(24, hyperpod_nodes=4, borrow=0)
    waiting = team.submit(8, replicas=2)
    elastic = {"minReplicas": 1, "maxReplicas": 3, "scalingTimeoutInSeconds": 0}
    grower = team.submit(8, replicas=1, elastic_policy=elastic)
    inventory = NodeStore(team.stack.tables["NodesTable"])
    service = team.scheduler(nodes=inventory)
    service.run_pass()
    assert team.running() == {waiting, grower}
    failed = team.job(waiting).nodes[0]
    inventory.upsert_inventory(team.apis.gateway.list_nodes())
    lifecycle = JobLifecycle(team.api.jobs)
    assert lifecycle.protect(waiting, incident_id="incident-1", node=failed, strategy="wait")
    replaced = sagemaker().batch_replace_cluster_nodes(ClusterName=HYPERPOD, NodeIds=[failed])
    assert replaced["Successful"] == [failed]
    team.apis.advance(team.apis.cluster.timings.replace_s + 60)
    (new,) = [n for n in team.apis.gateway.list_nodes() if n.instance_id not in team.apis.hyperpod]
    assert new.healthy and new.schedulable
    assert failed not in {i.instance_id for i in team.apis.cluster.instances()}
    grown_from = team.job(grower).nodes
    held = {*team.job(waiting).nodes, *grown_from}
    (idle,) = {n.instance_id for n in team.apis.gateway.list_nodes()} - held - {new.instance_id}
    assert team.api.quota("solo", 40, borrow=0, version=1).status == 200  # room to grow
    # An operator cordons the idle node: the replacement is the only node with room, which
    # the grower would take, whatever the nodes' ids, if it were not held.
    idle_node = team.apis.cluster.instance(idle)
    assert idle_node is not None
    team.apis.kube.patch(NODES, idle_node.node_name, {"spec": {"unschedulable": True}})
    service.run_pass()
    assert team.job(grower).nodes == grown_from
    team.apis.kube.patch(NODES, idle_node.node_name, {"spec": {"unschedulable": False}})
    service.run_pass()
    assert team.job(grower).nodes[1:] == [idle]
    assert team.job(waiting).nodes.count(failed) == 1


def test_the_minimum_run_time_set_through_the_api_holds_preemption_back(solo: MakeSolo) -> None:
    team, low = _low_priority_job(solo)
    config = team.api.call("GET", "/scheduler-config").body["SchedulerConfig"]
    reply = team.api.call("PUT", "/scheduler-config", config | {"MinRuntimeSeconds": 600})
    assert reply.status == 200 and reply.body["Version"] == 2
    assert (
        team.api.call("GET", "/scheduler-config").body["SchedulerConfig"]["MinRuntimeSeconds"]
        == 600
    )
    service = team.scheduler()
    assert service.run_pass().admitted == [low]
    high = team.submit(8, priority_class="high")
    team.apis.advance(599)
    assert service.run_pass().preempted == []
    assert team.running() == {low}
    waiting = team.api.call("GET", f"/jobs/{high}").body
    assert waiting["status"] == "Pending"
    assert "candidate jobs have run less than the minimum run time 600s" in waiting["reason"]
    team.apis.advance(1)
    result = service.run_pass()
    assert result.preempted == [low] and result.admitted == [high]
    until_running(team.apis, high)


def test_a_job_whose_class_left_the_config_still_starts_on_the_cluster(solo: MakeSolo) -> None:
    team, low = _low_priority_job(solo)
    classes = {"PriorityClasses": [{"Name": "high", "Weight": 9}]}
    assert team.api.call("PUT", "/scheduler-config", classes).status == 200
    team.scheduler().run_pass()
    # Kueue needs the class the run names; the pass gives it one below every class.
    assert team.running() == {low}
    below = team.apis.kube.get(PRIORITY_CLASSES, "low-priority")
    assert below is not None and below["value"] == -1


def test_log_monitoring_rules_are_submitted_shown_and_run_on_the_strict_twin(
    solo: MakeSolo,
) -> None:
    """A job's logMonitoringConfiguration goes, as submitted, into its HyperPodPyTorchJob,
    which the twin's API server checks against the rule's fields; a rule the operator
    could not apply is refused at submission with the field named."""
    team = solo(8, hyperpod_nodes=1, borrow=0)
    rules = [
        {
            "name": "JobHangingDetection",
            "logPattern": ".*'training_loss_step': (\\d+(\\.\\d+)?).*",
            "expectedRecurringFrequencyInSeconds": 300,
            "expectedStartCutOffInSeconds": 600,
        }
    ]
    reply = team.api.submit("solo", 8, log_monitoring_configuration=rules)
    assert reply.status == 201, reply.body
    job_id = reply.body["job_id"]
    shown = team.api.call("GET", f"/jobs/{job_id}").body["log_monitoring_configuration"]
    assert [{k: v for k, v in r.items() if v is not None} for r in shown] == rules
    team.scheduler().run_pass()
    assert team.running() == {job_id}
    run = team.apis.cluster.runs()[job_id]
    stored = team.apis.kube.get(HYPERPOD_PYTORCH_JOBS, run.name, run.namespace)
    assert stored is not None and stored["spec"]["runPolicy"]["logMonitoringConfiguration"] == rules

    bad = [{"name": "JobStart", "logPattern": "(", "expectedStartCutOffInSeconds": 60}]
    refused = team.api.submit("solo", 8, log_monitoring_configuration=bad)
    assert refused.status == 422
    assert "log_monitoring_configuration" in str(refused.body)
    assert "logPattern" in str(refused.body)


class CountsResizes(HyperPodEksGateway):
    """The cluster, with every resize HyperGuard asks of it recorded (job id, nodes)."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.resizes: list[tuple[str, int]] = []

    def resize(self, job: Job, nodes: list[str]) -> bool:
        self.resizes.append((job.job_id, len(nodes)))
        return super().resize(job, nodes)


def elastic_job_on_four_nodes(
    solo: MakeSolo,
) -> tuple[Solo, str, CountsResizes, SchedulerService]:
    """A low-priority elastic job (1-4 nodes) running on all four nodes of a team's own
    cluster, with a scheduler whose cluster records every resize; priority class `high` is
    defined."""
    team = solo(32, hyperpod_nodes=4, strategy="DontLend", borrow=None)
    assert team.api.call("PUT", "/scheduler-config", LOW_AND_HIGH).status == 200
    elastic = {"minReplicas": 1, "maxReplicas": 4, "scalingTimeoutInSeconds": 0}
    training = team.submit(8, replicas=4, priority_class="low", elastic_policy=elastic)
    gateway = team.gateway(CountsResizes)
    service = team.scheduler(gateway)
    assert service.run_pass().admitted == [training]
    return team, training, gateway, service


def test_an_elastic_job_two_admissions_shrink_restarts_once_at_its_final_size(
    solo: MakeSolo,
) -> None:
    """Two urgent jobs admitted in one pass both take a node of the team's elastic job: its
    record is written smaller for each admission (each write fenced with it), but the
    cluster resizes it once, to two nodes, since each resize is a checkpoint and a restart
    of the whole job."""
    team, training, gateway, service = elastic_job_on_four_nodes(solo)
    urgent = {team.submit(8, priority_class="high") for _ in range(2)}
    result = service.run_pass()
    assert set(result.admitted) == urgent
    assert result.resized == [training, training]  # written once for each admission
    assert gateway.resizes == [(training, 2)]
    assert len(team.job(training).nodes) == 2
    assert team.running() == {training, *urgent}
    assert len(team.apis.cluster.runs()[training].nodes) == 2


def test_an_elastic_job_shrunk_for_a_refused_admission_is_resized_on_the_cluster_too(
    solo: MakeSolo,
) -> None:
    """The shrink is written (fenced on the lease), the admission it served is refused (the
    team's quota changed after the snapshot): the cluster follows the record, so the job
    keeps running at its new size instead of its run being swept as out of date."""
    team, training, gateway, service = elastic_job_on_four_nodes(solo)
    urgent = team.submit(8, priority_class="high")
    change = partial(team.api.quota, "solo", 32, strategy="DontLend", borrow=None, version=1)
    with quota_changed_after_the_snapshot(service, change):
        result = service.run_pass()
    assert result.admitted == [] and result.conflicts == 1
    assert result.resized == [training] and gateway.resizes == [(training, 3)]
    assert service.run_pass().admitted == [urgent]
    assert team.running() == {training, urgent}
    assert len(team.apis.cluster.runs()[training].nodes) == 3


@contextmanager
def throttled(jobs: JobStore, job_id: str) -> Iterator[list[str]]:
    """DynamoDB throttles every transaction on the jobs table that writes `job_id`, raised as
    botocore raises it once its retries are spent. Yields the throttled job ids."""
    events = wire_client(jobs.table).meta.events  # the store's transactions (D180)
    refused: list[str] = []

    def throttle(params: dict[str, Any], **_: Any) -> None:
        if job_id in json.dumps(params, default=str):
            refused.append(job_id)
            error = {"Code": "ThrottlingException", "Message": "Rate of requests exceeds limit"}
            raise ClientError({"Error": error}, "TransactWriteItems")

    events.register("before-call.dynamodb.TransactWriteItems", throttle)
    try:
        yield refused
    finally:
        events.unregister("before-call.dynamodb.TransactWriteItems", throttle)


def test_one_throttled_admission_leaves_the_others_standing_and_is_admitted_next_pass(
    solo: MakeSolo,
) -> None:
    """A pass writes its admissions in one transaction and dispatches them together (D162,
    D172). DynamoDB throttles, past botocore's retries, every transaction that writes one of
    them: the batch's, then that job's own, once the batch's jobs are written one by one.
    The pass fails once the others are done: they stand, admitted, dispatched and marked
    Running; the next pass admits the throttled one, and no job is admitted twice."""
    team = solo(32, hyperpod_nodes=4, strategy="DontLend", borrow=None)
    ids = [team.submit(8) for _ in range(4)]
    unlucky = ids[2]
    service = team.scheduler()
    with throttled(service.jobs, unlucky) as refused, pytest.raises(ClientError):
        service.run_pass()
    assert refused == [unlucky, unlucky]
    assert {i for i in ids if team.job(i).status is JobStatus.RUNNING} == set(ids) - {unlucky}
    assert team.job(unlucky).status is JobStatus.PENDING
    assert service.run_pass().admitted == [unlucky]
    for job_id in ids:
        history = team.api.call("GET", f"/jobs/{job_id}").body["history"]
        assert [h["event"] for h in history].count("admitted") == 1, job_id
    assert {i for i in ids if team.job(i).status is JobStatus.RUNNING} == set(ids)
    until_running(team.apis, *ids)


class Killed(BaseException):
    """The Lambda runtime ending a pass mid-way (a timeout): nothing of the pass runs after."""


class KilledDispatching(HyperPodEksGateway):
    """The pass is killed as it dispatches `doomed`: that job's run is never created."""

    doomed = ""

    def dispatch(self, job: Job, nodes: list[str]) -> bool:
        if job.job_id == self.doomed:
            raise Killed
        return super().dispatch(job, nodes)


def test_jobs_a_killed_pass_left_admitted_run_or_are_placed_again_by_the_next_pass(
    solo: MakeSolo,
) -> None:
    """A pass killed between its admissions' writes and their Running marks leaves them
    Admitted; the next pass marks the one whose run the cluster has Running and puts the
    other back in the queue, then admits it again: each job ends up running once."""
    team = solo(16, hyperpod_nodes=2, strategy="DontLend", borrow=None)
    created, lost = team.submit(8), team.submit(8)
    killer = team.gateway(KilledDispatching)
    killer.doomed = lost
    service = team.scheduler(killer)

    def killed(dispatched: Sequence[Job]) -> dict[str, Outcome]:
        raise Killed

    service.lifecycle.start_all = killed  # type: ignore[method-assign]
    with pytest.raises(Killed):
        service.run_pass()
    assert team.job(created).status is team.job(lost).status is JobStatus.ADMITTED
    team.apis.settle()  # the operator sees the run object the killed pass created
    assert set(team.apis.cluster.runs()) == {created}

    result = team.scheduler().run_pass()
    assert result.dispatched == [created, lost] and result.admitted == [lost]
    view = team.api.call("GET", f"/jobs/{lost}").body
    events = [h["event"] for h in view["history"]]
    assert events[-3:] == ["requeued", "restarted", "dispatched"]  # as a refused dispatch
    assert "the pass that admitted it ended before it created the run" in str(view["history"])
    until_running(team.apis, created, lost)
    assert (team.job(created).run, team.job(lost).run) == (0, 1)
    assert set(team.apis.cluster.runs()) == {created, lost}


def test_a_pass_reads_its_nodes_beside_its_jobs_and_lists_the_runs_after_them(
    solo: MakeSolo, monkeypatch: pytest.MonkeyPatch
) -> None:
    """D193: the snapshot's reads that need no job are in flight while the jobs are read
    (each waits here for the other: read one after the other, they would time out); the
    runs are listed only once the jobs are (what the orphan sweep is safe against)."""
    team = solo(16)
    job_id = team.submit(8)
    jobs_reading, jobs_read, nodes_read = threading.Event(), threading.Event(), threading.Event()
    runs_after_jobs: list[bool] = []
    active = JobStore.active

    def read_active(store: JobStore, also: Collection[str] = ()) -> list[JobRecord]:
        jobs_reading.set()
        assert nodes_read.wait(10), "the nodes were not read beside the jobs"
        found = active(store, also)
        jobs_read.set()
        return found

    class ReadOrder(HyperPodEksGateway):
        def list_nodes(self) -> list[Node]:
            assert jobs_reading.wait(10), "the nodes were not read beside the jobs"
            nodes = super().list_nodes()
            nodes_read.set()
            return nodes

        def job_runs(self) -> list[RunStatus]:
            runs_after_jobs.append(jobs_read.is_set())
            return super().job_runs()

    monkeypatch.setattr(JobStore, "active", read_active)
    assert team.scheduler(team.gateway(ReadOrder)).run_pass().admitted == [job_id]
    assert runs_after_jobs == [True]
