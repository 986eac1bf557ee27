"""Recovery strategies carried out: an elastic job shrinks onto its healthy nodes and grows
back once the node returns; an asked-for wait_for_repair is honoured even with a spare at
hand; a job whose template allows burst capacity moves at once. Jobs go through the API and
the scheduler; recovery's steps run against the simulated cluster's APIs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.conftest import Stack
from tests.deadlines import loaded
from tests.integration.api_harness import Api
from tests.integration.cluster_harness import BUCKET, ClusterApis, wait_for_cluster
from tests.integration.conftest import MakeCluster
from tests.integration.recovery_harness import UP_TO_DRAIN, StepRunner, recovery_steps
from tests.integration.scheduler_harness import running_jobs, scheduler

from hyperguard.cluster.hyperpod_eks import HyperPodEksGateway
from hyperguard.governance.service import SchedulerService
from hyperguard.inventory import InventorySync
from hyperguard.messaging import EventPublisher
from hyperguard.models import IncidentStatus, Job, JobStatus, Repair
from hyperguard.policies.repair import NodeRepairConfig
from hyperguard.store import IncidentStore, NodeStore
from hyperguard.store.checkpoints import split_s3_uri
from hyperguard.store.policy import RepairPolicyStore
from hyperguard_trainer import Checkpointer, Context
from hyperguard_trainer.storage import S3Target

ELASTIC = {
    "minReplicas": 2,
    "maxReplicas": 4,
    "replicaIncrementStep": 1,
    "scalingTimeoutInSeconds": 0,
    "faultyScaleDownTimeoutInSeconds": 30,
}


class Recovery(StepRunner):
    def __init__(self, stack: Stack, apis: ClusterApis) -> None:
        self.apis = apis
        self.nodes = NodeStore(stack.tables["NodesTable"])
        self.incidents = IncidentStore(stack.tables["IncidentsTable"], stack.tables["NodesTable"])
        self.sync = InventorySync(self.nodes, apis.gateway, frozenset({"hyperguard-twin"}))
        publisher = EventPublisher(stack.bus_name)
        publisher.publish = lambda *a, **k: None  # type: ignore[method-assign]
        self.steps = recovery_steps(stack, apis, self.nodes, self.incidents, publisher)

    def fault(self, instance_id: str, kind: str = "gpu") -> dict[str, Any]:
        """The node fails (a GPU fault is to be rebooted, any other replaced), the inventory
        sees it and the report opens its incident."""
        self.apis.cluster.inject_fault(instance_id, kind)  # type: ignore[arg-type]
        self.sync.sync()
        return self.open(instance_id, Repair.REBOOT if kind == "gpu" else Repair.REPLACE)

    def drained(self, instance_id: str, kind: str = "gpu") -> dict[str, Any]:
        """A fault on the node, and recovery's steps on it up to the drain."""
        return self.run(*UP_TO_DRAIN, r=self.fault(instance_id, kind))

    def plan(self, r: dict[str, Any]) -> Any:
        incident = self.incidents.get(r["incident_id"])
        assert incident is not None
        return incident.jobs[0]


def running_on(apis: ClusterApis, job_id: str, replicas: int) -> Any:
    """The job's run once its pods run on `replicas` nodes: the operator restarts a resized
    run and kube-scheduler binds its pods in wall time, after the service has acted."""

    def ready() -> Any:
        apis.settle()
        run = apis.cluster.runs().get(job_id)
        return run if run and run.state == "running" and len(run.nodes) == replicas else None

    return wait_for_cluster(apis, ready, loaded(60), f"{job_id} to run on {replicas} node(s)")


