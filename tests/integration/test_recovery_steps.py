"""NodeRecovery's steps in the order the state machine runs them, on moto and the simulated
cluster behind real APIs (SageMaker, EKS, the Kubernetes API server), reached through the
service's own adapters, with a manual clock (the state machine itself runs in tests/e2e)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Sequence
from datetime import timedelta
from email.utils import format_datetime
from typing import Any

import pytest
from tests.conftest import EVENTS, Stack
from tests.deadlines import loaded
from tests.integration.cluster_harness import (
    POD_DISRUPTION_BUDGETS,
    ClusterApis,
    cluster_apis,
    seed_jobs,
)
from tests.integration.incident_harness import fault_signal
from tests.integration.recovery_harness import UP_TO_DRAIN, UP_TO_REPAIR, StepRunner, recovery_steps
from tests.integration.scheduler_harness import scheduler

from hyperguard.cluster import ClusterError
from hyperguard.cluster.kubernetes import EVENT_NAMESPACE, FIELD_MANAGER
from hyperguard.events import classify_health_event
from hyperguard.governance.jobs import JobLifecycle
from hyperguard.inventory import InventorySync
from hyperguard.messaging import EventPublisher
from hyperguard.models import (
    Action,
    HealthSignal,
    IncidentStatus,
    JobStatus,
    Node,
    NodeStatus,
    ProtectedJob,
    Repair,
    Severity,
    SignalSource,
)
from hyperguard.models.cluster import RunPhase, RunStatus
from hyperguard.policies.repair import NodeRepairConfig
from hyperguard.recovery.steps import (
    RecoveryTimeoutError,
    RepairRejectedError,
    RepairRetryableError,
)
from hyperguard.store import IncidentStore, JobStore, NodeStore, TeamStore
from hyperguard.store.incidents import SignalOutcome
from hyperguard.store.policy import RepairersStore, RepairPolicyStore
from hyperguard_twin.cluster import SimulatedCluster
from hyperguard_twin.plane.kube import EVENTS as KUBE_EVENTS
from hyperguard_twin.plane.kube import HYPERPOD_PYTORCH_JOBS, NODES, PODS, wait_for


class World(StepRunner):
    def __init__(self, stack: Stack, apis: ClusterApis) -> None:
        self.apis = apis
        self.clock = apis.clock
        self.cluster: SimulatedCluster = apis.cluster
        self.gateway = apis.gateway
        self.nodes = NodeStore(stack.tables["NodesTable"])
        self.jobs = JobStore(stack.tables["JobsTable"])
        self.incidents = IncidentStore(stack.tables["IncidentsTable"], stack.tables["NodesTable"])
        self.teams = TeamStore(stack.tables["TeamsTable"])
        seed_jobs(apis, self.jobs, self.teams)
        self.sync = InventorySync(self.nodes, apis.gateway, frozenset({"hyperguard-twin"}))
        self.sync.sync()
        self.published: list[tuple[str, dict[str, Any]]] = []
        publisher = EventPublisher(stack.bus_name)

        def record(detail_type: str, detail: dict[str, Any], resources: Sequence[str] = ()) -> None:
            self.published.append((detail_type, detail))

        publisher.publish = record  # type: ignore[method-assign]
        self.steps = recovery_steps(
            stack,
            apis,
            self.nodes,
            self.incidents,
            publisher,
            jobs=self.jobs,
            repairers=RepairersStore(stack.tables["TeamsTable"]),
        )

    def gateway_runs(self, *, running: bool = False) -> set[str]:
        """Jobs the cluster has a run of (pending or running ones only, if asked), read
        through the service's adapter."""
        self.apis.settle()
        live = (RunPhase.PENDING, RunPhase.RUNNING)
        return {r.job_id for r in self.gateway.job_runs() if not running or r.phase in live}

    def schedulable(self, instance_id: str) -> bool:
        """What the Kubernetes API says, read through the service's adapter."""
        return self.gateway.node_status(instance_id).schedulable


@pytest.fixture
def world(stack: Stack) -> Iterator[World]:
    """The HyperPod cluster with its seeded jobs, and no burst node (Karpenter's launch
    is three of a set-up's seven seconds, and one test needs it: `burst_world`)."""
    with cluster_apis(burst_nodes=0) as apis:
        yield World(stack, apis)


@pytest.fixture
def burst_world(stack: Stack) -> Iterator[World]:
    """The same, with Karpenter's burst nodes beside it."""
    with cluster_apis() as apis:
        yield World(stack, apis)


def busy_node(world: World, job_id: str = "llama3-70b-pretrain", index: int = 1) -> str:
    return world.cluster.job_instances(job_id)[index]


def occupy_spares(world: World) -> None:
    """Cordon every idle HyperPod node (through the Kubernetes API), so no spare is left."""
    busy = {i for job_id in world.cluster.runs() for i in world.cluster.job_instances(job_id)}
    for instance_id in world.apis.hyperpod:
        if instance_id not in busy:
            world.gateway.cordon(instance_id, incident_id="maintenance", reason="maintenance")
    world.sync.sync()


def test_replace_with_no_spare_resumes_the_job_on_the_replacement_from_its_checkpoint(
    world: World,
) -> None:
    occupy_spares(world)
    world.apis.advance(60 + 30 * 25)  # start, then 25 steps: two more checkpoints land in S3
    faulty = busy_node(world)
    step_before = world.cluster.step_of("llama3-70b-pretrain")
    world.cluster.inject_fault(faulty)
    r = world.open(faulty)
    r = world.run(*UP_TO_REPAIR, r=r)
    assert (r["verdict"], r["action"]) == ("proceed", "replace")
    incident = world.incidents.get(r["incident_id"])
    assert incident is not None and incident.status is IncidentStatus.RECOVERING
    plan = incident.jobs[0]
    assert plan.strategy == "wait_for_repair"
    assert plan.checkpoint_step == step_before - step_before % 10  # the newest complete one
    assert world.schedulable(faulty) is False

    r = world.until_healthy(r)
    assert r["health"] == "healthy" and r["replacement"] != faulty
    r = world.run("return_to_service", "resume_jobs", "close", r=r)
    assert r["resumed"] == ["llama3-70b-pretrain"] and r["resolution"] == "replaced"

    world.apis.advance(60 + 30 * 3)  # restart overhead, then three steps
    placed = world.cluster.job_instances("llama3-70b-pretrain")
    assert r["replacement"] in placed and faulty not in placed
    assert world.cluster.step_of("llama3-70b-pretrain") >= plan.checkpoint_step + 3
    assert world.cluster.runs()["llama3-70b-pretrain"].name == "llama3-70b-pretrain-run-1"
    stored = world.jobs.get("llama3-70b-pretrain")
    assert stored is not None and stored.restart_count == 1 and stored.status is JobStatus.RUNNING
    closed = world.incidents.get(r["incident_id"])
    assert closed is not None and closed.status is IncidentStatus.RESOLVED
    assert set(closed.timings) >= {
        "signal_to_detected_s",
        "signal_to_cordoned_s",
        "signal_to_repair_requested_s",
        "signal_to_healthy_s",
        "signal_to_resumed_s",
        "signal_to_resolved_s",
    }
    assert world.nodes.get(faulty).open_incident_id is None  # type: ignore[union-attr]
    assert [t for t, _ in world.published] == ["IncidentOpened", "IncidentResolved"]


