"""What the API asks of the cluster about a job's runs: the port the jobs routes call,
implemented by the cluster gateway (hyperguard.cluster.hyperpod_eks)."""

from __future__ import annotations

from typing import Protocol

from hyperguard.api.errors import NodeActionsUnavailableError
from hyperguard.cluster.workloads import DryRunObject
from hyperguard.models import Job


class RunObjects(Protocol):
    def dry_run(self, job: Job, paths: list[str]) -> list[DryRunObject]:
        """The run objects a dispatch of `job` would create on each of `paths` (hyperpod,
        burst), as the API server answered their dry run (nothing is created)."""
        ...


class ClusterRunObjects:
    """The deployed answer: the cluster gateway's."""

    def __init__(self, gateway: RunObjects) -> None:
        self.gateway = gateway

    def dry_run(self, job: Job, paths: list[str]) -> list[DryRunObject]:
        return self.gateway.dry_run(job, paths)


class UnavailableRunObjects:
    """Where the API reaches no cluster: every call answers 501."""

    def dry_run(self, job: Job, paths: list[str]) -> list[DryRunObject]:
        raise NodeActionsUnavailableError("the cluster is not reachable from this deployment")
