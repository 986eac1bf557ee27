"""Pure parts of the API: views, caller mapping, error fields."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from tests.conftest import catalogue

from hyperguard.api.auth import resolve_caller, role_arn
from hyperguard.api.errors import ForbiddenError, UnauthenticatedError, _field, _mapped
from hyperguard.api.views import cluster_view, priority_class_views, quota_view, team_views
from hyperguard.models import Job, JobStatus, Node, NodeStatus
from hyperguard.models.governance import ComputeQuota, SchedulerConfig
from hyperguard.models.records import JobEvent, JobHistoryEntry, JobRecord
from hyperguard.policies.burst import BurstPolicy
from hyperguard.recovery.operator import OperatorActionError, OperatorNodeActions, RecoveryOperator
from hyperguard.store.teams import PrincipalGrant

CATALOGUE = catalogue()

T0 = datetime(2025, 1, 6, 9, 0, tzinfo=UTC)


def _quota(team: str, accelerators: int, borrow: int = 50) -> ComputeQuota:
    return ComputeQuota.model_validate(
        {
            "Name": team,
            "ClusterArn": "arn:aws:sagemaker:us-east-1:123456789012:cluster/x",
            "ComputeQuotaConfig": {
                "ComputeQuotaResources": [
                    {"InstanceType": "ml.p5.48xlarge", "Accelerators": accelerators}
                ],
                "ResourceSharingConfig": {"Strategy": "LendAndBorrow", "BorrowLimit": borrow},
            },
            "ComputeQuotaTarget": {"TeamName": team},
        }
    )


def _record(job_id: str, team: str, status: JobStatus, gpus: int = 8, **kw: Any) -> JobRecord:
    fields = {k: kw.pop(k) for k in ("priority_class", "replicas") if k in kw}
    job = Job(
        job_id=job_id,
        team=team,
        status=status,
        accelerators_per_replica=gpus,
        submitted_at=kw.pop("submitted_at", T0),
        **fields,
    )
    return JobRecord(job=job, **kw)


def test_a_gpu_only_quota_resolves_vcpu_and_memory_in_proportion() -> None:
    view = quota_view(_quota("nlp", 2), CATALOGUE).model_dump(mode="json")
    assert view["ResolvedResources"] == [
        {"InstanceType": "ml.p5.48xlarge", "Accelerators": 2, "VCpu": 48.0, "MemoryInGiB": 512.0}
    ]
    assert view["ResolvedLimits"][0]["Accelerators"] == 3
    assert view["ComputeQuotaVersion"] == 1 and view["ComputeQuotaId"] == "nlp"


def test_team_view_counts_use_borrowing_and_utilisation() -> None:
    records = [
        _record("a", "nlp", JobStatus.RUNNING, replicas=2),
        _record("b", "nlp", JobStatus.ADMITTED, gpus=4),
        _record("c", "nlp", JobStatus.PENDING),
        _record("d", "nlp", JobStatus.SUCCEEDED),
        _record("e", "cv", JobStatus.RUNNING, admitted_replicas=1, replicas=3),
    ]
    views = {v.team: v for v in team_views([_quota("nlp", 16)], records, CATALOGUE, BurstPolicy())}
    nlp = views["nlp"]
    assert (nlp.allocated_gpus, nlp.limit_gpus, nlp.gpus_in_use, nlp.borrowed_gpus) == (
        16,
        24,
        20,
        4,
    )
    assert nlp.utilisation_pct == 125.0 and (nlp.running_jobs, nlp.pending_jobs) == (2, 1)
    cv = views["cv"]  # jobs but no quota: everything it uses is borrowed
    assert (cv.allocated_gpus, cv.gpus_in_use, cv.borrowed_gpus, cv.utilisation_pct) == (
        0,
        8,
        8,
        None,
    )


def test_priority_class_view_run_and_wait_times() -> None:
    config = SchedulerConfig.model_validate({"PriorityClasses": [{"Name": "high", "Weight": 9}]})
    now = T0 + timedelta(seconds=100)
    records = [
        _record(
            "a",
            "t",
            JobStatus.RUNNING,
            priority_class="high",
            first_admitted_at=T0 + timedelta(seconds=10),
            started_at=T0 + timedelta(seconds=40),
        ),
        _record(
            "b",
            "t",
            JobStatus.SUCCEEDED,
            priority_class="high",
            first_admitted_at=T0 + timedelta(seconds=30),
            started_at=T0 + timedelta(seconds=30),
            ended_at=T0 + timedelta(seconds=50),
        ),
        _record("c", "t", JobStatus.PREEMPTED, priority_class="high"),
        _record("d", "t", JobStatus.PENDING),
    ]
    views = {v.priority_class: v for v in priority_class_views(config, records, now)}
    high = views["high"]
    assert (high.running, high.pending, high.preempted) == (1, 0, 1)
    assert (high.average_run_s, high.longest_run_s) == (40.0, 60.0)
    assert (high.average_wait_s, high.longest_wait_s) == (round(140 / 3, 3), 100.0)
    assert views[None].pending == 1 and views[None].weight is None


def test_cluster_view_sums_installed_capacity() -> None:
    nodes = [
        Node(
            instance_id=f"i-{n:017x}",
            cluster="c",
            pool="workers",
            platform="hyperpod",
            instance_type="ml.p5.48xlarge",
            accelerators=8,
            status=status,
            open_incident_id="inc" if status is NodeStatus.FAILURE else None,
            schedulable=status is NodeStatus.RUNNING,
        )
        for n, status in enumerate([NodeStatus.RUNNING, NodeStatus.FAILURE, NodeStatus.NOT_FOUND])
    ]
    view = cluster_view(nodes, [_record("a", "t", JobStatus.RUNNING)], CATALOGUE, T0, BurstPolicy())
    assert view.instances == 2
    assert view.instances_by_health.model_dump() == {
        "schedulable": 1,
        "pending_recovery": 1,
        "unschedulable": 0,
    }
    assert (view.gpus, view.vcpus, view.memory_gib, view.gpus_in_use) == (16, 384, 4096, 8)
    assert view.idle_gpus == 8
    assert view.instances_by_status == {"Running": 1, "Failure": 1}


def test_costs_by_pool_and_team_at_the_burst_policys_prices() -> None:
    """Per pool: its present instances x the policy's price (committed: 0), GPU-hours today
    of its nodes and of the jobs now in it; per team: its jobs on EKS pools."""
    start = T0.replace(hour=0)

    def node(n: int, pool: str, platform: str, itype: str, capacity: str = "on-demand") -> Node:
        return Node(
            instance_id=f"i-{n:017x}",
            cluster="c",
            pool=pool,
            platform=platform,
            instance_type=itype,
            accelerators=8,
            capacity_type=capacity,
            launch_time=start,
        )

    nodes = [
        node(1, "workers", "hyperpod", "ml.p5.48xlarge"),
        node(2, "workers", "hyperpod", "ml.p5.48xlarge"),
        node(3, "burst", "eks", "p5.48xlarge"),
        node(4, "burst", "eks", "p5.48xlarge", "spot"),
    ]
    on_demand = _record(
        "od", "ml", JobStatus.RUNNING, gpus=4, pool_kind="eks-on-demand", started_at=start
    )
    on_demand.job.pool = "burst-on-demand"
    on_spot = _record("sp", "cv", JobStatus.RUNNING, pool_kind="eks-spot")
    on_spot.job.pool = "burst-spot"
    on_hp = _record("hp", "ml", JobStatus.RUNNING, pool_kind="hyperpod")
    on_hp.job.pool = "workers"
    records = [on_demand, on_spot, on_hp]
    policy = BurstPolicy(committed_pools=["workers", "burst-spot"])
    view = cluster_view(nodes, records, CATALOGUE, T0, policy)
    pools = {p.pool: p for p in view.pools}
    assert sorted(pools) == ["burst-on-demand", "burst-spot", "workers"]
    assert (pools["workers"].kind, pools["workers"].instances, pools["workers"].gpus) == (
        "hyperpod",
        2,
        16,
    )
    assert pools["workers"].usd_per_hour == 0.0 and pools["workers"].committed
    assert pools["burst-on-demand"].usd_per_hour == 55.04
    assert pools["burst-on-demand"].gpus_in_use == 4
    assert pools["burst-on-demand"].gpu_hours_installed_today == 72.0  # 8 GPUs x 9 h
    assert pools["burst-spot"].usd_per_hour == 0.0
    teams = {v.team: v for v in team_views([], records, CATALOGUE, policy)}
    assert teams["ml"].burst_usd_per_hour == 27.52  # half a p5 on demand; HyperPod: not burst
    assert teams["cv"].burst_usd_per_hour == 0.0  # committed spot pool
    teams = {v.team: v for v in team_views([], records, CATALOGUE, BurstPolicy())}
    assert teams["cv"].burst_usd_per_hour == 31.04  # a whole p5 on spot (31.037), to the cent


def test_a_job_on_a_hyperpod_node_a_burst_added_counts_that_share_as_burst() -> None:
    """A node BatchAddClusterNodes added for a burst stays burst capacity (priced, capped)
    until scale-in gives it back, although jobs on it are placed on HyperPod."""
    job = _record("hp", "nlp", JobStatus.RUNNING, replicas=2, pool_kind="hyperpod")
    job.job.pool, job.job.nodes = "workers", ["i-original", "i-added"]
    (plain,) = team_views([], [job], CATALOGUE, BurstPolicy())
    assert (plain.burst_gpus, plain.burst_usd_per_hour) == (0, 0.0)
    (view,) = team_views([], [job], CATALOGUE, BurstPolicy(), added={"i-added"})
    assert view.burst_gpus == 8  # one of its two nodes
    assert view.burst_usd_per_hour == 98.32  # a p5 on HyperPod, at the policy's price
    committed = BurstPolicy(committed_pools=["workers"])
    (free,) = team_views([], [job], CATALOGUE, committed, added={"i-added"})
    assert (free.burst_gpus, free.burst_usd_per_hour) == (8, 0.0)


class _Grants:
    def __init__(self, grants: dict[str, PrincipalGrant]) -> None:
        self.grants = grants

    def principal(self, arn: str) -> PrincipalGrant | None:
        return self.grants.get(arn)


def test_a_role_session_maps_through_its_role() -> None:
    session = "arn:aws:sts::123456789012:assumed-role/nlp-engineers/alice"
    role = "arn:aws:iam::123456789012:role/nlp-engineers"
    assert role_arn(session) == role
    assert role_arn(role) is None
    teams: Any = _Grants({role: PrincipalGrant(role, "nlp", False)})
    caller = resolve_caller(session, teams, frozenset())
    assert (caller.team, caller.admin, caller.principal) == ("nlp", False, session)
    assert resolve_caller(role, _Grants({}), frozenset({role})).admin  # type: ignore[arg-type]
    with pytest.raises(ForbiddenError):
        resolve_caller("arn:aws:iam::123456789012:user/bob", teams, frozenset())
    with pytest.raises(UnauthenticatedError):
        resolve_caller(None, teams, frozenset())


def test_error_fields_name_the_json_path() -> None:
    loc = ("body", "ComputeQuotaConfig", "ComputeQuotaResources", 0, "InstanceType")
    assert _field(loc) == "ComputeQuotaConfig.ComputeQuotaResources[0].InstanceType"
    assert _field(("query", "limit")) == "limit"
    assert _field(("body",)) == "body"


class _NodeWithIncident:
    def get(self, instance_id: str) -> Node:
        return Node(
            instance_id=instance_id,
            cluster="c",
            pool="workers",
            platform="hyperpod",
            instance_type="ml.p5.48xlarge",
            open_incident_id="inc-1",
        )


def test_a_node_action_recovery_refuses_is_a_domain_error_the_api_answers_with_409() -> None:
    unused: Any = None
    operator = RecoveryOperator(incidents=unused, nodes=_NodeWithIncident(), workflows=unused)  # type: ignore[arg-type]
    actions = OperatorNodeActions(operator, gateway=unused)
    with pytest.raises(OperatorActionError) as refused:
        actions.uncordon("i-0123456789abcdef0")
    assert _mapped(refused.value) == (
        409,
        "i-0123456789abcdef0 has open incident inc-1; its recovery returns it to service",
        None,
    )


def test_team_gpu_hours_today_come_from_the_histories_ended_jobs_included() -> None:
    start = T0.replace(hour=0)
    ended = _record("done", "nlp", JobStatus.SUCCEEDED, replicas=2)
    ended.history = [
        JobHistoryEntry(
            at=start - timedelta(hours=1), event=JobEvent.ADMITTED, status=JobStatus.ADMITTED
        ),
        JobHistoryEntry(
            at=start + timedelta(hours=2), event=JobEvent.FINISHED, status=JobStatus.SUCCEEDED
        ),
    ]
    running = _record("run", "nlp", JobStatus.RUNNING, gpus=4)
    running.history = [
        JobHistoryEntry(
            at=start + timedelta(hours=5), event=JobEvent.ADMITTED, status=JobStatus.ADMITTED
        ),
        JobHistoryEntry(
            at=start + timedelta(hours=6), event=JobEvent.DISPATCHED, status=JobStatus.RUNNING
        ),
    ]
    waiting = _record("wait", "cv", JobStatus.PENDING)
    teams = {
        v.team: v for v in team_views([], [ended, running, waiting], CATALOGUE, BurstPolicy(), T0)
    }
    # 16 GPUs from midnight to 02:00 (not the hour before), 4 GPUs from 05:00 to 09:00.
    assert teams["nlp"].gpu_hours_today == 16 * 2 + 4 * 4
    assert (teams["nlp"].running_jobs, teams["nlp"].pending_jobs) == (1, 0)
    assert teams["cv"].gpu_hours_today == 0.0
    without_clock = team_views([], [running], CATALOGUE, BurstPolicy())
    assert without_clock[0].gpu_hours_today == 0.0


def test_a_dry_run_sends_each_path_its_template_allows() -> None:
    """production runs on HyperPod only, development on HyperPod then EKS, research on EKS
    spot (hyperguard.governance.placement): the dry run checks those run objects, no other."""
    from hyperguard.api.routes.jobs import run_paths

    assert run_paths("production") == ["hyperpod"]
    assert run_paths("development") == ["hyperpod", "burst"]
    assert run_paths("research") == ["burst"]
