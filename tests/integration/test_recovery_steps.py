"""NodeRecovery's steps in the order the state machine runs them, on moto and the
simulated cluster with a manual clock (the state machine itself runs in tests/e2e)."""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from tests.conftest import REGION, Stack

from hyperguard.cluster.clock import ManualClock
from hyperguard.cluster.simulated import SimulatedCluster
from hyperguard.messaging import Escalator, EventPublisher
from hyperguard.models import (
    Action,
    HealthSignal,
    IncidentStatus,
    JobStatus,
    Repair,
    Severity,
    SignalSource,
)
from hyperguard.recovery.steps import (
    RecoverySteps,
    RecoveryTimeoutError,
    RepairRejectedError,
    RepairRetryableError,
)
from hyperguard.store import IncidentStore, JobStore, NodeStore
from hyperguard.store.checkpoints import CheckpointStore
from hyperguard.store.policy import RepairPolicyStore

BUCKET = "hyperguard-twin-checkpoints"


class World:
    def __init__(self, stack: Stack) -> None:
        self.clock = ManualClock()
        self.checkpoints = CheckpointStore()
        boto3.client("s3", region_name=REGION).create_bucket(Bucket=BUCKET)
        self.cluster = SimulatedCluster(self.clock, checkpoint_sink=self._sink).seed_default()
        self.nodes = NodeStore(stack.tables["NodesTable"])
        self.jobs = JobStore(stack.tables["JobsTable"])
        self.incidents = IncidentStore(stack.tables["IncidentsTable"], stack.tables["NodesTable"])
        self.nodes.upsert_inventory(self.cluster.list_nodes())
        for job in self.cluster.jobs():
            self.jobs.put(job)
        self.published: list[tuple[str, dict[str, Any]]] = []
        publisher = EventPublisher(stack.bus_name)
        publisher.publish = lambda t, d, resources=[]: self.published.append((t, d))  # type: ignore[method-assign]
        self.steps = RecoverySteps(
            incidents=self.incidents,
            nodes=self.nodes,
            jobs=self.jobs,
            policies=RepairPolicyStore(stack.tables["TeamsTable"]),
            checkpoints=self.checkpoints,
            gateway=self.cluster,
            publisher=publisher,
            escalator=Escalator(stack.topic_arn),
            clock=self.clock.now,
        )

    def _sink(self, job_id: str, step: int, uri: str) -> None:
        job = next(j for j in self.cluster.jobs() if j.job_id == job_id)
        assert job.checkpoint_location
        self.checkpoints.write(job.checkpoint_location, step)

    def open(
        self, instance_id: str, repair: Repair = Repair.REPLACE, kind: str = "hyperpod_node_health"
    ) -> dict[str, Any]:
        node = self.nodes.get(instance_id)
        assert node is not None
        signal = HealthSignal(
            source=SignalSource.HYPERPOD,
            kind=kind,
            instance_id=instance_id,
            cluster=node.cluster,
            severity=Severity.FATAL,
            action=Action.OPEN_INCIDENT,
            repair=repair,
            reason="NvidiaErrorTerminate",
            observed_at=self.clock.now(),
            dedupe_key=f"e-{instance_id}-{self.clock.now().timestamp()}",
        )
        incident, _ = self.incidents.open_or_append(node, signal, self.clock.now())
        return {"incident_id": incident.incident_id, "instance_id": instance_id}

    def run(self, *names: str, r: dict[str, Any]) -> dict[str, Any]:
        for name in names:
            r = self.steps.run(name, r)
        return r

    def until_healthy(
        self, r: dict[str, Any], step_s: float = 30, limit: int = 200
    ) -> dict[str, Any]:
        for _ in range(limit):
            self.clock.advance(step_s)
            r = self.steps.run("check_health", r)
            if r["health"] != "pending":
                return r
        raise AssertionError("never healthy")


@pytest.fixture
def world(stack: Stack) -> World:
    return World(stack)


def busy_node(world: World, job_id: str = "llama3-70b-pretrain", index: int = 1) -> str:
    return next(j for j in world.cluster.jobs() if j.job_id == job_id).nodes[index]


