"""Builders shared by the governance tests: quotas, scheduler configs, workloads."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tests.conftest import catalogue

from hyperguard.governance import GovernanceState, Workload
from hyperguard.models.governance import ComputeQuota, SchedulerConfig, accelerator_share
from hyperguard.models.jobs import ElasticPolicy

P5 = "ml.p5.48xlarge"
CATALOGUE = catalogue()
CLASSES = {"low": 10, "mid": 50, "high": 100}


def quota(
    team: str,
    gpus: int,
    *,
    strategy: str = "LendAndBorrow",
    borrow: int | None = 50,
    absolute: int | None = None,
    weight: int = 0,
    preempt: str = "LowerPriority",
    active: str = "Enabled",
) -> ComputeQuota:
    sharing: dict[str, Any] = {"Strategy": strategy}
    if borrow is not None:
        sharing["BorrowLimit"] = borrow
    if absolute is not None:
        sharing["AbsoluteBorrowLimits"] = [{"InstanceType": P5, "Accelerators": absolute}]
    return ComputeQuota.model_validate(
        {
            "Name": team,
            "ClusterArn": "arn:aws:sagemaker:us-east-1:123456789012:cluster/abcdefabcdef",
            "ComputeQuotaConfig": {
                "ComputeQuotaResources": [{"InstanceType": P5, "Accelerators": gpus}],
                "ResourceSharingConfig": sharing,
                "PreemptTeamTasks": preempt,
            },
            "ComputeQuotaTarget": {"TeamName": team, "FairShareWeight": weight},
            "ActivationState": active,
        }
    )


def scheduler(
    *, fair_share: str = "Enabled", idle: str = "Enabled", min_runtime: int = 0
) -> SchedulerConfig:
    return SchedulerConfig.model_validate(
        {
            "PriorityClasses": [{"Name": n, "Weight": w} for n, w in CLASSES.items()],
            "FairShare": fair_share,
            "IdleResourceSharing": idle,
            "MinRuntimeSeconds": min_runtime,
        }
    )


def job(
    job_id: str,
    team: str,
    gpus: int,
    *,
    cls: str | None = "low",
    at: float = 0.0,
    replicas: int = 1,
    min_replicas: int | None = None,
    max_replicas: int | None = None,
    step: int | None = None,
    discrete: list[int] | None = None,
    scaling_timeout_s: float = 0.0,
) -> Workload:
    """`gpus` per replica of a p5 instance; elastic when any of min/max/discrete is given
    (HyperPod's elasticPolicy rules decide the sizes)."""
    sizes = None
    if min_replicas is not None or max_replicas is not None or discrete is not None:
        policy = ElasticPolicy(
            min_replicas=min_replicas or min([replicas, *(discrete or [])]),
            max_replicas=max_replicas or max([replicas, *(discrete or [])]),
            replica_increment_step=step,
            replica_discrete_values=discrete,
        )
        sizes = tuple(policy.sizes())
    return Workload(
        job_id,
        team,
        P5,
        accelerator_share(CATALOGUE.spec(P5), gpus),
        replicas,
        cls,
        at,
        sizes=sizes,
        scaling_timeout_s=scaling_timeout_s,
    )


def running(workload: Workload, replicas: int | None = None, *, since: float = 0.0) -> Workload:
    workload.admitted = replicas if replicas is not None else workload.replicas
    workload.started_at = since
    return workload


def cluster(
    quotas: list[ComputeQuota],
    instances: int,
    jobs: Sequence[Workload] = (),
    *,
    fair_share: str = "Enabled",
    idle: str = "Enabled",
    min_runtime: int = 0,
    now: float = 1000.0,
    hyperpod: int | None = None,
) -> GovernanceState:
    """`instances` p5 instances installed, `hyperpod` of them on HyperPod (None: all)."""
    state = GovernanceState(
        quotas,
        scheduler(fair_share=fair_share, idle=idle, min_runtime=min_runtime),
        {P5: instances},
        CATALOGUE,
        now,
        None if hyperpod is None else {P5: hyperpod},
    )
    for workload in jobs:
        state.add(workload)
    return state


def gpus_used(state: GovernanceState, team: str) -> int:
    return state.team_usage(team, P5).accelerators
