"""The scheduling pass: take the lease, read a snapshot, plan, apply.

    lease ─▶ snapshot (governance.snapshot) ─▶ plan_reconcile ─▶ apply ─▶ re-read what moved
          ─▶ plan_admission + plan_capacity (governance.decide, pure) ─▶ apply (governance.applier)

Every decision is `governance.decide`'s, from the snapshot alone; every effect is the applier's,
through the job lifecycle (hyperguard.governance.jobs: each job write a conditional write),
the ClusterGateway and the workflows. The pass plans in two phases because admission must
see what reconciliation did: the jobs it ended or requeued are read again before admission
is planned.

Single writer. A pass holds the cluster's lease (TeamsTable `LEASE/<cluster>`); every write
that takes or gives back quota is a transaction that also checks the lease is still this
pass's (and, for an admission or an elastic growth, that the team's quota is still the
version the pass read).
A concurrent cancel, a finished job, a quota update or a second pass that took an expired
lease therefore makes the write fail instead of oversubscribing anything. The deployment
adds a FIFO queue with one message group and reserved concurrency 1, so passes rarely even
contend for the lease.

Reconciliation, before admission: a job whose current run completed ends Succeeded, one
whose run failed by itself ends Failed, one whose run the cluster lost (or no longer has) is
requeued to resume from its checkpoint — each only once node recovery has had
`failedRunGraceS` to claim it (a run that dies with its node is recovery's, which knows the
job's strategy), and never while a node under it is unhealthy or recovery protects it.
Running jobs' progress is read from their checkpoint markers. Then live runs that no job
should have any more — of a job that ended or waits, or older than the job's current run
(a stop that failed, a run recovery dispatched after a cancel) — are stopped, a bounded
number a pass.

Hot spares: `hotSpares` idle healthy nodes per pool (NodeRepairConfig) are left out of the
capacity the pass admits into, so that node recovery finds one when a node fails.

Burst policy (hyperguard.policies.burst), read once a pass: placement ranks pools by
its prices, uses its committed pools first, and keeps each team's (and all teams') burst
spend rate within its caps — counted from the jobs holding EKS capacity at the start of the
pass plus those the pass places there (releases count from the next pass). Every admission
records the pool kind, the price per instance-hour and the job's hourly cost it assumed.

Burst capacity (hyperguard.bursting.requests), when BurstCapacity is deployed: jobs that
only installed capacity holds back (the engine's `short_of_capacity`) and jobs admitted that
no allowed pool has room for, whose template may run on EKS, less the nodes HyperGuard's
NodeClaims are already launching, start one BurstCapacity execution per template and
instance type, named by a deterministic burst id (a second pass starting it again is a
no-op). The same pass releases HyperGuard's burst nodes idle past the policy's cooldown.

Order of effects, and why:
* cancelled jobs' pods, reconciliation's verdicts (the finished jobs' ends together, in
  transactions of up to 100: D116) and orphaned runs come first, and admission
  is planned only after the jobs they moved are read again: quota and nodes a verdict frees
  are then free to the same pass, and nothing is admitted from a stale status;
* preempt: conditional write first, then `stop_job` — the database is what quota is counted
  from, so it must never show a job stopped that is still admitted; a stop that fails is
  retried by the next pass's orphan sweep;
* cancel: `stop_job` first, then `stopped` (clearing `stop_pending`), only if the stop
  succeeded — otherwise the next pass tries again;
* resize (elastic): conditional write, then the cluster (a HyperPodPyTorchJob is patched in
  place, a batch Job re-run from its checkpoint); the shrinks made for the pass's admissions
  are resized on the cluster once all are written and before any admission is dispatched, and
  a job several admissions shrink is resized once, to its last written size (each resize
  restarts it);
* admit: every victim gives way first, then the admissions' conditional writes (status
  Admitted, nodes, pool; in transactions of up to 100 actions: D172), then their
  `dispatch`es, then Running (the pass's dispatched jobs together, in transactions of up to
  100: D116), also when the pass failed meanwhile; a dispatch the cluster refuses puts the
  job back to Pending with the cluster's error. Independent moves are issued together, at
  most `IO_CONCURRENCY` at a time (D162): the victims of different jobs, the resizes, the
  dispatches, the growths; one refused or throttled leaves the rest standing, and the pass
  then fails with it once all are done.
  Before a pass's first dispatch for a team it ensures the team's Kueue objects
  (namespace, ClusterQueue, LocalQueue; with the first team also the ResourceFlavor and the
  priority classes' WorkloadPriorityClasses: hyperguard.cluster.kueue), whose failure is a
  refused dispatch too;
* a job the engine admits but no allowed pool can place stays pending with the placement
  reason, and the preemptions made for it are not carried out;
* scale-in, moving back, hand-backs (D121) and bursts come after every admission (a node
  an admission took is busy, not idle; a node held for a hand-back is busy too), and an
  idle burst node is released only if no job holds it when the jobs are read once more;
* admissions are placed with the jobs only HyperPod can hold first, so that one that could
  burst does not take the last HyperPod node from one that cannot;
* reasons last, each written only while the stored reason is still the one the snapshot
  read (D61), and only when it changes: a reason carries figures that hold while the job
  waits, never live usage, and the pass's reasons go in transactions of up to 100 (D116).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Collection
from dataclasses import replace
from datetime import datetime

from hyperguard.aws import ClientError
from hyperguard.catalogue import InstanceCatalogue, ml_name
from hyperguard.cluster.gateway import ClusterGateway
from hyperguard.concurrency import bounded_map
from hyperguard.governance.adoption import (
    MAX_ADOPTED_PER_PASS,
    Adopt,
    adopted_ids,
    plan_adoption,
)
from hyperguard.governance.applier import CLUSTER_OBJECTS, PassApplier, PassResult
from hyperguard.governance.decide import (
    Ledger,
    plan_admission,
    plan_capacity,
    plan_reconcile,
    wants_burst,
)
from hyperguard.governance.intents import AdmissionPlan, ReconcilePlan
from hyperguard.governance.jobs import FencedOutError, JobLifecycle, SubmissionRules
from hyperguard.governance.reader import SnapshotReader
from hyperguard.governance.snapshot import PassSnapshot
from hyperguard.messaging import EventPublisher, Workflows
from hyperguard.models import Job, utcnow
from hyperguard.models.cluster import HeldWorkload
from hyperguard.observability import logger
from hyperguard.sandbox import collector_paused
from hyperguard.store.checkpoints import CheckpointStore
from hyperguard.store.incidents import IncidentStore
from hyperguard.store.jobs import JobStore
from hyperguard.store.nodes import NodeStore
from hyperguard.store.teams import Lease, TeamStore

__all__ = ["PassResult", "SchedulerBusyError", "SchedulerService"]


class SchedulerBusyError(RuntimeError):
    """Another pass holds the cluster's lease."""