def occupy_spares(world: World) -> None:
    """Cordon every idle HyperPod node, so no hot spare is left."""
    busy = {n for j in world.cluster.jobs() for n in j.nodes}
    for node in world.cluster.list_nodes():
        if node.platform == "hyperpod" and node.instance_id not in busy:
            world.cluster.cordon(node.instance_id, incident_id="maintenance", reason="maintenance")
    world.nodes.upsert_inventory(world.cluster.list_nodes())


def test_replace_with_no_spare_resumes_the_job_on_the_replacement_from_its_checkpoint(
    world: World,
) -> None:
    occupy_spares(world)
    world.clock.advance(30 * 25)  # the jobs take 25 steps: two more checkpoints land in S3
    faulty = busy_node(world)
    step_before = world.cluster.progress()["llama3-70b-pretrain"].step
    world.cluster.inject_fault(faulty)
    r = world.open(faulty)
    r = world.run("diagnose", "guard", "cordon", "protect_jobs", "drain", "repair", r=r)
    assert (r["verdict"], r["action"]) == ("proceed", "replace")
    incident = world.incidents.get(r["incident_id"])
    assert incident is not None and incident.status is IncidentStatus.RECOVERING
    plan = incident.jobs[0]
    assert plan.strategy == "wait_for_repair"
    assert plan.checkpoint_step == step_before - step_before % 10  # the newest complete one
    assert world.cluster.node_status(faulty).schedulable is False

    r = world.until_healthy(r)
    assert r["health"] == "healthy" and r["replacement"] != faulty
    r = world.run("return_to_service", "resume_jobs", "close", r=r)
    assert r["resumed"] == ["llama3-70b-pretrain"] and r["resolution"] == "replaced"

    world.clock.advance(60 + 30 * 3)  # restart overhead, then three steps
    progress = world.cluster.progress()["llama3-70b-pretrain"]
    assert r["replacement"] in progress.job.nodes and faulty not in progress.job.nodes
    assert progress.step >= plan.checkpoint_step + 3  # continues from the checkpoint
    assert progress.job.restart_count == 1
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


def test_a_hot_spare_takes_the_job_before_the_repair_finishes(world: World) -> None:
    faulty = busy_node(world)
    world.cluster.inject_fault(faulty)
    r = world.run("diagnose", "guard", "cordon", "protect_jobs", "drain", r=world.open(faulty))
    incident = world.incidents.get(r["incident_id"])
    assert incident is not None and incident.jobs[0].strategy == "move_to_spare"
    spare = incident.jobs[0].spare
    assert r["moved_to_spare"] == ["llama3-70b-pretrain"]
    assert spare in world.cluster.progress()["llama3-70b-pretrain"].job.nodes


def test_auto_resume_jobs_are_left_to_hyperpod(world: World) -> None:
    faulty = busy_node(world, "mistral-7b-sft", 0)
    world.cluster.inject_fault(faulty)
    r = world.run("diagnose", "guard", "cordon", "protect_jobs", "drain", r=world.open(faulty))
    incident = world.incidents.get(r["incident_id"])
    assert incident is not None and [j.strategy for j in incident.jobs] == ["hyperpod_auto_resume"]
    r = world.run("repair", r=r)
    r = world.until_healthy(r)
    r = world.run("return_to_service", "resume_jobs", r=r)
    assert r["resumed"] == [] and r["moved_to_spare"] == []


