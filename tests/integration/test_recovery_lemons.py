"""Lemon nodes in the recovery (D87): a node (its HyperPod slot) that keeps failing is
replaced rather than rebooted and never taken as a hot spare; on moto and the simulated
cluster behind real APIs, as tests/integration/test_recovery_steps.py."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from tests.conftest import Stack
from tests.integration.cluster_harness import cluster_apis
from tests.integration.recovery_harness import UP_TO_REPAIR
from tests.integration.test_recovery_steps import World, busy_node

from hyperguard.models import Repair


@pytest.fixture
def world(stack: Stack) -> Iterator[World]:
    with cluster_apis() as apis:
        yield World(stack, apis)


def past_fault(world: World, instance_id: str) -> None:
    """An incident on the node, opened and closed (the node recovered on its own), then an
    hour passes."""
    r = world.open(instance_id, Repair.REBOOT)
    incident = world.incidents.get(r["incident_id"])
    assert incident is not None
    closed = world.incidents.close(
        incident, "recovered_on_its_own", signal_count=1, at=world.clock.now()
    )
    assert closed
    world.apis.advance(3600)


def idle_nodes(world: World) -> list[str]:
    busy = {i for job_id in world.cluster.runs() for i in world.cluster.job_instances(job_id)}
    return sorted(i for i in world.apis.hyperpod if i not in busy)


@pytest.mark.parametrize("faults_before", [1, 2])
def test_the_fault_that_reaches_the_threshold_replaces_instead_of_rebooting(
    world: World, faults_before: int
) -> None:
    faulty = busy_node(world, "vit-h14-pretrain", 0)
    for _ in range(faults_before):
        past_fault(world, faulty)
    world.cluster.inject_fault(faulty)
    r = world.run("diagnose", r=world.open(faulty, Repair.REBOOT))
    if faults_before + 1 < 3:
        assert (r["action"], r["reason"]) == ("reboot", "fatal: act at once")
    else:
        assert r["action"] == "replace"
        assert r["reason"] == "fatal: act at once; lemon: 3 incidents in 30 days, so replace"


def test_a_lemon_slot_is_known_after_its_instance_was_replaced(world: World) -> None:
    faulty = busy_node(world, "vit-h14-pretrain", 0)
    slot = world.nodes.get(faulty).logical_id  # type: ignore[union-attr]
    world.cluster.inject_fault(faulty, kind="persistent")
    r = world.run(*UP_TO_REPAIR, r=world.open(faulty, Repair.REPLACE))
    r = world.until_healthy(r)
    r = world.run("return_to_service", "resume_jobs", "close", r=r)
    replacement = str(r["replacement"])
    assert r["resolution"] == "replaced" and replacement != faulty
    assert world.nodes.get(replacement).logical_id == slot  # type: ignore[union-attr]
    past_fault(world, replacement)
    world.cluster.inject_fault(replacement)
    r = world.run("diagnose", r=world.open(replacement, Repair.REBOOT))
    assert r["action"] == "replace" and "lemon: 3 incidents in 30 days" in r["reason"]


@pytest.mark.parametrize("lemon", [False, True])
def test_a_lemon_is_never_taken_as_a_hot_spare(world: World, lemon: bool) -> None:
    spare, *others = idle_nodes(world)
    for instance_id in others:  # one idle node left to be the spare
        world.gateway.cordon(instance_id, incident_id="maintenance", reason="maintenance")
    world.sync.sync()
    if lemon:
        for _ in range(3):
            past_fault(world, spare)
    faulty = busy_node(world)
    world.cluster.inject_fault(faulty)
    r = world.run("diagnose", "cordon", "guard", "protect_jobs", r=world.open(faulty))
    incident = world.incidents.get(r["incident_id"])
    assert incident is not None
    plan = incident.jobs[0]
    if lemon:
        assert (plan.strategy, plan.spare) == ("wait_for_repair", None)
    else:
        assert (plan.strategy, plan.spare) == ("hot_spare", spare)
