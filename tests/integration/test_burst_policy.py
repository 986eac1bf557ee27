"""The burst policy through the API (PUT/GET /policies/burst) and in the scheduling pass:
prices, committed pools and spend caps on moto tables and the simulated cluster."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import boto3
import pytest
from tests.conftest import Stack
from tests.deadlines import loaded
from tests.integration.api_harness import Api, member
from tests.integration.cluster_harness import ClusterApis
from tests.integration.scheduler_harness import MakeSolo, Solo

from hyperguard.bursting.requests import BurstJob, BurstRequest, next_window, rollback_note
from hyperguard.cluster import ClusterError
from hyperguard.cluster.hyperpod_eks import HyperPodEksGateway
from hyperguard.cluster.karpenter import (
    DISRUPTED_TAINT,
    IDLE_SINCE_ANNOTATION,
    idle_mark,
    nodeclaim_manifest,
)
from hyperguard.cluster.workloads import JOB_ID_LABEL, job_name
from hyperguard.governance.jobs import JobLifecycle
from hyperguard.governance.occupancy import usable
from hyperguard.governance.service import SchedulerService
from hyperguard.inventory import InventorySync
from hyperguard.messaging import EventPublisher, Workflows
from hyperguard.models import JobStatus, NodeStatus
from hyperguard.models.cluster import BurstClaim, RunStatus
from hyperguard.models.nodes import BURST_LABEL, CapacityType
from hyperguard.models.records import JobEvent
from hyperguard.policies.burst import DEFAULT_HOURLY_PRICES, BurstPolicy, PoolKind
from hyperguard.scaling.steps import BurstSteps
from hyperguard.store.jobs import JobStore
from hyperguard_twin.plane.kube import NODES, PODS, wait_for

OD_P5 = DEFAULT_HOURLY_PRICES[(PoolKind.EKS_ON_DEMAND, "p5.48xlarge")]


def test_get_answers_the_documented_defaults_until_a_policy_is_stored(stack: Stack) -> None:
    api = Api(stack)
    api.call("PUT", "/principals", {"principal_arn": member("nlp"), "team": "nlp"})
    reply = api.call("GET", "/policies/burst", principal=member("nlp"))
    assert reply.status == 200
    assert reply.body["committedPools"] == []
    assert reply.body["spendCaps"] == {
        "globalUsdPerDay": None,
        "teams": {},
        "globalGpuHoursPerDay": None,
        "teamGpuHoursPerDay": {},
    }
    prices = {(p["poolKind"], p["instanceType"]): p["hourlyUsd"] for p in reply.body["prices"]}
    assert prices == {(k.value, t): usd for (k, t), usd in DEFAULT_HOURLY_PRICES.items()}


def test_only_an_admin_sets_the_policy_and_every_field_is_bounded(stack: Stack) -> None:
    api = Api(stack)
    api.call("PUT", "/principals", {"principal_arn": member("nlp"), "team": "nlp"})
    policy = {
        "prices": [{"poolKind": "eks-on-demand", "instanceType": "p5.48xlarge", "hourlyUsd": 30}],
        "committedPools": ["workers"],
        "spendCaps": {"globalUsdPerDay": 5000, "teams": {"nlp": 1000}},
    }
    refused = api.call("PUT", "/policies/burst", policy, principal=member("nlp"))
    assert refused.status == 403
    price = {"poolKind": "eks-spot", "instanceType": "p5.48xlarge", "hourlyUsd": 1}
    cases: list[tuple[dict[str, Any], str]] = [
        ({"prices": [price | {"hourlyUsd": 10_001}]}, "prices[0].hourlyUsd"),
        ({"prices": [price | {"poolKind": "gpu-farm"}]}, "prices[0].poolKind"),
        ({"prices": [price | {"instanceType": "p5 48xlarge"}]}, "prices[0].instanceType"),
        ({"prices": [price] * 201}, "prices"),
        ({"committedPools": ["no spaces please"]}, "committedPools[0]"),
        ({"spendCaps": {"globalUsdPerDay": -1}}, "spendCaps.globalUsdPerDay"),
        ({"spendCaps": {"teams": {"nlp": -1}}}, "spendCaps.teams"),
        ({"spendCaps": {"teams": {f"t{i}": 1 for i in range(501)}}}, "spendCaps.teams"),
        ({"spendCaps": {"globalGpuHoursPerDay": -1}}, "spendCaps.globalGpuHoursPerDay"),
        ({"spendCaps": {"teamGpuHoursPerDay": {"nlp": 1e9}}}, "spendCaps.teamGpuHoursPerDay"),
        ({"capacity": {"burstAfterS": {"research": -1}}}, "capacity.burstAfterS"),
        ({"capacity": {"burstAfterS": {"Not A Class": 1}}}, "capacity.burstAfterS"),
        ({"capacity": {"capacityOrder": ["spot", "spot"]}}, "capacity.capacityOrder"),
        ({"capacity": {"capacityOrder": ["cheap"]}}, "capacity.capacityOrder[0]"),
        ({"capacity": {"maxNodes": 1001}}, "capacity.maxNodes"),
        ({"capacity": {"pollIntervalS": 0}}, "capacity.pollIntervalS"),
        ({"capacity": {"launchTimeoutS": 3601}}, "capacity.launchTimeoutS"),
        ({"capacity": {"nodePool": "no spaces"}}, "capacity.nodePool"),
        ({"capacity": {"whenCanPreempt": "Sometimes"}}, "capacity.whenCanPreempt"),
        (
            {"capacity": {"hyperpodGroups": [{"instanceGroupName": "a_b", "maxCount": 2}]}},
            "capacity.hyperpodGroups[0].instanceGroupName",
        ),
        (
            {"capacity": {"hyperpodGroups": [{"instanceGroupName": "w", "maxCount": 0}]}},
            "capacity.hyperpodGroups[0].maxCount",
        ),
        (
            {"capacity": {"hyperpodGroups": [{"instanceGroupName": "w", "maxCount": 2}] * 2}},
            "capacity.hyperpodGroups",
        ),
        ({"surprise": 1}, "surprise"),
    ]
    for body, field in cases:
        reply = api.call("PUT", "/policies/burst", body)
        assert reply.status == 422, body
        assert reply.body["field"].startswith(field), (body, reply.body)
    assert api.wakeup.reasons == []
    assert api.call("GET", "/policies/burst").body["committedPools"] == []
    stored = api.call("PUT", "/policies/burst", policy)
    assert stored.status == 200
    assert api.wakeup.reasons == ["burst policy changed"]
    assert api.call("GET", "/policies/burst").body == policy | {
        "prices": [price | {"poolKind": "eks-on-demand", "hourlyUsd": 30.0}],
        "spendCaps": {
            "globalUsdPerDay": 5000.0,
            "teams": {"nlp": 1000.0},
            "globalGpuHoursPerDay": None,
            "teamGpuHoursPerDay": {},
        },
        "capacity": {
            "nodePool": "gpu-burst",
            "nodeClass": "default",
            "hyperpodGroups": [],
            "capacityOrder": ["on-demand", "spot"],
            "burstAfterS": {},
            "maxNodes": 0,
            "pollIntervalS": 30,
            "launchTimeoutS": 900,
            "scaleInAfterS": 600,
            "retryAfterS": 600,
            "moveBack": False,
            "whenCanPreempt": "Preempt",
        },
    }


def _admission(api: Api, job_id: str) -> dict[str, Any]:
    record = api.jobs.record(job_id)
    assert record is not None
    entry = [e for e in record.history if e.event is JobEvent.ADMITTED][-1]
    return entry.details


def test_a_spend_cap_keeps_a_development_job_pending_while_hyperpod_is_full(solo: MakeSolo) -> None:
    team = solo(64, hyperpod_nodes=1, burst_nodes=4, borrow=0)  # 2 on-demand, 2 spot p5 nodes
    api = team.api
    caps: dict[str, Any] = {"spendCaps": {"teams": {"solo": 1000}}}
    assert api.call("PUT", "/policies/burst", caps).status == 200
    production = team.submit(8)
    development = team.submit(8, template="development")
    service = team.scheduler()
    result = service.run_pass()
    assert result.dispatched == [production]
    assert result.unplaced == [development]
    waiting = api.call("GET", f"/jobs/{development}").body
    assert waiting["status"] == "Pending"
    assert waiting["reason"] == (
        "admissible but not placeable: waiting: team solo's burst spend cap of "
        f"$1000.00/day would be exceeded: $0.00/h running + ${OD_P5:.2f}/h for this job = "
        f"${OD_P5 * 24:.2f}/day"
    )
    assert development not in team.running()

    # A higher cap: the job bursts onto EKS on-demand, at the price the policy says.
    caps["spendCaps"]["teams"]["solo"] = 2000
    assert api.call("PUT", "/policies/burst", caps).status == 200
    assert service.run_pass().dispatched == [development]
    assert api.call("GET", f"/jobs/{development}").body["pool"] == "gpu-burst-on-demand"
    details = _admission(api, development)
    assert (details["pool_kind"], details["hourly_price"], details["hourly_cost"]) == (
        "eks-on-demand",
        OD_P5,
        OD_P5,
    )
    assert _admission(api, production)["pool_kind"] == "hyperpod"
    teams = {t["team"]: t for t in api.call("GET", "/views/teams").body["teams"]}
    assert teams["solo"]["burst_usd_per_hour"] == OD_P5
    assert teams["solo"]["burst_gpus"] == 8

    # What runs on burst counts against the cap: a second development job is refused.
    third = team.submit(8, template="development")
    service.run_pass()
    reason = api.call("GET", f"/jobs/{third}").body["reason"]
    assert f"${OD_P5:.2f}/h running + ${OD_P5:.2f}/h for this job" in reason


def test_a_gpu_hour_cap_holds_burst_gpus_whatever_they_cost(solo: MakeSolo) -> None:
    team = solo(64, hyperpod_nodes=1, burst_nodes=4, borrow=0)
    api = team.api
    caps = {"spendCaps": {"teamGpuHoursPerDay": {"solo": 8 * 24}}}
    assert api.call("PUT", "/policies/burst", caps).status == 200
    api.submit("solo", 8)  # production takes the HyperPod node
    first = team.submit(8, template="development")
    second = team.submit(8, template="development")
    result = team.scheduler().run_pass()
    assert first in result.dispatched and second in result.unplaced
    assert api.call("GET", f"/jobs/{first}").body["pool"] == "gpu-burst-on-demand"
    assert api.call("GET", f"/jobs/{second}").body["reason"] == (
        "admissible but not placeable: waiting: team solo's burst cap of 192 GPU-hours/day "
        "would be exceeded: 8 GPUs running + 8 for this job = 384 GPU-hours/day"
    )


def test_a_hyperpod_node_a_burst_added_counts_against_the_caps_until_it_is_given_back(
    solo: MakeSolo,
) -> None:
    """Jobs on a node BatchAddClusterNodes added run on HyperPod, but the node is burst
    capacity until scale-in deletes it: its GPUs count against the GPU-hour caps, and the
    team view reports them."""
    team = solo(64, hyperpod_nodes=2, burst_nodes=4, borrow=0)
    api, apis = team.api, team.apis
    added = apis.hyperpod[1]
    assert apis.gateway.kubernetes.mark_node(added, labels={BURST_LABEL: "burst-1"})
    caps = {"spendCaps": {"teamGpuHoursPerDay": {"solo": 8 * 24}}}
    assert api.call("PUT", "/policies/burst", caps).status == 200
    production = [team.submit(8) for _ in range(2)]
    development = team.submit(8, template="development")
    result = team.scheduler().run_pass()
    assert sorted(result.dispatched) == sorted(production)
    assert result.unplaced == [development]
    assert api.call("GET", f"/jobs/{development}").body["reason"] == (
        "admissible but not placeable: waiting: team solo's burst cap of 192 GPU-hours/day "
        "would be exceeded: 8 GPUs running + 8 for this job = 384 GPU-hours/day"
    )
    InventorySync(api.nodes, apis.gateway, frozenset({"hyperguard-twin"})).sync()
    (team,) = api.call("GET", "/views/teams").body["teams"]
    assert (team["burst_gpus"], team["burst_usd_per_hour"]) == (
        8,
        DEFAULT_HOURLY_PRICES[(PoolKind.HYPERPOD, "ml.p5.48xlarge")],
    )


@pytest.mark.parametrize("pool", ["gpu-burst-on-demand"])
def test_a_committed_pool_is_used_first_at_no_cost_and_under_any_cap(
    solo: MakeSolo, pool: str
) -> None:
    team = solo(64, hyperpod_nodes=1, burst_nodes=4, borrow=0)
    api = team.api
    policy = {"committedPools": [pool], "spendCaps": {"teams": {"solo": 0}}}
    assert api.call("PUT", "/policies/burst", policy).status == 200
    development = team.submit(8, template="development")
    assert team.scheduler().run_pass().dispatched == [development]
    placed = api.call("GET", f"/jobs/{development}").body
    assert placed["pool"] == pool  # before the free HyperPod node: already paid for
    assert placed["history"][-2]["reason"].endswith(f"committed capacity first: {pool} at $0.00/h")
    details = _admission(api, development)
    assert (details["hourly_price"], details["hourly_cost"]) == (0.0, 0.0)
    teams = {t["team"]: t for t in api.call("GET", "/views/teams").body["teams"]}
    assert teams["solo"]["burst_usd_per_hour"] == 0.0
    assert teams["solo"]["burst_gpus"] == 8  # free, but GPU-hour caps count it


BURSTS = "arn:aws:states:us-east-1:123456789012:stateMachine:hyperguard-BurstCapacity"


def hyperpod_full_then_development(team: Solo, service: SchedulerService) -> tuple[str, str]:
    """A production job fills the one HyperPod node, then a development job runs on a burst
    node: their ids."""
    production = team.submit(8)
    assert service.run_pass().dispatched == [production]
    development = team.submit(8, template="development")
    assert service.run_pass().dispatched == [development]
    return production, development


def test_move_back_takes_a_development_job_home_at_a_checkpoint_it_just_reported(
    solo: MakeSolo,
) -> None:
    """A checkpoint reported through the API (no newer marker for the pass to find) moves a
    development job back from burst capacity while it is fresh, never an old one."""
    team = solo(64, hyperpod_nodes=1, burst_nodes=2, borrow=0, api_on_cluster_clock=True)
    api, apis = team.api, team.apis
    assert api.call("PUT", "/policies/burst", {"capacity": {"moveBack": True}}).status == 200
    service = team.scheduler()
    # Scale-in and move-back run where BurstCapacity is deployed; nothing here starts one.
    service.bursts = Workflows(BURSTS)
    production, development = hyperpod_full_then_development(team, service)
    assert api.call("GET", f"/jobs/{development}").body["pool"] == "gpu-burst-on-demand"
    assert api.call("DELETE", f"/jobs/{production}").status == 200
    service.run_pass()  # stops the production run: the HyperPod node is free
    assert api.call("GET", f"/jobs/{development}").body["status"] == "Running"

    def checkpoint(step: int, age: timedelta) -> None:
        report = {
            "step": step,
            "uri": f"s3://ckpt-bucket/dev/step-{step:08d}/",
            "completed_at": (apis.clock.now() - age).isoformat(),
        }
        assert api.call("POST", f"/jobs/{development}/checkpoints", report).status == 201

    checkpoint(100, timedelta(minutes=5))
    assert service.run_pass().moved_back == []  # it would redo five minutes
    checkpoint(200, timedelta(seconds=30))
    assert service.run_pass().moved_back == [development]
    view = api.call("GET", f"/jobs/{development}").body
    assert view["history"][-1]["reason"] == (
        "moving back to HyperPod (workers has room) from checkpoint step 200"
    )
    assert service.run_pass().dispatched == [development]
    assert api.call("GET", f"/jobs/{development}").body["pool"] == "workers"


def test_a_burst_that_rolled_back_is_asked_for_again_only_when_its_window_turns(
    solo: MakeSolo,
) -> None:
    """Within the window of a burst that raised nothing, the job's reason says when the next
    burst may start, not that this one was asked for; the next window starts a new one."""
    team = solo(64, hyperpod_nodes=1, borrow=0, api_on_cluster_clock=True)
    api, apis = team.api, team.apis
    sfn = boto3.client("stepfunctions", region_name="us-east-1")
    machine = sfn.create_state_machine(
        name="hyperguard-BurstCapacity",
        definition=json.dumps({"StartAt": "Plan", "States": {"Plan": {"Type": "Succeed"}}}),
        roleArn="arn:aws:iam::123456789012:role/hyperguard-burst",
    )["stateMachineArn"]
    assert api.call("PUT", "/policies/burst", {"capacity": {"maxNodes": 2}}).status == 200
    service = team.scheduler()
    service.bursts = Workflows(machine)
    production = team.submit(8)
    assert service.run_pass().dispatched == [production]  # HyperPod is full
    development = team.submit(8, template="development")
    [burst] = service.run_pass().bursts
    assert (
        api.call("GET", f"/jobs/{development}")
        .body["reason"]
        .endswith(f"; burst capacity asked for ({burst})")
    )

    # The burst rolls back: BurstSteps.rollback leaves its note and the execution ends.
    sfn.stop_execution(executionArn=service.bursts.execution_arn(burst))
    note = rollback_note(burst, "on-demand: InsufficientInstanceCapacity")
    assert JobLifecycle(api.jobs).set_reason(development, note)
    assert service.run_pass().bursts == []
    retry = next_window(apis.clock.now(), BurstPolicy().capacity.retry_after_s)
    assert apis.clock.now() < retry
    assert (
        api.call("GET", f"/jobs/{development}")
        .body["reason"]
        .endswith(
            f"; next burst from {retry:%H:%M:%S}Z; last burst {burst} raised no capacity: "
            "on-demand: InsufficientInstanceCapacity"
        )
    )

    apis.advance((retry - apis.clock.now()).total_seconds())
    [again] = service.run_pass().bursts
    assert again != burst
    assert (
        f"; burst capacity asked for ({again}); last burst {burst} raised no"
        in (api.call("GET", f"/jobs/{development}").body["reason"])
    )


def ready_burst_nodes(apis: ClusterApis, *names: str) -> list[BurstClaim]:
    """On-demand p5 NodeClaims of one burst, asked for through the API and given the time
    Karpenter takes to launch and register them."""
    manifests = [
        nodeclaim_manifest(
            name=name,
            burst_id="burst-0123456789abcdef",
            attempt=0,
            node_pool="gpu-burst",
            node_class="default",
            instance_type="p5.48xlarge",
            capacity_type=CapacityType.ON_DEMAND,
            accelerators=8,
        )
        for name in names
    ]
    assert apis.gateway.request_burst_nodes(manifests) == len(names)

    def ours(done: Callable[[BurstClaim], Any]) -> list[BurstClaim] | None:
        claims = apis.gateway.burst_claims()
        named = [c for c in claims if c.name in names]
        return claims if len(named) == len(names) and all(map(done, named)) else None

    # Karpenter launches (EC2 RunInstances) and registers the booted nodes in wall time:
    # the instances must exist before the clock moves past their boot.
    wait_for(lambda: ours(lambda c: c.instance_id), loaded(60), f"Karpenter to launch {names}")
    apis.advance(600)
    claims: list[BurstClaim] = wait_for(
        lambda: ours(lambda c: c.ready), loaded(60), f"Karpenter to register {names}"
    )
    return claims


class RestartsOnTheIdleNode(HyperPodEksGateway):
    """Recovery restarts a job on a hot spare, an idle burst node, after the pass read the
    jobs and before it gives that node back (the pass lists the runs in between: D193)."""

    jobs: JobStore
    job_id: str
    failed: str
    spare: str

    def job_runs(self) -> list[RunStatus]:
        lifecycle = JobLifecycle(self.jobs)
        assert lifecycle.protect(self.job_id, incident_id="inc-1", node=self.failed)
        assert lifecycle.restart(
            self.job_id, incident_id="inc-1", run=0, nodes=[self.spare], reason="hot spare"
        )
        return super().job_runs()


def test_scale_in_never_gives_back_a_node_a_recovery_just_restarted_a_job_on(
    solo: MakeSolo,
) -> None:
    """An idle burst node past the cooldown that recovery restarts a job on (a hot spare)
    while the pass runs stays: the pass reads the jobs again before it releases (D62)."""
    team = solo(64, hyperpod_nodes=1, borrow=0, api_on_cluster_clock=True)
    api, apis = team.api, team.apis
    assert api.call("PUT", "/policies/burst", {"capacity": {"maxNodes": 2}}).status == 200
    claims = ready_burst_nodes(apis, "hg-burst-a", "hg-burst-b")
    assert len(claims) == 2 and all(c.ready and c.instance_id for c in claims), claims
    service = team.scheduler()
    service.bursts = Workflows(BURSTS)
    _, development = hyperpod_full_then_development(team, service)
    [failed] = api.call("GET", f"/jobs/{development}").body["nodes"]
    [idle] = [c for c in claims if c.instance_id != failed]
    an_hour_ago = idle_mark(apis.clock.now() - timedelta(hours=1))
    assert apis.gateway.kubernetes.annotate_nodeclaim(
        idle.name, {IDLE_SINCE_ANNOTATION: an_hour_ago}
    )

    gateway = team.gateway(RestartsOnTheIdleNode)
    gateway.jobs, gateway.job_id, gateway.failed = api.jobs, development, failed
    gateway.spare = str(idle.instance_id)
    racing = team.scheduler(gateway)
    racing.bursts = Workflows(BURSTS)
    assert racing.run_pass().released == []
    assert api.call("GET", f"/jobs/{development}").body["nodes"] == [idle.instance_id]
    assert {c.name for c in apis.gateway.burst_claims() if not c.deleting} == {
        "hg-burst-a",
        "hg-burst-b",
    }


def test_a_node_whose_nodeclaim_is_being_deleted_gets_nothing_new(solo: MakeSolo) -> None:
    """A node counts as leaving from the moment its NodeClaim is deleted (scale-in, or
    Karpenter's own consolidation), not once its Node object goes: the pass places nothing
    there, and on the twin a run put there anyway ends with the node."""
    team = solo(64, hyperpod_nodes=1, borrow=0, api_on_cluster_clock=True)
    api, apis = team.api, team.apis
    [claim] = ready_burst_nodes(apis, "hg-burst-a")
    assert claim.ready and claim.instance_id and claim.node_name
    service = team.scheduler()
    service.bursts = Workflows(BURSTS)
    production = team.submit(8)
    assert service.run_pass().dispatched == [production]

    assert apis.gateway.release_burst_node(claim)  # scale-in gives it back
    # The NodeClaim's deletion says the node is leaving at once; Karpenter's termination
    # then taints it, in its own time (and puts the taint back if anyone takes it off, so
    # the claim-only moment cannot be held here).
    leaving = next(n for n in apis.gateway.list_nodes() if n.instance_id == claim.instance_id)
    assert leaving.status is NodeStatus.SHUTTING_DOWN and not usable(leaving)

    def disrupted() -> bool:
        node = apis.kube.get(NODES, str(claim.node_name)) or {}
        taints = (node.get("spec") or {}).get("taints") or []
        return {"key": DISRUPTED_TAINT, "effect": "NoSchedule"} in taints

    wait_for(disrupted, loaded(60), "Karpenter to taint the leaving node")
    leaving = next(n for n in apis.gateway.list_nodes() if n.instance_id == claim.instance_id)
    assert leaving.status is NodeStatus.SHUTTING_DOWN and not usable(leaving)

    development = team.submit(8, template="development")
    assert development not in service.run_pass().dispatched
    assert api.call("GET", f"/jobs/{development}").body["status"] == "Pending"

    # A run placed on it regardless (the mistake the pass no longer makes) never starts:
    # kube-scheduler binds its pod to no node (Karpenter's taint, then no node at all), and
    # the node goes with its claim.
    record = api.jobs.record(development)
    assert record is not None
    assert apis.gateway.dispatch(record.job, [claim.instance_id])
    apis.advance(3600)
    wait_for(
        lambda: apis.kube.get(NODES, str(claim.node_name)) is None, loaded(60), "the node to go"
    )
    assert development not in team.running()
    (pod,) = apis.kube.list_objects(PODS, label_selector=f"{JOB_ID_LABEL}={job_name(development)}")
    assert not pod["spec"].get("nodeName")


def burst_steps_for(team: Solo) -> BurstSteps:
    publisher = EventPublisher(team.stack.bus_name)
    publisher.publish = lambda *args, **kwargs: None  # type: ignore[method-assign]
    return BurstSteps(
        gateway=team.apis.gateway,
        jobs=team.api.jobs,
        policies=team.api.burst_policies,
        wakeup=team.api.wakeup,
        publisher=publisher,
        nodes=team.api.nodes,
        clock=team.apis.clock.now,
    )


def development_burst(burst_id: str, *job_ids: str) -> BurstRequest:
    """A burst of p5 nodes for team solo's development jobs, one node each."""
    return BurstRequest(
        burst_id=burst_id,
        template="development",
        instance_type="p5.48xlarge",
        accelerators_per_node=8,
        jobs=[BurstJob(job_id=job_id, team="solo", nodes=1) for job_id in job_ids],
    )


def planned_burst(steps: BurstSteps, job_id: str) -> dict[str, Any]:
    request = development_burst("burst-00000000000000aa", job_id)
    burst = steps.run("plan", {"request": request.model_dump(mode="json", by_alias=True)})
    assert burst["capacity"] == "planned", burst
    return burst


def test_a_burst_rechecks_the_job_and_the_caps_before_buying(solo: MakeSolo) -> None:
    """Between the plan and each purchase the job may be cancelled or a cap lowered: the
    burst then buys nothing ("withdrawn", which the workflow rolls back); unchanged, it buys."""
    team = solo(64, hyperpod_nodes=1, borrow=0, api_on_cluster_clock=True)
    api, apis = team.api, team.apis
    assert api.call("PUT", "/policies/burst", {"capacity": {"maxNodes": 2}}).status == 200
    steps = burst_steps_for(team)

    cancelled = team.submit(8, template="development")
    burst = planned_burst(steps, cancelled)
    assert api.call("DELETE", f"/jobs/{cancelled}").status == 200
    burst = steps.run("request", burst)
    assert burst["capacity"] == "withdrawn" and "no job waits" in burst["failures"][-1]

    capped = team.submit(8, template="development")
    burst = planned_burst(steps, capped)
    lowered = {"capacity": {"maxNodes": 2}, "spendCaps": {"teams": {"solo": 1}}}
    assert api.call("PUT", "/policies/burst", lowered).status == 200
    burst = steps.run("request", burst)
    assert burst["capacity"] == "withdrawn" and "not bought" in burst["failures"][-1]
    assert apis.gateway.burst_claims() == []  # nothing bought either time

    assert api.call("PUT", "/policies/burst", {"capacity": {"maxNodes": 2}}).status == 200
    burst = steps.run("request", planned_burst(steps, capped))
    assert burst["capacity"] == "requested"
    assert len(apis.gateway.burst_claims()) == 1


def test_a_nodeclaim_the_api_server_will_not_delete_holds_back_no_other_of_a_rollback(
    solo: MakeSolo, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rollback gives back every other node before it fails for the refused one (for
    the state machine to retry); its retry completes the rollback."""
    team = solo(64, hyperpod_nodes=1, borrow=0, api_on_cluster_clock=True)
    api, apis = team.api, team.apis
    assert api.call("PUT", "/policies/burst", {"capacity": {"maxNodes": 2}}).status == 200
    steps = burst_steps_for(team)
    jobs = [team.submit(8, template="development") for _ in range(2)]
    request = development_burst("burst-00000000000000bb", *jobs)
    burst = steps.run("plan", {"request": request.model_dump(mode="json", by_alias=True)})
    burst = steps.run("request", burst)
    claims = apis.gateway.burst_claims(request.burst_id, include_hyperpod=False)
    assert len(claims) == 2
    refused = claims[0].name
    real = apis.gateway.release_burst_node

    def release_burst_node(claim: BurstClaim) -> bool:
        if claim.name == refused:
            raise ClusterError(f"delete NodeClaim {claim.name}: 500 etcdserver: leader changed")
        return real(claim)

    monkeypatch.setattr(apis.gateway, "release_burst_node", release_burst_node)
    burst["failures"] = ["on-demand: InsufficientInstanceCapacity"]
    with pytest.raises(ClusterError, match=refused):
        steps.run("rollback", burst)
    kept = apis.gateway.burst_claims(request.burst_id, include_hyperpod=False)
    assert [c.name for c in kept if not c.deleting] == [refused]

    monkeypatch.undo()
    assert steps.run("rollback", burst)["outcome"] == "rolled-back"
    assert not [c for c in apis.gateway.burst_claims() if not c.deleting]
    assert all(
        "InsufficientInstanceCapacity" in api.call("GET", f"/jobs/{j}").body["reason"] for j in jobs
    )


def test_a_rollback_keeps_the_nodes_a_job_already_runs_on_and_says_so(solo: MakeSolo) -> None:
    """A burst that fails after its nodes are Ready (a worker killed while its claims launch)
    rolls back; the scheduler has already placed a job on one of them. That node stays (scale
    -in gives it back once idle), the job keeps running, the other node goes, marked released
    in the inventory so that its departure opens no incident (D208), and the rollback says
    what it kept."""
    team = solo(64, hyperpod_nodes=1, borrow=0, api_on_cluster_clock=True)
    api, apis = team.api, team.apis
    assert api.call("PUT", "/policies/burst", {"capacity": {"maxNodes": 2}}).status == 200
    claims = ready_burst_nodes(apis, "hg-burst-a", "hg-burst-b")
    service = team.scheduler()
    service.bursts = Workflows(BURSTS)
    _, development = hyperpod_full_then_development(team, service)
    [used] = api.call("GET", f"/jobs/{development}").body["nodes"]
    [held] = [c for c in claims if c.instance_id == used]
    [other] = [c for c in claims if c is not held]
    InventorySync(api.nodes, apis.gateway, frozenset({"hyperguard-twin"})).sync()
    request = development_burst("burst-0123456789abcdef", development)
    burst = {
        "request": request.model_dump(mode="json", by_alias=True),
        "error": {"Error": "Runtime.ExitError", "Cause": "signal: killed"},
    }
    rolled = burst_steps_for(team).run("rollback", burst)
    assert rolled["outcome"] == "rolled-back"
    assert f"kept 1 node(s) jobs already run on ({used})" in rolled["reason"]
    left = {c.name for c in apis.gateway.burst_claims() if not c.deleting}
    assert left == {held.name}
    assert other.instance_id and held.instance_id
    gone, kept = api.nodes.get(other.instance_id), api.nodes.get(held.instance_id)
    assert gone is not None and gone.released_at == apis.clock.now()
    assert kept is not None and kept.released_at is None
    view = api.call("GET", f"/jobs/{development}").body
    assert (view["status"], view["nodes"]) == ("Running", [used])


def test_a_failed_hyperpod_growth_gives_back_the_node_that_came_marked_released(
    solo: MakeSolo,
) -> None:
    """A production burst grows the HyperPod group by two nodes and HyperPod has one: the
    attempt fails, and the move to the next option deletes the node that came up by its
    logical id. That node is marked released in the inventory (D208), so that its departure
    opens no incident; the node that never launched has nothing to mark."""
    team = solo(64, hyperpod_nodes=1, borrow=0, api_on_cluster_clock=True)
    api, apis = team.api, team.apis
    growth = {
        "capacity": {
            "maxNodes": 2,
            "hyperpodGroups": [{"instanceGroupName": "workers", "maxCount": 3}],
        }
    }
    assert api.call("PUT", "/policies/burst", growth).status == 200
    service = team.scheduler()
    service.bursts = Workflows(BURSTS)
    production = team.submit(8)
    assert service.run_pass().dispatched == [production]
    waiting = team.submit(8, replicas=2)  # two nodes more than HyperPod has
    service.run_pass()
    assert team.job(waiting).status is JobStatus.PENDING
    apis.cluster.set_hyperpod_capacity("workers", 1)
    steps = burst_steps_for(team)
    request = BurstRequest(
        burst_id="burst-00000000000000bb",
        template="production",
        instance_type="p5.48xlarge",
        accelerators_per_node=8,
        jobs=[BurstJob(job_id=waiting, team="solo", nodes=2)],
    )
    burst = steps.run("plan", {"request": request.model_dump(mode="json", by_alias=True)})
    options = burst["plan"]["options"]
    assert options and options[0]["instanceGroup"] == "workers", burst
    burst = steps.run("request", burst)
    assert len(burst["added"]) == 2, burst
    apis.advance(apis.cluster.timings.hyperpod_add_s + 1)
    apis.settle()
    burst = steps.run("check", burst)
    assert burst["capacity"] == "failed", burst
    came = [c for c in apis.gateway.burst_claims("burst-00000000000000bb") if c.instance_id]
    assert len(came) == 1, came
    InventorySync(api.nodes, apis.gateway, frozenset({"hyperguard-twin"})).sync()
    assert api.nodes.get(str(came[0].instance_id)) is not None

    burst = steps.run("next_capacity", burst)
    assert burst["capacity"] == "exhausted" and burst["added"] == []
    node = api.nodes.get(str(came[0].instance_id))
    assert node is not None and node.released_at == apis.clock.now()