def test_a_reboot_that_does_not_cure_escalates_to_replace(world: World) -> None:
    faulty = busy_node(world, "vit-h14-pretrain", 0)
    world.cluster.inject_fault(faulty, kind="persistent")
    r = world.run(
        "diagnose",
        "guard",
        "cordon",
        "protect_jobs",
        "drain",
        "repair",
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
    assert world.cluster.node_status(healthy).schedulable  # never cordoned


@pytest.mark.parametrize(
    ("code", "error"),
    [("InstanceIdInUse", RepairRetryableError), ("InstanceIdNotFound", RepairRejectedError)],
)
def test_refused_repairs_raise_the_error_the_state_machine_routes(
    world: World, code: str, error: type[Exception]
) -> None:
    faulty = busy_node(world)
    world.cluster.inject_fault(faulty)
    r = world.run("diagnose", "guard", "cordon", "protect_jobs", "drain", r=world.open(faulty))
    world.cluster.fail_next_repairs(code)
    with pytest.raises(error, match=code):
        world.run("repair", r=r)
    assert world.cluster.node_status(faulty).schedulable is False  # left cordoned


def test_a_replacement_that_never_gets_healthy_times_out(world: World) -> None:
    faulty = busy_node(world)
    world.cluster.inject_fault(faulty)
    world.cluster.replacement_never_healthy(faulty)
    r = world.run(
        "diagnose", "guard", "cordon", "protect_jobs", "drain", "repair", r=world.open(faulty)
    )
    with pytest.raises(RecoveryTimeoutError):
        world.until_healthy(r, step_s=60)
    r = world.run(
        "escalate",
        r={**r, "error": {"Error": "RecoveryTimeoutError", "Cause": "no healthy replacement"}},
    )
    incident = world.incidents.get(r["incident_id"])
    assert incident is not None and incident.status is IncidentStatus.NEEDS_OPERATOR
    assert "RecoveryTimeoutError" in incident.notes[-1]


def test_a_storm_over_a_fifth_of_the_pool_trips_the_brake(stack: Stack) -> None:
    clock = ManualClock()
    cluster = SimulatedCluster(clock).seed_default(hyperpod_nodes=256, burst_nodes=0)
    world_nodes = NodeStore(stack.tables["NodesTable"])
    world_nodes.upsert_inventory(cluster.list_nodes())
    incidents = IncidentStore(stack.tables["IncidentsTable"], stack.tables["NodesTable"])
    steps = RecoverySteps(
        incidents=incidents,
        nodes=world_nodes,
        jobs=JobStore(stack.tables["JobsTable"]),
        policies=RepairPolicyStore(stack.tables["TeamsTable"]),
        checkpoints=CheckpointStore(),
        gateway=cluster,
        publisher=EventPublisher(stack.bus_name),
        escalator=Escalator(stack.topic_arn),
        clock=clock.now,
    )
    hyperpod = [n for n in cluster.list_nodes() if n.platform == "hyperpod"]
    verdicts: list[str] = []
    for n, node in enumerate(hyperpod[:64]):
        signal = HealthSignal(
            source=SignalSource.HYPERPOD,
            kind="hyperpod_node_health",
            instance_id=node.instance_id,
            cluster=node.cluster,
            severity=Severity.FATAL,
            action=Action.OPEN_INCIDENT,
            repair=Repair.REPLACE,
            reason="storm",
            observed_at=clock.now(),
            dedupe_key=f"s{n}",
        )
        incident, _ = incidents.open_or_append(node, signal, clock.now())
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
    approved = world.run("guard", r={**r, "approval": {"approved_by": "ops"}})
    assert approved["verdict"] == "proceed"


def test_two_replacements_in_one_pool_each_find_their_own_node(world: World) -> None:
    first, second = busy_node(world, index=0), busy_node(world, "vit-h14-pretrain", 0)
    recoveries = []
    for faulty in (first, second):
        world.cluster.inject_fault(faulty)
        r = world.run(
            "diagnose", "guard", "cordon", "protect_jobs", "drain", "repair", r=world.open(faulty)
        )
        recoveries.append(r)
    done = [world.until_healthy(r) for r in recoveries]
    replacements = [r["replacement"] for r in done]
    assert len(set(replacements)) == 2
    assert replacements == [
        world.cluster.replacement_of(first),
        world.cluster.replacement_of(second),
    ]


def test_an_eks_burst_node_is_done_once_karpenter_took_it_away(world: World) -> None:
    eks = next(n for n in world.cluster.list_nodes() if n.platform == "eks")
    world.cluster.inject_fault(eks.instance_id)
    r = world.run(
        "diagnose",
        "guard",
        "cordon",
        "protect_jobs",
        "drain",
        "repair",
        r=world.open(eks.instance_id),
    )
    assert r["action"] == "replace"
    r = world.until_healthy(r)
    assert (r["health"], r["replacement"]) == ("healthy", None)
    r = world.run("return_to_service", "resume_jobs", "close", r=r)
    retired = world.nodes.get(eks.instance_id)
    assert retired is not None and retired.status.value == "NotFound"
    assert r["resolution"] == "replaced"
