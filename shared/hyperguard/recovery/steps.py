"""NodeRecovery workflow steps. Each is an *ensure* step: safe to run twice.

Every step receives the workflow's state (`recovery`, the JSON object the state machine
passes along, parsed into `hyperguard.recovery.state.Recovery`) and returns it updated; the
state machine's Choice states read `verdict`, `action` and `health`. Steps raise typed errors
(names ending in Error) that the state machine retries or catches by name.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from hyperguard.cluster import ClusterError, ClusterGateway, DrainResult, NodeNotFoundError
from hyperguard.cluster.conventions import (
    DEEP_HEALTH_CHECK_LABEL,
    INSTANCE_ID_IN_USE,
    INSTANCE_ID_NOT_FOUND,
)
from hyperguard.concurrency import beside
from hyperguard.governance.jobs import Actor, JobLifecycle, Outcome
from hyperguard.messaging import (
    Escalator,
    EventPublisher,
    announcement,
    escalation,
    resolved,
)
from hyperguard.models import (
    Checkpoint,
    HealthSignal,
    Incident,
    IncidentStatus,
    Job,
    JobStatus,
    Node,
    NodeStatus,
    ProtectedJob,
    Repair,
    RepairFailure,
    RepairOutcome,
    Severity,
    utcnow,
    wait_timestamp,
)
from hyperguard.models.incidents import RepairedBy
from hyperguard.models.jobs import HOLDING_STATUSES, AppliedStrategy, held_nodes
from hyperguard.models.nodes import BURST_LABEL
from hyperguard.models.records import JobRecord
from hyperguard.observability import NAMESPACE, MetricUnit, logger, metrics, single_metric
from hyperguard.policies.reliability import PLANNED_KINDS, faults_by_slot, lemon_slots, slot_of
from hyperguard.policies.repair import NodeRepairConfig
from hyperguard.policies.repairers import Repairers
from hyperguard.recovery.policy import RepairDecision, decide, replace_lemon
from hyperguard.recovery.protection import (
    JobToProtect,
    LeaveToAutoResume,
    ProtectionSnapshot,
    Requeue,
    Restart,
    Shrink,
    carry_out,
    next_nodes,
    plan_protection,
    protectable,
)
from hyperguard.recovery.repairers import holds_karpenter_off, repairer
from hyperguard.recovery.state import CaughtError, Drained, Health, Recovery
from hyperguard.recovery.strategy import measured
from hyperguard.steps import step_of
from hyperguard.store import IncidentStore, JobStore, NodeStore
from hyperguard.store.checkpoints import CheckpointStore, fence_of
from hyperguard.store.history import read_history
from hyperguard.store.policy import RepairersStore, RepairPolicyStore

MAX_REPAIR_EVENTS = 20
"""The newest HyperPod cluster events an incident keeps (its `repair_events`)."""

DRAIN_RETRY_S = 10
"""How long the state machine waits before evicting again what a PodDisruptionBudget refused
(a replacement pod elsewhere takes seconds to become ready)."""

REPAIRING_STATUSES = frozenset(
    {
        NodeStatus.PENDING,
        NodeStatus.SHUTTING_DOWN,
        NodeStatus.SYSTEM_UPDATING,
        NodeStatus.DEEP_HEALTH_CHECK_IN_PROGRESS,
    }
)


REPAIRS_UNDER_WAY = {NodeStatus.PENDING: Repair.REBOOT, NodeStatus.SHUTTING_DOWN: Repair.REPLACE}
"""The repair a HyperPod node's status shows under way: a reboot leaves the node Pending until
it is back, a replacement shuts it down (HyperPod's published node statuses)."""


class IncidentMissingError(LookupError):
    pass


class RepairRetryableError(RuntimeError):
    """The cluster refused the repair for now (InstanceIdInUse, InternalServerError, ...)."""


class RepairRejectedError(RuntimeError):
    """The cluster cannot repair the node (InstanceIdNotFound): an operator must look."""


class RecoveryTimeoutError(RuntimeError):
    """The repaired node did not become healthy within the health budget."""


class ReevaluateError(RuntimeError):
    """A more urgent signal joined the incident while its repair was waiting: the waiting
    state is left at once, and the incident diagnosed again."""


class FaultPersistsError(RuntimeError):
    """The node kept failing after its repair, diagnosis after diagnosis: an operator must
    look."""


MAX_ROUNDS = 3
"""Diagnoses an incident may go through (a fault reported again right after the repair
starts another round) before it is escalated."""
OBSERVED = "observed_only"
"""The resolution of an incident the observe-only policy recorded and did nothing about."""
NODE_LEFT = frozenset({"replaced", "instance_gone"})
"""Resolutions after which the node is no longer in the cluster: nothing scheduled on it
is left to honour."""
INCIDENT_HISTORY = 200
"""Recent incidents whose repair durations inform the recovery strategy's estimates."""
RESOLUTIONS = {
    Repair.REBOOT.value: "rebooted",
    Repair.REPLACE.value: "replaced",
    Repair.DRAIN.value: "drained",
}
"""How an incident whose repair ran to its end is resolved, by the repair."""


@dataclass
class RecoverySteps:
    incidents: IncidentStore
    nodes: NodeStore
    jobs: JobStore
    policies: RepairPolicyStore
    checkpoints: CheckpointStore
    gateway: ClusterGateway
    publisher: EventPublisher
    escalator: Escalator
    clock: Callable[[], datetime] = utcnow
    repairers: RepairersStore | None = None
    """The inventory's record of the cluster's other repairers (None: none recorded)."""
    lifecycle: JobLifecycle = field(init=False)

    def __post_init__(self) -> None:
        self.lifecycle = JobLifecycle(self.jobs, clock=self.clock)

    def run(self, step: str, recovery: Mapping[str, Any]) -> dict[str, Any]:
        """Run `step` on the state as the state machine passes it; the new state, as JSON."""
        action = step_of(self, "Recovery", step, STEPS)
        result: Recovery = action(Recovery.model_validate(recovery))
        metrics.add_metric(name=f"RecoveryStep_{step}", unit="Count", value=1)
        return result.dump()

    # -- helpers --------------------------------------------------------------------------
    def _incident(self, recovery: Recovery) -> Incident:
        incident_id = recovery.incident_id
        incident = self.incidents.get(incident_id) if incident_id else None
        if incident is None:
            raise IncidentMissingError(f"incident {incident_id!r} does not exist")
        return incident

    def _mark(self, incident: Incident, milestone: str) -> None:
        self.incidents.mark(
            incident.incident_id,
            milestone,
            (self.clock() - incident.first_signal_at).total_seconds(),
        )

    def _policy(self) -> NodeRepairConfig:
        return self.policies.get()

    # -- steps ----------------------------------------------------------------------------
    def diagnose(self, r: Recovery) -> Recovery:
        """Record detection and the execution, re-read the node, decide the repair (or that
        none is needed)."""
        incident = self._incident(r)
        execution_arn = r.execution_arn
        r.forget("execution_arn")
        # The incident's bookkeeping and the three reads the decision needs depend on none of
        # each other: issued together, they cost the longer of the two, not the sum (D215).
        _, (policy, node, stored) = beside(
            lambda: self._record_detection(incident, execution_arn),
            [
                self._policy,
                lambda: self._node_or_none(incident),
                lambda: self.nodes.get(incident.instance_id),  # its repairs
            ],
        )
        # An integer: a Wait state's SecondsPath must resolve to one, or the execution fails.
        r.poll_s = int(policy.poll_interval_s)
        r.round = (r.round or 0) + 1
        r.urgency = incident.urgency
        r.forget("resolution", "health", "replacement", "deep_health_check", "saw_repairing")
        if r.round > MAX_ROUNDS:
            raise FaultPersistsError(
                f"{incident.instance_id} failed again after {MAX_ROUNDS - 1} repair(s)"
            )
        if node is None:
            return self._gone(incident, r, policy, stored)
        if node.status is NodeStatus.SYSTEM_UPDATING and incident.kind not in PLANNED_KINDS:
            return self._await_software_update(incident, r, r.poll_s)
        if (
            incident.kind not in PLANNED_KINDS
            and node.status is NodeStatus.RUNNING
            and node.healthy
        ):
            r.verdict, r.resolution = "recovered", "recovered_on_its_own"
            r.signals_seen = incident.signal_count
            return r
        history = node.model_copy(update={"repairs": stored.repairs if stored else []})
        decision = replace_lemon(
            policy,
            incident,
            decide(policy, incident, history, self.clock()),
            self._faults_of_slot(policy, incident, stored),
            self.clock(),
        )
        decision = self._replace_if_going_anyway(incident, decision)
        r.action = decision.action
        r.reason = decision.reason
        if policy.observe_only and decision.action is not Repair.NONE:
            return self._observe(incident, decision, r)
        if decision.action is Repair.NONE:
            r.verdict, r.resolution = "recovered", "no_action_by_policy"
        elif decision.not_before and decision.not_before > self.clock():
            r.verdict, r.wait_until = "wait", wait_timestamp(decision.not_before)
            # A Task's TimeoutSecondsPath must be a positive integer.
            r.wait_s = max(1, math.ceil((decision.not_before - self.clock()).total_seconds()))
            self.incidents.set_status(incident.incident_id, IncidentStatus.WAITING)
            if incident.severity != Severity.SCHEDULED:
                # A degraded node takes no new pods while the policy waits to see if it
                # recovers (its running pods stay); one that does is uncordoned at the close.
                # A scheduled change's node stays in service until its window (D96).
                self._cordon(incident)
                self._repairer(incident, node, policy)  # holds Karpenter off while it waits
        else:
            r.verdict = "repair"
            r.repaired_by = self._repairer(incident, node, policy)
            self.incidents.update(
                incident.incident_id, action=decision.action.value, repaired_by=r.repaired_by
            )
        return r

    def _record_detection(self, incident: Incident, execution_arn: str | None) -> None:
        """The execution on the incident, and its detection recorded and announced once."""
        if incident.execution_arn is None and execution_arn is not None:
            # Ingest records it after starting us; a worker that died before could have its
            # retry suppressed once this recovery has closed the incident.
            self.incidents.set_execution(incident.incident_id, execution_arn)
        if incident.status is IncidentStatus.OPEN:
            self._mark(incident, "detected")
            self.incidents.set_status(incident.incident_id, IncidentStatus.DETECTED)
            self.publisher.publish("IncidentOpened", announcement(incident))

    def _node_or_none(self, incident: Incident) -> Node | None:
        """The node as the cluster has it now; None when it is gone from the cluster."""
        try:
            return self.gateway.node_status(incident.instance_id)
        except NodeNotFoundError:
            return None

    def _gone(
        self, incident: Incident, r: Recovery, policy: NodeRepairConfig, stored: Node | None
    ) -> Recovery:
        """The node is gone from the cluster: nothing to repair. Where HyperPod's automatic
        recovery replaced it before this diagnosis, the incident says so (D142): its jobs'
        runs went with it, and the scheduler requeues them from their checkpoints."""
        r.verdict, r.resolution = "recovered", "instance_gone"
        if (
            stored is not None
            and stored.platform == "hyperpod"
            and self._repairer(incident, stored, policy) == "hyperpod"
        ):
            r.repaired_by = "hyperpod"
            self.incidents.update(incident.incident_id, repaired_by="hyperpod")
        return r

    def _repairer(self, incident: Incident, node: Node, policy: NodeRepairConfig) -> RepairedBy:
        """Who reboots or replaces the node (D142, D148): the other repairer that acts on
        this fault where the policy defers to it, else HyperGuard; never both. What the
        inventory last saw of the cluster's repairers decides, HyperPod's NodeRecovery read
        now (one DescribeCluster) for a HyperPod node. Where HyperGuard repairs a Karpenter
        node whose NodeRepair is on, the node is annotated karpenter.sh/do-not-repair."""
        seen = self.repairers.get() if self.repairers is not None else Repairers()
        if node.platform == "hyperpod" and policy.hyperpod_node_recovery == "defer":
            recovery = self.gateway.hyperpod_node_recovery()
            seen = seen.model_copy(update={"hyperpod_node_recovery": recovery})
        owner = repairer(incident.kind, incident.facts, node, seen, policy)
        if owner == "hyperguard" and holds_karpenter_off(node, seen):
            # Karpenter's node repair acts on the same conditions; it leaves a node annotated
            # do-not-repair alone (until ReturnToService takes the annotation off).
            self.gateway.hold_other_repair(incident.instance_id, held=True)
        return owner

    def _observe(self, incident: Incident, decision: RepairDecision, r: Recovery) -> Recovery:
        """Observe-only: note the decision on the incident and close it, acting on nothing
        (D92)."""
        when = decision.not_before or self.clock()
        note = (
            f"observe-only: would {decision.action.value} {incident.instance_id} "
            f"at {when.isoformat()}: {decision.reason}"
        )
        self.incidents.set_status(incident.incident_id, IncidentStatus.DETECTED, note=note)
        logger.info(
            "observe-only decision",
            extra={"incident_id": incident.incident_id, "would": decision.action.value},
        )
        r.verdict, r.resolution = "recovered", OBSERVED
        return r

    def _faults_of_slot(
        self, policy: NodeRepairConfig, incident: Incident, node: Node | None
    ) -> list[datetime]:
        """When the incident's node, its slot, failed within the lemon window (this
        incident included: the index may not list it yet)."""
        now = self.clock()
        history = read_history(self.incidents, self.nodes, policy, now, [node] if node else [])
        by_slot = faults_by_slot(policy, [*history.incidents, incident], history.logical_ids, now)
        found = by_slot.get(slot_of(incident.instance_id, history.logical_ids), [])
        return [i.opened_at for i in found]

    def _replace_if_going_anyway(
        self, incident: Incident, decision: RepairDecision
    ) -> RepairDecision:
        """A reboot due now on a node a merged scheduled change (a retirement) will replace
        anyway becomes the replacement, now: one disruption instead of a reboot now and a
        replacement at the change's window (D82)."""
        due_now = decision.not_before is None or decision.not_before <= self.clock()
        if decision.action is not Repair.REBOOT or not due_now:
            return decision
        change = pending_scheduled_change(incident, self.incidents.signals(incident.incident_id))
        if change is None or change.repair is not Repair.REPLACE:
            return decision
        window = change.not_before or change.deadline
        return decision.model_copy(
            update={
                "action": Repair.REPLACE,
                "reason": f"{decision.reason}; the {change.kind} merged for "
                f"{window.isoformat() if window else 'later'} replaces the node anyway, "
                "so replace it now",
            }
        )

    def _await_software_update(self, incident: Incident, r: Recovery, wait: int) -> Recovery:
        """HyperPod is updating the node's software (its automatic patching, or
        UpdateClusterSoftware): the node is NotReady by design, and a reboot or replacement
        would cut the update short. Look again after a poll interval, then decide on what
        the node is; the wait is not a repair round (D101)."""
        r.round = r.this_round - 1
        r.action = Repair.NONE
        r.reason = "HyperPod is updating the node's software: look again once it is done"
        r.verdict = "wait"
        r.wait_until = wait_timestamp(self.clock() + timedelta(seconds=wait))
        r.wait_s = wait
        self.incidents.set_status(incident.incident_id, IncidentStatus.WAITING)
        return r

    def park(self, r: Recovery) -> Recovery:
        """Wait for the repair's time with a task token that ingestion sends back when a
        more urgent signal joins the incident. If one joined since diagnosis, leave at once."""
        incident = self._incident(r)
        token = r.take_task_token()
        if not self.incidents.park(incident.incident_id, token, urgency=r.urgency or 0):
            raise ReevaluateError(
                f"incident {incident.incident_id} became more urgent while its repair waited"
            )
        return r

    def guard(self, r: Recovery) -> Recovery:
        """The blast-radius brake: too much of the pool unhealthy, too many repairs at
        once, or an operator veto → hold for approval."""
        incident = self._incident(r)
        policy = self._policy()
        # A handful of calls whatever the size of the fleet or of the incident history:
        # the pool's size by COUNT, its open incidents by the sparse OpenByPool index.
        me = self.nodes.get(incident.instance_id)
        size = self.nodes.pool_size(me.pool) if me else 0
        open_nodes = self.nodes.open_in_pool(me.pool) if me else []
        unhealthy = len(open_nodes)
        repairing = sum(
            1
            for i in self.incidents.many([o.incident_id for o in open_nodes])
            if i.status is IncidentStatus.RECOVERING and i.incident_id != incident.incident_id
        )
        reasons = []
        if me and me.veto:
            reasons.append(f"operator veto on {me.instance_id}: {me.veto}")
        if size and unhealthy > policy.limit("max_unhealthy_node_threshold", size):
            reasons.append(
                f"{unhealthy} of {size} nodes in pool {me.pool if me else '?'} are "
                f"unhealthy, above the limit of "
                f"{policy.limit('max_unhealthy_node_threshold', size)}"
            )
        if size and repairing >= policy.limit("max_parallel_nodes_repaired", size):
            reasons.append(
                f"{repairing} repairs already running, the limit is "
                f"{policy.limit('max_parallel_nodes_repaired', size)}"
            )
        if r.repaired_by not in (None, "hyperguard"):
            # The repairer deferred to repairs it whatever HyperGuard holds (under its own
            # budgets, where it has any): nothing to hold back.
            reasons = []
        if incident.repair is Repair.DRAIN:
            # The instance goes away whatever HyperGuard does: draining it is never the
            # risk the brake guards against (Karpenter does not brake interruptions either).
            reasons = []
        r.verdict = "hold" if reasons and not r.approval else "proceed"
        r.hold_reasons = reasons
        if r.verdict == "proceed":
            self.incidents.set_status(incident.incident_id, IncidentStatus.RECOVERING)
        return r

    def request_approval(self, r: Recovery) -> Recovery:
        """Park the incident until an operator approves (SendTaskSuccess) or vetoes."""
        incident = self._incident(r)
        token = r.take_task_token()
        self.incidents.update(incident.incident_id, task_token=token)
        if incident.status is not IncidentStatus.AWAITING_APPROVAL:  # a retry notes nothing
            # Why it waits and what to run, where `incidents show` and `watch` read it.
            why = "; ".join(r.hold_reasons or []) or "an operator's approval was asked for"
            note = (
                f"awaiting approval: {why}. Approve: hyperguard incidents approve "
                f"{incident.incident_id}; veto: hyperguard incidents veto {incident.incident_id}"
            )
            self.incidents.set_status(
                incident.incident_id, IncidentStatus.AWAITING_APPROVAL, note=note[:1000]
            )
        self.escalator.notify(
            f"HyperGuard: repair of {incident.instance_id} needs approval",
            {
                "incident_id": incident.incident_id,
                "instance_id": incident.instance_id,
                "why": r.hold_reasons or [],
                "approve": f"hyperguard incidents approve {incident.incident_id}",
                "veto": f"hyperguard incidents veto {incident.incident_id}",
            },
        )
        return r

    def _spares(
        self, policy: NodeRepairConfig, me: Node | None, nodes: list[Node], busy: set[str]
    ) -> list[str]:
        """The pool's idle healthy nodes a job may move to. A replacement already found for
        a node whose incident is still open is not one: it is promised to the jobs that wait
        for that repair, which restart on it once it is back in service (D83). Nor is a
        lemon, a node that keeps failing (D87)."""
        if me is None:
            return []
        now = self.clock()
        history = read_history(self.incidents, self.nodes, policy, now, nodes)
        lemons = lemon_slots(policy, history.incidents, history.logical_ids, now)
        open_nodes = self.nodes.open_in_pool(me.pool)
        taken = busy | {
            i.replacement_instance_id
            for i in self.incidents.many([o.incident_id for o in open_nodes])
            if i.replacement_instance_id
        }
        return [
            n.instance_id
            for n in nodes
            if n.pool == me.pool
            and n.instance_type == me.instance_type
            and n.instance_id not in taken
            and slot_of(n.instance_id, history.logical_ids) not in lemons
            and n.instance_id != me.instance_id
            and n.schedulable
            and n.healthy
            and not n.open_incident_id
            and n.status is NodeStatus.RUNNING
        ]

    def cordon(self, r: Recovery) -> Recovery:
        """Before the brake: a node reported faulty takes no new pods while its repair
        waits for the brake or an operator (running pods stay until Drain)."""
        self._cordon(self._incident(r))
        return r

    def _cordon(self, incident: Incident) -> None:
        try:
            cordoned = self.gateway.cordon(
                incident.instance_id, incident_id=incident.incident_id, reason=incident.kind
            )
        except NodeNotFoundError:
            # Gone since Diagnose read it (HyperPod's automatic recovery took it: D167): a
            # node that is not in the cluster takes no pods, so it is as good as cordoned.
            logger.info("node gone before its cordon", extra={"node": incident.instance_id})
            return
        if cordoned or "signal_to_cordoned_s" not in incident.timings:
            self._mark(incident, "cordoned")  # when it was first cordoned (D96)

    def protect_jobs(self, r: Recovery) -> Recovery:
        """Every job on the node: its latest complete checkpoint, and the strategy that
        loses the least (or the one it asked for), recorded on the incident and the job."""
        incident = self._incident(r)
        round_ = r.this_round
        if any(p.round == round_ for p in incident.jobs):  # a retried step keeps its plan
            return r
        planned = list(incident.jobs)
        for protection in plan_protection(self._protection_snapshot(incident, r)):
            choice = protection.choice
            outcome = self.lifecycle.protect(
                protection.job.job_id,
                incident_id=incident.incident_id,
                node=incident.instance_id,
                strategy=choice.strategy.value,
                why=choice.why,
                lost_gpu_minutes=choice.lost_gpu_minutes,
                checkpoint_age_s=protection.checkpoint_age_s,
            )
            if not outcome:
                logger.info("job not protected", extra={"why": outcome.why})
                continue
            planned.append(protection.planned())
        self.incidents.update(incident.incident_id, jobs=planned)
        r.jobs = [p.job_id for p in planned if p.round == round_]
        return r

    def _protection_snapshot(self, incident: Incident, r: Recovery) -> ProtectionSnapshot:
        """What ProtectJobs decides on: the node, its jobs with their latest checkpoints, the
        pool's spares, the component times measured from recent incidents."""
        policy = self._policy()
        me = self.nodes.get(incident.instance_id)
        nodes = self.nodes.in_pool(me.pool) if me else []
        active = self.jobs.active()
        records = {record.job.job_id: record for record in active}
        spares = self._spares(policy, me, nodes, held_nodes(record.job for record in active))
        times, source = measured(policy.strategy_times, self.incidents.recent(INCIDENT_HISTORY))
        return ProtectionSnapshot(
            incident=incident,
            round=r.this_round,
            repair=Repair(r.action or incident.action or incident.repair),
            node=me,
            jobs=tuple(
                JobToProtect(job, self._latest_checkpoint(records[job.job_id]))
                for job in protectable(incident, active)
            ),
            spares=tuple(spares),
            times=times,
            source=source,
            now=self.clock(),
        )

    def _latest_checkpoint(self, record: JobRecord) -> Checkpoint | None:
        """The newer of the reported checkpoint and the newest complete marker in S3 that
        contract v2 allows (D164: a refusal is noted in the job's history)."""
        return self.lifecycle.newest_checkpoint(
            self.checkpoints, record.job, fence_of(record), record.checkpoint_refused
        )

    def drain(self, r: Recovery) -> Recovery:
        """Evict the node's pods, one round a call, until none is left or the deadline has
        passed (what a PodDisruptionBudget still protects then is deleted): while pods are
        left, `drain_pending` sends the state machine to wait `drain_retry_s` and call again,
        so a drain may take as long as the policy's deadline, beyond a Lambda's timeout.
        Then the jobs that need not wait for the node move on: to a hot spare, shrunk onto
        their other nodes, or back to the queue. A fault announced ahead (a planned incident:
        the node still works) moves the jobs first, so that an elastic job shrinks, or moves
        to a spare, the graceful way (it checkpoints before its pods leave the node), and
        evicts what is left after."""
        incident = self._incident(r)
        now = self.clock()
        moving = {
            AppliedStrategy.HOT_SPARE,
            AppliedStrategy.ELASTIC_SHRINK,
            AppliedStrategy.MOVE,
            AppliedStrategy.REQUEUE,
        }
        if r.drain_until is None:  # the first call of this drain
            deadline = float(self._policy().drain_deadline_s)
            if incident.deadline is not None:
                deadline = max((incident.deadline - now).total_seconds(), 0.0)
            r.drain_until = now + timedelta(seconds=deadline)
            r.drain = Drained(evicted=0, forced=0)
            r.moved = self._carry_out(incident, moving, r) if incident.kind in PLANNED_KINDS else []
        final = now >= r.drain_until
        # Where the Node Termination Handler drains it (D148), HyperGuard evicts nothing
        # itself: it waits for the handler's drain and deletes what is left at the deadline.
        evict = r.repaired_by != "nth"
        try:
            result = self.gateway.drain(
                incident.instance_id, deadline_s=0, force=final, evict=evict
            )
        except NodeNotFoundError:
            # Gone from the cluster (D167): its pods went with it, nothing is left to evict.
            result = DrainResult()
        done = r.drain or Drained(evicted=0, forced=0)
        r.drain = Drained(
            evicted=done.evicted + len(result.evicted), forced=done.forced + len(result.forced)
        )
        if result.blocked and not final:
            r.drain_pending = True
            left = math.ceil((r.drain_until - now).total_seconds())
            r.drain_retry_s = max(1, min(DRAIN_RETRY_S, left))
            return r
        r.drain_pending = False
        r.drain_until = None
        r.moved = [*(r.moved or []), *self._carry_out(self._incident(r), moving, r)]
        # A job that waits for the repair trains no more until then: an elastic one whose
        # operator would shrink it on its own is stopped too.
        round_ = r.this_round
        for protected in incident.jobs:
            if (
                protected.round == round_
                and protected.strategy == AppliedStrategy.WAIT_FOR_REPAIR.value
                and not protected.resumed
            ):
                self.gateway.stop_job(protected.job_id, before_run=protected.run + 1)
        return r

    def repair(self, r: Recovery) -> Recovery:
        incident = self._incident(r)
        action = Repair(r.action or incident.action or incident.repair)
        pool = self._pool(incident.instance_id)
        # Marked before the call: the node goes NotReady as soon as HyperPod takes it, and the
        # forwarder's Ready=False may be ingested before this step could mark it after; the
        # mark is what makes that report a side effect of the repair, not a new fault to take
        # the incident over (D133). A refused call is retried; the first time is kept.
        self._mark(incident, "repair_requested")
        # HyperPod's automatic node recovery (D142), or Karpenter's or EKS's node repair
        # (D148), repairs it.
        deferred = r.repaired_by not in (None, "hyperguard")
        outcome = (
            RepairOutcome(successful=[incident.instance_id])
            if deferred
            else self.gateway.reboot([incident.instance_id])
            if action is Repair.REBOOT
            else self.gateway.replace([incident.instance_id])
        )
        under_way = self._repair_under_way(incident.instance_id, outcome.failed)
        if under_way is not None:
            action = under_way
            r.reason = (
                f"a {action.value} of the node was already under way (InstanceIdInUse): "
                "its outcome is waited for"
            )
        elif outcome.failed:
            failure = outcome.failed[0]
            refused = (
                RepairRejectedError
                if failure.error_code == INSTANCE_ID_NOT_FOUND
                else RepairRetryableError
            )
            raise refused(f"{failure.node_id}: {failure.error_code} {failure.message}")
        now = self.clock()
        self.nodes.record_repair(
            incident.instance_id,
            now.isoformat(),
            action.value,
            planned=incident.severity == Severity.SCHEDULED,
        )
        self.incidents.update(incident.incident_id, action=action.value)
        budget = timedelta(minutes=self._policy().health_budget_mins)
        r.action = action
        r.pool_before = [n.instance_id for n in pool]
        # Which logical id each of them had: a replacement that keeps its node's id is that
        # node's, never another's whose id was not kept.
        r.logical_ids_before = {n.instance_id: n.logical_id for n in pool if n.logical_id}
        r.repair_requested_at = now
        r.health_deadline = now + budget
        r.health = "pending"
        return r

    def _repair_under_way(self, instance_id: str, failed: Sequence[RepairFailure]) -> Repair | None:
        """The repair the cluster is already carrying out on the node, where it refused this
        one as InstanceIdInUse: this step's own earlier call, whose answer was lost (the state
        machine runs a step again after a Lambda timeout), HyperPod's automatic recovery, or
        an operator's. Repair ensures that the node is being repaired, so it adopts that
        repair, of the kind the node's status shows, and waits for it as for its own: retried
        instead, the refusal outlasts the state machine's retries (a minute) long before a
        replacement ends (903-981 s at P90), and the incident would go to an operator. The
        health check's ladder replaces a node a reboot did not cure. None: not that case (a
        node refused while it runs, or any other refusal, is retried as before)."""
        if [f.error_code for f in failed] != [INSTANCE_ID_IN_USE]:
            return None
        try:
            node = self.gateway.node_status(instance_id)
        except NodeNotFoundError:
            return None
        return REPAIRS_UNDER_WAY.get(node.status)

    def _pool(self, instance_id: str) -> list[Node]:
        """The nodes of `instance_id`'s pool (itself included), by instance id."""
        nodes = self.gateway.list_nodes()
        me = next((n for n in nodes if n.instance_id == instance_id), None)
        pool = [n for n in nodes if me is not None and n.pool == me.pool]
        return sorted(pool, key=lambda n: n.instance_id)

    def check_health(self, r: Recovery) -> Recovery:
        """healthy / pending; a reboot that does not cure the fault → replace (the ladder);
        past the budget → RecoveryTimeoutError."""
        incident = self._incident(r)
        action = r.repairing
        if r.repaired_by == "hyperpod":
            self._record_hyperpod_events(incident)
        if action is Repair.REBOOT and r.repaired_by == "hyperpod":
            try:
                self.gateway.node_status(incident.instance_id)
            except NodeNotFoundError:
                # HyperPod's recovery replaced it instead (a reboot that did not cure): the
                # replacement keeps its NodeLogicalId.
                action = r.action = Repair.REPLACE
                r.reason = "HyperPod's automatic node recovery replaced the node"
        if r.repaired_by in ("karpenter", "eks"):
            verdict = self._repaired_elsewhere(incident, r)
            if verdict is not None:
                r.health, r.replacement = verdict, None
                return r
        elif action is Repair.REBOOT:
            verdict = self._rebooted_health(incident, r)
            if verdict is not None:
                r.health = verdict
                return r
        elif self._is_eks(incident):
            # Karpenter replaces capacity, not the node: done once the old node is gone.
            try:
                self.gateway.node_status(incident.instance_id)
            except NodeNotFoundError:
                r.health, r.replacement = "healthy", None
                return r
        else:
            replacement = self._replacement(incident, r)
            if (
                replacement is not None
                and replacement.status is NodeStatus.RUNNING
                and replacement.healthy
            ):
                r.health, r.replacement = "healthy", replacement.instance_id
                return r
        deadline = r.deadline
        if self.clock() > deadline:
            if action is Repair.REBOOT:
                r.health, r.action = "escalate_replace", Repair.REPLACE
                r.reason = "not healthy within the budget after a reboot: replace"
                return r
            raise RecoveryTimeoutError(
                f"{incident.instance_id}: no healthy replacement by {deadline.isoformat()}"
            )
        r.health = "pending"
        return r

    def _record_hyperpod_events(self, incident: Incident) -> None:
        """HyperPod's own account of the repair left to it (D148): its cluster events about
        the node since the fault, on the incident. Best effort: a failed read is logged and
        the wait goes on."""
        try:
            events = self.gateway.hyperpod_events(incident.instance_id, incident.first_signal_at)
        except ClusterError as error:
            logger.warning("cluster events unread", extra={"error": str(error)})
            return
        lines = [
            f"{_iso(e.get('EventTime'))} {e.get('EventLevel', 'Info')}: "
            f"{str(e.get('Description') or '')[:300]}"
            for e in events
        ][-MAX_REPAIR_EVENTS:]
        if lines != incident.repair_events:
            self.incidents.update(incident.incident_id, repair_events=lines)

    def _repaired_elsewhere(self, incident: Incident, r: Recovery) -> Health | None:
        """After Karpenter's or EKS's repair was left to them (D148): healthy once the node is
        gone (replaced, whatever HyperGuard's policy would have done: Karpenter launches
        capacity for its pods) or back healthy (rebooted); None to keep waiting."""
        try:
            node = self.gateway.node_status(incident.instance_id)
        except NodeNotFoundError:
            r.action = Repair.REPLACE
            r.reason = f"{r.repaired_by}'s node repair replaced the node"
            return "healthy"
        healthy = node.status is NodeStatus.RUNNING and node.healthy
        return "healthy" if healthy else None

    def _rebooted_health(self, incident: Incident, r: Recovery) -> Health | None:
        """After a reboot: "healthy", "escalate_replace", or None to keep waiting. Where the
        policy asks for deep health checks, a node that comes back healthy is checked first
        and returns to service only once HyperPod's label says the checks passed. A node
        running again whose only problem is a kubelet not yet Ready is still booting: it is
        waited for (the health budget bounds the wait), not taken for an uncured fault."""
        node = self.gateway.node_status(incident.instance_id)
        if r.deep_health_check:
            check = node.labels.get(DEEP_HEALTH_CHECK_LABEL)
            if check == "InProgress":
                r.deep_health_check = "running"
            elif r.deep_health_check != "running":
                return None  # the label still shows an earlier check's result
            elif check == "Failed":
                r.action = Repair.REPLACE
                r.reason = "the deep health check after the reboot failed: replace"
                return "escalate_replace"
            elif check == "Passed" and node.status is NodeStatus.RUNNING and node.healthy:
                return "healthy"
            return None
        if node.status in REPAIRING_STATUSES:
            r.saw_repairing = True
        elif node.status is NodeStatus.RUNNING and node.healthy:
            checks = [c.value for c in self._policy().deep_health_checks]
            if checks and self.gateway.start_deep_health_check([node.instance_id], checks):
                r.deep_health_check = "started"
                return None
            return "healthy"
        elif r.saw_repairing and not node.booting:  # back from the reboot, still faulty
            r.action = Repair.REPLACE
            r.reason = "the reboot did not cure the fault: replace"
            return "escalate_replace"
        return None

    def _is_eks(self, incident: Incident) -> bool:
        node = self.nodes.get(incident.instance_id)
        return node is not None and node.platform == "eks"

    def _replacement(self, incident: Incident, r: Recovery) -> Node | None:
        """The node that replaces the incident's, as `replacement_among` finds it."""
        old = self.nodes.get(incident.instance_id)
        logical_ids = dict(r.logical_ids_before or {})
        if old is not None and old.logical_id:
            logical_ids.setdefault(incident.instance_id, old.logical_id)
        return replacement_among(
            self.gateway.list_nodes(),
            old_id=incident.instance_id,
            pool=old.pool if old else None,
            pool_before=list(r.pool_before or []),
            logical_ids_before=logical_ids,
            requested_at=r.repair_requested_at,
        )

    def return_to_service(self, r: Recovery) -> Recovery:
        """Uncordon a rebooted node; admit a replacement into the inventory."""
        incident = self._incident(r)
        if r.repairing is Repair.REBOOT:
            self._back_in_service(incident.instance_id)
        elif r.replacement:
            new = self.gateway.node_status(r.replacement)
            self.nodes.upsert_inventory([new])
            self.nodes.retire(incident.instance_id)
            self.incidents.update(incident.incident_id, replacement_instance_id=new.instance_id)
            for record in self.jobs.active():
                job = record.job
                if job.auto_resume and incident.instance_id in job.nodes:
                    self.lifecycle.relocate(
                        job,
                        old=incident.instance_id,
                        new=new.instance_id,
                        incident_id=incident.incident_id,
                    )
        else:  # an EKS node whose capacity Karpenter provisions anew
            self.nodes.retire(incident.instance_id)
        self._mark(incident, "healthy")
        r.signals_seen = incident.signal_count
        return r

    def _back_in_service(self, instance_id: str) -> None:
        """Undo HyperGuard's cordon (nothing else's) and its hold on Karpenter's node repair,
        and record the node as it is now."""
        self.gateway.uncordon(instance_id)
        node = self.gateway.node_status(instance_id)
        if node.platform == "eks":
            self.gateway.hold_other_repair(instance_id, held=False)
        self.nodes.upsert_inventory([node])

    def resume_jobs(self, r: Recovery) -> Recovery:
        """Jobs that waited for the repair restart on the repaired node or its replacement;
        HyperPod resumes those that opted into auto-resume; anything still planned (a spare
        that did not work out) goes back to the queue."""
        incident = self._incident(r)
        r.resumed = self._carry_out(
            incident,
            {
                AppliedStrategy.WAIT_FOR_REPAIR,
                AppliedStrategy.HYPERPOD_AUTO_RESUME,
                AppliedStrategy.HOT_SPARE,
                AppliedStrategy.ELASTIC_SHRINK,
                AppliedStrategy.MOVE,
                AppliedStrategy.REQUEUE,
            },
            r,
        )
        self._mark(incident, "resumed")
        return r

    def _carry_out(
        self, incident: Incident, strategies: set[AppliedStrategy], r: Recovery
    ) -> list[str]:
        """Carry out the plan of every job of this round whose strategy is one of
        `strategies` and which is not done yet. Each is an ensure: a retried step finds
        what an earlier attempt did (the job's run moved on under this incident's
        protection) and completes it. A job the cluster refuses holds back none of the
        others: the step fails after them, for its retry to take that job up again."""
        done: list[str] = []
        refused: ClusterError | None = None
        plan = list(incident.jobs)
        round_ = r.this_round
        for index, protected in enumerate(plan):
            strategy = AppliedStrategy(protected.strategy)
            if protected.resumed or protected.round != round_ or strategy not in strategies:
                continue
            record = self.jobs.record(protected.job_id)
            try:
                outcome = (
                    self._carry_out_one(incident, protected, strategy, record, r)
                    if record is not None
                    else "the job is gone"
                )
            except ClusterError as error:
                logger.warning(
                    "job's plan not carried out",
                    extra={"job_id": protected.job_id, "error": str(error)},
                )
                refused = refused or error
                continue
            plan[index] = protected.model_copy(update={"resumed": True, "outcome": outcome})
            self.incidents.update(incident.incident_id, jobs=plan)
            done.append(protected.job_id)
        if refused is not None:
            raise refused
        return done

    def _carry_out_one(
        self,
        incident: Incident,
        protected: ProtectedJob,
        strategy: AppliedStrategy,
        record: JobRecord,
        r: Recovery,
    ) -> str:
        """Carry out one job's plan: what it comes to is decided (`carry_out`) over the job
        as it is now and which of its next nodes are out of service, then applied."""
        job = record.job
        # An earlier attempt's move: the job's next run is already under way.
        moved_on = job.run == protected.run + 1 and record.protected_by == incident.incident_id
        nodes = next_nodes(strategy, protected, incident.instance_id, r.replacement)
        lost = self._out_of_service(nodes, incident) if nodes is not None and not moved_on else ""
        intent = carry_out(
            strategy,
            protected,
            job,
            failed=incident.instance_id,
            replacement=r.replacement,
            lost=lost,
        )
        match intent:
            case LeaveToAutoResume():
                self.lifecycle.release(
                    job.job_id,
                    incident_id=incident.incident_id,
                    reason="HyperPod auto-resume restarts it",
                )
                return "left to HyperPod auto-resume"
            case Restart():
                return self._restart(incident, protected, strategy, job, intent, moved_on)
            case Shrink():
                return self._shrink(incident, protected, job, intent, moved_on)
            case Requeue(why, prefer_burst):
                return self._requeue(incident, protected, job, why, prefer_burst=prefer_burst)

    def _restart(
        self,
        incident: Incident,
        protected: ProtectedJob,
        strategy: AppliedStrategy,
        job: Job,
        restart: Restart,
        moved_on: bool,
    ) -> str:
        if not moved_on:
            outcome = self.lifecycle.restart(
                job.job_id,
                incident_id=incident.incident_id,
                run=protected.run,
                nodes=restart.nodes,
                reason=restart.reason,
                strategy=strategy.value,
            )
            if not outcome:
                return outcome.why
        restarted = job.model_copy(
            update={
                "nodes": restart.nodes,
                "status": JobStatus.RUNNING,
                "run": protected.run + 1,
                "restart_count": job.restart_count + (not moved_on),
            }
        )
        self.gateway.stop_job(job.job_id, before_run=restarted.run)
        self.gateway.dispatch(restarted, restart.nodes)
        self._release(incident, job.job_id)
        return f"restarted on {restart.target}"

    def _shrink(
        self,
        incident: Incident,
        protected: ProtectedJob,
        job: Job,
        shrink: Shrink,
        moved_on: bool,
    ) -> str:
        if not moved_on:
            outcome = self.lifecycle.resize(
                job.job_id,
                nodes=shrink.nodes,
                by=Actor.RECOVERY,
                reason=shrink.reason,
                grown=False,
                protected_by=incident.incident_id,
                run=protected.run,
            )
            if not outcome:
                return outcome.why
        shrunk = job.model_copy(update={"nodes": shrink.nodes, "run": protected.run + 1})
        in_place = self.gateway.resize(shrunk, shrink.nodes)
        self._release(incident, job.job_id)
        return f"shrunk to {shrink.size} replica(s){' in place' if in_place else ''}"

    def _out_of_service(self, nodes: list[str], incident: Incident) -> str:
        """Which of `nodes` cannot take the job's next run: gone from the inventory
        (replaced meanwhile) or failed too (another incident's node); "" if none. Several
        nodes of one job can fail at once, and only one incident acts on the job."""
        wanted = set(nodes)
        found = {n.instance_id: n for n in self.nodes.many(sorted(wanted))}
        lost = sorted(
            i
            for i in wanted
            if (node := found.get(i)) is None
            or node.status is NodeStatus.NOT_FOUND
            or node.open_incident_id not in (None, incident.incident_id)
        )
        return ", ".join(lost)

    def _requeue(
        self,
        incident: Incident,
        protected: ProtectedJob,
        job: Job,
        why: str,
        *,
        prefer_burst: bool = False,
    ) -> str:
        """Back to the queue with its checkpoint; its runs up to the failed one are stopped.
        `prefer_burst` (a `move`): placed next on EKS burst capacity where it has room."""
        if job.status in HOLDING_STATUSES:
            where = "; placed next on EKS burst capacity first" if prefer_burst else ""
            outcome: Outcome = self.lifecycle.requeue(
                job.job_id,
                by=Actor.RECOVERY,
                reason=f"requeued by incident {incident.incident_id} ({why}): resumes from "
                f"checkpoint step {protected.checkpoint_step}{where}",
                protected_by=incident.incident_id,
                run=protected.run,
                prefer_burst=prefer_burst,
            )
            if not outcome:
                return outcome.why
        elif job.run != protected.run:
            return f"moved on meanwhile (run {job.run}, {job.status.value})"
        self.gateway.stop_job(job.job_id, before_run=protected.run + 1)
        return f"requeued ({why})"

    def _release(self, incident: Incident, job_id: str) -> None:
        # The job's reason says why it is where it is: running again, after this incident
        # (its history keeps the release itself).
        self.lifecycle.release(
            job_id,
            incident_id=incident.incident_id,
            reason=f"running again after incident {incident.incident_id}",
        )

    def _resolved_metric(self, incident: Incident, resolution: str) -> None:
        """Time to resolution by pool and outcome (dimensions: a pool's recoveries and each
        way they end can be graphed and alarmed on apart)."""
        seconds = incident.timings.get("signal_to_resolved_s")
        if seconds is None:
            return
        node = self.nodes.get(incident.instance_id)
        with single_metric(
            name="IncidentResolvedSeconds",
            unit=MetricUnit.Seconds,
            value=seconds,
            namespace=NAMESPACE,
        ) as metric:
            metric.add_dimension(name="pool", value=(node.pool if node else None) or "unknown")
            metric.add_dimension(name="outcome", value=resolution)
        if incident.repaired_by is not None:
            # Who repaired it: the dashboard's "who repairs" widget (D148).
            with single_metric(
                name="Repairs", unit=MetricUnit.Count, value=1, namespace=NAMESPACE
            ) as metric:
                metric.add_dimension(name="repaired_by", value=incident.repaired_by)

    def close(self, r: Recovery) -> Recovery:
        """Resolve with timings, release the node, announce IncidentResolved. A signal that
        joined after the node was found healthy, while the node is unhealthy again, is not
        lost: the incident is diagnosed again instead ("rediagnose")."""
        incident = self._incident(r)
        if self._fault_returned(incident, r):
            r.verdict = "rediagnose"
            return r
        resolution = r.resolution or RESOLUTIONS.get(r.action or "", "resolved")
        if resolution == "recovered_on_its_own":
            # A re-drive finds a node healthy that an earlier attempt cordoned (the step
            # that failed came after its repair): nothing else would return it to service.
            # (One gone since diagnosis has nothing to return.)
            with suppress(NodeNotFoundError):
                self._back_in_service(incident.instance_id)
        rebooted_at = r.repair_requested_at if resolution == "rebooted" else None
        if self._carry_scheduled_change(incident, resolution, rebooted_at):
            r.verdict = "rediagnose"
            return r
        self._mark(incident, "resolved")
        closed_now = self.incidents.close(
            incident, resolution, signal_count=incident.signal_count, at=self.clock()
        )
        if not closed_now:
            current = self._incident(r)
            if current.status is not IncidentStatus.RESOLVED:
                # A signal joined between reading the incident and closing it: look again.
                r.verdict = "rediagnose" if self._fault_returned(current, r) else "close"
                return r
        if closed_now:
            closed = self.incidents.get(incident.incident_id) or incident
            self.publisher.publish("IncidentResolved", resolved(closed, resolution))
            for name, seconds in closed.timings.items():
                metrics.add_metric(name=f"Incident_{name}", unit="Seconds", value=seconds)
            self._resolved_metric(closed, resolution)
            logger.info(
                "incident resolved",
                extra={"incident_id": incident.incident_id, "resolution": resolution},
            )
        r.resolution = resolution
        r.verdict = "closed"
        return r

    def _carry_scheduled_change(
        self, incident: Incident, resolution: str, rebooted_at: datetime | None
    ) -> bool:
        """A scheduled change (a retirement, an interruption notice) that merged into an
        incident about another fault must still be honoured once that fault is cured and the
        node stays: the incident takes the change on, with the change's own window, and is
        diagnosed again instead of closing (closing lost it). True when there is one. A
        scheduled reboot announced before the node's own reboot was asked for is done: that
        reboot completed it (D90)."""
        if resolution in NODE_LEFT or resolution == OBSERVED:
            return False  # gone; or observed: the decision noted already names the change
        change = pending_scheduled_change(
            incident, self.incidents.signals(incident.incident_id), rebooted_at=rebooted_at
        )
        if change is None:
            return False
        note = (
            f"{resolution}: the {change.kind} merged at {change.observed_at.isoformat()} "
            "is carried on with its own window"
        )
        # None: the incident changed since it was read; diagnosing it again reads it afresh.
        self.incidents.escalate_urgency(incident, change, note=note)
        logger.info(
            "scheduled change carried past the incident's close",
            extra={"incident_id": incident.incident_id, "kind": change.kind},
        )
        return True

    def _fault_returned(self, incident: Incident, r: Recovery) -> bool:
        """Signals joined after the node was last found healthy, and it is not healthy now
        (only where the node stays: rebooted, or recovered by itself)."""
        seen = r.signals_seen
        stays = r.resolution == "recovered_on_its_own" or (
            r.action is Repair.REBOOT and r.resolution is None
        )
        if seen is None or incident.signal_count <= seen or not stays:
            return False
        try:
            node = self.gateway.node_status(incident.instance_id)
        except NodeNotFoundError:
            return False
        return not (node.status is NodeStatus.RUNNING and node.healthy)

    def escalate(self, r: Recovery) -> Recovery:
        """Hand the incident to an operator with the node cordoned (and a replacement that
        never became healthy too), whichever step failed: an operator looks at a node that
        takes no new pods. Every job it protected and had not moved on goes back to the
        queue — those in its plan, and any it protected before the plan was written — so
        that no job is left holding a node that is not coming back (one the cluster refuses
        to stop is named in the note)."""
        incident = self._incident(r)
        error = r.error or CaughtError()
        if error.cause:
            # The whole cause, stack frames included, for whoever debugs it; the note is
            # one line an operator reads.
            logger.error("recovery escalated", extra={"error": error.error, "cause": error.cause})
        note = f"escalated: {error.summary()}"
        fenced = self._fence_off(incident, r)
        left = "; ".join(p for p in (fenced, *self._requeue_all(incident, r)) if p)
        if left:
            note = f"{note} ({left})"
        note = note[:1000]
        if incident.status is not IncidentStatus.NEEDS_OPERATOR:
            self.incidents.set_status(
                incident.incident_id, IncidentStatus.NEEDS_OPERATOR, note=note
            )
            self.escalator.notify(
                f"HyperGuard incident {incident.incident_id} needs an operator",
                {
                    "incident_id": incident.incident_id,
                    "instance_id": incident.instance_id,
                    "why": note,
                    "redrive": f"hyperguard incidents redrive {incident.incident_id}",
                },
            )
            self.publisher.publish("IncidentEscalated", escalation(incident, note))
        r.status = IncidentStatus.NEEDS_OPERATOR.value
        r.cause = note  # the execution's failure cause (the Fail state's CausePath)
        return r

    def _requeue_all(self, incident: Incident, r: Recovery) -> list[str]:
        """Requeue every job the incident protected and has not moved on; a job the cluster
        refuses holds back none of the others: it stays in the plan, not done, for a
        re-drive, and is named for the operator's note."""
        refused: list[str] = []
        plan = list(incident.jobs) + self._unplanned(incident, r)
        for index, protected in enumerate(plan):
            if protected.resumed:
                continue
            record = self.jobs.record(protected.job_id)
            try:
                outcome = (
                    self._requeue(incident, protected, record.job, "the incident was escalated")
                    if record is not None
                    else "the job is gone"
                )
            except ClusterError as error:
                refused.append(f"job {protected.job_id} could not be requeued: {error}"[:200])
                continue
            plan[index] = protected.model_copy(update={"resumed": True, "outcome": outcome})
            self.incidents.update(incident.incident_id, jobs=plan)
        return refused

    def _fence_off(self, incident: Incident, r: Recovery) -> str:
        """Cordon the incident's node, and the replacement a replace left unhealthy; what
        could not be cordoned, said for the operator's note ("" when all went well)."""
        targets = [incident.instance_id]
        if r.action is Repair.REPLACE and not self._is_eks(incident):
            try:
                replacement = self._replacement(incident, r)
            except ClusterError:
                replacement = None
            if replacement is not None and not (
                replacement.status is NodeStatus.RUNNING and replacement.healthy
            ):
                targets.append(replacement.instance_id)
        failed = []
        for target in targets:
            try:
                self.gateway.cordon(
                    target, incident_id=incident.incident_id, reason="needs_operator"
                )
            except NodeNotFoundError:
                continue  # gone: nothing can be scheduled on it
            except ClusterError as error:
                failed.append(f"{target} could not be cordoned: {error}"[:200])
        return "; ".join(failed)

    def _unplanned(self, incident: Incident, r: Recovery) -> list[ProtectedJob]:
        """Jobs this incident protected whose plan never reached the incident (the step
        that protects them failed before writing it)."""
        planned = {p.job_id for p in incident.jobs}
        return [
            ProtectedJob(
                job_id=record.job.job_id,
                team=record.job.team,
                strategy=AppliedStrategy.REQUEUE.value,
                why="protected before the incident was escalated; its plan was never written",
                checkpoint_step=(
                    record.job.last_checkpoint.step if record.job.last_checkpoint else None
                ),
                nodes=record.job.nodes,
                run=record.job.run,
                round=r.this_round,
            )
            for record in self.jobs.active()
            if record.protected_by == incident.incident_id and record.job.job_id not in planned
        ]


def pending_scheduled_change(
    incident: Incident,
    signals: Sequence[Mapping[str, Any]],
    *,
    rebooted_at: datetime | None = None,
) -> HealthSignal | None:
    """The merged scheduled change with the earliest window (as stored by the incident
    store), unless it is the change the incident is already about; None when none is left.
    Taking the earliest each time ends: once carried, it is the incident's own. A scheduled
    reboot observed before `rebooted_at` (when the node's own reboot was asked for) is not
    pending: EC2 clears it once the instance has been rebooted."""
    changes = [
        signal
        for signal in (
            HealthSignal.model_validate(s)
            for s in signals
            if s.get("kind") in PLANNED_KINDS and (s.get("not_before") or s.get("deadline"))
        )
        if not (
            rebooted_at is not None
            and signal.repair is Repair.REBOOT
            and signal.observed_at <= rebooted_at
        )
    ]
    if not changes:
        return None
    first = min(changes, key=_window_start)
    own = (first.kind, first.not_before, first.deadline) == (
        incident.kind,
        incident.not_before,
        incident.deadline,
    )
    return None if own else first


def _window_start(signal: HealthSignal) -> datetime:
    start = signal.not_before or signal.deadline
    assert start is not None  # only signals with a window are compared
    return start


def replacement_among(
    nodes: list[Node],
    *,
    old_id: str,
    pool: str | None,
    pool_before: list[str],
    logical_ids_before: dict[str, str],
    requested_at: datetime | None,
) -> Node | None:
    """The node among `nodes` that replaces `old_id`, None while there is none yet.

    HyperPod keeps a node's NodeLogicalId across a replacement, which names the replacement
    exactly even when several nodes of a pool are replaced at once. Where the id was not kept
    (or never known), a new node stands in: of the same pool, not in it when the repair was
    asked for (`pool_before`), launched since (`requested_at`), not added by a burst, and
    whose logical id is no other node's of before (that node's replacement, which kept its
    id). When several nodes of the pool went and several new ones came, the k-th node gone
    (by instance id) takes the k-th new one (by launch time), so that two replacements never
    pick the same node; which new node replaced which no API says then, and either is a new
    node of the group."""
    old_logical_id = logical_ids_before.get(old_id)
    if old_logical_id:
        kept = next(
            (n for n in nodes if n.logical_id == old_logical_id and n.instance_id != old_id),
            None,
        )
        if kept is not None:
            return kept
    gone = _gone(nodes, [*pool_before, old_id], logical_ids_before)
    if old_id not in gone:
        return None  # still listed: its replacement has not come yet
    fresh = _new_in_pool(nodes, pool, set(pool_before), logical_ids_before, requested_at)
    rank = gone.index(old_id)
    return fresh[rank] if rank < len(fresh) else None


def _gone(nodes: list[Node], before: list[str], logical_ids: dict[str, str]) -> list[str]:
    """The nodes of `before` no longer listed, nor replaced by a node that kept their id."""
    listed = {n.instance_id for n in nodes} | {n.logical_id for n in nodes if n.logical_id}
    return sorted({i for i in before if i not in listed and logical_ids.get(i, i) not in listed})


def _new_in_pool(
    nodes: list[Node],
    pool: str | None,
    before: set[str],
    logical_ids: dict[str, str],
    requested_at: datetime | None,
) -> list[Node]:
    """Nodes that joined `pool` since the repair was asked for, oldest first."""
    taken = set(logical_ids.values())
    since = requested_at or datetime.min.replace(tzinfo=UTC)
    fresh = [
        n
        for n in nodes
        if n.pool == pool
        and n.instance_id not in before
        and n.logical_id not in taken
        and BURST_LABEL not in n.labels
        and (n.launch_time or since) >= since
    ]
    return sorted(fresh, key=lambda n: (n.launch_time or since, n.instance_id))


STEPS = frozenset(
    {
        "diagnose",
        "park",
        "guard",
        "request_approval",
        "cordon",
        "protect_jobs",
        "drain",
        "repair",
        "check_health",
        "return_to_service",
        "resume_jobs",
        "close",
        "escalate",
    }
)


def _iso(at: object) -> str:
    """A ClusterEventSummary's EventTime as ISO 8601 (boto3 gives a datetime)."""
    return at.isoformat() if isinstance(at, datetime) else str(at)
