"""What the API asks of the cluster about a job's runs (dry runs, logs): the port the jobs
routes call, implemented by the cluster gateway (hyperguard.cluster.hyperpod_eks)."""

from __future__ import annotations

from typing import Protocol

from hyperguard.api.errors import NodeActionsUnavailableError
from hyperguard.cluster.workloads import DryRunObject, ReplicaLog
from hyperguard.models import Job


class RunObjects(Protocol):
    def dry_run(self, job: Job, paths: list[str]) -> list[DryRunObject]:
        """The run objects a dispatch of `job` would create on each of `paths` (hyperpod,
        burst), as the API server answered their dry run (nothing is created)."""
        ...

    def replica_log(
        self, job: Job, replica: int, *, tail_lines: int, limit_bytes: int
    ) -> ReplicaLog | None:
        """The tail of the log of the job's newest pod of `replica`, through the API
        server's pods/log (None: the job has no such pod)."""
        ...


class ClusterRunObjects:
    """The deployed answer: the cluster gateway's."""

    def __init__(self, gateway: RunObjects) -> None:
        self.gateway = gateway

    def dry_run(self, job: Job, paths: list[str]) -> list[DryRunObject]:
        return self.gateway.dry_run(job, paths)

    def replica_log(
        self, job: Job, replica: int, *, tail_lines: int, limit_bytes: int
    ) -> ReplicaLog | None:
        return self.gateway.replica_log(
            job, replica, tail_lines=tail_lines, limit_bytes=limit_bytes
        )


class UnavailableRunObjects:
    """Where the API reaches no cluster: every call answers 501."""

    def dry_run(self, job: Job, paths: list[str]) -> list[DryRunObject]:
        raise NodeActionsUnavailableError("the cluster is not reachable from this deployment")

    def replica_log(
        self, job: Job, replica: int, *, tail_lines: int, limit_bytes: int
    ) -> ReplicaLog | None:
        raise NodeActionsUnavailableError("the cluster is not reachable from this deployment")
