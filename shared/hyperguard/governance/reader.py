"""What one scheduling pass reads, before it decides anything: the pass's snapshot
(`hyperguard.governance.snapshot.PassSnapshot`).

`SnapshotReader.read` makes every read the pass's decisions (`governance.decide`) need, in
one go, after the pass took its lease: the repair and burst policies, the active jobs (and
those the wake-ups named), the cluster's nodes and runs, the newer checkpoints of running
jobs, the records of ended jobs whose runs still live, HyperPod's instance groups, the node
inventory's stand-ins for replaced nodes, the lemon slots, the quotas and the scheduler
config, and the burst claims. Nothing here decides; `hyperguard.governance.decide` does,
from the snapshot alone.

Four reads stay outside the one snapshot, each for the safety it gives (docs/architecture.md,
"A scheduling pass"):
- `refresh`: the jobs the pass's reconciliation just moved, read again before admission is
  planned (the pass plans in two phases: reconcile, apply, re-read what moved, admission);
- `bursts_in_flight`: the running BurstCapacity executions, read only when the admission plan
  leaves a job short of capacity (most passes want no burst, and the read costs a call per
  running burst);
- `winding_down`: the pods of the stopped runs of the restarts the admission plan admits,
  read only then (most passes admit no restart), and the plan made again without those
  whose pods are still on Ready nodes (D210);
- the applier's guarded re-checks: the active jobs once more before it releases an idle
  burst node (a recovery may have restarted a job there since), and a burst's output before
  it deletes a HyperPod node that burst says it added.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass
from datetime import datetime

from hyperguard.aws import AWS_ERRORS
from hyperguard.cluster.gateway import ClusterError, ClusterGateway
from hyperguard.concurrency import beside, bounded_map
from hyperguard.governance.snapshot import (
    InstanceGroups,
    JobViews,
    PassSnapshot,
    backed_off,
    may_wind_down,
    reads_progress,
    unread_run_jobs,
)
from hyperguard.messaging import Workflows
from hyperguard.models import Checkpoint, JobStatus, Node
from hyperguard.models.cluster import BurstClaim, RunPhase, RunStatus
from hyperguard.models.jobs import HOLDING_STATUSES, RefusedCheckpoint
from hyperguard.models.records import JobRecord
from hyperguard.observability import logger
from hyperguard.policies.reliability import lemon_slots, slot_of
from hyperguard.policies.repair import NodeRepairConfig
from hyperguard.store.checkpoints import (
    CheckpointLocationError,
    CheckpointStore,
    Lookup,
    fence_of,
)
from hyperguard.store.history import read_history
from hyperguard.store.incidents import IncidentStore
from hyperguard.store.jobs import JobStore
from hyperguard.store.nodes import NodeStore
from hyperguard.store.policy import pass_settings
from hyperguard.store.teams import TeamStore

MAX_BURSTS_IN_FLIGHT = 50
"""Running bursts a pass reads (their inputs name the jobs they serve)."""


@dataclass
class SnapshotReader:
    """The reads of a pass, through the stores, the cluster gateway and the workflows."""

    jobs: JobStore
    teams: TeamStore
    gateway: ClusterGateway
    checkpoints: CheckpointStore
    inventory: NodeStore | None = None
    """The node inventory: what a node HyperPod replaced under a job was (None: no replaced
    node is held as its replacement)."""
    incidents: IncidentStore | None = None
    """The incident history that names lemon nodes (None, or no inventory: none)."""

    def read(
        self,
        now: datetime,
        named: Collection[str] = (),
        *,
        bursting: bool = False,
        teams_ensured: Collection[str] = (),
    ) -> PassSnapshot:
        # The jobs first and the runs after them (what `decide._orphans` is safe against),
        # beside the reads that need neither (D162, D193).
        def jobs_then_runs() -> tuple[tuple[JobRecord, ...], tuple[RunStatus, ...]]:
            jobs = tuple(self.jobs.active(also=named))
            return jobs, tuple(self.gateway.job_runs())

        (jobs, runs), (settings, (nodes, claims), groups, quotas) = beside(
            jobs_then_runs,
            [
                lambda: pass_settings(self.teams),
                lambda: self.nodes_and_claims(bursting),
                self.instance_groups,
                lambda: tuple(self.teams.quotas()),
            ],
        )
        repair, burst, config = settings
        # The records sorted once; each read below looks only at the jobs it is about.
        views, ended = self._with_unread(JobViews.of(jobs), runs)
        checkpoints, refused, unreadable = self.new_checkpoints(views.running, runs, now)
        return PassSnapshot(
            now=now,
            repair=repair,
            burst=burst,
            jobs=views.jobs,
            nodes=nodes,
            runs=runs,
            checkpoints=checkpoints,
            refused=refused,
            unreadable=unreadable,
            placed=self.placements(views.running, runs),
            ended=ended,
            groups=groups,
            stand_ins=self.stand_ins(views.holding, nodes),
            lemons=self.lemons(repair, nodes, now),
            quotas=quotas,
            config=config,
            claims=claims,
            bursting=bursting,
            teams_ensured=frozenset(teams_ensured),
            views=views,
        )

    def _with_unread(
        self, views: JobViews, runs: tuple[RunStatus, ...]
    ) -> tuple[JobViews, dict[str, JobRecord]]:
        """The jobs with live runs that the `Live` index did not name, read by key: those
        that ended (their runs are orphans to stop), and those still active, which join the
        pass's jobs. An active one is a job admitted a moment after its submission, before
        the index had it, by a pass its submission woke: the next pass, woken by others,
        must still count what it holds (D178)."""
        unread = self.jobs.records_of(unread_run_jobs(views.by_id, runs))
        active = {r.job.job_id: r for r in unread if r.is_live()}
        if active:
            joined = {**views.by_id, **active}
            views = JobViews.of(tuple(joined[job_id] for job_id in sorted(joined)))
        return views, {r.job.job_id: r for r in unread if r.job.job_id not in active}

    def refresh(self, snapshot: PassSnapshot, moved: Collection[str]) -> PassSnapshot:
        """The jobs this pass just moved, read again. Only those: another writer's change
        since the snapshot is refused by the conditional writes (as it is a moment after any
        read), and a job submitted since has a wake-up of its own."""
        return snapshot.refreshed(self.jobs.records_of(moved)) if moved else snapshot

    def new_checkpoints(
        self, jobs: Iterable[JobRecord], runs: Iterable[RunStatus], now: datetime
    ) -> tuple[dict[str, Checkpoint], dict[str, RefusedCheckpoint], dict[str, str]]:
        """Per running job that writes checkpoints, a complete one newer than its last known
        (one delimiter listing of the step folders after it, a GET of the marker, and a
        listing of the folder of a contract v2 marker); the newest refused by contract v2
        (D164); and the jobs whose location could not be read, with S3's answer: each is
        skipped, never the pass (D138). A job S3 refused before is read again only from its
        retry time (D139)."""
        current = {(r.job_id, r.run): r for r in runs}
        due = [
            record
            for record in jobs
            if record.job.checkpoint_location
            and reads_progress(record, current.get((record.job.job_id, record.job.run)))
            and not backed_off(record, now)
        ]

        def lookup(record: JobRecord) -> Lookup | CheckpointLocationError:
            job = record.job
            last = job.last_checkpoint.step if job.last_checkpoint else None
            try:
                return self.checkpoints.lookup(
                    str(job.checkpoint_location), after=last, fence=fence_of(record)
                )
            except CheckpointLocationError as error:
                logger.warning(
                    "checkpoint location unreadable",
                    extra={"job_id": job.job_id, "error": str(error)},
                )
                return error

        found: dict[str, Checkpoint] = {}
        refused: dict[str, RefusedCheckpoint] = {}
        unreadable: dict[str, str] = {}
        for record, looked in zip(due, bounded_map(lookup, due), strict=True):  # together
            job_id = record.job.job_id
            if isinstance(looked, CheckpointLocationError):
                unreadable[job_id] = str(looked)
                continue
            if looked.checkpoint is not None:
                found[job_id] = looked.checkpoint
            news = looked.news(record.checkpoint_refused)
            if news is not None:
                refused[job_id] = news
        return found, refused, unreadable

    def placements(
        self, jobs: Iterable[JobRecord], runs: Iterable[RunStatus]
    ) -> dict[str, tuple[str, ...]]:
        """Where the pods of running auto-resume jobs' current runs are, and those of jobs a
        team applied (kube-scheduler places them: D170), one pod list per team that has one;
        nothing when the cluster cannot say (the pass goes on: the
        record is corrected by a later one)."""
        running = {(r.job_id, r.run) for r in runs if r.phase is RunPhase.RUNNING}
        asked = [
            r.job
            for r in jobs
            if r.job.status is JobStatus.RUNNING
            and (r.job.auto_resume or r.job.cluster_object is not None)
            and not r.stop_pending
            and not r.protected_by
            and (r.job.job_id, r.job.run) in running
        ]
        if not asked:
            return {}
        try:
            found = self.gateway.placements(asked)
        except ClusterError as error:
            logger.warning("run placements unreadable", extra={"error": str(error)})
            return {}
        return {job_id: tuple(nodes) for job_id, nodes in found.items()}

    def winding_down(self, jobs: Iterable[JobRecord]) -> frozenset[str]:
        """Those of these jobs (restarts an admission plan admits) that ran before and
        write checkpoints and whose stopped run still has pods on Ready nodes (D210), one pod
        list per team that has such a job; none when the cluster cannot say (their restarts
        then go ahead, as before D210)."""
        asked = [r.job for r in jobs if may_wind_down(r)]
        if not asked:
            return frozenset()
        try:
            return frozenset(self.gateway.winding_down(asked))
        except ClusterError as error:
            logger.warning("stopped runs' pods unreadable", extra={"error": str(error)})
            return frozenset()

    def instance_groups(self) -> InstanceGroups | None:
        """One DescribeCluster; None when the cluster cannot say (the pass goes on: a patch
        it misses costs what it did before, and no group grows this pass)."""
        try:
            continuous, groups = self.gateway.hyperpod_groups()
        except ClusterError as error:
            logger.warning("instance groups unreadable", extra={"error": str(error)})
            return None
        return InstanceGroups(continuous, tuple(groups))

    def stand_ins(self, jobs: Iterable[JobRecord], nodes: Iterable[Node]) -> dict[str, str]:
        """Nodes holding jobs name that HyperPod has replaced, each with its replacement (the
        node that kept its NodeLogicalId). One read of the inventory, and only when a held
        node is gone from the cluster."""
        listed = {n.instance_id: n for n in nodes}
        held = {i for r in jobs if r.job.status in HOLDING_STATUSES for i in r.job.nodes}
        gone = sorted(held - listed.keys())
        if not gone or self.inventory is None:
            return {}
        by_logical_id = {n.logical_id: i for i, n in listed.items() if n.logical_id}
        return {
            old.instance_id: by_logical_id[old.logical_id]
            for old in self.inventory.many(gone)
            if old.logical_id in by_logical_id
        }

    def lemons(
        self, policy: NodeRepairConfig, nodes: Iterable[Node], now: datetime
    ) -> frozenset[str]:
        """The cluster's nodes in lemon slots, read only when hot spares are kept and lemons
        are on: one query of the window's incidents (and a batch read of the slots of
        instances no longer listed)."""
        if not policy.hot_spares or self.incidents is None or self.inventory is None:
            return frozenset()
        known = list(nodes)
        history = read_history(self.incidents, self.inventory, policy, now, known)
        bad = lemon_slots(policy, history.incidents, history.logical_ids, now)
        return frozenset(
            n.instance_id for n in known if slot_of(n.instance_id, history.logical_ids) in bad
        )

    def nodes_and_claims(
        self, bursting: bool
    ) -> tuple[tuple[Node, ...], tuple[BurstClaim, ...] | None]:
        """The cluster's nodes, and, when the pass may burst, HyperGuard's burst nodes
        (NodeClaims, HyperPod nodes bursts added) from the same listings; the claims are None
        when the cluster cannot say (the pass then neither bursts nor scales in)."""
        if not bursting:
            return tuple(self.gateway.list_nodes()), None
        nodes, claims = self.gateway.nodes_and_claims()
        if isinstance(claims, ClusterError):
            logger.warning("burst claims unreadable", extra={"error": str(claims)})
            return tuple(nodes), None
        return tuple(nodes), tuple(claims)

    @staticmethod
    def bursts_in_flight(workflows: Workflows) -> dict[str, str]:
        """The jobs a running BurstCapacity execution serves, and its burst id: a job is in
        one burst at a time (its nodes may still be asked for, so no NodeClaim shows them)."""
        try:
            inputs = workflows.running_inputs(MAX_BURSTS_IN_FLIGHT)
        except AWS_ERRORS as error:  # the next pass looks again
            logger.warning("running bursts unreadable", extra={"error": str(error)})
            return {}
        serving: dict[str, str] = {}
        for name, payload in inputs.items():
            request = payload.get("request") if isinstance(payload, dict) else None
            listed = request.get("jobs") if isinstance(request, dict) else None
            for job in listed if isinstance(listed, list) else []:
                if isinstance(job, dict) and isinstance(job.get("jobId"), str):
                    serving[job["jobId"]] = name
        return serving
