"""What the API reads of the cluster (a job's dry run and logs, what HyperGuard needs
installed): the port the routes call, implemented by the cluster gateway
(hyperguard.cluster.hyperpod_eks)."""

from __future__ import annotations

from typing import Protocol

from hyperguard.api.errors import NodeActionsUnavailableError
from hyperguard.cluster.prerequisites import ClusterPrerequisites
from hyperguard.cluster.workloads import DryRunObject, ReplicaLog
from hyperguard.models import Job


class ClusterReads(Protocol):
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

    def prerequisites(self) -> ClusterPrerequisites:
        """Kueue's served versions, the training operator's, the Karpenter NodePools."""
        ...


class GatewayCluster:
    """The deployed answer: the cluster gateway's."""

    def __init__(self, gateway: ClusterReads) -> None:
        self.gateway = gateway

    def dry_run(self, job: Job, paths: list[str]) -> list[DryRunObject]:
        return self.gateway.dry_run(job, paths)

    def replica_log(
        self, job: Job, replica: int, *, tail_lines: int, limit_bytes: int
    ) -> ReplicaLog | None:
        return self.gateway.replica_log(
            job, replica, tail_lines=tail_lines, limit_bytes=limit_bytes
        )

    def prerequisites(self) -> ClusterPrerequisites:
        return self.gateway.prerequisites()


class UnavailableCluster:
    """Where the API reaches no cluster: every call answers 501."""

    def dry_run(self, job: Job, paths: list[str]) -> list[DryRunObject]:
        raise NodeActionsUnavailableError("the cluster is not reachable from this deployment")

    def replica_log(
        self, job: Job, replica: int, *, tail_lines: int, limit_bytes: int
    ) -> ReplicaLog | None:
        raise NodeActionsUnavailableError("the cluster is not reachable from this deployment")

    def prerequisites(self) -> ClusterPrerequisites:
        raise NodeActionsUnavailableError("the cluster is not reachable from this deployment")
