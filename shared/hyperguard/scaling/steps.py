"""BurstCapacity workflow steps. Each is an *ensure* step: safe to run twice.

The state machine passes the state (`burst`, a plain dict) from step to step; each step
returns it updated, and its Choice states read `capacity`. The state starts as
{"request": BurstRequest}; `plan` adds the plan, `request` the attempt's nodes (NodeClaims,
or the logical ids of the nodes BatchAddClusterNodes added to a HyperPod group, in `added`)
and when they were asked for, `check` where they stand, `next_capacity` moves to the next
option, `admit` hands the nodes to the scheduler and `rollback` gives everything back.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

from hyperguard.bursting.plan import (
    TEMPLATE_CAPACITY,
    BurstPlan,
    CapacityOption,
    assess,
    plan_burst,
)
from hyperguard.bursting.requests import BurstRequest, rollback_note
from hyperguard.cluster import ClusterError, ClusterGateway
from hyperguard.cluster.karpenter import nodeclaim_manifest
from hyperguard.governance.jobs import JobLifecycle
from hyperguard.messaging import EventPublisher, SchedulerWakeup
from hyperguard.models import utcnow
from hyperguard.models.cluster import BurstClaim, InstanceGroupSize
from hyperguard.models.jobs import HOLDING_STATUSES, WAITING_STATUSES
from hyperguard.observability import NAMESPACE, MetricUnit, logger, metrics, single_metric
from hyperguard.policies.burst import allows_hyperpod
from hyperguard.steps import step_of
from hyperguard.store import JobStore, NodeStore
from hyperguard.store.nodes import mark_given_back
from hyperguard.store.policy import BurstPolicyStore

Burst = dict[str, Any]

STEPS = frozenset({"plan", "request", "check", "next_capacity", "admit", "rollback"})
MAX_FAILURES_KEPT = 10


class BurstSteps:
    def __init__(
        self,
        *,
        gateway: ClusterGateway,
        jobs: JobStore,
        policies: BurstPolicyStore,
        wakeup: SchedulerWakeup,
        publisher: EventPublisher,
        nodes: NodeStore | None = None,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.gateway = gateway
        self.jobs = jobs
        self.nodes = nodes
        self.lifecycle = JobLifecycle(jobs, clock=clock)
        self.policies = policies
        self.wakeup = wakeup
        self.publisher = publisher
        self.clock = clock

    def run(self, step: str, burst: Burst) -> Burst:
        result: Burst = step_of(self, "Burst", step, STEPS)(dict(burst))
        metrics.add_metric(name=f"BurstStep_{step}", unit="Count", value=1)
        return result

    # -- steps ----------------------------------------------------------------------------
    def plan(self, burst: Burst) -> Burst:
        """Which of the jobs still wait, and the capacity types to try for them."""
        request = BurstRequest.model_validate(burst["request"])
        policy = self.policies.get()
        records = {r.job.job_id: r for r in self.jobs.records_of([j.job_id for j in request.jobs])}
        waiting = [
            job
            for job in request.jobs
            if (record := records.get(job.job_id)) is not None
            and record.job.status in WAITING_STATUSES
            and not record.stop_pending
        ]
        elsewhere = sum(
            1
            for claim in self.gateway.burst_claims()
            if not claim.deleting and claim.burst_id != request.burst_id
        )
        groups: list[InstanceGroupSize] = []
        unavailable = None
        if waiting and policy.capacity.hyperpod_groups and allows_hyperpod(request.template):
            continuous, groups = self.gateway.hyperpod_groups()
            if not continuous:
                groups = []
                unavailable = (
                    "hyperpod: the cluster does not add nodes on request "
                    "(its NodeProvisioningMode is not Continuous)"
                )
        room: tuple[int | None, str | None] = (None, None)
        if waiting and TEMPLATE_CAPACITY.get(request.template):
            room = self.gateway.nodepool_room(policy.capacity.node_pool, request.instance_type)
        plan = plan_burst(
            request.model_copy(update={"jobs": waiting}) if waiting else request,
            policy,
            claims_elsewhere=elsewhere,
            spend_usd_per_hour=request.spend_usd_per_hour,
            hyperpod_groups=groups,
            nodepool_room=room,
        )
        if unavailable:
            plan.refused.insert(0, unavailable)
        if not waiting:
            plan = BurstPlan(jobs=[], nodes=0, options=[], refused=["no job waits any more"])
        burst.update(
            plan=plan.model_dump(mode="json"),
            attempt=0,
            failures=list(plan.refused)[:MAX_FAILURES_KEPT],
            poll_s=policy.capacity.poll_interval_s,
            # Jobs wait but no capacity may be bought for them (maxNodes, caps, prices):
            # roll back, which leaves the reasons on them.
            capacity=(
                "not-needed"
                if not waiting
                else "planned"
                if plan.jobs and plan.options
                else "unaffordable"
            ),
        )
        logger.info(
            "burst planned",
            extra={"burst_id": request.burst_id, "nodes": plan.nodes, "refused": plan.refused},
        )
        return burst

    def request(self, burst: Burst) -> Burst:
        """Ensure the attempt's nodes are asked for: one NodeClaim per node, or the HyperPod
        group grown by them (the attempt's client token makes asking again a no-op). Before
        an attempt's first request, the jobs and the policy are read again: nothing is
        bought once the jobs no longer wait or the caps no longer allow this capacity
        ("withdrawn": the workflow rolls back, leaving the reason on the jobs)."""
        request, plan = self._request(burst), self._plan(burst)
        attempt = int(burst.get("attempt", 0))
        option = plan.options[attempt]
        if burst.get("requested_attempt") != attempt:
            refusal = self._no_longer_allowed(burst, plan, option)
            if refusal is not None:
                burst["capacity"] = "withdrawn"
                burst["failures"] = [
                    *burst.get("failures", []),
                    f"{option.label}: not bought: {refusal}",
                ][-MAX_FAILURES_KEPT:]
                return burst
        policy = self.policies.get()
        if option.capacity_type is None:
            added, failed = self.gateway.add_hyperpod_nodes(
                str(option.instance_group), plan.nodes, f"{request.burst_id}-{attempt}"
            )
            burst.update(added=added, add_failures=failed)
        else:
            self.gateway.request_burst_nodes(
                [
                    nodeclaim_manifest(
                        name=_claim_name(request.burst_id, attempt, index),
                        burst_id=request.burst_id,
                        attempt=attempt,
                        node_pool=policy.capacity.node_pool,
                        node_class=policy.capacity.node_class,
                        instance_type=request.instance_type,
                        capacity_type=option.capacity_type,
                        accelerators=request.accelerators_per_node,
                    )
                    for index in range(plan.nodes)
                ]
            )
        if burst.get("requested_attempt") != attempt:
            burst["requested_attempt"] = attempt
            burst["requested_at"] = self.clock().isoformat()
        burst["capacity"] = "requested"
        return burst

    def check(self, burst: Burst) -> Burst:
        """Are the attempt's nodes Ready? Failed or too slow: the next option."""
        plan = self._plan(burst)
        attempt = int(burst.get("attempt", 0))
        policy = self.policies.get()
        option = plan.options[attempt]
        waited = (self.clock() - datetime.fromisoformat(burst["requested_at"])).total_seconds()
        claims: list[BurstClaim] = []
        why: str | None
        if burst.get("add_failures"):  # SageMaker refused the group: nothing to look at
            status, why = "failed", "; ".join(burst["add_failures"])
        else:
            claims = self._claims(burst, option)
            status, why = assess(
                claims, plan.nodes, waited_s=waited, timeout_s=policy.capacity.launch_timeout_s
            )
        burst["capacity"] = status
        burst["poll_s"] = policy.capacity.poll_interval_s
        if why is not None:
            burst["failures"] = [
                *burst.get("failures", []),
                f"{option.label}: {why}",
            ][-MAX_FAILURES_KEPT:]
        if status == "ready":
            burst["instance_ids"] = sorted(c.instance_id for c in claims if c.instance_id)
        return burst

    def next_capacity(self, burst: Burst) -> Burst:
        """Give back this attempt's nodes; move on to the next option, if any."""
        plan = self._plan(burst)
        attempt = int(burst.get("attempt", 0))
        self._give_back(burst, plan.options[attempt])
        burst["attempt"] = attempt + 1
        burst["capacity"] = "retry" if attempt + 1 < len(plan.options) else "exhausted"
        return burst

    def admit(self, burst: Burst) -> Burst:
        """The nodes are Ready: wake the scheduler, which places the jobs on them."""
        request, plan = self._request(burst), self._plan(burst)
        option = plan.options[int(burst.get("attempt", 0))]
        self.wakeup.wake(f"burst {request.burst_id} ready", plan.jobs[0].job_id)
        waited = (self.clock() - datetime.fromisoformat(burst["requested_at"])).total_seconds()
        detail = {
            "burst_id": request.burst_id,
            "instance_type": request.instance_type,
            "capacity_type": option.label,
            "nodes": plan.nodes,
            "instance_ids": burst.get("instance_ids", []),
            "usd_per_hour": option.usd_per_hour,
            "jobs": [j.job_id for j in plan.jobs],
            "seconds_to_ready": round(waited, 1),
        }
        self.publisher.publish("BurstCapacityRaised", detail)
        self._metric("BurstNodesReadySeconds", waited, option.label)
        burst["outcome"] = "ready"
        return burst

    def rollback(self, burst: Burst) -> Burst:
        """No capacity came (or a step failed): give back every node of the burst no job runs
        on, and leave the jobs that still wait pending with the reasons. A node a job was
        placed on meanwhile (the scheduler places on a Ready node at once) is kept, never
        pulled from under the job: scale-in gives it back once it is idle (D144)."""
        request = BurstRequest.model_validate(burst["request"])
        holding = {
            r.job.job_id: r.job.nodes
            for r in self.jobs.active()
            if r.job.status in HOLDING_STATUSES
        }
        kept = self._give_back_unused(burst, request, {n for ns in holding.values() for n in ns})
        failures = _failures(burst)
        why = "; ".join(failures) or "no capacity type to try"
        if kept:
            nodes = ", ".join(sorted(str(c.instance_id) for c in kept))
            why += f"; kept {len(kept)} node(s) jobs already run on ({nodes}), given back once idle"
        reason = rollback_note(request.burst_id, why)
        for job in request.jobs:
            self.lifecycle.set_reason(job.job_id, reason)  # only a job that still waits
        self.publisher.publish(
            "BurstRolledBack",
            {
                "burst_id": request.burst_id,
                "instance_type": request.instance_type,
                "jobs": [j.job_id for j in request.jobs],
                "reasons": failures,
                "kept": sorted(c.name for c in kept),
                "running": sorted(j.job_id for j in request.jobs if j.job_id in holding),
            },
        )
        burst["outcome"] = "rolled-back"
        burst["reason"] = why
        return burst

    def _give_back_unused(
        self, burst: Burst, request: BurstRequest, held: set[str]
    ) -> list[BurstClaim]:
        """Give back the burst's nodes that no job holds (`held`: instance ids); the kept
        ones. The HyperPod nodes of the burst are those its attempt added (earlier attempts'
        were given back when they failed)."""
        claims = self.gateway.burst_claims(request.burst_id, include_hyperpod=True)
        live = [c for c in claims if not c.deleting]
        kept = [c for c in live if c.instance_id is not None and c.instance_id in held]
        refused = self._release([c for c in live if c.platform == "eks" and c not in kept])
        kept_hyperpod = {c.name for c in kept if c.platform == "hyperpod"}
        added = [a for a in burst.get("added") or [] if a not in kept_hyperpod]
        if added:
            self._delete_added(added, live)
        if refused is not None:
            raise refused
        return kept

    # -- helpers --------------------------------------------------------------------------
    def _no_longer_allowed(
        self, burst: Burst, plan: BurstPlan, option: CapacityOption
    ) -> str | None:
        """Why this attempt's nodes may no longer be bought, planning again from the jobs
        and the policy as they are now (None: they may)."""
        fresh = self.plan({"request": burst["request"]})
        now = BurstPlan.model_validate(fresh["plan"])
        if fresh["capacity"] != "planned":
            return "; ".join(now.refused) or "no job waits any more"
        allowed = next((o for o in now.options if o.label == option.label), None)
        if allowed is None:
            return "; ".join(now.refused) or f"{option.label} is no longer allowed"
        if now.nodes < plan.nodes:
            return f"the policy now allows {now.nodes} node(s), not {plan.nodes}"
        return None

    @staticmethod
    def _request(burst: Burst) -> BurstRequest:
        return BurstRequest.model_validate(burst["request"])

    @staticmethod
    def _plan(burst: Burst) -> BurstPlan:
        return BurstPlan.model_validate(burst["plan"])

    def _claims(self, burst: Burst, option: CapacityOption) -> list[BurstClaim]:
        """The attempt's nodes as their platform reports them."""
        burst_id = self._request(burst).burst_id
        attempt = int(burst.get("attempt", 0))
        if option.instance_group is not None:
            return self.gateway.track_hyperpod_nodes(
                burst_id, attempt, option.instance_group, list(burst.get("added") or [])
            )
        claims = self.gateway.burst_claims(burst_id, include_hyperpod=False)
        return [c for c in claims if c.attempt == attempt]

    def _give_back(self, burst: Burst, option: CapacityOption) -> None:
        if option.instance_group is not None:
            added = list(burst.get("added") or [])
            if added:
                burst_id = self._request(burst).burst_id
                self._delete_added(added, self.gateway.burst_claims(burst_id))
            burst.update(added=[], add_failures=[])
            return
        refused = self._release(self._claims(burst, option))
        if refused is not None:
            raise refused

    def _delete_added(self, added: list[str], claims: Iterable[BurstClaim]) -> None:
        """Delete these HyperPod nodes the burst added (by logical id), and mark released
        each of them that joined the cluster (`claims`: the burst's nodes as the cluster
        lists them, which name their instances: D208)."""
        self.gateway.delete_hyperpod_nodes(added)
        for claim in claims:
            if claim.platform == "hyperpod" and claim.name in added:
                mark_given_back(self.nodes, claim, self.clock())

    def _release(self, claims: list[BurstClaim]) -> ClusterError | None:
        """Give back every one of these nodes, one the cluster refuses holding back none of
        the others: the first refusal, for the caller to raise once it is done, so that the
        step's retry gives that node back. Each node given back is marked released in the
        inventory (D208)."""
        refused: ClusterError | None = None
        for claim in claims:
            try:
                self.gateway.release_burst_node(claim)
            except ClusterError as error:
                logger.warning(
                    "burst node not given back", extra={"claim": claim.name, "error": str(error)}
                )
                refused = refused or error
                continue
            mark_given_back(self.nodes, claim, self.clock())
        return refused

    def _metric(self, name: str, value: float, capacity_type: str) -> None:
        with single_metric(
            name=name, unit=MetricUnit.Seconds, value=value, namespace=NAMESPACE
        ) as metric:
            metric.add_dimension(name="capacity_type", value=capacity_type)


def _claim_name(burst_id: str, attempt: int, index: int) -> str:
    return f"hg-{burst_id}-{attempt}-{index}"


def _failures(burst: Burst) -> list[str]:
    """Why the burst rolls back, in order: its attempts' failures, then a step's error."""
    failures = list(burst.get("failures") or [])
    error = burst.get("error")
    if isinstance(error, dict):
        failures.append(f"{error.get('Error')}: {str(error.get('Cause', ''))[:300]}")
    return failures
