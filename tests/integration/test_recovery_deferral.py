"""HyperPod's automatic node recovery (NodeRecovery Automatic, AWS's default) and HyperGuard:
exactly one of them repairs a node (D142). Where HyperPod's recovery acts on the fault, the
policy's `hyperpodNodeRecovery: defer` (the default) leaves the reboot or replacement to it:
HyperGuard cordons, drains, protects the jobs, waits for HyperPod's repair, and resumes them.
`own` orders the repair as on a cluster whose NodeRecovery is None."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from tests.conftest import Stack
from tests.integration.cluster_harness import cluster_apis
from tests.integration.recovery_harness import UP_TO_REPAIR
from tests.integration.test_recovery_steps import World, busy_node

from hyperguard.models import Incident, IncidentStatus, Repair
from hyperguard.policies.repair import NodeRepairConfig
from hyperguard.store.policy import RepairPolicyStore


@pytest.fixture
def world(stack: Stack) -> Iterator[World]:
    with cluster_apis(node_recovery="Automatic") as apis:
        yield World(stack, apis)


def never_ordered(world: World, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """HyperGuard's reboot and replace calls, which must not be made: each is recorded."""
    ordered: list[str] = []

    def refuse(name: str) -> Any:
        def call(instance_ids: list[str]) -> Any:
            ordered.append(f"{name} {instance_ids}")
            raise AssertionError(f"HyperGuard ordered a {name} HyperPod's recovery does")

        return call

    monkeypatch.setattr(world.gateway, "reboot", refuse("reboot"))
    monkeypatch.setattr(world.gateway, "replace", refuse("replace"))
    return ordered


def followed_to_the_replacement(world: World, faulty: str, r: dict[str, Any]) -> Incident:
    """From Repair on: the recovery waits for HyperPod's replacement, resumes the jobs and
    closes the incident as HyperPod's replacement. The closed incident."""
    r = world.until_healthy(r)
    assert r["health"] == "healthy" and r["replacement"] not in (None, faulty)
    r = world.run("return_to_service", "resume_jobs", "close", r=r)
    incident = world.incidents.get(r["incident_id"])
    assert incident is not None and incident.status is IncidentStatus.RESOLVED
    assert (incident.repaired_by, incident.resolution) == ("hyperpod", "replaced")
    assert incident.replacement_instance_id == r["replacement"]
    return incident


def test_a_fault_hyperpods_recovery_replaces_is_left_to_it_and_the_job_resumes(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    ordered = never_ordered(world, monkeypatch)
    faulty = busy_node(world)
    world.cluster.inject_fault(faulty, "persistent")  # HyperPod's agent: replace
    r = world.run(*UP_TO_REPAIR, r=world.open(faulty))
    assert (r["repaired_by"], r["action"]) == ("hyperpod", "replace")
    incident = followed_to_the_replacement(world, faulty, r)
    # HyperPod's own account of it, from its cluster events (ListClusterEvents).
    assert any("Automatic node recovery started a replace" in e for e in incident.repair_events)
    assert any("Node replaced" in e for e in incident.repair_events)
    (job,) = incident.jobs
    assert job.resumed and "signal_to_resumed_s" in incident.timings
    assert ordered == []


def test_a_gpu_fault_hyperpods_recovery_reboots_is_left_to_it(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    ordered = never_ordered(world, monkeypatch)
    faulty = busy_node(world)
    world.cluster.inject_fault(faulty, "gpu")  # HyperPod's agent: reboot (a reboot cures it)
    r = world.run(*UP_TO_REPAIR, r=world.open(faulty, repair=Repair.REBOOT))
    assert (r["repaired_by"], r["action"]) == ("hyperpod", "reboot")
    r = world.until_healthy(r)
    assert r["health"] == "healthy"
    r = world.run("return_to_service", "resume_jobs", "close", r=r)
    incident = world.incidents.get(r["incident_id"])
    assert incident is not None and incident.resolution == "rebooted"
    assert world.schedulable(faulty) is True  # back in service, HyperGuard's cordon undone
    assert ordered == []


def test_own_orders_the_repair_even_where_hyperpods_recovery_is_on(world: World) -> None:
    policies = RepairPolicyStore(world.teams.table_name)
    policies.put(NodeRepairConfig.model_validate({"hyperpodNodeRecovery": "own"}))
    faulty = busy_node(world)
    world.cluster.inject_fault(faulty, "persistent")
    r = world.run(*UP_TO_REPAIR, r=world.open(faulty))
    assert r["repaired_by"] == "hyperguard"
    incident = world.incidents.get(r["incident_id"])
    assert incident is not None and incident.repaired_by == "hyperguard"


def test_a_fault_hyperpods_checks_did_not_find_is_hyperguards_to_repair(
    world: World,
) -> None:
    """A kernel fault the node's conditions show: HyperPod's health agent reports nothing,
    its recovery does nothing, HyperGuard repairs."""
    faulty = busy_node(world)
    world.cluster.inject_fault(faulty, "kernel")  # a condition on the node, not HyperPod's
    r = world.run(*UP_TO_REPAIR, r=world.open(faulty, kind="node_condition"))
    assert r["repaired_by"] == "hyperguard"


def test_a_node_hyperpod_replaced_before_the_diagnosis_is_closed_as_its_repair(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """HyperPod's recovery can be done with the node before HyperGuard's diagnosis reads it:
    the incident closes `instance_gone`, says HyperPod repaired it, and orders nothing."""
    ordered = never_ordered(world, monkeypatch)
    faulty = busy_node(world)
    world.cluster.inject_fault(faulty, "persistent")
    world.apis.advance(300)  # HyperPod's repair starts at 120 s; the old instance goes at 240 s
    assert world.cluster.instance(faulty) is None
    r = world.run("diagnose", r=world.open(faulty))
    assert (r["resolution"], r["repaired_by"]) == ("instance_gone", "hyperpod")
    incident = world.incidents.get(r["incident_id"])
    assert incident is not None and incident.repaired_by == "hyperpod"
    assert ordered == []


def test_a_node_hyperpod_replaces_between_the_steps_is_followed_not_escalated(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """HyperPod's recovery can take the node between Diagnose and Cordon (CI's run of
    2026-11-27 escalated on a NodeNotFoundError there): a node gone from the cluster takes no
    pods and has none left to drain, and the recovery follows HyperPod to its replacement."""
    ordered = never_ordered(world, monkeypatch)
    faulty = busy_node(world)
    world.cluster.inject_fault(faulty, "persistent")
    r = world.run("diagnose", r=world.open(faulty))
    assert (r["repaired_by"], r["action"]) == ("hyperpod", "replace")
    world.apis.advance(300)  # HyperPod's repair starts at 120 s; the old instance goes at 240 s
    assert world.cluster.instance(faulty) is None
    r = world.run("cordon", "guard", "protect_jobs", "drain", "repair", r=r)
    assert r["drain"] == {"evicted": 0, "forced": 0}
    incident = followed_to_the_replacement(world, faulty, r)
    (job,) = incident.jobs
    assert job.resumed
    assert ordered == []
