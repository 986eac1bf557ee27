"""ClusterGateway for a HyperPod cluster orchestrated by EKS.

SageMaker is the authority on the node inventory and repairs nodes; the EKS API server is
where pods are kept off a node and where jobs run. Jobs follow HyperPod task governance's
conventions: namespace `hyperpod-ns-<team>`, priority class label `<class>-priority`; the
team's `hyperpod-ns-<team>-localqueue` holds what teams apply with kubectl until HyperGuard
admits it (hyperguard.cluster.held, D170).

The API server also holds EKS burst nodes, which Karpenter provisions and SageMaker does not
know. SageMaker's inventory decides who owns a node: HyperPod nodes are repaired by
SageMaker; Karpenter nodes (labelled with their NodePool) are replaced by deleting their
NodeClaim and rebooted through EC2, since Karpenter has no reboot.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from hyperguard.aws import client
from hyperguard.catalogue import InstanceSpec, UnknownInstanceTypeError
from hyperguard.cluster.conventions import (
    CAPACITY_TYPE_LABEL,
    EC2_CAPACITY_TYPES,
    HEALTH_LABEL,
    INSTANCE_GROUP_LABEL,
    INSTANCE_ID_NOT_FOUND,
    INSTANCE_TYPE_LABEL,
    NODEPOOL_LABEL,
)
from hyperguard.cluster.ec2 import Ec2Adapter
from hyperguard.cluster.gateway import ClusterError, DrainResult, InvalidRunError, NodeNotFoundError
from hyperguard.cluster.held import active, check_state, finished, waiting
from hyperguard.cluster.hyperpod import HyperPodAdapter, accelerators_of
from hyperguard.cluster.karpenter import (
    ATTEMPT_LABEL,
    DISRUPTED_TAINT,
    IDLE_SINCE_ANNOTATION,
    LOGICAL_ID_ANNOTATION,
    from_nodepool_template,
    idle_mark,
    nodes_within_limits,
    read_attempt,
    read_claim,
    read_time,
)
from hyperguard.cluster.kubernetes import (
    KubeNode,
    KubernetesAdapter,
    NodeCondition,
    RunPod,
)
from hyperguard.cluster.kueue import ADMISSION_CHECK, KueueObjects, utc_timestamp
from hyperguard.cluster.prerequisites import (
    KUEUE_CRD,
    OPERATOR_CRD,
    ClusterPrerequisites,
    summarize,
)
from hyperguard.cluster.workloads import (
    JOB_ID_ANNOTATION,
    JOB_ID_LABEL,
    RUN_LABEL,
    WORKLOAD_ANNOTATION,
    DryRunObject,
    ReplicaLog,
    batch_job_manifest,
    hyperpod_job_manifest,
    job_name,
    rendezvous_service,
    resize_patch,
    run_name,
    run_status,
    team_namespace,
    toleration_of,
)
from hyperguard.models import Job, Node, NodeStatus, RepairFailure, RepairOutcome
from hyperguard.models.cluster import (
    HYPERPOD_CAPACITY,
    BurstClaim,
    InstanceGroupSize,
    RunKind,
    RunPhase,
    RunStatus,
)
from hyperguard.models.nodes import BURST_LABEL
from hyperguard.policies.repairers import (
    DO_NOT_REPAIR,
    KARPENTER_GATE,
    KARPENTER_NAME,
    NTH_NAME,
    REPAIRER_NAMESPACE,
    Repairers,
    feature_gate,
    karpenter_gates,
)

UNHEALTHY_LABEL_VALUES = frozenset(
    {"Unschedulable", "UnschedulablePendingReplacement", "UnschedulablePendingReboot"}
)
EKS_PLATFORM = "eks"
MAX_NODE_GROUPS = 1000

RepairCall = Callable[[list[str]], RepairOutcome]


NODE_NAMES_TTL_S = 10.0
"""How long a listing of the Kubernetes nodes names the nodes a run is pinned to: a pass
lists them at its start and dispatches within seconds; a node missing from the listing, or
an older listing, means a new one."""


class HyperPodEksGateway:
    """The full ClusterGateway port for a HyperPod cluster whose orchestrator is EKS, with
    the cluster's EKS burst nodes."""

    def __init__(
        self,
        hyperpod: HyperPodAdapter,
        kubernetes: KubernetesAdapter,
        *,
        ec2: Ec2Adapter | None = None,
    ) -> None:
        self.hyperpod = hyperpod
        self.kubernetes = kubernetes
        self._ec2 = ec2
        self._listed: tuple[float, dict[str, KubeNode]] = (float("-inf"), {})
        """The Kubernetes nodes by instance id as last listed, and when (time.monotonic)."""

    def _kube_nodes(self, every: list[KubeNode] | None = None) -> dict[str, KubeNode]:
        """The Kubernetes nodes (`every`, or listed now), by instance id."""
        nodes = self.kubernetes.list_nodes() if every is None else every
        listed = {n.instance_id: n for n in nodes if n.instance_id}
        self._listed = (time.monotonic(), listed)
        return dict(listed)

    def _named(self, nodes: list[str]) -> dict[str, KubeNode]:
        """The Kubernetes nodes of these instances: from the last listing when it has them
        all, each with its NodePool or instance group label, and is under NODE_NAMES_TTL_S
        old (a pass that listed the nodes and dispatches thirty runs lists them once), listed
        again otherwise. A node's name is fixed at its creation, its label once it has one;
        Karpenter labels a node with its NodePool when it registers it, and a listing from
        before that would make its burst node a HyperPod one and its run a
        HyperPodPyTorchJob (`bench/plane_burst.py` dispatched 5 of 25 runs so)."""
        at, listed = self._listed
        if time.monotonic() - at < NODE_NAMES_TTL_S and all(
            i in listed and _placed_by_label(listed[i]) for i in nodes
        ):
            return listed
        return self._kube_nodes()

    @property
    def ec2(self) -> Ec2Adapter:
        if self._ec2 is None:
            self._ec2 = Ec2Adapter()
        return self._ec2

    def list_nodes(self) -> list[Node]:
        kube_nodes = self._kube_nodes()
        claims = self.kubernetes.list_nodeclaims({}) if _on_karpenter(kube_nodes) else []
        return self._nodes(kube_nodes, claims)

    def nodes_and_claims(self) -> tuple[list[Node], list[BurstClaim] | ClusterError]:
        """`list_nodes` and `burst_claims` from one listing each of the Kubernetes nodes and
        the NodeClaims (what a scheduling pass reads: the two apart list both twice). A
        failed NodeClaim listing is returned in place of the claims, unless Karpenter has
        nodes (they need it: it is raised, as `list_nodes` raises it)."""
        every = self.kubernetes.list_nodes()
        kube_nodes = self._kube_nodes(every)
        try:
            claims = self.kubernetes.list_nodeclaims({})
        except ClusterError as error:
            if _on_karpenter(kube_nodes):
                raise
            return self._nodes(kube_nodes, []), error
        burst = [c for c in map(read_claim, claims) if c is not None]
        return self._nodes(kube_nodes, claims), burst + _added_nodes(every)

    def _nodes(self, kube_nodes: dict[str, KubeNode], claims: list[dict[str, Any]]) -> list[Node]:
        """HyperPod's nodes merged with their Kubernetes nodes, then Karpenter's: a node whose
        NodeClaim is being deleted is leaving from that moment, before Karpenter's taint is
        on it and long before its Node object goes."""
        hyperpod = [
            _merge(node, kube_nodes.pop(node.instance_id, None))
            for node in self.hyperpod.list_nodes()
        ]
        claimed_away = {
            str(claim["status"]["nodeName"])
            for claim in claims
            if (claim.get("metadata") or {}).get("deletionTimestamp")
            and (claim.get("status") or {}).get("nodeName")
        }
        burst = [
            self._burst_node(instance_id, kube, leaving=kube.name in claimed_away)
            for instance_id, kube in kube_nodes.items()
            if NODEPOOL_LABEL in kube.labels
        ]
        return [*hyperpod, *burst]

    def node_status(self, instance_id: str) -> Node:
        try:
            node = self.hyperpod.node_status(instance_id)
        except NodeNotFoundError:
            kube = self.kubernetes.find_node(instance_id)
            if NODEPOOL_LABEL not in kube.labels:
                raise
            return self._burst_node(instance_id, kube)
        try:
            kube = self.kubernetes.find_node(instance_id)
        except NodeNotFoundError:
            # Not registered with the API server (yet, or any more): HyperPod's view stands.
            return node
        return _merge(node, kube)

    def cordon(self, instance_id: str, *, incident_id: str, reason: str) -> bool:
        return self.kubernetes.cordon(instance_id, incident_id=incident_id, reason=reason)

    def uncordon(self, instance_id: str) -> bool:
        return self.kubernetes.uncordon(instance_id)

    def drain(
        self, instance_id: str, *, deadline_s: float, force: bool = True, evict: bool = True
    ) -> DrainResult:
        return self.kubernetes.drain(instance_id, deadline_s=deadline_s, force=force, evict=evict)

    def reboot(self, instance_ids: list[str]) -> RepairOutcome:
        outcome = self._repair(instance_ids, self.hyperpod.reboot, self.ec2.reboot)
        self._repair_events(outcome, "HyperGuardRebootRequested", "reboot")
        return outcome

    def replace(self, instance_ids: list[str]) -> RepairOutcome:
        """HyperPod nodes get new instances from SageMaker (their volumes are destroyed);
        a Karpenter node's NodeClaim is deleted, and Karpenter provisions a new node if
        pods are left waiting for one."""
        outcome = self._repair(instance_ids, self.hyperpod.replace, self._delete_nodeclaims)
        self._repair_events(outcome, "HyperGuardReplaceRequested", "replacement")
        return outcome

    def _repair_events(self, outcome: RepairOutcome, reason: str, what: str) -> None:
        """An Event on each node whose repair was accepted (best effort)."""
        for instance_id in outcome.successful:
            self.kubernetes.node_event(instance_id, reason, f"HyperGuard requested a {what}")

    def start_deep_health_check(self, instance_ids: list[str], checks: list[str]) -> bool:
        """HyperPod's deep health checks; EKS burst nodes have none (False)."""
        return self.hyperpod.start_deep_health_check(instance_ids, checks)

    def ensure_queues(self, manifests: list[dict[str, Any]]) -> dict[str, str]:
        """Kueue's objects on the EKS cluster's API server (hyperguard.cluster.kueue)."""
        return dict(KueueObjects(self.kubernetes).ensure(manifests))

    def dispatch(self, job: Job, nodes: list[str]) -> bool:
        """Submit run `job.run` of `job` pinned to `nodes` (instance ids, one per replica):
        a HyperPodPyTorchJob on HyperPod nodes, a batch Job on EKS burst nodes. False when
        this run was already submitted. A job a team applied itself is admitted instead:
        Kueue starts its own object (D170)."""
        if job.cluster_object is not None:
            return self._admit_held(job)
        return self._create_run(job, self._manifest(job, self._placement(nodes)))

    # jobs a team applied itself, held by Kueue on HyperGuard's admission check (D170)

    def held_workload(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.kubernetes.get_workload(namespace, name)

    def refuse_held(self, namespace: str, workload: str, reason: str) -> bool:
        return self._set_check(namespace, workload, "Rejected", reason)

    def _set_check(
        self, namespace: str, workload: str, state: str, message: str, **more: Any
    ) -> bool:
        """HyperGuard's check on the Workload set to `state`. A merge patch replaces the
        Workload's list of checks: its ClusterQueue names only HyperGuard's."""
        check = {
            "name": ADMISSION_CHECK,
            "state": state,
            "message": message[:1024],
            "lastTransitionTime": utc_timestamp(),
            **more,
        }
        patch = {"status": {"admissionChecks": [check]}}
        return self.kubernetes.patch_workload_status(namespace, workload, patch)

    def _admit_held(self, job: Job) -> bool:
        """Label the held object as run `job.run` of the job, then set the check Ready with
        the same labels for its pods (so that placements and logs find them): False when it
        was Ready already. Raises InvalidRunError when the object or its Workload is gone (the
        team deleted it) or Kueue deactivated it, ClusterError while the Workload does not
        wait on the check (`waiting`): Kueue has yet to evict it after a stop, or to reserve
        its quota again; a Ready set then can be reset (D185)."""
        held = job.cluster_object
        assert held is not None
        what = f"{held.kind} {held.namespace}/{held.name}"
        workload = self.held_workload(held.namespace, held.workload)
        if workload is None:
            raise InvalidRunError(f"the Kueue Workload of {what} was deleted")
        state = check_state(workload, ADMISSION_CHECK)
        done = finished(workload)
        if not done and state != "Ready" and not waiting(workload, ADMISSION_CHECK):
            if not active(workload):
                raise InvalidRunError(f"the Kueue Workload of {what} is deactivated")
            raise ClusterError(
                f"{what} does not wait on HyperGuard's check yet (check {state}): Kueue has yet "
                "to finish evicting it or to reserve its quota again; admitted on a later try"
            )
        labels = {JOB_ID_LABEL: job_name(job.job_id), RUN_LABEL: str(job.run)}
        annotations = {JOB_ID_ANNOTATION: job.job_id, WORKLOAD_ANNOTATION: held.workload}
        patch = {"metadata": {"labels": labels, "annotations": annotations}}
        if not self.kubernetes.patch_run(RunKind(held.kind), held.namespace, held.name, patch):
            raise InvalidRunError(f"{what} was deleted from the cluster")
        if state == "Ready" or done:
            # Admitted already; or ended, which no admission changes: labelled as this run,
            # the next pass reads its end and gives the job its verdict.
            return False
        updates = [{"name": held.pod_set, "labels": labels}]
        message = f"admitted by HyperGuard as run {job.run} of job {job.job_id}"
        if not self._set_check(
            held.namespace, held.workload, "Ready", message, podSetUpdates=updates
        ):
            raise InvalidRunError(f"the Kueue Workload of {what} was deleted")
        return True

    def _stop_held(self, run: RunStatus) -> bool:
        """Evict a held object HyperGuard admitted back to its queue (check Retry: Kueue
        suspends it, deletes its pods and puts the check back to Pending), then take its run
        label off: it is no run until HyperGuard admits it again. Evicted first, so that a
        failure between the two leaves a run the next pass stops again, never one that runs
        unseen; a check that is not Ready, or a Workload that finished, has nothing to evict."""
        workload = self.held_workload(run.namespace, run.workload)
        evicted = False
        ready = workload is not None and check_state(workload, ADMISSION_CHECK) == "Ready"
        if workload is not None and ready and not finished(workload):
            message = "stopped by HyperGuard: suspended until it is admitted again"
            evicted = self._set_check(run.namespace, run.workload, "Retry", message)
        unlabel = {"metadata": {"labels": {RUN_LABEL: None}}}
        return self.kubernetes.patch_run(run.kind, run.namespace, run.name, unlabel) or evicted

    def _create_run(self, job: Job, manifest: dict[str, Any]) -> bool:
        """Ensure the run object, and a batch run's headless Service (owned by its Job, so
        it goes with it): True when the run object is new."""
        self._check_pods(job, manifest)
        uid = self.kubernetes.create_run(manifest)
        if manifest["kind"] == RunKind.BATCH.value:
            owner = uid or self._run_uid(job, manifest["metadata"]["name"])
            if owner is not None:
                self.kubernetes.create_service(rendezvous_service(job, owner))
        return uid is not None

    def _check_pods(self, job: Job, manifest: dict[str, Any]) -> None:
        """A HyperPodPyTorchJob of a job's own pod template has its pods validated first
        (KubernetesAdapter.dry_run_pods): InvalidRunError if the API server refuses them as
        invalid (422), ClusterError for any other refusal. HyperGuard's own template needs no
        such check, and a batch Job's pods are validated with the Job."""
        if job.pod_template is None or manifest["kind"] != RunKind.HYPERPOD.value:
            return
        template = manifest["spec"]["replicaSpecs"][0]["template"]
        refusal = self.kubernetes.dry_run_pods(manifest, template)
        if refusal is None:
            return
        code, line = refusal
        meta = manifest["metadata"]
        what = f"pods of HyperPodPyTorchJob {meta['namespace']}/{meta['name']}: {line}"
        raise InvalidRunError(what) if code == 422 else ClusterError(what)

    def _run_uid(self, job: Job, name: str) -> str | None:
        """The uid of the job's run object `name`, created by an earlier attempt."""
        for obj in self.kubernetes.list_runs({JOB_ID_LABEL: job_name(job.job_id)}):
            meta = obj.get("metadata") or {}
            if meta.get("name") == name and meta.get("uid"):
                return str(meta["uid"])
        return None

    def dry_run(self, job: Job, paths: list[str]) -> list[DryRunObject]:
        """The run objects a dispatch of `job` creates on each of `paths` (`hyperpod`: a
        HyperPodPyTorchJob for HyperPod nodes; `burst`: a batch Job for EKS burst nodes), each
        sent to the API server as a dry run: nothing is created. The placement (node pins, a
        NodePool's tolerations) is chosen at admission and is not in them."""
        instance = self._instance(job)
        builders = {
            "hyperpod": lambda: hyperpod_job_manifest(job, [], instance=instance),
            "burst": lambda: batch_job_manifest(job, [], instance=instance),
        }
        namespace = team_namespace(job.team)
        unready = (
            None
            if self.kubernetes.namespace_exists(namespace)
            else f"not sent: namespace {namespace} does not exist yet (the scheduler creates "
            "a team's namespace, its RoleBindings and its queue before the team's first run)"
        )
        objects = []
        for path in paths:
            manifest = builders[path]()
            refused = unready or self.kubernetes.dry_run_create(manifest)
            if refused is None:
                try:
                    self._check_pods(job, manifest)
                except ClusterError as error:
                    refused = str(error)
            objects.append(DryRunObject(path=path, object=manifest, refused=refused))
        return objects

    def replica_log(
        self, job: Job, replica: int, *, tail_lines: int, limit_bytes: int
    ) -> ReplicaLog | None:
        """The tail of the log of the job's newest pod of `replica` (None: it has none)."""
        return self.kubernetes.replica_log(
            team_namespace(job.team),
            job_name(job.job_id),
            replica,
            tail_lines=tail_lines,
            limit_bytes=limit_bytes,
        )

    def prerequisites(self) -> ClusterPrerequisites:
        """What HyperGuard needs installed in the cluster, as its API server shows it."""
        return summarize(
            self.kubernetes.crd_versions(KUEUE_CRD),
            self.kubernetes.crd_versions(OPERATOR_CRD),
            self.kubernetes.list_nodepools(),
            self.kubernetes.list_ec2nodeclasses(),
        )

    def stop_job(
        self,
        job_id: str,
        *,
        before_run: int | None = None,
        runs: Sequence[RunStatus] | None = None,
    ) -> bool:
        """Delete the job's runs (those numbered below `before_run`, if given) with their
        pods: `runs`, the job's run objects as the caller read them, else those the cluster
        lists now. False when none was left to stop. A team's own object HyperGuard admitted
        is evicted back to its queue instead, never deleted (D170)."""
        if runs is None:
            listed = self.kubernetes.list_runs({JOB_ID_LABEL: job_name(job_id)})
            runs = [r for r in map(run_status, listed) if r is not None]
        stopped = False
        for run in runs:
            if before_run is not None and run.run >= before_run:
                continue
            if run.workload:
                stopped = self._stop_held(run) or stopped
            elif run.name and not run.deleting:  # never a nameless DELETE (a collection's)
                stopped = self.kubernetes.delete_run(run.kind, run.namespace, run.name) or stopped
        return stopped

    def resize(self, job: Job, nodes: list[str]) -> bool:
        """Run `job` (its new run number) on `nodes` instead: a running HyperPodPyTorchJob
        is patched in place (the operator checkpoints and restarts it at the new size;
        True); anything else is stopped and dispatched anew (False)."""
        placement = self._placement(nodes)
        objects = self.kubernetes.list_runs({JOB_ID_LABEL: job_name(job.job_id)})
        live = [
            r
            for r in map(run_status, objects)
            if r is not None and r.phase in (RunPhase.PENDING, RunPhase.RUNNING)
        ]
        current = max(live, key=lambda r: r.run, default=None)
        if placement.on_hyperpod and current is not None and current.kind is RunKind.HYPERPOD:
            patch = resize_patch(job, placement.node_names, instance=self._instance(job))
            if self.kubernetes.patch_run(current.kind, current.namespace, current.name, patch):
                return True
        self.stop_job(job.job_id, before_run=job.run)
        self._create_run(job, self._manifest(job, placement))
        return False

    def job_runs(self) -> list[RunStatus]:
        """Every run HyperGuard created that the cluster still has."""
        objects = self.kubernetes.list_runs({JOB_ID_LABEL: None})
        return [r for r in map(run_status, objects) if r is not None]

    def placements(self, jobs: list[Job]) -> dict[str, list[str]]:
        """Where the pods of these jobs' current runs run (instance ids), for each job whose
        run's pods are all bound and running: one pod list per team namespace."""
        names = {k.name: i for i, k in self._listed[1].items()}
        found: dict[str, list[str]] = {}
        for named, listed in self._team_pods(jobs):
            pods: dict[str, list[RunPod]] = {}
            for pod in listed:
                if not pod.stopping:
                    pods.setdefault(pod.job, []).append(pod)
            for label, job in named.items():
                mine = [p for p in pods.get(label, []) if p.run == run_name(job)]
                if not mine or not all(p.running and p.node for p in mine):
                    continue
                if any(p.node not in names for p in mine):
                    names = {k.name: i for i, k in self._kube_nodes().items()}
                nodes = [names[p.node] for p in mine if p.node in names]
                if len(nodes) == len(mine):
                    found[job.job_id] = sorted(nodes)
        return found

    def winding_down(self, jobs: list[Job]) -> set[str]:
        """Those of these waiting jobs that still have a pod on a Ready node: one of a run
        that was stopped, running still or in its termination grace period (its trainer may
        be saving a checkpoint on SIGTERM). A pod on a node that is not Ready, or gone, is
        not counted: no kubelet runs its grace period. One pod list per team namespace."""
        if not jobs:
            return set()
        at, listed = self._listed  # the pass's own listing, a moment old
        if time.monotonic() - at >= NODE_NAMES_TTL_S:
            listed = self._kube_nodes()
        ready = {k.name for k in listed.values() if _ready(k)}
        return {
            named[pod.job].job_id
            for named, pods in self._team_pods(jobs)
            for pod in pods
            if pod.node in ready and pod.job in named
        }

    def _team_pods(self, jobs: list[Job]) -> Iterator[tuple[dict[str, Job], list[RunPod]]]:
        """Each team's jobs among these, by their job label's value, with their pods that
        have not ended: one pod list per team namespace."""
        by_team: dict[str, dict[str, Job]] = {}
        for job in jobs:
            by_team.setdefault(job.team, {})[job_name(job.job_id)] = job
        for team, named in sorted(by_team.items()):
            yield named, self.kubernetes.run_pods(team_namespace(team), named)

    # burst capacity: Karpenter NodeClaims HyperGuard creates, nodes it adds to HyperPod

    def burst_claims(
        self, burst_id: str | None = None, *, include_hyperpod: bool = True
    ) -> list[BurstClaim]:
        """HyperGuard's NodeClaims, as Karpenter reports them, and (unless told not to: that
        costs a list of every node) the HyperPod nodes bursts added (of one burst, if given)."""
        labels: dict[str, Any] = {BURST_LABEL: burst_id if burst_id is not None else None}
        claims = [read_claim(obj) for obj in self.kubernetes.list_nodeclaims(labels)]
        found = [claim for claim in claims if claim is not None]
        if include_hyperpod:
            found += _added_nodes(self.kubernetes.list_nodes(), burst_id)
        return found

    def request_burst_nodes(self, manifests: list[dict[str, Any]]) -> int:
        """Ensure these NodeClaims exist, each with what its NodePool's template asks of every
        node (each NodePool read once; one that is gone leaves its claims as they are, and
        Karpenter refuses them): how many were created (the others existed already)."""
        pools: dict[str, dict[str, Any] | None] = {}
        created = 0
        for manifest in manifests:
            name = (manifest["metadata"].get("labels") or {}).get(NODEPOOL_LABEL)
            if name and name not in pools:
                pools[name] = self.kubernetes.get_nodepool(name)
            pool = pools.get(name) if name else None
            claim = from_nodepool_template(manifest, pool) if pool is not None else manifest
            created += self.kubernetes.create_nodeclaim(claim)
        return created

    def release_burst_node(self, claim: BurstClaim) -> bool:
        """Give the node back: delete its NodeClaim (Karpenter drains the node and
        terminates the instance), or delete it from its HyperPod instance group. False when
        a NodeClaim was already gone."""
        if claim.platform == "hyperpod":
            self.delete_hyperpod_nodes([claim.name])
            return True
        return self.kubernetes.delete_nodeclaim_named(claim.name)

    def mark_burst_node_idle(self, claim: BurstClaim, since: datetime | None) -> bool:
        """Record (or, with None, clear) when the node was first seen idle."""
        mark = {IDLE_SINCE_ANNOTATION: idle_mark(since)}
        if claim.platform == "hyperpod" and claim.instance_id:
            return self.kubernetes.mark_node(claim.instance_id, annotations=mark)
        return self.kubernetes.annotate_nodeclaim(claim.name, mark)

    def nodepool_room(self, node_pool: str, instance_type: str) -> tuple[int | None, str | None]:
        """How many more nodes of `instance_type` the NodePool's limits leave room for, counting
        every NodeClaim of the pool, and the limit that binds (None: no limit applies). A
        NodePool that does not exist has no room."""
        pool = self.kubernetes.get_nodepool(node_pool)
        if pool is None:
            return 0, f"NodePool {node_pool} does not exist"
        limits = (pool.get("spec") or {}).get("limits") or {}
        if not limits:
            return None, None
        claims = self.kubernetes.list_nodeclaims({NODEPOOL_LABEL: node_pool})
        return nodes_within_limits(limits, claims, instance_type, self.hyperpod.catalogue.spec)

    def hyperpod_node_recovery(self) -> str:
        """The HyperPod cluster's NodeRecovery (Automatic or None)."""
        return self.hyperpod.node_recovery()

    def repairers(self) -> Repairers:
        """What the cluster shows of its other repairers, each source read apart: one that
        cannot be read (a refusal, a timeout) is named in `unread` and the rest still count."""
        seen: dict[str, Any] = {}
        unread: dict[str, str] = {}
        reads: dict[str, Callable[[], dict[str, Any]]] = {
            "hyperpod": lambda: {"hyperpod_node_recovery": self.hyperpod.node_recovery()},
            "karpenter": self._karpenter,
            "eks": self._eks_repair,
            "nth": self._termination_handler,
        }
        for source, read in reads.items():
            try:
                seen |= read()
            except (ClusterError, ClientError, BotoCoreError) as error:
                unread[source] = str(error)[:300]
        return Repairers(observed_at=datetime.now(UTC), unread=unread, **seen)

    def _karpenter(self) -> dict[str, Any]:
        found = self.kubernetes.workloads(REPAIRER_NAMESPACE, KARPENTER_NAME)
        for kind, name, containers in found:
            if kind == "Deployment" and containers:
                gate = feature_gate(karpenter_gates(containers[0]), KARPENTER_GATE)
                return {
                    "karpenter": f"{REPAIRER_NAMESPACE}/{name}",
                    "karpenter_node_repair": bool(gate),
                }
        return {}

    def _termination_handler(self) -> dict[str, Any]:
        found = self.kubernetes.workloads(REPAIRER_NAMESPACE, NTH_NAME)
        return (
            {"node_termination_handler": f"{found[0][0]} {REPAIRER_NAMESPACE}/{found[0][1]}"}
            if found
            else {}
        )

    def _eks_repair(self) -> dict[str, Any]:
        """EKS Auto Mode (DescribeCluster's computeConfig) and each managed node group's
        nodeRepairConfig (ListNodegroups, DescribeNodegroup)."""
        eks = client("eks")
        name = self.kubernetes.cluster_name
        cluster = eks.describe_cluster(name=name)["cluster"]
        groups: dict[str, bool] = {}
        for page in eks.get_paginator("list_nodegroups").paginate(clusterName=name):
            for group in page.get("nodegroups", [])[: MAX_NODE_GROUPS - len(groups)]:
                described = eks.describe_nodegroup(clusterName=name, nodegroupName=group)
                repair = described["nodegroup"].get("nodeRepairConfig") or {}
                groups[group] = repair.get("enabled") is True
        auto = (cluster.get("computeConfig") or {}).get("enabled") is True
        return {"eks_auto_mode": auto, "eks_node_groups": groups}

    def hyperpod_events(self, instance_id: str, since: datetime) -> list[dict[str, Any]]:
        return self.hyperpod.cluster_events(instance_id, since)

    def hold_other_repair(self, instance_id: str, *, held: bool) -> bool:
        return self.kubernetes.mark_node(
            instance_id, annotations={DO_NOT_REPAIR: "true" if held else None}
        )

    def hyperpod_groups(self) -> tuple[bool, list[InstanceGroupSize]]:
        """Whether HyperPod adds nodes on request (Continuous provisioning), and the groups."""
        return self.hyperpod.instance_groups()

    def add_hyperpod_nodes(
        self, group: str, count: int, client_token: str
    ) -> tuple[list[str], list[str]]:
        """Ensure `group` grew by `count` nodes for this token: their logical ids, and why
        any could not be added."""
        return self.hyperpod.add_nodes(group, count, client_token)

    def track_hyperpod_nodes(
        self, burst_id: str, attempt: int, group: str, logical_ids: list[str]
    ) -> list[BurstClaim]:
        """Where the nodes a burst added stand. A node that runs is labelled as the burst's
        (with its logical id), so that scale-in finds it after the burst has ended."""
        claims = []
        for logical_id in logical_ids:
            node = self.hyperpod.added_node(logical_id)
            claim = BurstClaim(
                name=logical_id,
                platform="hyperpod",
                burst_id=burst_id,
                attempt=attempt,
                node_pool=group,
                instance_type="",
                capacity_type=HYPERPOD_CAPACITY,
                deleting=node.status in (None, NodeStatus.SHUTTING_DOWN),
                launched=node.instance_id is not None,
                failure=f"{node.status.value}: {node.message}".rstrip(": ")
                if node.status is NodeStatus.FAILURE
                else None,
                instance_id=node.instance_id,
            )
            if node.status is NodeStatus.RUNNING and node.instance_id:
                try:
                    self.kubernetes.mark_node(
                        node.instance_id,
                        labels={BURST_LABEL: burst_id, ATTEMPT_LABEL: str(attempt)},
                        annotations={LOGICAL_ID_ANNOTATION: logical_id},
                    )
                except NodeNotFoundError:
                    pass  # not registered with the API server yet: not ready
                else:
                    claim.ready = True
            claims.append(claim)
        return claims

    def delete_hyperpod_nodes(self, logical_ids: list[str]) -> None:
        """Ensure these HyperPod nodes are deleted (already gone is fine)."""
        refused = self.hyperpod.delete_nodes(logical_ids)
        if refused:
            raise ClusterError(f"BatchDeleteClusterNodes refused {'; '.join(refused)}")

    def _manifest(self, job: Job, placement: _Placement) -> dict[str, Any]:
        instance = self._instance(job)
        if placement.on_hyperpod:
            return hyperpod_job_manifest(job, placement.node_names, instance=instance)
        return batch_job_manifest(
            job, placement.node_names, self._tolerations(placement), instance=instance
        )

    def _instance(self, job: Job) -> InstanceSpec | None:
        """What the job's instance type has (its requests come from it); None if EC2 does
        not know it (submission refuses such a job; its pods then ask for accelerators
        only)."""
        try:
            return self.hyperpod.catalogue.spec(job.instance_type)
        except UnknownInstanceTypeError:
            return None

    def _placement(self, nodes: list[str]) -> _Placement:
        """The Kubernetes node names of `nodes`, whether any is a HyperPod node, and the
        NodePools of the Karpenter nodes among them."""
        kube = self._named(nodes)
        missing = [i for i in nodes if i not in kube]
        if missing:
            raise NodeNotFoundError(missing[0])
        on_hyperpod = not nodes or any(NODEPOOL_LABEL not in kube[i].labels for i in nodes)
        pools = (
            sorted({kube[i].labels[NODEPOOL_LABEL] for i in nodes} - {""})
            if not on_hyperpod
            else []
        )
        return _Placement([kube[i].name for i in nodes], on_hyperpod, pools)

    def _tolerations(self, placement: _Placement) -> list[dict[str, Any]]:
        """Tolerations of the taints the placement's NodePools put on their nodes
        (spec.template.spec.taints; startupTaints are removed before pods schedule)."""
        tolerations: list[dict[str, Any]] = []
        for name in placement.node_pools:
            pool = self.kubernetes.get_nodepool(name) or {}
            template = ((pool.get("spec") or {}).get("template") or {}).get("spec") or {}
            for taint in template.get("taints") or []:
                toleration = toleration_of(taint)
                if toleration not in tolerations:
                    tolerations.append(toleration)
        return tolerations

    def _repair(
        self, instance_ids: list[str], hyperpod: RepairCall, burst: RepairCall
    ) -> RepairOutcome:
        """Send each node to whoever owns it and merge the outcomes. An id that neither
        SageMaker nor Karpenter owns fails with InstanceIdNotFound, as SageMaker reports it."""
        ids = list(dict.fromkeys(instance_ids))
        owned = {node.instance_id for node in self.hyperpod.list_nodes()}
        hyperpod_ids = [i for i in ids if i in owned]
        burst_ids: list[str] = []
        unknown: list[str] = []
        if len(hyperpod_ids) < len(ids):
            kube_nodes = {n.instance_id: n for n in self.kubernetes.list_nodes() if n.instance_id}
            for instance_id in ids:
                if instance_id in owned:
                    continue
                kube = kube_nodes.get(instance_id)
                if kube is not None and NODEPOOL_LABEL in kube.labels:
                    burst_ids.append(instance_id)
                else:
                    unknown.append(instance_id)
        outcome = RepairOutcome()
        for part, repair in ((hyperpod_ids, hyperpod), (burst_ids, burst)):
            if part:
                result = repair(part)
                outcome.successful.extend(result.successful)
                outcome.failed.extend(result.failed)
        outcome.failed.extend(
            RepairFailure(
                node_id=instance_id,
                error_code=INSTANCE_ID_NOT_FOUND,
                message=f"{instance_id} is neither a HyperPod node nor a Karpenter node",
            )
            for instance_id in unknown
        )
        return outcome

    def _delete_nodeclaims(self, instance_ids: list[str]) -> RepairOutcome:
        """A NodeClaim already being deleted, or already gone, means the replacement is
        under way: that node's replace succeeded, which keeps a retried step harmless. A
        failed API call fails only its node, so earlier repairs in the batch are reported
        rather than repeated by a caller retrying on an exception."""
        outcome = RepairOutcome()
        for instance_id in instance_ids:
            try:
                self.kubernetes.delete_nodeclaim(instance_id)
            except ClusterError as error:
                outcome.failed.append(
                    RepairFailure(
                        node_id=instance_id, error_code=type(error).__name__, message=str(error)
                    )
                )
            else:
                outcome.successful.append(instance_id)
        return outcome

    def _burst_node(self, instance_id: str, kube: KubeNode, *, leaving: bool = False) -> Node:
        """An EKS node as Karpenter labels it (its instance type is the EC2 name); one whose
        NodeClaim is being deleted (`leaving`) is shutting down."""
        instance_type = kube.labels.get(INSTANCE_TYPE_LABEL, "")
        status = NodeStatus.SHUTTING_DOWN if leaving else _kube_status(kube)
        capacity = kube.labels.get(CAPACITY_TYPE_LABEL, "on-demand")
        return Node(
            instance_id=instance_id,
            cluster=self.kubernetes.cluster_name,
            pool=kube.labels[NODEPOOL_LABEL],
            platform=EKS_PLATFORM,
            instance_type=instance_type,
            capacity_type=EC2_CAPACITY_TYPES.get(capacity, "OnDemand"),
            accelerators=accelerators_of(self.hyperpod.catalogue, instance_type),
            status=status,
            schedulable=not kube.unschedulable,
            node_name=kube.name,
            labels=kube.labels,
            taints=kube.taints,
            launch_time=kube.created,
            healthy=status is NodeStatus.RUNNING and not _problems(kube),
        )


def _placed_by_label(kube: KubeNode) -> bool:
    """Whether the node's labels say whose it is: Karpenter's NodePool or HyperPod's instance
    group."""
    return NODEPOOL_LABEL in kube.labels or INSTANCE_GROUP_LABEL in kube.labels


def _on_karpenter(kube_nodes: dict[str, KubeNode]) -> bool:
    """Whether Karpenter has any of these nodes (whose state then needs their NodeClaims)."""
    return any(NODEPOOL_LABEL in k.labels for k in kube_nodes.values())


def _added_nodes(nodes: list[KubeNode], burst_id: str | None = None) -> list[BurstClaim]:
    """The HyperPod nodes bursts added (of one burst, if given) among these nodes."""
    added = (
        _added_node(kube)
        for kube in nodes
        if NODEPOOL_LABEL not in kube.labels
        and kube.labels.get(BURST_LABEL)
        and burst_id in (None, kube.labels[BURST_LABEL])
    )
    return [claim for claim in added if claim is not None]


def _added_node(kube: KubeNode) -> BurstClaim | None:
    """A HyperPod node a burst added, from the marks `track_hyperpod_nodes` left on it."""
    logical_id = kube.annotations.get(LOGICAL_ID_ANNOTATION)
    if not logical_id:
        return None
    return BurstClaim(
        name=logical_id,
        platform="hyperpod",
        burst_id=kube.labels[BURST_LABEL],
        attempt=read_attempt(kube.labels),
        node_pool=kube.labels.get(INSTANCE_GROUP_LABEL, ""),
        instance_type=kube.labels.get(INSTANCE_TYPE_LABEL, ""),
        capacity_type=HYPERPOD_CAPACITY,
        created=kube.created,
        deleting=kube.deleting,
        launched=True,
        ready=_kube_status(kube) is NodeStatus.RUNNING,
        instance_id=kube.instance_id,
        node_name=kube.name,
        idle_since=read_time(kube.annotations.get(IDLE_SINCE_ANNOTATION)),
    )


def _kube_status(kube: KubeNode) -> NodeStatus:
    """HyperPod's status vocabulary for a plain Kubernetes node: being deleted or disrupted by
    Karpenter → ShuttingDown; not Ready yet (no Ready condition) → Pending; Ready → Running;
    otherwise Failure."""
    if _leaving(kube):
        return NodeStatus.SHUTTING_DOWN
    ready = next((c for c in kube.conditions if c.type == "Ready"), None)
    if ready is None:
        return NodeStatus.PENDING
    return NodeStatus.RUNNING if ready.status == "True" else NodeStatus.FAILURE


def _ready(kube: KubeNode) -> bool:
    """The kubelet reports the node Ready."""
    return any(c.type == "Ready" and c.status == "True" for c in kube.conditions)


def _leaving(kube: KubeNode) -> bool:
    """Being deleted, or tainted by Karpenter to be drained and deleted next."""
    return kube.deleting or any(t.get("key") == DISRUPTED_TAINT for t in kube.taints)


def _is_problem(condition: NodeCondition) -> bool:
    # "*Ready" conditions (the EKS node monitoring agent's) are healthy when True; problem
    # conditions (MemoryPressure, node-problem-detector's KernelDeadlock, ...) when not True.
    if condition.type.endswith("Ready"):
        return condition.status != "True"
    return condition.status == "True"


def _problems(kube: KubeNode) -> list[NodeCondition]:
    return [c for c in kube.conditions if _is_problem(c)]


def _booting(problems: list[NodeCondition]) -> bool:
    """Whether the kubelet's Ready is the node's only problem: after a boot the instance
    runs before its kubelet reports Ready, and that is no fault."""
    return bool(problems) and all(c.type == "Ready" for c in problems)


def _merge(node: Node, kube: KubeNode | None) -> Node:
    """HyperPod's view of a node, completed with what the API server knows about it."""
    if kube is None:
        return node
    labelled_healthy = kube.labels.get(HEALTH_LABEL) not in UNHEALTHY_LABEL_VALUES
    problems = _problems(kube)
    return node.model_copy(
        update={
            "node_name": kube.name,
            # HyperPod says Running until it has the instance back; its Node leaves first.
            "status": NodeStatus.SHUTTING_DOWN if _leaving(kube) else node.status,
            "schedulable": not kube.unschedulable,
            "labels": kube.labels,
            "taints": kube.taints,
            # SageMaker can say Running while the kubelet or the EKS node monitoring agent
            # reports a problem (KernelReady=False): the node is not healthy then.
            "healthy": node.healthy and labelled_healthy and not problems,
            "booting": node.status is NodeStatus.RUNNING
            and labelled_healthy
            and _booting(problems),
        }
    )


@dataclass(frozen=True)
class _Placement:
    node_names: list[str]
    on_hyperpod: bool
    node_pools: list[str]