def test_a_run_with_operator_retries_is_resumed_by_recovery_not_restarted_beside_it(
    world: World,
) -> None:
    """A job with `jobMaxRetryCount` above 0 (its own `max_retries`, or log monitoring's
    default: D168) and no auto-resume: after a node fault the operator's pods wait for the
    node, recovery stops that run and resumes the job its own way, and only the new run runs."""
    occupy_spares(world)
    run = world.cluster.runs()["llama3-70b-pretrain"]
    world.apis.kube.patch(
        HYPERPOD_PYTORCH_JOBS,
        run.name,
        {"spec": {"runPolicy": {"jobMaxRetryCount": 3}}},
        run.namespace,
    )
    faulty = busy_node(world)
    world.cluster.inject_fault(faulty)
    r = world.run(*UP_TO_REPAIR, r=world.open(faulty))
    r = world.until_healthy(r)
    r = world.run("return_to_service", "resume_jobs", "close", r=r)
    assert r["resumed"] == ["llama3-70b-pretrain"]
    world.apis.advance(60 + 30 * 3)
    world.apis.settle()
    current = world.cluster.runs()["llama3-70b-pretrain"]
    assert current.name == "llama3-70b-pretrain-run-1" and current.state == "running"
    assert current.restarts == 0  # HyperGuard's run, not the operator's restart of the old
    old = world.apis.kube.get(HYPERPOD_PYTORCH_JOBS, run.name, run.namespace)
    assert old is None or old.get("metadata", {}).get("deletionTimestamp")
    placed = world.cluster.job_instances("llama3-70b-pretrain")
    assert r["replacement"] in placed and faulty not in placed


def test_a_hot_spare_takes_the_job_before_the_repair_finishes(world: World) -> None:
    faulty = busy_node(world)
    world.cluster.inject_fault(faulty)
    r = world.run(*UP_TO_DRAIN, r=world.open(faulty))
    incident = world.incidents.get(r["incident_id"])
    assert incident is not None and incident.jobs[0].strategy == "hot_spare"
    spare = incident.jobs[0].spare
    assert r["moved"] == ["llama3-70b-pretrain"]
    world.apis.settle()
    assert spare in world.cluster.job_instances("llama3-70b-pretrain")
    record = world.jobs.record("llama3-70b-pretrain")
    assert record is not None and record.protected_by is None  # recovery is done with it
    assert record.reason == f"running again after incident {r['incident_id']}"
    assert spare in record.job.nodes and faulty not in record.job.nodes
    assert (record.job.run, record.job.restart_count) == (1, 1)
    why = world.incidents.get(r["incident_id"]).jobs[0]  # type: ignore[union-attr]
    assert why.outcome == f"restarted on {spare}" and why.resumed
    assert "hot_spare" in why.lost_gpu_minutes and why.why.startswith("auto:")


def test_auto_resume_jobs_are_left_to_hyperpod_and_recorded_where_their_pods_run(
    world: World, stack: Stack
) -> None:
    faulty = busy_node(world, "mistral-7b-sft", 0)
    world.cluster.inject_fault(faulty)
    r = world.run(*UP_TO_DRAIN, r=world.open(faulty))
    incident = world.incidents.get(r["incident_id"])
    assert incident is not None and [j.strategy for j in incident.jobs] == ["hyperpod_auto_resume"]
    r = world.run("repair", r=r)
    r = world.until_healthy(r)
    r = world.run("return_to_service", "resume_jobs", r=r)
    assert r["resumed"] == ["mistral-7b-sft"]
    plan = world.incidents.get(r["incident_id"]).jobs[0]  # type: ignore[union-attr]
    assert plan.outcome == "left to HyperPod auto-resume"
    record = world.jobs.record("mistral-7b-sft")
    assert record is not None and record.job.status is JobStatus.RUNNING
    assert record.protected_by is None and record.job.run == 0  # HyperPod's restart, not ours
    # Recovery holds the replacement for it, HyperPod's likeliest choice...
    assert r["action"] == "replace"
    assert r["replacement"] in record.job.nodes and faulty not in record.job.nodes
    assert record.history[-2].event == "relocated"
    # ...but kube-scheduler binds the restarted pods to any free node of the group: the next
    # scheduling pass records the job where they run (D136).
    world.apis.advance(60)
    world.apis.settle()
    assert world.cluster.runs()["mistral-7b-sft"].restarts == 1
    where = set(world.cluster.job_instances("mistral-7b-sft"))
    assert faulty not in where
    result = scheduler(stack, world.apis).run_pass()
    record = world.jobs.record("mistral-7b-sft")
    assert record is not None and set(record.job.nodes) == where
    assert result.relocated == ([] if r["replacement"] in where else ["mistral-7b-sft"])
    # The operator's restart (its restartCount) is in the job's history, once (D155).
    assert result.operator_restarts == ["mistral-7b-sft"]
    restarted = [e for e in record.history if e.event == "operator_restarted"]
    assert [(e.details["run"], e.details["restart_count"]) for e in restarted] == [(0, 1)]
    assert scheduler(stack, world.apis).run_pass().operator_restarts == []


def test_a_reboot_that_does_not_cure_escalates_to_replace(world: World) -> None:
    faulty = busy_node(world, "vit-h14-pretrain", 0)
    world.cluster.inject_fault(faulty, kind="persistent")
    r = world.run(
        *UP_TO_REPAIR,
        r=world.open(faulty, Repair.REBOOT),
    )
    assert r["action"] == "reboot"
    r = world.until_healthy(r)
    assert (r["health"], r["action"]) == ("escalate_replace", "replace")
    r = world.run("repair", r=r)
    r = world.until_healthy(r)
    assert r["health"] == "healthy" and r["replacement"] != faulty
    node = world.nodes.get(faulty)
    assert node is not None and [x["action"] for x in node.repairs] == ["reboot", "replace"]


