"""What the API's routes need: stores, the job lifecycle, the scheduler's wake-up, the
instance catalogue, node actions, and who the admins are."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from hyperguard.api.cluster import ClusterReads, UnavailableCluster
from hyperguard.api.nodes import NodeActions
from hyperguard.api.rate_limits import RateLimits
from hyperguard.catalogue import InstanceCatalogue
from hyperguard.governance.jobs import JobLifecycle
from hyperguard.messaging import SchedulerWakeup, wakeup_for
from hyperguard.models import utcnow
from hyperguard.settings import Settings
from hyperguard.store import IncidentStore, JobStore, NodeStore, TeamStore
from hyperguard.store.policy import BurstPolicyStore, RepairersStore, RepairPolicyStore
from hyperguard.store.rate_limits import RateCounterStore


@dataclass
class ApiDependencies:
    jobs: JobStore
    teams: TeamStore
    incidents: IncidentStore
    nodes: NodeStore
    node_actions: NodeActions
    wakeup: SchedulerWakeup
    catalogue: InstanceCatalogue
    policies: RepairPolicyStore
    burst_policies: BurstPolicyStore
    admin_principals: frozenset[str] = frozenset()
    checkpoint_bucket: str = ""
    """The one bucket the deployment's roles may read checkpoints in ("": any)."""
    checkpoint_readers: tuple[str, ...] = ()
    """The roles that read them (the scheduler's and recovery's), named in a refusal."""
    rate_limits: RateLimits | None = None
    """Each caller's requests per second (hyperguard.api.rate_limits); None: not limited."""
    clock: Callable[[], datetime] = utcnow
    repairers: RepairersStore | None = None
    """The inventory's record of the cluster's other repairers (None: none recorded)."""
    cluster: ClusterReads = field(default_factory=UnavailableCluster)
    """What the API reads of the cluster: dry runs, logs, prerequisites."""
    lifecycle: JobLifecycle = field(init=False)

    def __post_init__(self) -> None:
        self.lifecycle = JobLifecycle(self.jobs, clock=self.clock)

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        node_actions: NodeActions,
        catalogue: InstanceCatalogue,
        cluster: ClusterReads | None = None,
    ) -> ApiDependencies:
        """The deployed wiring: stores on the stack's tables, the scheduler's queue."""
        teams = TeamStore(settings.teams_table)
        return cls(
            jobs=JobStore(
                settings.jobs_table,
                idempotency_table_name=settings.idempotency_table,
                idempotency_ttl_s=settings.idempotency_ttl_s,
            ),
            teams=teams,
            incidents=IncidentStore(settings.incidents_table, settings.nodes_table),
            nodes=NodeStore(settings.nodes_table),
            node_actions=node_actions,
            cluster=cluster or UnavailableCluster(),
            wakeup=wakeup_for(settings, teams),
            catalogue=catalogue,
            policies=RepairPolicyStore(settings.teams_table),
            burst_policies=BurstPolicyStore(settings.teams_table),
            repairers=RepairersStore(settings.teams_table),
            admin_principals=frozenset(_names(settings.admin_principal_arns)),
            checkpoint_bucket=settings.checkpoint_bucket,
            checkpoint_readers=tuple(_names(settings.checkpoint_reader_roles)),
            rate_limits=RateLimits(
                per_principal=settings.api_principal_rate_limit,
                per_team=settings.api_team_rate_limit,
                counters=RateCounterStore(settings.rate_limit_table),
            )
            if settings.rate_limit_table
            else None,
        )


def _names(listed: str) -> list[str]:
    """The names of a comma-separated environment variable."""
    return [name.strip() for name in listed.split(",") if name.strip()]
