"""The scheduler service on moto tables, against the simulated cluster behind real APIs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from tests.conftest import Stack
from tests.deadlines import loaded
from tests.integration.api_harness import Api
from tests.integration.cluster_harness import ClusterApis

from hyperguard.cluster import ClusterGateway
from hyperguard.cluster.hyperpod_eks import HyperPodEksGateway
from hyperguard.cluster.workloads import JOB_ID_LABEL, job_name, team_namespace
from hyperguard.governance.applier import PassResult
from hyperguard.governance.service import SchedulerService
from hyperguard.models import Job
from hyperguard.store import IncidentStore, JobStore, NodeStore, TeamStore
from hyperguard_twin.plane.kube import PODS, wait_for


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
    wait_for(
        lambda: running_jobs(apis) == set(job_ids), loaded(60), f"exactly {sorted(job_ids)} to run"
    )


def job_pods(apis: ClusterApis, job_id: str, team: str = "solo") -> list[dict[str, Any]]:
    """The job's pods, of any run, those being deleted too."""
    return apis.kube.list_objects(
        PODS, team_namespace(team), label_selector=f"{JOB_ID_LABEL}={job_name(job_id)}"
    )


def until_pods_gone(apis: ClusterApis, job_id: str, team: str = "solo") -> None:
    """Until the job's stopped runs have no pod left: a pass then restarts it (D210)."""
    wait_for(lambda: not job_pods(apis, job_id, team), loaded(30), f"{job_id}'s pods to go")


def admitted_again(
    service: SchedulerService, apis: ClusterApis, job_id: str, result: PassResult
) -> PassResult:
    """The pass that admitted the job `result`'s pass requeued: that pass itself when the
    pods of the run it stopped were gone by its admission (KWOK, the twin's kubelet, ends a
    deleted pod at once), else the first pass after they went, the job waiting meanwhile
    (D210)."""
    if result.admitted == [job_id]:
        return result
    assert result.admitted == [], result.admitted
    until_pods_gone(apis, job_id)
    again = service.run_pass()
    assert again.admitted == [job_id], again.admitted
    return again


Gateway = TypeVar("Gateway", bound=HyperPodEksGateway)


@dataclass
class Solo:
    """Team `solo`, its quota set, on an idle cluster of its own: the API on moto tables,
    the cluster behind real APIs, and scheduling passes over both."""

    stack: Stack
    apis: ClusterApis
    api: Api

    def scheduler(
        self,
        gateway: ClusterGateway | None = None,
        *,
        nodes: NodeStore | None = None,
        incidents: IncidentStore | None = None,
    ) -> SchedulerService:
        return scheduler(self.stack, self.apis, gateway, nodes=nodes, incidents=incidents)

    def gateway(self, kind: type[Gateway]) -> Gateway:
        """The cluster's gateway as `kind`, a subclass that changes what one call does."""
        return kind(self.apis.gateway.hyperpod, self.apis.gateway.kubernetes)

    def submit(self, gpus: int, **fields: Any) -> str:
        """A job of team `solo` submitted as the admin (201, or the test fails): its id."""
        reply = self.api.submit("solo", gpus, **fields)
        assert reply.status == 201, reply.body
        return str(reply.body["job_id"])

    def job(self, job_id: str) -> Job:
        """The job as stored now (the test fails if it is not stored)."""
        record = self.api.jobs.record(job_id)
        assert record is not None, job_id
        return record.job

    def running(self) -> set[str]:
        return running_jobs(self.apis)


MakeSolo = Callable[..., Solo]
"""`solo(gpus, hyperpod_nodes=4, burst_nodes=0, **sharing)`: team `solo` with a quota of
`gpus` (None: no quota) shared as `Api.quota` takes it. The API stamps submissions with
the wall clock (each a moment apart, so first come is first served) unless
`api_on_cluster_clock=True` puts it on the cluster's manual clock."""
