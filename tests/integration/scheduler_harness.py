"""A simulated cluster with nothing running, and the scheduler service on moto tables."""

from __future__ import annotations

from tests.conftest import Stack

from hyperguard.cluster.clock import ManualClock
from hyperguard.cluster.simulated import SimulatedCluster
from hyperguard.governance.service import SchedulerService
from hyperguard.store import JobStore, TeamStore


def empty_cluster[C: SimulatedCluster](
    clock: ManualClock,
    hyperpod_nodes: int = 4,
    burst_nodes: int = 0,
    kind: type[C] = SimulatedCluster,  # type: ignore[assignment]
) -> C:
    """`hyperpod_nodes` idle p5.48xlarge HyperPod nodes (and EKS burst nodes): the seeded
    demo jobs are stopped and never written to the JobsTable."""
    cluster = kind(clock).seed_default(hyperpod_nodes=hyperpod_nodes, burst_nodes=burst_nodes)
    for job in cluster.jobs():
        cluster.stop_job(job.job_id)
    return cluster


def scheduler(stack: Stack, cluster: SimulatedCluster, clock: ManualClock) -> SchedulerService:
    return SchedulerService(
        jobs=JobStore(stack.tables["JobsTable"]),
        teams=TeamStore(stack.tables["TeamsTable"]),
        gateway=cluster,
        cluster="hyperguard-twin",
        clock=clock.now,
    )
