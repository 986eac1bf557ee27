"""Burst decisions: capacity order, caps, maxNodes, the all-or-nothing check, scale-in."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from hyperguard.bursting.plan import assess, plan_burst
from hyperguard.bursting.requests import (
    BurstJob,
    BurstRequest,
    burst_id,
    last_rollback,
    next_window,
    nodes_for,
    rollback_note,
    scale_in,
)
from hyperguard.catalogue import InstanceSpec
from hyperguard.cluster.karpenter import nodeclaim_manifest, nodes_within_limits, read_claim
from hyperguard.models.cluster import BurstClaim, InstanceGroupSize
from hyperguard.models.nodes import CapacityType
from hyperguard.policies.burst import BurstCapacity, BurstPolicy, PoolKind, SpendCaps

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
OD_P5 = 55.04
SPOT_P5 = 31.037
"""us-east-1's spot price for p5.48xlarge in hyperguard.policies.prices (the zones' median)."""


def request(template: str = "development", *jobs: tuple[str, str, int]) -> BurstRequest:
    return BurstRequest(
        burst_id="burst-0123456789abcdef",
        template=template,
        instance_type="p5.48xlarge",
        accelerators_per_node=8,
        jobs=[BurstJob(job_id=j, team=t, nodes=n) for j, t, n in jobs or [("j1", "alpha", 2)]],
    )


def policy(**capacity: object) -> BurstPolicy:
    return BurstPolicy(capacity=BurstCapacity.model_validate({"max_nodes": 16} | capacity))


def test_development_tries_its_capacity_types_in_the_policy_order() -> None:
    chosen = policy(capacity_order=["reserved", "on-demand", "spot"])
    plan = plan_burst(request(), chosen, claims_elsewhere=0, spend_usd_per_hour={})
    assert [o.capacity_type for o in plan.options] == [
        CapacityType.RESERVED,
        CapacityType.ON_DEMAND,
    ]
    assert plan.nodes == 2
    assert plan.options[1].usd_per_hour == pytest.approx(2 * OD_P5)
    assert plan.options[1].pool == "gpu-burst-on-demand"


def test_research_bursts_only_onto_spot_and_production_never() -> None:
    research = plan_burst(request("research"), policy(), claims_elsewhere=0, spend_usd_per_hour={})
    assert [o.capacity_type for o in research.options] == [CapacityType.SPOT]
    assert research.options[0].usd_per_hour == pytest.approx(2 * SPOT_P5)
    production = plan_burst(
        request("production"), policy(), claims_elsewhere=0, spend_usd_per_hour={}
    )
    assert production.options == []
    assert "template production never bursts onto EKS" in production.refused


def test_committed_reserved_capacity_costs_nothing_and_is_tried_first() -> None:
    chosen = BurstPolicy(
        committed_pools=["gpu-burst-reserved"],
        capacity=BurstCapacity(
            capacity_order=[CapacityType.RESERVED, CapacityType.ON_DEMAND], max_nodes=16
        ),
    )
    plan = plan_burst(request(), chosen, claims_elsewhere=0, spend_usd_per_hour={})
    assert plan.options[0].capacity_type is CapacityType.RESERVED
    assert plan.options[0].usd_per_hour == 0.0


def test_a_team_cap_skips_the_capacity_type_it_cannot_afford() -> None:
    # 2 on-demand nodes: $110.08/h = $2,641.92/day; 2 spot for research would be $1,440/day.
    on = BurstCapacity(max_nodes=16)
    capped = BurstPolicy(spend_caps=SpendCaps(teams={"alpha": 2000.0}), capacity=on)
    plan = plan_burst(request(), capped, claims_elsewhere=0, spend_usd_per_hour={})
    assert plan.options == []
    assert any("team alpha's burst spend cap of $2000.00/day" in r for r in plan.refused)
    # What the team already spends counts: $20/h running leaves room for ~$63/h only.
    roomy = BurstPolicy(spend_caps=SpendCaps(teams={"alpha": 3000.0}), capacity=on)
    plan = plan_burst(request(), roomy, claims_elsewhere=0, spend_usd_per_hour={"alpha": 20.0})
    assert plan.options == []
    plan = plan_burst(request(), roomy, claims_elsewhere=0, spend_usd_per_hour={})
    assert [o.capacity_type for o in plan.options] == [CapacityType.ON_DEMAND]


def test_the_global_cap_counts_every_team_of_the_burst_together() -> None:
    two_teams = request("development", ("j1", "alpha", 1), ("j2", "beta", 1))
    # Each team alone: $55.04/h = $1,320.96/day; together $2,641.92/day.
    capped = BurstPolicy(
        spend_caps=SpendCaps(global_usd_per_day=2000.0), capacity=BurstCapacity(max_nodes=16)
    )
    plan = plan_burst(two_teams, capped, claims_elsewhere=0, spend_usd_per_hour={})
    assert plan.options == []
    assert any("global burst spend cap" in r for r in plan.refused)


def test_max_nodes_counts_other_bursts_claims_and_keeps_whole_jobs() -> None:
    jobs = request("development", ("big", "alpha", 3), ("small", "alpha", 1))
    plan = plan_burst(jobs, policy(max_nodes=4), claims_elsewhere=2, spend_usd_per_hour={})
    assert [j.job_id for j in plan.jobs] == ["small"]
    assert plan.nodes == 1
    assert "job big: 3 more node(s) would exceed maxNodes 4 (2 held by other bursts)" in (
        plan.refused
    )
    off = plan_burst(jobs, policy(max_nodes=0), claims_elsewhere=0, spend_usd_per_hour={})
    assert off.jobs == [] and off.options == []


def group(
    name: str = "workers", target: int = 4, itype: str = "ml.p5.48xlarge"
) -> InstanceGroupSize:
    return InstanceGroupSize(name=name, instance_type=itype, target_count=target, current_count=4)


def test_a_hyperpod_group_the_policy_lets_grow_is_tried_before_any_eks_capacity() -> None:
    chosen = policy(hyperpod_groups=[{"instanceGroupName": "workers", "maxCount": 6}])
    plan = plan_burst(
        request(), chosen, claims_elsewhere=0, spend_usd_per_hour={}, hyperpod_groups=[group()]
    )
    assert [o.label for o in plan.options] == ["hyperpod", "on-demand"]
    assert (plan.options[0].instance_group, plan.options[0].pool) == ("workers", "workers")
    hyperpod_price = chosen.price_table()[(PoolKind.HYPERPOD, "ml.p5.48xlarge")]
    assert plan.options[0].usd_per_hour == pytest.approx(2 * hyperpod_price)
    production = plan_burst(
        request("production"),
        chosen,
        claims_elsewhere=0,
        spend_usd_per_hour={},
        hyperpod_groups=[group()],
    )
    assert [o.label for o in production.options] == ["hyperpod"]
    research = plan_burst(
        request("research"),
        chosen,
        claims_elsewhere=0,
        spend_usd_per_hour={},
        hyperpod_groups=[group()],
    )
    assert [o.label for o in research.options] == ["spot"]  # research never runs on HyperPod


def test_a_hyperpod_group_grows_only_within_max_count_its_type_and_a_price() -> None:
    chosen = policy(
        hyperpod_groups=[
            {"instanceGroupName": "workers", "maxCount": 5},
            {"instanceGroupName": "gone", "maxCount": 9},
            {"instanceGroupName": "small", "maxCount": 9},
        ]
    )
    plan = plan_burst(
        request("production"),
        chosen,
        claims_elsewhere=0,
        spend_usd_per_hour={},
        hyperpod_groups=[group(), group("small", itype="ml.g5.xlarge")],
    )
    assert plan.options == []
    assert "hyperpod workers: 2 more node(s) would exceed maxCount 5 (target 4)" in plan.refused
    assert "hyperpod gone: not an instance group the cluster can grow" in plan.refused
    assert not any("small" in why for why in plan.refused)  # another type: not a candidate
    committed = chosen.model_copy(update={"committed_pools": ["workers"]})
    roomy = plan_burst(
        request(),
        committed,
        claims_elsewhere=0,
        spend_usd_per_hour={},
        hyperpod_groups=[group(target=3)],
    )
    assert roomy.options[0].instance_group == "workers"
    assert roomy.options[0].usd_per_hour == 0.0  # a training plan's spare capacity


def test_a_group_hyperpods_autoscaler_manages_is_never_grown_by_hand() -> None:
    chosen = policy(hyperpod_groups=[{"instanceGroupName": "workers", "maxCount": 6}])
    managed = group().model_copy(update={"autoscaled": True})
    plan = plan_burst(
        request(), chosen, claims_elsewhere=0, spend_usd_per_hour={}, hyperpod_groups=[managed]
    )
    assert [o.label for o in plan.options] == ["on-demand"]  # EKS capacity is still tried
    assert any(
        why.startswith("hyperpod workers: HyperPod's managed autoscaling (Karpenter) is on")
        for why in plan.refused
    )


def test_a_group_grows_by_at_most_the_calls_limit() -> None:
    chosen = policy(
        max_nodes=60, hyperpod_groups=[{"instanceGroupName": "workers", "maxCount": 99}]
    )
    big = request("production", ("j1", "alpha", 51))
    plan = plan_burst(
        big, chosen, claims_elsewhere=0, spend_usd_per_hour={}, hyperpod_groups=[group()]
    )
    assert plan.options == []
    assert "hyperpod workers: 51 nodes, more than 50 at once" in plan.refused


def test_an_instance_type_without_a_price_is_never_bought() -> None:
    unpriced = BurstPolicy(prices=[], capacity=BurstCapacity(max_nodes=16))
    plan = plan_burst(request(), unpriced, claims_elsewhere=0, spend_usd_per_hour={})
    assert plan.options == []
    assert "on-demand: no price for p5.48xlarge" in plan.refused


def test_capacity_order_names_each_type_once() -> None:
    with pytest.raises(ValidationError, match="twice"):
        BurstCapacity.model_validate({"capacityOrder": ["spot", "spot"]})


def claim(
    name: str = "c0",
    *,
    ready: bool = False,
    failure: str | None = None,
    deleting: bool = False,
    instance: str | None = None,
    idle_since: datetime | None = None,
) -> BurstClaim:
    return BurstClaim(
        name=name,
        burst_id="burst-0123456789abcdef",
        attempt=0,
        node_pool="gpu-burst",
        instance_type="p5.48xlarge",
        capacity_type="on-demand",
        ready=ready,
        failure=failure,
        deleting=deleting,
        instance_id=instance,
        idle_since=idle_since,
    )


def test_assess_is_all_or_nothing() -> None:
    one_ready = [claim("a", ready=True), claim("b")]
    assert assess(one_ready, 2, waited_s=10, timeout_s=900) == ("waiting", None)
    assert (
        assess([claim("a", ready=True), claim("b", ready=True)], 2, waited_s=10, timeout_s=900)[0]
        == "ready"
    )
    status, why = assess(one_ready, 2, waited_s=900, timeout_s=900)
    assert status == "timeout" and why == "1 of 2 node(s) Ready after 900 s"


def test_assess_fails_at_once_on_insufficient_capacity_or_a_removed_claim() -> None:
    ice = [claim("a", failure="InsufficientCapacity: no p5"), claim("b")]
    assert assess(ice, 2, waited_s=1, timeout_s=900) == (
        "failed",
        "NodeClaim a: InsufficientCapacity: no p5",
    )
    status, why = assess([claim("a", ready=True)], 2, waited_s=1, timeout_s=900)
    assert status == "failed" and why is not None
    assert why.startswith("1 of 2 NodeClaim(s) removed by Karpenter")


def test_scale_in_marks_idle_nodes_then_releases_them_after_the_cooldown() -> None:
    fresh = claim("idle", ready=True, instance="i-1")
    release, marks = scale_in([fresh], busy=set(), now=NOW, cooldown_s=600)
    assert release == [] and marks == [(fresh, NOW)]
    waited = claim("idle", ready=True, instance="i-1", idle_since=NOW - timedelta(seconds=599))
    assert scale_in([waited], busy=set(), now=NOW, cooldown_s=600) == ([], [])
    cooled = claim("idle", ready=True, instance="i-1", idle_since=NOW - timedelta(seconds=600))
    assert scale_in([cooled], busy=set(), now=NOW, cooldown_s=600) == ([cooled], [])


def test_scale_in_keeps_busy_launching_and_leaving_nodes() -> None:
    busy = claim("busy", ready=True, instance="i-1", idle_since=NOW - timedelta(hours=1))
    launching = claim("launching", instance="i-2")
    leaving = claim("leaving", ready=True, instance="i-3", deleting=True)
    release, marks = scale_in([busy, launching, leaving], busy={"i-1"}, now=NOW, cooldown_s=0)
    assert release == []
    assert marks == [(busy, None)]


def test_burst_ids_are_stable_within_a_window_and_name_the_jobs() -> None:
    first = burst_id("c", "development", "p5.48xlarge", ["b", "a"], NOW, 600)
    assert first == burst_id("c", "development", "p5.48xlarge", ["a", "b"], NOW, 600)
    assert first != burst_id("c", "development", "p5.48xlarge", ["a"], NOW, 600)
    later = NOW + timedelta(seconds=600)
    assert first != burst_id("c", "development", "p5.48xlarge", ["a", "b"], later, 600)
    BurstRequest(
        burst_id=first,
        template="development",
        instance_type="p5.48xlarge",
        accelerators_per_node=8,
        jobs=[BurstJob(job_id="a", team="alpha", nodes=1)],
    )


def test_nodes_for_packs_whole_replicas() -> None:
    assert nodes_for(4, 8, 8) == 4
    assert nodes_for(4, 4, 8) == 2
    assert nodes_for(3, 4, 8) == 2
    assert nodes_for(1, 16, 8) == 1


def test_a_nodeclaim_reads_back_as_it_was_written_and_foreign_claims_are_ignored() -> None:
    manifest = nodeclaim_manifest(
        name="hg-burst-0123456789abcdef-1-0",
        burst_id="burst-0123456789abcdef",
        attempt=1,
        node_pool="gpu-burst",
        node_class="default",
        instance_type="p5.48xlarge",
        capacity_type=CapacityType.SPOT,
        accelerators=8,
    )
    manifest["status"] = {
        "providerID": "aws:///us-east-1a/i-0abc1234def567890",
        "nodeName": "ip-10-0-0-1.ec2.internal",
        "conditions": [{"type": "Launched", "status": "True"}, {"type": "Ready", "status": "True"}],
    }
    read = read_claim(manifest)
    assert read is not None
    assert (read.attempt, read.capacity_type, read.instance_type) == (1, "spot", "p5.48xlarge")
    assert (read.ready, read.instance_id, read.failure) == (True, "i-0abc1234def567890", None)
    assert manifest["spec"]["resources"]["requests"] == {"nvidia.com/gpu": "8"}
    foreign = {"metadata": {"name": "gpu-burst-abc", "labels": {"karpenter.sh/nodepool": "x"}}}
    assert read_claim(foreign) is None


@given(
    nodes=st.lists(st.integers(1, 8), min_size=1, max_size=12),
    elsewhere=st.integers(0, 20),
    max_nodes=st.integers(0, 24),
    cap=st.one_of(st.none(), st.floats(0, 20_000)),
    running=st.floats(0, 500),
    gpu_cap=st.floats(0, 5000),
)
def test_a_plan_never_exceeds_max_nodes_or_a_cap(
    nodes: list[int],
    elsewhere: int,
    max_nodes: int,
    cap: float | None,
    running: float,
    gpu_cap: float,
) -> None:
    jobs = [(f"j{i}", "alpha" if i % 2 else "beta", n) for i, n in enumerate(nodes)]
    chosen = BurstPolicy(
        spend_caps=SpendCaps(
            global_usd_per_day=cap,
            teams={"alpha": 5000.0},
            team_gpu_hours_per_day={"beta": gpu_cap},
        ),
        capacity=BurstCapacity(max_nodes=max_nodes),
    )
    plan = plan_burst(
        request("development", *jobs),
        chosen,
        claims_elsewhere=elsewhere,
        spend_usd_per_hour={"alpha": running},
    )
    assert plan.nodes == sum(j.nodes for j in plan.jobs)
    assert plan.nodes + elsewhere <= max(max_nodes, elsewhere)
    for option in plan.options:
        alpha = sum(j.nodes for j in plan.jobs if j.team == "alpha") * option.usd_per_node_hour
        if alpha > 0:
            assert (running + alpha) * 24 <= 5000.0 + 1e-6
        if cap is not None and option.usd_per_hour > 0:
            assert (running + option.usd_per_hour) * 24 <= cap + 1e-6
        beta_gpus = sum(j.nodes for j in plan.jobs if j.team == "beta") * 8
        assert beta_gpus * 24 <= gpu_cap + 1e-6


def test_gpu_hour_caps_refuse_a_burst_like_dollar_caps() -> None:
    capped = BurstPolicy(
        spend_caps=SpendCaps(team_gpu_hours_per_day={"alpha": 24 * 16}),
        capacity=BurstCapacity(max_nodes=16),
    )
    within = request("development", ("j1", "alpha", 2))  # 16 GPUs: exactly the cap
    assert [
        o.label
        for o in plan_burst(within, capped, claims_elsewhere=0, spend_usd_per_hour={}).options
    ] == ["on-demand"]
    running = within.model_copy(update={"burst_gpus": {"alpha": 8.0}})
    plan = plan_burst(running, capped, claims_elsewhere=0, spend_usd_per_hour={})
    assert plan.options == []
    assert plan.refused == [
        "on-demand: team alpha's burst cap of 384 GPU-hours/day would be exceeded: "
        "8 GPUs running + 16 for this job = 576 GPU-hours/day"
    ]
    global_cap = BurstPolicy(
        spend_caps=SpendCaps(global_gpu_hours_per_day=24 * 20),
        capacity=BurstCapacity(max_nodes=16),
    )
    other_team = within.model_copy(update={"burst_gpus": {"beta": 8.0}})
    assert (
        plan_burst(other_team, global_cap, claims_elsewhere=0, spend_usd_per_hour={}).options == []
    )


def test_committed_capacity_is_free_but_still_counts_gpu_hours() -> None:
    chosen = BurstPolicy(
        committed_pools=["gpu-burst-reserved"],
        spend_caps=SpendCaps(teams={"alpha": 0.0}, team_gpu_hours_per_day={"alpha": 24 * 8}),
        capacity=BurstCapacity(max_nodes=16, capacity_order=[CapacityType.RESERVED]),
    )
    one = request("development", ("j1", "alpha", 1))
    assert (
        plan_burst(one, chosen, claims_elsewhere=0, spend_usd_per_hour={}).options[0].usd_per_hour
        == 0
    )
    two = request("development", ("j1", "alpha", 2))
    assert plan_burst(two, chosen, claims_elsewhere=0, spend_usd_per_hour={}).options == []


def p5(count: int, *, label: bool = True) -> list[dict[str, object]]:
    """NodeClaims of p5.48xlarge: labelled (launched) or only asking (requirement)."""
    if label:
        return [
            {"metadata": {"labels": {"node.kubernetes.io/instance-type": "p5.48xlarge"}}}
        ] * count
    requirement = {
        "key": "node.kubernetes.io/instance-type",
        "operator": "In",
        "values": ["p5.48xlarge"],
    }
    return [{"metadata": {}, "spec": {"requirements": [requirement]}}] * count


P5_SPEC = InstanceSpec(accelerators=8, vcpu=192, memory_mib=2048 * 1024)


def test_nodepool_limits_count_every_claim_of_the_pool() -> None:
    spec = {"p5.48xlarge": P5_SPEC}.__getitem__
    room, why = nodes_within_limits(
        {"nvidia.com/gpu": "32"}, p5(2) + p5(1, label=False), "p5.48xlarge", spec
    )
    assert (room, why) == (1, "nvidia.com/gpu 32 (24 in use)")
    assert nodes_within_limits({"nodes": "3"}, p5(3), "p5.48xlarge", spec)[0] == 0
    assert nodes_within_limits({"memory": "8Ti", "cpu": "1000"}, p5(1), "p5.48xlarge", spec) == (
        3,
        "memory 8Ti (2048Gi in use)",
    )
    assert nodes_within_limits({"aws.amazon.com/neuron": "1"}, p5(9), "p5.48xlarge", spec) == (
        None,
        None,
    )
    assert nodes_within_limits({}, p5(9), "p5.48xlarge", spec) == (None, None)


def test_a_burst_the_nodepool_limits_cannot_hold_buys_no_eks_capacity() -> None:
    chosen = policy(hyperpod_groups=[{"instanceGroupName": "workers", "maxCount": 9}])
    plan = plan_burst(
        request(),
        chosen,
        claims_elsewhere=0,
        spend_usd_per_hour={},
        hyperpod_groups=[group()],
        nodepool_room=(1, "nvidia.com/gpu 32 (24 in use)"),
    )
    assert [o.label for o in plan.options] == ["hyperpod"]  # HyperPod is not the NodePool's
    assert plan.refused == [
        "NodePool gpu-burst: its limits leave room for 1 more p5.48xlarge node(s), the burst "
        "needs 2 (nvidia.com/gpu 32 (24 in use))"
    ]


@given(
    gpu_limit=st.integers(0, 256),
    existing=st.integers(0, 40),
    nodes=st.lists(st.integers(1, 8), min_size=1, max_size=6),
)
def test_karpenter_options_never_exceed_the_nodepool_limits(
    gpu_limit: int, existing: int, nodes: list[int]
) -> None:
    spec = {"p5.48xlarge": P5_SPEC}.__getitem__
    room = nodes_within_limits(
        {"nvidia.com/gpu": str(gpu_limit)}, p5(existing), "p5.48xlarge", spec
    )
    jobs = [(f"j{i}", "alpha", n) for i, n in enumerate(nodes)]
    plan = plan_burst(
        request("development", *jobs),
        policy(max_nodes=1000),
        claims_elsewhere=0,
        spend_usd_per_hour={},
        nodepool_room=room,
    )
    if plan.options:
        assert (existing + plan.nodes) * 8 <= max(gpu_limit, existing * 8)


def test_a_rollback_note_is_carried_forward_unchanged_pass_after_pass() -> None:
    note = rollback_note("burst-0123456789abcdef", "on-demand: 1 of 1 NodeClaim(s) removed")
    assert note == (
        "waiting: burst burst-0123456789abcdef raised no capacity: on-demand: 1 of 1 "
        "NodeClaim(s) removed"
    )
    last = last_rollback(note)
    assert last == note.removeprefix("waiting: ")
    next_pass = f"pending: capacity; burst capacity asked for (burst-1111111111111111); last {last}"
    assert last_rollback(next_pass) == last
    assert last_rollback("pending: capacity; burst capacity launching") is None


@given(
    st.datetimes(
        min_value=datetime(2020, 1, 1), max_value=datetime(2040, 1, 1), timezones=st.just(UTC)
    ),
    st.integers(min_value=5, max_value=86400),
)
def test_the_next_window_begins_where_the_burst_id_changes(now: datetime, length: int) -> None:
    turn = next_window(now, length)
    assert now < turn <= now + timedelta(seconds=length) and turn.tzinfo is UTC
    same = burst_id("c", "development", "p5.48xlarge", ["j"], now, length)
    before = turn - timedelta(microseconds=1)
    assert burst_id("c", "development", "p5.48xlarge", ["j"], before, length) == same
    assert burst_id("c", "development", "p5.48xlarge", ["j"], turn, length) != same