class SchedulerService:
    def __init__(
        self,
        *,
        jobs: JobStore,
        teams: TeamStore,
        gateway: ClusterGateway,
        catalogue: InstanceCatalogue,
        cluster: str,
        checkpoints: CheckpointStore | None = None,
        bursts: Workflows | None = None,
        nodes: NodeStore | None = None,
        incidents: IncidentStore | None = None,
        publisher: EventPublisher | None = None,
        lease_ttl_s: float = 120.0,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.jobs = jobs
        self.lifecycle = JobLifecycle(jobs, clock=clock)
        self.teams = teams
        self.gateway = gateway
        self.catalogue = catalogue
        self.cluster = cluster
        self.checkpoints = checkpoints or CheckpointStore()
        self.bursts = bursts
        """BurstCapacity; None: never burst (nor scale burst nodes in)."""
        self.nodes = nodes
        """The node inventory: what a node HyperPod replaced under a job was (None: no
        replaced node is held as its replacement); where a node given back is marked
        released (D208)."""
        self.incidents = incidents
        """The incident history that names lemon nodes, never hot spares (None, or no
        `nodes`: any idle node may be one); where a stalled job's incident is recorded
        (None: nowhere, D117)."""
        self.publisher = publisher
        """The service bus a stalled job's incident is announced on (None: not announced)."""
        self.lease_ttl_s = lease_ttl_s
        self.clock = clock
        self.queues_ensured: dict[str, datetime] = {}
        """When this process last ensured each team's Kueue objects (namespace, RoleBindings,
        queues) and the cluster-wide ones: at a dispatch once QUEUES_RECHECK has passed
        (D71), and for every team with running jobs once per cold start, so that an upgraded
        deployment grants Recovery in the namespaces of teams that dispatch nothing new
        (D98)."""

    def run_pass(
        self, job_ids: Collection[str] = (), held: Collection[HeldWorkload] = ()
    ) -> PassResult:
        """One pass, or nothing (`acquired` False) while another pass holds the lease.
        `job_ids`: jobs the wake-ups named, read by key besides the `Live` index (which a
        job just submitted may not be in yet), with those the coalesced wake-up taken with
        the lease names (D169). `held`: Workloads the forwarder found held on HyperGuard's
        admission check, recorded first as jobs of their teams (D170)."""
        started = time.perf_counter()
        lease = self.teams.acquire_lease(self.cluster, uuid.uuid4().hex, self.lease_ttl_s)
        if lease is None:
            return PassResult(acquired=False)
        result = PassResult()
        try:
            with collector_paused():
                adopted = self._adopt(held, result) if held else []
                self._pass(lease, {*job_ids, *lease.woken, *adopted}, result)
        except FencedOutError:
            result.conflicts += 1
            logger.warning("scheduler lease lost mid-pass", extra={"cluster": self.cluster})
        finally:
            self.teams.release_lease(lease)
            result.duration_s = time.perf_counter() - started
        return result

    def _adopt(self, held: Collection[HeldWorkload], result: PassResult) -> list[str]:
        """Record the jobs of these held Workloads (hyperguard.governance.adoption): the ids
        of those recorded, which the pass then reads by key. A Workload gone is skipped; a
        Kubernetes or DynamoDB error fails the pass, and SQS delivers the wake-ups again."""
        wanted = sorted(set(held), key=lambda h: (h.namespace, h.name))[:MAX_ADOPTED_PER_PASS]
        found = bounded_map(lambda h: self.gateway.held_workload(h.namespace, h.name), wanted)
        workloads = [w for w in found if w is not None]
        records = self.jobs.records_of(adopted_ids(workloads, instance_type=self._instance_type))
        quotas = {q.compute_quota_target.team_name for q in self.teams.quotas()}
        classes = frozenset(pc.name for pc in self.teams.scheduler_config()[0].priority_classes)

        def rules_for(job: Job) -> SubmissionRules:
            return SubmissionRules(
                team_has_quota=job.team in quotas,
                priority_classes=classes,
                accelerators_per_instance=self._instance_type(job.instance_type)[1],
            )

        intents = plan_adoption(
            workloads,
            {r.job.job_id: r for r in records},
            instance_type=self._instance_type,
            rules_for=rules_for,
        )
        for intent in intents:
            if isinstance(intent, Adopt):
                if self._record_held(intent.job, rules_for(intent.job)):
                    result.adopted.append(intent.job.job_id)
            elif self.gateway.refuse_held(intent.namespace, intent.workload, intent.reason):
                result.refused_held.append(f"{intent.namespace}/{intent.workload}")
                logger.warning(
                    "held workload refused",
                    extra={"workload": result.refused_held[-1], "reason": intent.reason},
                )
        return list(result.adopted)

    def _record_held(self, job: Job, rules: SubmissionRules) -> bool:
        """A held job recorded Pending; False when another pass recorded it first."""
        held = job.cluster_object
        assert held is not None
        try:
            _, created = self.lifecycle.submit(
                job, principal=f"cluster:{held.kind}/{held.namespace}/{held.name}", rules=rules
            )
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
                raise
            return False
        return created

    def _instance_type(self, name: str) -> tuple[str, int]:
        """HyperPod's name of an instance type and its accelerators (KeyError: unknown)."""
        return ml_name(name), self.catalogue.spec(name).accelerators

    def _pass(self, lease: Lease, named: Collection[str], result: PassResult) -> None:
        reader = SnapshotReader(
            jobs=self.jobs,
            teams=self.teams,
            gateway=self.gateway,
            checkpoints=self.checkpoints,
            inventory=self.nodes,
            incidents=self.incidents,
        )
        snapshot = reader.read(
            self.clock(),
            named,
            bursting=self.bursts is not None,
            teams_ensured=[t for t in self.queues_ensured if not t.startswith(CLUSTER_OBJECTS)],
        )
        result.unreadable = sorted(snapshot.unreadable)
        applier = PassApplier(
            lifecycle=self.lifecycle,
            jobs=self.jobs,
            teams=self.teams,
            gateway=self.gateway,
            lease=lease,
            result=result,
            bursts=self.bursts,
            incidents=self.incidents,
            publisher=self.publisher,
            nodes=self.nodes,
            checkpoints=self.checkpoints,
            priority_classes=snapshot.config.priority_classes,
            queues_ensured=self.queues_ensured,
            now=snapshot.now,
        )
        reconciled = plan_reconcile(snapshot)
        snapshot = reader.refresh(snapshot, applier.reconcile(reconciled))
        snapshot, admission, ledger = self._admission(reader, snapshot, reconciled)
        in_flight = (
            reader.bursts_in_flight(self.bursts)
            if self.bursts is not None and wants_burst(snapshot, ledger)
            else {}
        )
        capacity = plan_capacity(
            snapshot,
            reconciled,
            ledger,
            catalogue=self.catalogue,
            cluster=self.cluster,
            in_flight=in_flight,
        )
        applier.admit(admission)
        applier.scale(capacity)

    def _admission(
        self, reader: SnapshotReader, snapshot: PassSnapshot, reconciled: ReconcilePlan
    ) -> tuple[PassSnapshot, AdmissionPlan, Ledger]:
        """The admission plan, with the restarts it admits whose stopped runs still have
        pods on Ready nodes left waiting (D210). Their pods are read only for the restarts a
        plan admits (most plans admit none), and the plan made again without those that wait;
        each job is asked about once, so this ends."""
        asked: set[str] = set()
        while True:
            admission, ledger = plan_admission(snapshot, reconciled, self.catalogue)
            restarts = [
                snapshot.view.by_id[a.job.job_id]
                for a in admission.admissions
                if a.restart and a.job.job_id not in asked
            ]
            asked.update(r.job.job_id for r in restarts)
            winding = reader.winding_down(restarts)
            if not winding:
                return snapshot, admission, ledger
            snapshot = replace(snapshot, winding_down=snapshot.winding_down | winding)
