"""The scheduler service on moto tables, against the simulated cluster behind real APIs."""

from __future__ import annotations

from tests.conftest import Stack
from tests.integration.cluster_harness import ClusterApis

from hyperguard.cluster import ClusterGateway
from hyperguard.governance.service import SchedulerService
from hyperguard.store import IncidentStore, JobStore, NodeStore, TeamStore


def scheduler(
    stack: Stack,
    apis: ClusterApis,
    gateway: ClusterGateway | None = None,
    *,
    nodes: NodeStore | None = None,
    incidents: IncidentStore | None = None,
) -> SchedulerService:
    return SchedulerService(
        jobs=JobStore(stack.tables["JobsTable"]),
        teams=TeamStore(stack.tables["TeamsTable"]),
        gateway=gateway or apis.gateway,
        catalogue=apis.catalogue,
        cluster="hyperguard-twin",
        nodes=nodes,
        incidents=incidents,
        clock=apis.clock.now,
    )


def running_jobs(apis: ClusterApis) -> set[str]:
    """The jobs whose pods run on the cluster."""
    apis.settle()
    return {job_id for job_id, run in apis.cluster.runs().items() if run.state == "running"}
