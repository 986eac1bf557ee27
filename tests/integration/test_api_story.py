"""The governance story through the real API handler: three teams, quotas, borrowing, a
lender reclaiming, a high-priority job preempting a low-priority one (moto + the simulated
cluster; scheduler passes run explicitly)."""

from __future__ import annotations

from typing import Any

from tests.conftest import Stack
from tests.integration.api_harness import Api, member
from tests.integration.conftest import MakeCluster
from tests.integration.scheduler_harness import running_jobs, scheduler, until_running

from hyperguard.inventory import InventorySync


def _status(api: Api, job_id: str) -> str:
    return str(api.call("GET", f"/jobs/{job_id}").body["status"])


def _team(api: Api, team: str) -> dict[str, Any]:
    views = api.call("GET", "/views/teams").body["teams"]
    return next(v for v in views if v["team"] == team)


def test_three_teams_borrow_reclaim_and_preempt_by_priority(
    stack: Stack, make_cluster: MakeCluster
) -> None:
    apis = make_cluster(hyperpod_nodes=4)  # 32 GPUs
    clock = apis.clock
    service = scheduler(stack, apis)
    api = Api(stack, clock=clock.now)
    for team in ("alpha", "beta", "gamma"):
        api.call("PUT", "/principals", {"principal_arn": member(team), "team": team})
    assert api.quota("alpha", 16, borrow=100).status == 201
    assert api.quota("beta", 8, borrow=200).status == 201
    assert api.quota("gamma", 8, strategy="Lend", borrow=None).status == 201
    config = {"PriorityClasses": [{"Name": "low", "Weight": 10}, {"Name": "high", "Weight": 100}]}
    assert api.call("PUT", "/scheduler-config", config).status == 200

    # 1. beta borrows what alpha and gamma do not use.
    beta = []
    for _ in range(3):
        clock.advance(1)
        reply = api.submit("beta", 8, principal=member("beta"), priority_class="low")
        assert reply.status == 201
        beta.append(reply.body["job_id"])
    result = service.run_pass()
    assert sorted(result.admitted) == sorted(beta) and result.dispatched == result.admitted
    assert running_jobs(apis) == set(beta)
    view = _team(api, "beta")
    assert (view["allocated_gpus"], view["gpus_in_use"], view["borrowed_gpus"]) == (8, 24, 16)
    assert view["utilisation_pct"] == 300.0

    # 2. alpha (the lender) reclaims its nominal quota: beta's newest borrower gives way.
    clock.advance(60)
    a1 = api.submit("alpha", 8, principal=member("alpha"), replicas=2, priority_class="low")
    a1_id = a1.body["job_id"]
    result = service.run_pass()
    assert result.admitted == [a1_id] and result.preempted == [beta[2]]
    preempted = api.call("GET", f"/jobs/{beta[2]}", principal=member("beta")).body
    assert preempted["status"] == "Preempted"
    reason = preempted["history"][-1]["reason"]
    assert preempted["history"][-1]["event"] == "preempted"
    assert "to reclaim lent quota" in reason and a1_id in reason
    assert len(api.call("GET", f"/jobs/{a1_id}").body["nodes"]) == 2

    # 3. gamma (Lend only) takes back its 8 GPUs from beta too.
    clock.advance(60)
    g1 = api.submit("gamma", 8, principal=member("gamma"), priority_class="low").body["job_id"]
    result = service.run_pass()
    assert result.admitted == [g1] and result.preempted == [beta[1]]
    assert _status(api, beta[0]) == "Running"
    view = _team(api, "beta")
    assert (view["gpus_in_use"], view["borrowed_gpus"]) == (8, 0)

    # 4. A high-priority alpha job preempts alpha's own low-priority job.
    clock.advance(60)
    a2 = api.submit("alpha", 8, principal=member("alpha"), replicas=2, priority_class="high")
    a2_id = a2.body["job_id"]
    result = service.run_pass()
    assert result.admitted == [a2_id] and result.preempted == [a1_id]
    a1_view = api.call("GET", f"/jobs/{a1_id}").body
    assert a1_view["status"] == "Preempted"
    assert "for higher-priority job" in a1_view["reason"]
    assert [h["event"] for h in a1_view["history"]] == [
        "submitted",
        "admitted",
        "dispatched",
        "preempted",
    ]
    # a2's pods bind once a1's are gone: kube-scheduler retries in wall time.
    until_running(apis, beta[0], g1, a2_id)

    # Nothing moves on a stable state; waiting jobs say why.
    result = service.run_pass()
    assert result.admitted == [] and result.preempted == []
    waiting = api.call("GET", f"/jobs/{beta[1]}", principal=member("beta")).body
    assert waiting["status"] == "Preempted" and waiting["reason"].startswith("pending:")
    classes = {
        v["priority_class"]: v
        for v in api.call("GET", "/views/priority-classes").body["priority_classes"]
    }
    assert (classes["low"]["running"], classes["low"]["preempted"]) == (2, 3)
    assert (classes["high"]["running"], classes["high"]["pending"]) == (1, 0)
    # The cluster view's nodes are what the inventory function writes on AWS.
    InventorySync(api.nodes, apis.gateway, frozenset({"hyperguard-twin"})).sync()
    cluster_view = api.call("GET", "/views/cluster").body
    assert cluster_view["running_jobs"] == 3 and cluster_view["pending_jobs"] == 3
    assert (cluster_view["gpus"], cluster_view["gpus_in_use"], cluster_view["idle_gpus"]) == (
        32,
        32,
        0,
    )
    assert cluster_view["instances_by_health"]["schedulable"] == 4

    # A team sees only its own jobs.
    listed = api.call("GET", "/jobs", principal=member("gamma")).body["jobs"]
    assert [j["job_id"] for j in listed] == [g1]
    assert api.call("GET", f"/jobs/{a2_id}", principal=member("gamma")).status == 404