def start(
    stack: Stack,
    apis: ClusterApis,
    *,
    team_gpus: int,
    location: str = f"s3://{BUCKET}/job/",
    **job: Any,
) -> tuple[Api, SchedulerService, Recovery, str]:
    RepairPolicyStore(stack.tables["TeamsTable"]).put(NodeRepairConfig())
    api = Api(stack, checkpoint_bucket=split_s3_uri(location)[0])
    api.quota("solo", team_gpus, strategy="DontLend", borrow=None)
    job_id = api.submit("solo", 8, checkpoint_location=location, **job).body["job_id"]
    service = scheduler(stack, apis)
    assert service.run_pass().admitted == [job_id]
    recovery = Recovery(stack, apis)
    recovery.sync.sync()
    apis.advance(60 + 30 * 12)  # a checkpoint at step 10
    return api, service, recovery, job_id


def test_an_elastic_job_shrinks_in_place_and_grows_back_when_the_node_returns(
    stack: Stack, make_cluster: MakeCluster
) -> None:
    apis = make_cluster(hyperpod_nodes=4)
    api, service, recovery, job_id = start(
        stack,
        apis,
        team_gpus=32,
        replicas=4,
        elastic_policy=ELASTIC,
        recovery={"strategy": "elastic_shrink"},
    )
    faulty = apis.cluster.job_instances(job_id)[-1]
    r = recovery.drained(faulty)
    plan = recovery.plan(r)
    assert (plan.strategy, plan.why) == ("elastic_shrink", "asked for elastic_shrink")
    assert plan.outcome == "shrunk to 3 replica(s) in place"
    view = api.call("GET", f"/jobs/{job_id}").body
    assert len(view["nodes"]) == 3 and faulty not in view["nodes"]
    assert view["protected_by"] is None and view["run"] == 1
    run = running_on(apis, job_id, 3)
    assert run.name == view["job_id"]  # the same HyperPodPyTorchJob, patched
    apis.advance(120)
    assert apis.cluster.step_of(job_id) > 10  # training on at 3 replicas, from step 10

    r = recovery.run("repair", r=r)
    r = recovery.until_healthy(r)
    r = recovery.run("return_to_service", "resume_jobs", "close", r=r)
    assert r["resolution"] == "rebooted"
    result = service.run_pass()
    assert result.resized == [job_id]  # grown back into the returned node
    view = api.call("GET", f"/jobs/{job_id}").body
    assert len(view["nodes"]) == 4 and faulty in view["nodes"]
    events = [h["event"] for h in view["history"] if h["event"] != "checkpoint"]
    assert events[-5:] == [
        "protected",
        "shrunk",
        "released",
        "operator_restarted",  # the in-place shrink restarted the HyperPodPyTorchJob (D155)
        "grown",
    ]
    run = running_on(apis, job_id, 4)
    assert run.name == view["job_id"]  # still the same HyperPodPyTorchJob, grown back


def test_an_asked_wait_for_repair_is_honoured_with_a_spare_at_hand(
    stack: Stack, make_cluster: MakeCluster
) -> None:
    apis = make_cluster(hyperpod_nodes=4)
    api, _, recovery, job_id = start(
        stack, apis, team_gpus=32, replicas=2, recovery={"strategy": "wait_for_repair"}
    )
    faulty = apis.cluster.job_instances(job_id)[0]
    r = recovery.drained(faulty)
    plan = recovery.plan(r)
    assert (plan.strategy, plan.why, plan.spare) == (
        "wait_for_repair",
        "asked for wait_for_repair",
        None,
    )
    assert set(plan.lost_gpu_minutes) == {"wait_for_repair", "hot_spare"}  # spare was there
    assert job_id not in {r.job_id for r in apis.gateway.job_runs()}  # stopped until then
    record = api.jobs.record(job_id)
    assert record is not None and plan.checkpoint_step == 10
    protected = next(h for h in record.history if h.event.value == "protected")
    # Recorded, not weighed. (The marker's time is S3's LastModified, a wall clock the
    # twin's manual clock does not share: only its presence is checked here.)
    assert isinstance(protected.details["checkpoint_age_s"], int | float)