def test_a_node_that_recovered_on_its_own_is_closed_and_released(world: World) -> None:
    healthy = busy_node(world)
    r = world.run("diagnose", r=world.open(healthy))
    assert (r["verdict"], r["resolution"]) == ("recovered", "recovered_on_its_own")
    r = world.run("close", r=r)
    assert world.nodes.get(healthy).open_incident_id is None  # type: ignore[union-attr]
    assert world.schedulable(healthy)  # never cordoned


def test_diagnose_records_its_execution_on_an_incident_ingest_left_without_it(
    world: World,
) -> None:
    """Ingest starts the recovery, then records it on the incident; a worker killed between
    the two leaves the incident without it, and its retry may come after the recovery has
    closed the incident. Diagnose records it first (the state machine passes
    `$$.Execution.Id`), never over one already recorded."""
    healthy = busy_node(world)
    r = world.open(healthy)
    arn = f"arn:aws:states:us-east-1:123456789012:execution:NodeRecovery:{r['incident_id']}"
    r = world.run("diagnose", r={**r, "execution_arn": arn})
    assert "execution_arn" not in r
    assert world.incidents.get(r["incident_id"]).execution_arn == arn  # type: ignore[union-attr]
    world.run("diagnose", r={**r, "execution_arn": f"{arn}-other"})
    assert world.incidents.get(r["incident_id"]).execution_arn == arn  # type: ignore[union-attr]


def test_a_node_condition_on_a_hyperpod_node_is_not_recovered_on_its_own(world: World) -> None:
    """SageMaker still says Running; the Kubernetes node says KernelReady=False."""
    faulty = busy_node(world)
    world.cluster.inject_fault(faulty, kind="kernel")
    r = world.run("diagnose", r=world.open(faulty, Repair.REBOOT, kind="node_condition"))
    assert r["verdict"] == "repair" and r["action"] == "reboot"


