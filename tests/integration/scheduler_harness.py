"""The scheduler service on moto tables, against the simulated cluster behind real APIs."""

from __future__ import annotations

from tests.conftest import Stack
from tests.integration.cluster_harness import ClusterApis

from hyperguard.cluster import ClusterGateway
from hyperguard.governance.service import SchedulerService
from hyperguard.store import IncidentStore, JobStore, NodeStore, TeamStore
from hyperguard_twin.plane.kube import wait_for


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


def until_running(apis: ClusterApis, *job_ids: str) -> None:
    """Until the jobs whose pods run are exactly `job_ids`. A pass that stops one run and
    dispatches another onto its node leaves the new pod Pending (Insufficient
    nvidia.com/gpu) until the old pods are gone; kube-scheduler binds it at its next retry,
    in wall time, after a back-off the cluster is quiet through."""
    wait_for(lambda: running_jobs(apis) == set(job_ids), 60, f"exactly {sorted(job_ids)} to run")