def _move_off_a_failed_node(stack: Stack, apis: Any) -> tuple[Any, Any, Any, str, Any]:
    """A development job asking for `move`, its node failed, recovery up to the drain."""
    api, service, recovery, job_id = start(
        stack,
        apis,
        team_gpus=16,
        replicas=2,
        template="development",
        recovery={"strategy": "move"},
    )
    faulty = apis.cluster.job_instances(job_id)[0]
    r = recovery.drained(faulty, "persistent")
    return api, service, recovery, job_id, r


def test_a_development_job_moves_at_once_and_is_placed_again(
    stack: Stack, make_cluster: MakeCluster
) -> None:
    apis = make_cluster(hyperpod_nodes=2, burst_nodes=4)  # two on-demand, two spot
    api, service, recovery, job_id, r = _move_off_a_failed_node(stack, apis)
    assert r["moved"] == [job_id]
    assert recovery.plan(r).outcome == "requeued (move)"
    assert api.call("GET", f"/jobs/{job_id}").body["status"] == "Pending"
    result = service.run_pass()
    assert result.admitted == [job_id]
    view = api.call("GET", f"/jobs/{job_id}").body
    assert view["pool"] == "gpu-burst-on-demand"  # HyperPod has one healthy node left
    assert view["last_checkpoint"]["step"] == 10
    apis.settle()
    assert apis.cluster.runs()[job_id].kind == "Job"  # a batch Job on EKS
    assert apis.cluster.runs()[job_id].anchor_step == 10


class CancelsBeforeDispatch(HyperPodEksGateway):
    """Recovery's gateway: just before recovery dispatches the run it restarted, a user
    cancels the job and a scheduling pass stops its pods."""

    before: Callable[[], None]

    def dispatch(self, job: Job, nodes: list[str]) -> bool:
        self.before()
        return super().dispatch(job, nodes)


def test_a_cancel_between_recoverys_restart_and_its_dispatch_leaves_no_orphan_run(
    stack: Stack, make_cluster: MakeCluster
) -> None:
    apis = make_cluster(hyperpod_nodes=3)
    api, service, recovery, job_id = start(stack, apis, team_gpus=16, replicas=2)

    def cancel_and_pass() -> None:
        assert api.call("DELETE", f"/jobs/{job_id}").status == 200
        assert service.run_pass().stopped == [job_id]

    gateway = CancelsBeforeDispatch(apis.gateway.hyperpod, apis.gateway.kubernetes)
    gateway.before = cancel_and_pass
    recovery.steps.gateway = gateway
    faulty = apis.cluster.job_instances(job_id)[0]
    r = recovery.drained(faulty)
    assert recovery.plan(r).strategy == "hot_spare"
    record = api.jobs.record(job_id)
    assert record is not None and record.job.status is JobStatus.CANCELLED
    assert not record.stop_pending  # its pods were stopped before the run was dispatched
    assert job_id in running_jobs(apis)  # the run recovery dispatched after that: an orphan
    result = service.run_pass()
    assert result.stopped == [job_id]
    assert job_id not in running_jobs(apis)


def test_the_repaired_node_becomes_the_hot_spare(stack: Stack, make_cluster: MakeCluster) -> None:
    apis = make_cluster(hyperpod_nodes=3)
    api, service, recovery, job_id = start(stack, apis, team_gpus=24, replicas=2)
    RepairPolicyStore(stack.tables["TeamsTable"]).put(
        NodeRepairConfig.model_validate({"hotSpares": {"workers": 1}})
    )
    assert service.run_pass().spares == 1  # the idle third node
    faulty = apis.cluster.job_instances(job_id)[0]
    r = recovery.drained(faulty)
    spare = recovery.plan(r).spare
    assert recovery.plan(r).outcome == f"restarted on {spare}"
    r = recovery.run("repair", r=r)
    r = recovery.until_healthy(r)
    r = recovery.run("return_to_service", "resume_jobs", "close", r=r)
    assert r["resolution"] == "rebooted"
    later = api.submit("solo", 8).body["job_id"]
    result = service.run_pass()
    assert result.spares == 1 and result.admitted == []  # the repaired node is held back
    view = api.call("GET", f"/jobs/{job_id}").body
    assert spare in view["nodes"] and faulty not in view["nodes"]
    assert faulty in {n.instance_id for n in recovery.nodes.in_pool("workers") if n.healthy}
    assert faulty not in {i for j in running_jobs(apis) for i in apis.cluster.job_instances(j)}
    reason = api.call("GET", f"/jobs/{later}").body["reason"]
    assert "installed capacity of ml.p5.48xlarge exhausted" in reason