def test_diagnose_reads_the_node_while_it_records_the_detection(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """D215: the incident's bookkeeping (its detection marked, its status, IncidentOpened
    announced) and the reads the decision needs are issued together. The announcement here
    waits for the node's read: one after the other, the read came only after it."""
    faulty = busy_node(world)
    world.cluster.inject_fault(faulty)
    read = threading.Event()
    node_status = world.gateway.node_status

    def reading(instance_id: str) -> Node:
        read.set()
        return node_status(instance_id)

    announce = world.steps.publisher.publish
    read_before_announced: list[bool] = []

    def announcing(detail_type: str, detail: dict[str, Any], resources: Sequence[str] = ()) -> None:
        read_before_announced.append(read.wait(timeout=loaded(5)))
        announce(detail_type, detail, resources)

    monkeypatch.setattr(world.gateway, "node_status", reading)
    monkeypatch.setattr(world.steps.publisher, "publish", announcing)
    r = world.run("diagnose", r=world.open(faulty))
    assert read_before_announced == [True]
    assert r["verdict"] == "repair" and r["action"] == "replace"
    assert [kind for kind, _ in world.published] == ["IncidentOpened"]
    incident = world.incidents.get(r["incident_id"])
    assert incident is not None and incident.status is IncidentStatus.DETECTED


@pytest.mark.parametrize(
    ("code", "times", "error"),
    [
        # A busy node that no repair is under way on (the twin's injected refusal: the node
        # Running): the step fails at once and the state machine retries it (D187).
        ("InstanceIdInUse", 1, RepairRetryableError),
        ("InstanceIdNotFound", 1, RepairRejectedError),
    ],
)
def test_refused_repairs_raise_the_error_the_state_machine_routes(
    world: World, code: str, times: int, error: type[Exception]
) -> None:
    faulty = busy_node(world)
    world.cluster.inject_fault(faulty)
    r = world.run(*UP_TO_DRAIN, r=world.open(faulty))
    world.cluster.fail_next_repairs(code, times)
    with pytest.raises(error, match=code):
        world.run("repair", r=r)
    assert world.schedulable(faulty) is False  # left cordoned
    # The request is marked before the call (a node HyperPod takes goes NotReady at once, and
    # that report must find the mark to join as the repair's side effect: D133).
    incident = world.incidents.get(r["incident_id"])
    assert incident is not None and "signal_to_repair_requested_s" in incident.timings


def test_a_drain_a_pdb_blocks_for_ten_minutes_outlasts_a_lambda_and_ends_forced_on_time(
    world: World,
) -> None:
    """A PodDisruptionBudget that allows no disruption holds a pod on the failed node for the
    policy's whole 10-minute deadline, twice a Lambda's timeout: each Drain call evicts one
    round and returns, the state machine waits `drain_retry_s` and calls again (RouteDrain,
    WaitForDrain), and the call at the deadline deletes what is left."""
    policies = RepairPolicyStore(world.teams.table_name)
    policies.put(NodeRepairConfig.model_validate({"drainDeadlineS": 600}))
    faulty = busy_node(world)
    (node,) = (i.node_name for i in world.cluster.instances() if i.instance_id == faulty)
    namespace = "hyperpod-ns-nlp"
    labels = {"app": "inference"}
    world.apis.kube.create(
        POD_DISRUPTION_BUDGETS,
        {
            "metadata": {"name": "inference"},
            "spec": {"maxUnavailable": 0, "selector": {"matchLabels": labels}},
        },
        namespace,
    )
    world.apis.kube.create(
        PODS,
        {
            "metadata": {"name": "inference-0", "labels": labels},
            "spec": {
                "nodeName": node,
                "containers": [{"name": "serve", "image": "serve:1"}],
                # Only the drain takes it off: kube-controller-manager's taint eviction would
                # delete it once the failed node had been NotReady for 300 s.
                "tolerations": [{"operator": "Exists"}],
            },
        },
        namespace,
    )
    world.cluster.inject_fault(faulty)
    r = world.run("diagnose", "cordon", "guard", "protect_jobs", r=world.open(faulty))
    started = world.clock.now()
    calls = 0
    while True:
        r = world.run("drain", r=r)
        calls += 1
        if not r["drain_pending"]:
            break
        assert 1 <= r["drain_retry_s"] <= 10 and calls < 100
        world.apis.advance(r["drain_retry_s"])  # the WaitForDrain state
    assert (world.clock.now() - started).total_seconds() == 600
    assert calls == 61  # one at once, then one every 10 s for 10 minutes
    assert r["drain"]["forced"] == 1 and r.get("drain_until") is None
    on_node = world.apis.kube.list_objects(PODS, namespace, field_selector=f"spec.nodeName={node}")
    assert all(p["metadata"].get("deletionTimestamp") for p in on_node)


def test_a_busy_node_fails_the_step_at_once_and_the_retried_step_repairs_it(
    world: World,
) -> None:
    """InstanceIdInUse on a node that shows no repair under way is not retried inside the
    Lambda (2 + 4 + 8 s of its time before, D187): the step fails, and the state machine's
    Retry runs it again, which repairs the node."""
    faulty = busy_node(world)
    world.cluster.inject_fault(faulty)
    r = world.run(*UP_TO_DRAIN, r=world.open(faulty))
    world.cluster.fail_next_repairs("InstanceIdInUse", 1)
    with pytest.raises(RepairRetryableError, match="InstanceIdInUse"):
        world.run("repair", r=r)
    r = world.run("repair", r=r)
    assert r["action"] == "replace" and r["health"] == "pending"


def test_a_repair_step_run_again_after_its_call_went_through_waits_for_that_repair(
    world: World,
) -> None:
    """Every step is an ensure step. The Repair step's first call started the replacement and
    its answer was lost (a Lambda timeout: the state machine runs the step again), so HyperPod
    answers the second InstanceIdInUse. The step adopts the replacement under way: retried
    instead, the refusal would outlast the state machine's retries (about a minute) long
    before a replacement ends (a quarter of an hour on AWS), and an operator would be paged
    for a recovery that was going well. The node is replaced once."""
    faulty = busy_node(world)
    world.cluster.inject_fault(faulty)
    r = world.run(*UP_TO_DRAIN, r=world.open(faulty))
    world.run("repair", r=r)  # its answer lost
    again = world.run("repair", r=r)
    assert (again["action"], again["health"]) == ("replace", "pending")
    assert again["reason"] == (
        "a replace of the node was already under way (InstanceIdInUse): its outcome is waited for"
    )
    healthy = world.until_healthy(again)
    assert healthy["health"] == "healthy"
    assert healthy["replacement"] == world.cluster.replacement_of(faulty)
    node = world.nodes.get(faulty)
    assert node is not None and [x["action"] for x in node.repairs] == ["replace", "replace"]


def test_a_reboot_already_under_way_is_waited_for_and_the_ladder_replaces_what_it_left(
    world: World,
) -> None:
    """An operator (or HyperPod) is rebooting the node when HyperGuard asks for its
    replacement: HyperPod refuses with InstanceIdInUse, the node Pending. Repair waits for that
    reboot as for its own; the reboot does not cure the fault, and the health check's ladder
    asks for the replacement."""
    faulty = busy_node(world, "vit-h14-pretrain", 0)
    world.cluster.inject_fault(faulty, kind="persistent")
    r = world.run(*UP_TO_DRAIN, r=world.open(faulty))
    assert world.cluster.api.batch_repair("reboot", [faulty])["Successful"] == [faulty]
    r = world.run("repair", r=r)
    assert (r["action"], r["health"]) == ("reboot", "pending")
    assert r["reason"].startswith("a reboot of the node was already under way")
    r = world.until_healthy(r)
    assert (r["health"], r["action"]) == ("escalate_replace", "replace")
    r = world.until_healthy(world.run("repair", r=r))
    assert r["health"] == "healthy" and r["replacement"] != faulty


def test_a_replacement_that_never_gets_healthy_times_out(world: World) -> None:
    occupy_spares(world)  # the job waits for the repair
    faulty = busy_node(world)
    world.cluster.inject_fault(faulty)
    world.cluster.replacement_never_healthy(faulty)
    r = world.run(*UP_TO_REPAIR, r=world.open(faulty))
    with pytest.raises(RecoveryTimeoutError):
        world.until_healthy(r, step_s=60)
    r = world.run(
        "escalate",
        r={**r, "error": {"Error": "RecoveryTimeoutError", "Cause": "no healthy replacement"}},
    )
    incident = world.incidents.get(r["incident_id"])
    assert incident is not None and incident.status is IncidentStatus.NEEDS_OPERATOR
    assert "RecoveryTimeoutError" in incident.notes[-1]
    # The job it protected is not left holding a node that is not coming back.
    record = world.jobs.record("llama3-70b-pretrain")
    assert record is not None and record.job.status is JobStatus.PENDING
    assert record.job.nodes == [] and record.protected_by is None
    assert incident.jobs[0].outcome.startswith("requeued (the incident was escalated)")
    assert "llama3-70b-pretrain" not in world.gateway_runs()
    # The replacement that never became healthy takes no pods either.
    replacement = world.cluster.replacement_of(faulty)
    assert replacement is not None and world.schedulable(replacement) is False


def test_an_escalation_before_cordon_leaves_the_node_cordoned(world: World) -> None:
    faulty = busy_node(world)
    world.cluster.inject_fault(faulty)
    r = world.run("diagnose", r=world.open(faulty))
    assert world.schedulable(faulty)
    r = world.run("escalate", r={**r, "error": {"Error": "ClusterError", "Cause": "throttled"}})
    assert world.schedulable(faulty) is False
    incident = world.incidents.get(r["incident_id"])
    assert incident is not None and incident.status is IncidentStatus.NEEDS_OPERATOR


def test_an_escalation_requeues_a_job_protected_before_its_plan_was_written(
    world: World,
) -> None:
    """The step died between protecting the job and writing the plan on the incident."""
    occupy_spares(world)
    faulty = busy_node(world)
    world.cluster.inject_fault(faulty)
    r = world.run("diagnose", "cordon", "guard", r=world.open(faulty))
    assert world.steps.lifecycle.protect(
        "llama3-70b-pretrain", incident_id=r["incident_id"], node=faulty
    )
    r = world.run("escalate", r={**r, "error": {"Error": "Runtime.ExitError", "Cause": ""}})
    record = world.jobs.record("llama3-70b-pretrain")
    assert record is not None and record.job.status is JobStatus.PENDING
    assert record.protected_by is None
    incident = world.incidents.get(r["incident_id"])
    assert incident is not None
    assert [(p.job_id, p.strategy) for p in incident.jobs] == [("llama3-70b-pretrain", "requeue")]
    assert incident.jobs[0].outcome.startswith("requeued (the incident was escalated)")


def two_jobs_one_unstoppable(world: World, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """An incident past its guard that protects two jobs, planned to go back to the queue in
    this order, and an API server that refuses to delete the first one's runs (and only
    those). Constructed: the seeded jobs each have nodes of their own, so the second is
    protected through one of its own, as a node that carries two jobs would have it."""
    faulty = busy_node(world)
    world.cluster.inject_fault(faulty)
    r = world.run("diagnose", "cordon", "guard", r=world.open(faulty))
    plan = []
    for job_id, node in (
        ("llama3-70b-pretrain", faulty),
        ("vit-h14-pretrain", busy_node(world, "vit-h14-pretrain", 0)),
    ):
        assert world.steps.lifecycle.protect(job_id, incident_id=r["incident_id"], node=node)
        job = world.jobs.get(job_id)
        assert job is not None
        plan.append(
            ProtectedJob(
                job_id=job_id,
                team=job.team,
                strategy="requeue",
                nodes=job.nodes,
                run=job.run,
                round=1,
            )
        )
    world.incidents.update(r["incident_id"], jobs=plan)
    real = world.gateway.stop_job

    def stop_job(
        job_id: str, *, before_run: int | None = None, runs: Sequence[RunStatus] | None = None
    ) -> bool:
        if job_id == "llama3-70b-pretrain":
            raise ClusterError(f"delete runs of {job_id}: 500 etcdserver: request timed out")
        return real(job_id, before_run=before_run, runs=runs)

    monkeypatch.setattr(world.gateway, "stop_job", stop_job)
    return r


def test_a_job_the_cluster_will_not_stop_holds_back_no_other_job_of_a_step(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Drain carries out every job's plan before it fails for the one the cluster refused,
    and its retry completes that one."""
    r = two_jobs_one_unstoppable(world, monkeypatch)
    with pytest.raises(ClusterError, match="llama3-70b-pretrain"):
        world.run("drain", r=r)
    assert "vit-h14-pretrain" not in world.gateway_runs()
    plan = {p.job_id: p for p in world.incidents.get(r["incident_id"]).jobs}  # type: ignore[union-attr]
    assert plan["vit-h14-pretrain"].resumed and not plan["llama3-70b-pretrain"].resumed

    monkeypatch.undo()
    r = world.run("drain", r=r)
    assert r["moved"] == ["llama3-70b-pretrain"]
    assert "llama3-70b-pretrain" not in world.gateway_runs()


def test_a_job_the_cluster_will_not_stop_holds_back_no_other_job_of_an_escalation(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The other job still goes back to the queue, and the incident to an operator, whose
    note names the job left behind."""
    r = two_jobs_one_unstoppable(world, monkeypatch)
    r = world.run("escalate", r={**r, "error": {"Error": "States.Timeout", "Cause": ""}})
    record = world.jobs.record("vit-h14-pretrain")
    assert record is not None and record.job.status is JobStatus.PENDING
    assert record.protected_by is None
    assert "vit-h14-pretrain" not in world.gateway_runs()
    incident = world.incidents.get(r["incident_id"])
    assert incident is not None and incident.status is IncidentStatus.NEEDS_OPERATOR
    assert "job llama3-70b-pretrain could not be requeued" in incident.notes[-1]
    plan = {p.job_id: p for p in incident.jobs}
    assert plan["vit-h14-pretrain"].resumed and not plan["llama3-70b-pretrain"].resumed


def test_a_redrive_that_finds_the_node_repaired_returns_it_to_service(world: World) -> None:
    """The reboot cured the node, then a step after it failed and the incident went to an
    operator with the node cordoned; the operator's re-drive finds the node healthy."""
    occupy_spares(world)
    faulty = busy_node(world, "vit-h14-pretrain", 0)
    world.cluster.inject_fault(faulty, kind="gpu")
    r = world.run(
        *UP_TO_REPAIR,
        r=world.open(faulty, Repair.REBOOT),
    )
    r = world.until_healthy(r)
    world.run("escalate", r={**r, "error": {"Error": "ClusterError", "Cause": "uncordon"}})
    assert world.schedulable(faulty) is False
    redriven = world.run("diagnose", r={"incident_id": r["incident_id"], "instance_id": faulty})
    assert redriven["resolution"] == "recovered_on_its_own"
    closed = world.run("close", r=redriven)
    assert closed["verdict"] == "closed"
    assert world.schedulable(faulty)
    stored = world.nodes.get(faulty)
    assert stored is not None and stored.schedulable and stored.open_incident_id is None


def test_a_job_whose_other_node_failed_meanwhile_is_requeued_not_restarted(
    world: World,
) -> None:
    """Two nodes of one job fail together: the first incident protects the job, the second
    finds it taken; the first does not restart the job on its partner's failed node."""
    occupy_spares(world)
    first, second = busy_node(world, index=0), busy_node(world, index=1)
    world.cluster.inject_fault(first)
    r = world.run(*UP_TO_REPAIR, r=world.open(first))
    world.cluster.inject_fault(second)
    other = world.run("diagnose", "cordon", "guard", "protect_jobs", r=world.open(second))
    assert other["jobs"] == []  # the first incident has the job
    r = world.until_healthy(r)
    r = world.run("return_to_service", "resume_jobs", r=r)
    plan = world.incidents.get(r["incident_id"]).jobs[0]  # type: ignore[union-attr]
    assert plan.outcome == f"requeued ({second} out of service)"
    record = world.jobs.record("llama3-70b-pretrain")
    assert record is not None and record.job.status is JobStatus.PENDING
    assert record.job.nodes == [] and record.protected_by is None


def repairing_a_busy_node(world: World) -> dict[str, Any]:
    """The llama job's node fails with no spare left: its recovery waits for the repair."""
    occupy_spares(world)
    faulty = busy_node(world)
    world.cluster.inject_fault(faulty)
    return world.run(*UP_TO_REPAIR, r=world.open(faulty))


def test_a_cancel_during_the_repair_is_not_undone_by_resume_jobs(world: World) -> None:
    r = repairing_a_busy_node(world)
    outcome, _ = JobLifecycle(world.jobs).cancel("llama3-70b-pretrain", principal="alice")
    assert outcome
    r = world.until_healthy(r)
    r = world.run("return_to_service", "resume_jobs", "close", r=r)
    record = world.jobs.record("llama3-70b-pretrain")
    assert record is not None and record.job.status is JobStatus.CANCELLED
    assert record.job.run == 0 and record.stop_pending  # the scheduler stops what is left
    plan = world.incidents.get(r["incident_id"]).jobs[0]  # type: ignore[union-attr]
    assert plan.outcome == (
        "restart refused: job llama3-70b-pretrain is Cancelled, not Admitted/Running"
    )
    assert "llama3-70b-pretrain" not in world.gateway_runs(running=True)  # no zombie


def test_a_preemption_during_the_repair_is_not_undone_by_resume_jobs(world: World) -> None:
    r = repairing_a_busy_node(world)
    lease = world.teams.acquire_lease("hyperguard-twin", "a-pass", 60)
    assert lease is not None
    assert JobLifecycle(world.jobs).preempt(
        "llama3-70b-pretrain",
        reason="for a higher priority",
        fence=[world.teams.lease_check(lease)],
    )
    r = world.until_healthy(r)
    r = world.run("return_to_service", "resume_jobs", r=r)
    record = world.jobs.record("llama3-70b-pretrain")
    assert record is not None and record.job.status is JobStatus.PREEMPTED
    assert record.job.nodes == [] and record.job.run == 0
    plan = world.incidents.get(r["incident_id"]).jobs[0]  # type: ignore[union-attr]
    assert plan.outcome.startswith("restart refused: job llama3-70b-pretrain is Preempted")
    assert "llama3-70b-pretrain" not in world.gateway_runs(running=True)


def test_a_storm_over_a_fifth_of_the_pool_trips_the_brake(stack: Stack) -> None:
    with cluster_apis(hyperpod_nodes=256, burst_nodes=0) as apis:
        world_nodes = NodeStore(stack.tables["NodesTable"])
        InventorySync(world_nodes, apis.gateway, frozenset({"hyperguard-twin"})).sync()
        incidents = IncidentStore(stack.tables["IncidentsTable"], stack.tables["NodesTable"])
        steps = recovery_steps(stack, apis, world_nodes, incidents, EventPublisher(stack.bus_name))
        verdicts: list[str] = []
        for instance_id in apis.hyperpod[:64]:
            node = world_nodes.get(instance_id)
            assert node is not None
            signal = fault_signal(node, apis.clock.now(), repair=Repair.REPLACE)
            incident, _ = incidents.open_or_append(node, signal, apis.clock.now())
            verdicts.append(steps.run("guard", {"incident_id": incident.incident_id})["verdict"])
        # 51 of 256 (20 %) may be unhealthy; from the 52nd open incident on, repairs hold.
        assert verdicts[:51] == ["proceed"] * 51
        assert set(verdicts[51:]) == {"hold"}
        held = steps.run("guard", {"incident_id": incidents.recent(1)[0].incident_id})
        assert "64 of 256 nodes in pool workers are unhealthy" in held["hold_reasons"][0]


def test_an_operator_veto_holds_even_a_single_repair(world: World) -> None:
    faulty = busy_node(world)
    world.nodes.set_veto(faulty, "firmware investigation")
    r = world.run("guard", r=world.open(faulty))
    assert r["verdict"] == "hold" and "firmware investigation" in r["hold_reasons"][0]
    for _ in range(2):  # delivered twice: one note
        world.run("request_approval", r={**r, "task_token": "token-1"})
    incident = world.incidents.get(r["incident_id"])
    assert incident is not None and incident.status is IncidentStatus.AWAITING_APPROVAL
    (note,) = incident.notes
    assert "awaiting approval: operator veto on" in note and "firmware investigation" in note
    assert f"hyperguard incidents approve {incident.incident_id}" in note
    approved = world.run("guard", r={**r, "approval": {"approved_by": "ops"}})
    assert approved["verdict"] == "proceed"


def test_two_replacements_in_one_pool_each_find_their_own_node(world: World) -> None:
    first, second = busy_node(world, index=0), busy_node(world, "vit-h14-pretrain", 0)
    recoveries = []
    for faulty in (first, second):
        world.cluster.inject_fault(faulty)
        r = world.run(*UP_TO_REPAIR, r=world.open(faulty))
        recoveries.append(r)
    done = [world.until_healthy(r) for r in recoveries]
    replacements = [r["replacement"] for r in done]
    assert len(set(replacements)) == 2
    assert replacements == [
        world.cluster.replacement_of(first),
        world.cluster.replacement_of(second),
    ]


def test_a_replacement_with_a_new_logical_id_is_found_not_timed_out(world: World) -> None:
    world.cluster.keep_logical_ids_on_replace(False)
    occupy_spares(world)
    faulty = busy_node(world)
    old_slot = world.nodes.get(faulty).logical_id  # type: ignore[union-attr]
    world.cluster.inject_fault(faulty)
    r = world.run(*UP_TO_REPAIR, r=world.open(faulty))
    r = world.until_healthy(r)
    replacement = world.cluster.replacement_of(faulty)
    assert (r["health"], r["replacement"]) == ("healthy", replacement)
    new = world.cluster.instance(str(replacement))
    assert new is not None and new.logical_id not in (None, old_slot)  # the id was not kept
    r = world.run("return_to_service", "resume_jobs", "close", r=r)
    assert r["resolution"] == "replaced"
    assert world.nodes.get(str(replacement)) is not None  # admitted to the inventory


def test_two_replacements_with_new_logical_ids_each_take_a_new_node(world: World) -> None:
    world.cluster.keep_logical_ids_on_replace(False)
    first, second = busy_node(world, index=0), busy_node(world, "vit-h14-pretrain", 0)
    before = {i.instance_id for i in world.cluster.instances()}
    recoveries = []
    for faulty in (first, second):
        world.cluster.inject_fault(faulty)
        recoveries.append(world.run(*UP_TO_REPAIR, r=world.open(faulty)))
    done = [world.until_healthy(r) for r in recoveries]
    replacements = {r["replacement"] for r in done}
    # Which new node replaced which no API says; each takes one, and none was there before.
    assert replacements == {
        world.cluster.replacement_of(first),
        world.cluster.replacement_of(second),
    }
    assert not replacements & before


def test_an_eks_burst_node_is_done_once_karpenter_took_it_away(burst_world: World) -> None:
    world = burst_world
    eks = world.apis.burst[0]
    node_name = world.gateway.node_status(eks).node_name
    assert node_name is not None
    world.cluster.inject_fault(eks)
    r = world.run(*UP_TO_REPAIR, r=world.open(eks))
    assert r["action"] == "replace"
    # Karpenter terminates the node of the deleted NodeClaim in its own (wall) time, some
    # seconds after settle() is done: the health check's budget is on the manual clock,
    # which would run out long before that.
    wait_for(lambda: not world.apis.kube.get(NODES, node_name), loaded(120), "Karpenter to take it")
    r = world.until_healthy(r)
    assert (r["health"], r["replacement"]) == ("healthy", None)
    r = world.run("return_to_service", "resume_jobs", "close", r=r)
    retired = world.nodes.get(eks)
    assert retired is not None and retired.status.value == "NotFound"
    assert r["resolution"] == "replaced"


def test_a_fault_reported_again_while_closing_sends_the_incident_back_to_diagnosis(
    world: World,
) -> None:
    occupy_spares(world)  # the job waits for the reboot and is back on the node after it
    faulty = busy_node(world, "vit-h14-pretrain", 0)
    world.cluster.inject_fault(faulty, kind="gpu")
    r = world.run(
        *UP_TO_REPAIR,
        r=world.open(faulty, Repair.REBOOT),
    )
    assert r["action"] == "reboot"
    r = world.until_healthy(r)
    r = world.run("return_to_service", "resume_jobs", r=r)
    # the node fails again just as the incident is about to close, and is reported
    world.apis.advance(60)
    world.cluster.inject_fault(faulty, kind="persistent")
    world.open(faulty)  # joins the open incident
    r = world.run("close", r=r)
    assert r["verdict"] == "rediagnose"
    incident = world.incidents.get(r["incident_id"])
    assert incident is not None and incident.status is not IncidentStatus.RESOLVED
    r = world.run("diagnose", "cordon", "guard", "protect_jobs", r=r)
    assert (r["round"], r["verdict"]) == (2, "proceed")
    assert r["action"] == "replace"  # rebooted within the window: the ladder replaces it
    incident = world.incidents.get(r["incident_id"])
    assert incident is not None
    assert [(p.job_id, p.round) for p in incident.jobs] == [
        ("vit-h14-pretrain", 1),
        ("vit-h14-pretrain", 2),
    ]


def test_a_healthy_node_closes_even_when_late_duplicates_joined(world: World) -> None:
    faulty = busy_node(world, "vit-h14-pretrain", 0)
    world.cluster.inject_fault(faulty, kind="gpu")
    r = world.run(
        *UP_TO_REPAIR,
        r=world.open(faulty, Repair.REBOOT),
    )
    r = world.until_healthy(r)
    r = world.run("return_to_service", "resume_jobs", r=r)
    world.open(faulty)  # a late report of the fault that was cured
    r = world.run("close", r=r)
    assert (r["verdict"], r["resolution"]) == ("closed", "rebooted")


def merge_retirement(world: World, instance_id: str, days: float) -> HealthSignal:
    """An AWS Health scheduled retirement of the node joins its open incident."""
    node = world.nodes.get(instance_id)
    assert node is not None
    now = world.clock.now()
    retirement = HealthSignal(
        source=SignalSource.AWS_HEALTH,
        kind="health_scheduled_change",
        instance_id=instance_id,
        cluster=node.cluster,
        severity=Severity.SCHEDULED,
        action=Action.OPEN_INCIDENT,
        repair=Repair.REPLACE,
        reason="AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED",
        observed_at=now,
        dedupe_key=f"health-{instance_id}",
        not_before=now + timedelta(days=days),
    )
    _, outcome = world.incidents.open_or_append(node, retirement, now)
    assert outcome is SignalOutcome.APPENDED
    return retirement


def test_a_retirement_merged_into_a_rebooted_incident_survives_its_close(world: World) -> None:
    occupy_spares(world)
    faulty = busy_node(world, "vit-h14-pretrain", 0)
    world.cluster.inject_fault(faulty, kind="gpu")
    r = world.run(*UP_TO_REPAIR, r=world.open(faulty, Repair.REBOOT))
    retirement = merge_retirement(world, faulty, days=3)
    r = world.until_healthy(r)
    r = world.run("return_to_service", "resume_jobs", "close", r=r)
    assert r["verdict"] == "rediagnose"  # not closed: the retirement is still to come
    incident = world.incidents.get(r["incident_id"])
    assert incident is not None and incident.status is not IncidentStatus.RESOLVED
    assert (incident.kind, incident.not_before) == (retirement.kind, retirement.not_before)
    assert "carried on" in incident.notes[-1]
    r = world.run("diagnose", r=r)
    assert r["verdict"] == "wait"  # until the retirement's window, less the lead time
    assert world.incidents.get(r["incident_id"]).status is IncidentStatus.WAITING  # type: ignore[union-attr]
    assert world.schedulable(faulty)  # in service until then
    world.apis.advance(3 * 86_400)
    r = world.run("diagnose", r=r)
    assert (r["verdict"], r["action"]) == ("repair", "replace")
    assert world.nodes.get(faulty).open_incident_id == r["incident_id"]  # type: ignore[union-attr]


def test_a_retirement_merged_into_an_incident_that_cured_itself_survives_its_close(
    world: World,
) -> None:
    healthy = busy_node(world)
    r = world.run("diagnose", r=world.open(healthy))
    assert r["resolution"] == "recovered_on_its_own"
    retirement = merge_retirement(world, healthy, days=10)
    r = world.run("close", r=r)
    assert r["verdict"] == "rediagnose"
    r = world.run("diagnose", r=r)
    assert r["verdict"] == "wait"
    incident = world.incidents.get(r["incident_id"])
    assert incident is not None and incident.not_before == retirement.not_before
    # its own change is not carried again: a close after a decision to do nothing closes
    assert world.steps.run("close", {**r, "resolution": "no_action_by_policy"})["verdict"] == (
        "closed"
    )


def announce_reboot(world: World, instance_id: str, days: float) -> HealthSignal:
    """AWS Health announces a reboot of the node `days` ahead. Constructed: the published
    retirement sample (tests/events) with its event type, time, start and entity edited."""
    event = json.loads((EVENTS / "aws-health-ec2-retirement.json").read_text())
    now = world.clock.now()
    event["time"] = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    event["detail"].update(
        eventTypeCode="AWS_EC2_INSTANCE_REBOOT_MAINTENANCE_SCHEDULED",
        startTime=format_datetime(now + timedelta(days=days), usegmt=True),
        affectedEntities=[{"entityValue": instance_id, "status": "PENDING"}],
    )
    (signal,) = classify_health_event(event)
    node = world.nodes.get(instance_id)
    assert node is not None and signal.repair is Repair.REBOOT
    world.incidents.open_or_append(node, signal, now)
    return signal


def test_a_scheduled_reboot_is_a_reboot_before_its_window_that_the_ladder_never_counts(
    world: World,
) -> None:
    occupy_spares(world)  # the job waits for the reboot and is back on the node after it
    node = busy_node(world, "vit-h14-pretrain", 0)
    announce_reboot(world, node, days=3)
    (incident,) = [i for i in world.incidents.recent(10) if i.instance_id == node]
    r = world.run("diagnose", r={"incident_id": incident.incident_id, "instance_id": node})
    assert r["verdict"] == "wait" and world.schedulable(node)  # in service until then
    world.apis.advance(3 * 86_400)
    r = world.run(*UP_TO_REPAIR, r=r)
    assert r["action"] == "reboot"
    r = world.until_healthy(r)
    r = world.run("return_to_service", "resume_jobs", "close", r=r)
    assert (r["verdict"], r["resolution"]) == ("closed", "rebooted")
    # What `kubectl describe node` shows of HyperGuard's part in it, in order: the real
    # control plane records its own events too (kcm's RegisteredNode, the node's Ready),
    # and some of the namespace's events are about no named object. The timestamps are
    # whole seconds: ties go by the order the API server stored them.
    name = world.gateway.node_status(node).node_name
    events = [
        e
        for e in world.apis.kube.list_objects(KUBE_EVENTS, EVENT_NAMESPACE)
        if (e.get("involvedObject") or {}).get("name") == name
        and (e.get("source") or {}).get("component") == FIELD_MANAGER
    ]

    def stored(e: dict[str, Any]) -> tuple[str, int]:
        return e["firstTimestamp"], int(e["metadata"]["resourceVersion"])

    assert [e["reason"] for e in sorted(events, key=stored)] == [
        "HyperGuardCordoned",
        "HyperGuardRebootRequested",
        "HyperGuardUncordoned",
    ]
    # A fault an hour later is the node's first that needed a reboot: a reboot, not the
    # ladder's replacement.
    world.apis.advance(3600)
    world.cluster.inject_fault(node, kind="gpu")
    r = world.run(*UP_TO_REPAIR, r=world.open(node, Repair.REBOOT))
    assert r["action"] == "reboot"


@pytest.mark.parametrize("announced", ["before the repair", "after the repair"])
def test_a_scheduled_reboot_merged_into_a_rebooted_incident_is_done_by_that_reboot(
    world: World, announced: str
) -> None:
    occupy_spares(world)
    faulty = busy_node(world, "vit-h14-pretrain", 0)
    world.cluster.inject_fault(faulty, kind="gpu")
    r = world.run(*UP_TO_REPAIR[:-1], r=world.open(faulty, Repair.REBOOT))
    if announced == "before the repair":
        announce_reboot(world, faulty, days=3)
    r = world.run("repair", r=r)
    world.apis.advance(1)
    if announced == "after the repair":
        announce_reboot(world, faulty, days=3)
    r = world.until_healthy(r)
    r = world.run("return_to_service", "resume_jobs", "close", r=r)
    if announced == "before the repair":
        assert (r["verdict"], r["resolution"]) == ("closed", "rebooted")
    else:  # EC2 scheduled it after that reboot: it is still to come
        assert r["verdict"] == "rediagnose"
        incident = world.incidents.get(r["incident_id"])
        assert incident is not None and incident.repair is Repair.REBOOT


def test_observe_only_notes_what_it_would_do_and_touches_nothing(world: World) -> None:
    """A first deployment beside another repair system: the fault's incident records the
    repair HyperGuard would make, and when, and closes; the node stays schedulable, its job
    runs on, and the cluster is asked for nothing (D92)."""
    policies = world.steps.policies
    policies.put(policies.get().model_copy(update={"observe_only": True}))
    faulty = busy_node(world, "vit-h14-pretrain", 0)
    run = world.cluster.runs()["vit-h14-pretrain"]
    before = world.jobs.record("vit-h14-pretrain")
    assert before is not None and faulty in before.job.nodes
    world.cluster.inject_fault(faulty, kind="gpu")
    r = world.run("diagnose", r=world.open(faulty, Repair.REBOOT))
    assert (r["verdict"], r["resolution"]) == ("recovered", "observed_only")
    r = world.run("close", r=r)
    assert (r["verdict"], r["resolution"]) == ("closed", "observed_only")
    incident = world.incidents.get(r["incident_id"])
    assert incident is not None and incident.status is IncidentStatus.RESOLVED
    assert any(n.startswith(f"observe-only: would reboot {faulty} at ") for n in incident.notes)
    assert world.schedulable(faulty)
    # Still in the Failure HyperPod shows for its fault: not rebooting, not replaced.
    assert world.cluster.instance(faulty).status.value == "Failure"  # type: ignore[union-attr]
    assert world.cluster.replacement_of(faulty) is None
    assert world.nodes.get(faulty).repairs == []  # type: ignore[union-attr]
    # The fault itself crashed the job's processes on the node (it is not auto-resume, so
    # its run ended there); HyperGuard neither protected, restarted nor requeued it: the
    # cluster's latest run of the job is still the one it had, and the job's record is
    # as it was, on the faulty node.
    world.apis.settle()
    latest = world.cluster.runs()["vit-h14-pretrain"]
    assert (latest.uid, latest.restarts) == (run.uid, run.restarts)
    after = world.jobs.record("vit-h14-pretrain")
    assert after is not None and after.protected_by is None
    assert (after.job.run, after.job.nodes) == (before.job.run, before.job.nodes)


def test_a_degraded_node_takes_no_new_pods_while_its_repair_waits(world: World) -> None:
    """The policy waits before repairing a degraded fault (it may clear by itself); the node
    is cordoned at once meanwhile (running pods are not evicted), and uncordoned when the
    fault cleared by itself (D96)."""
    node = busy_node(world, "vit-h14-pretrain", 0)
    world.cluster.inject_fault(node, kind="gpu")
    r = world.run("diagnose", r=world.open(node, Repair.REBOOT, severity=Severity.DEGRADED))
    assert r["verdict"] == "wait"
    assert not world.schedulable(node)
    incident = world.incidents.get(r["incident_id"])
    assert incident is not None and incident.status is IncidentStatus.WAITING
    assert "signal_to_cordoned_s" in incident.timings
    world.cluster.clear_fault(node)
    world.apis.advance(r["wait_s"])
    r = world.run("diagnose", r=r)
    assert r["resolution"] == "recovered_on_its_own"
    r = world.run("close", r=r)
    assert (r["verdict"], r["resolution"]) == ("closed", "recovered_on_its_own")
    assert world.schedulable(node)


def test_a_node_hyperpod_is_patching_is_waited_for_not_repaired(world: World) -> None:
    """HyperPod's automatic patching takes an idle node NotReady (SystemUpdating). A fault
    report of it (the forwarder's Ready=False) makes the recovery look again after a poll
    interval, without a repair or a spent round, and close once the update is done (D101)."""
    busy = {i for job_id in world.cluster.runs() for i in world.cluster.job_instances(job_id)}
    idle = next(i for i in world.apis.hyperpod if i not in busy)
    world.cluster.schedule_patch("workers", world.clock.now() + timedelta(seconds=1))
    world.apis.advance(2)
    assert world.gateway.node_status(idle).status is NodeStatus.SYSTEM_UPDATING
    r = world.run("diagnose", r=world.open(idle, Repair.REBOOT, kind="node_condition"))
    assert (r["verdict"], r["action"], r["round"]) == ("wait", "none", 0)
    assert r["wait_s"] == r["poll_s"]
    incident = world.incidents.get(r["incident_id"])
    assert incident is not None and incident.status is IncidentStatus.WAITING
    patching = world.cluster.instance(idle)
    assert patching is not None and patching.status is NodeStatus.SYSTEM_UPDATING  # not cut short
    world.apis.advance(world.cluster.timings.patch_s)
    r = world.run("diagnose", r=r)
    assert (r["verdict"], r["resolution"], r["round"]) == ("recovered", "recovered_on_its_own", 1)