def test_a_moved_job_is_placed_on_burst_capacity_though_hyperpod_has_room(
    stack: Stack, make_cluster: MakeCluster
) -> None:
    apis = make_cluster(hyperpod_nodes=4, burst_nodes=4)
    api, service, recovery, job_id, r = _move_off_a_failed_node(stack, apis)
    assert recovery.plan(r).outcome == "requeued (move)"
    requeued = api.jobs.record(job_id)
    assert requeued is not None and requeued.prefer_burst
    assert requeued.history[-1].reason.endswith("placed next on EKS burst capacity first")
    assert requeued.history[-1].details["prefer_burst"] is True
    assert service.run_pass().admitted == [job_id]
    placed = api.jobs.record(job_id)
    assert placed is not None and placed.job.pool == "gpu-burst-on-demand"  # two HyperPod
    assert not placed.prefer_burst  # nodes were idle: the preference is spent
    admitted = next(h for h in reversed(placed.history) if h.event.value == "restarted")
    assert "burst capacity first: moved off a failed node" in admitted.reason


def test_a_job_whose_checkpoints_s3_refuses_still_has_its_node_repaired(
    stack: Stack, make_cluster: MakeCluster
) -> None:
    """The stack's CheckpointBucketName, and so the job's bucket, is mistyped: recovery cannot
    read its newest checkpoint, falls back to the one it reported (none), and the node is
    repaired and the job resumed all the same (D138)."""
    apis = make_cluster(hyperpod_nodes=2)
    api, _, recovery, job_id = start(
        stack, apis, team_gpus=16, location="s3://hyperguard-mistyped/job/"
    )
    faulty = apis.cluster.job_instances(job_id)[0]
    r = recovery.run("repair", r=recovery.drained(faulty, "persistent"))
    assert recovery.plan(r).checkpoint_step is None  # none it could read or had reported
    r = recovery.until_healthy(r)
    assert r["health"] == "healthy"
    r = recovery.run("return_to_service", "resume_jobs", "close", r=r)
    closed = recovery.incidents.get(r["incident_id"])
    assert closed is not None and closed.status is IncidentStatus.RESOLVED
    assert api.jobs.record(job_id).job.status is JobStatus.RUNNING  # type: ignore[union-attr]


def test_recovery_does_not_resume_from_a_checkpoint_contract_v2_refuses(
    stack: Stack, make_cluster: MakeCluster
) -> None:
    """A writer that claims a run HyperGuard never started completes a checkpoint far ahead
    of the job's: recovery passes it over for the job's own newest, and says why in the
    job's history, once (D164)."""
    apis = make_cluster(hyperpod_nodes=2)
    location = f"s3://{BUCKET}/fenced-recovery/"
    api, _, recovery, job_id = start(stack, apis, team_gpus=16, location=location)
    foreign = Context(job_id=job_id, run=7)
    Checkpointer(S3Target(location), context=foreign).save(9_000, {"w": [1]})
    faulty = apis.cluster.job_instances(job_id)[0]
    r = recovery.drained(faulty, "persistent")
    step = recovery.plan(r).checkpoint_step
    assert step is not None and 0 < step < 9_000  # the job's own newest, written by its run
    history = api.call("GET", f"/jobs/{job_id}").body["history"]
    (refusal,) = [h for h in history if h["event"] == "checkpoint_refused"]
    assert refusal["details"] == {"step": 9_000}
    assert "written by run 7, which HyperGuard has not started" in refusal["reason"]
