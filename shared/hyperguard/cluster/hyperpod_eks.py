"""ClusterGateway for a HyperPod cluster orchestrated by EKS.

SageMaker is the authority on the node inventory and repairs nodes; the EKS API server is
where pods are kept off a node and where jobs run. Jobs follow HyperPod task governance's
conventions: namespace `hyperpod-ns-<team>`, Kueue local queue
`hyperpod-ns-<team>-localqueue`, priority class label `<class>-priority`.

The API server also holds EKS burst nodes, which Karpenter provisions and SageMaker does not
know. SageMaker's inventory decides who owns a node: HyperPod nodes are repaired by
SageMaker; Karpenter nodes (labelled with their NodePool) are replaced by deleting their
NodeClaim and rebooted through EC2, since Karpenter has no reboot.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from typing import Any

from hyperguard.cluster.conventions import (
    CAPACITY_TYPE_LABEL,
    HEALTH_LABEL,
    INSTANCE_ID_NOT_FOUND,
    INSTANCE_TYPE_LABEL,
    NODEPOOL_LABEL,
)
from hyperguard.cluster.ec2 import Ec2Adapter
from hyperguard.cluster.gateway import ClusterError, DrainResult, NodeNotFoundError
from hyperguard.cluster.hyperpod import HyperPodAdapter, accelerators_of
from hyperguard.cluster.kubernetes import (
    KubeNode,
    KubernetesAdapter,
    NodeCondition,
)
from hyperguard.models import Job, Node, NodeStatus, RepairFailure, RepairOutcome

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
JOB_ID_LABEL = "hyperguard.io/job-id"
JOB_ID_ANNOTATION = "hyperguard.io/job-id"
AUTO_RESUME_ANNOTATION = "sagemaker.amazonaws.com/enable-job-auto-resume"
# What a training container is told: which job it is, where it checkpoints (to report new
# checkpoints: POST /jobs/{jobId}/checkpoints), and, on a restart, the latest complete
# checkpoint to resume from (by the `_COMPLETE` marker convention, hyperguard.store.checkpoints).
JOB_ID_ENV = "HYPERGUARD_JOB_ID"
CHECKPOINT_ENV = "HYPERGUARD_CHECKPOINT_URI"
RESUME_FROM_ENV = "HYPERGUARD_RESUME_FROM"
RESUME_STEP_ENV = "HYPERGUARD_RESUME_STEP"
UNHEALTHY_LABEL_VALUES = frozenset(
    {"Unschedulable", "UnschedulablePendingReplacement", "UnschedulablePendingReboot"}
)
EKS_PLATFORM = "eks"

RepairCall = Callable[[list[str]], RepairOutcome]

_NAME_UNSAFE = re.compile(r"[^a-z0-9-]+")


def team_namespace(team: str) -> str:
    return f"hyperpod-ns-{team}"


def local_queue(team: str) -> str:
    return f"{team_namespace(team)}-localqueue"


def job_name(job_id: str) -> str:
    """A DNS-1123 label for `job_id`; ids that need rewriting get a short hash so that two
    different ids never share a name."""
    cleaned = _NAME_UNSAFE.sub("-", job_id.lower()).strip("-")
    if cleaned == job_id and len(cleaned) <= 63:
        return cleaned
    digest = hashlib.sha256(job_id.encode()).hexdigest()[:8]
    return f"{cleaned[:54].strip('-') or 'job'}-{digest}"


def accelerator_resource(instance_type: str) -> str:
    return "aws.amazon.com/neuron" if instance_type.startswith("ml.trn") else "nvidia.com/gpu"


def run_name(job: Job) -> str:
    """The Kubernetes Job name of this run of `job`: a restart is a new Job object, so that
    dispatching a restart is not mistaken for a repeat of the first dispatch."""
    if job.restart_count == 0:
        return job_name(job.job_id)
    return job_name(f"{job.job_id}-restart-{job.restart_count}")


def job_manifest(job: Job, node_names: list[str]) -> dict[str, Any]:
    """The batch/v1 Job HyperGuard submits for `job`, suspended until Kueue admits it."""
    name = run_name(job)
    job_label = job_name(job.job_id)
    labels = {QUEUE_LABEL: local_queue(job.team), JOB_ID_LABEL: job_label}
    if job.priority_class:
        labels[PRIORITY_LABEL] = f"{job.priority_class}-priority"
    annotations = {JOB_ID_ANNOTATION: job.job_id}
    if job.auto_resume:
        annotations[AUTO_RESUME_ANNOTATION] = "true"
    accelerators = {accelerator_resource(job.instance_type): str(job.accelerators_per_replica)}
    env = [{"name": JOB_ID_ENV, "value": job.job_id}]
    if job.checkpoint_location:
        env.append({"name": CHECKPOINT_ENV, "value": job.checkpoint_location})
    if job.last_checkpoint is not None:
        env.append({"name": RESUME_FROM_ENV, "value": job.last_checkpoint.uri})
        env.append({"name": RESUME_STEP_ENV, "value": str(job.last_checkpoint.step)})
    container: dict[str, Any] = {
        "name": "main",
        "image": job.image,
        "env": env,
        "resources": {"requests": accelerators, "limits": accelerators},
    }
    if job.command:
        container["command"] = list(job.command)
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "nodeSelector": {INSTANCE_TYPE_LABEL: job.instance_type},
        "containers": [container],
    }
    if node_names:
        pod_spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": node_names}
                            ]
                        }
                    ]
                }
            }
        }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": team_namespace(job.team),
            "labels": labels,
            "annotations": annotations,
        },
        "spec": {
            "suspend": True,
            "parallelism": job.replicas,
            "completions": job.replicas,
            "completionMode": "Indexed",
            "backoffLimit": 0,
            "template": {"metadata": {"labels": {JOB_ID_LABEL: job_label}}, "spec": pod_spec},
        },
    }


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

    @property
    def ec2(self) -> Ec2Adapter:
        if self._ec2 is None:
            self._ec2 = Ec2Adapter()
        return self._ec2

    def list_nodes(self) -> list[Node]:
        kube_nodes = {n.instance_id: n for n in self.kubernetes.list_nodes() if n.instance_id}
        hyperpod = [
            _merge(node, kube_nodes.pop(node.instance_id, None))
            for node in self.hyperpod.list_nodes()
        ]
        burst = [
            self._burst_node(instance_id, kube)
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

    def drain(self, instance_id: str, *, deadline_s: float) -> DrainResult:
        return self.kubernetes.drain(instance_id, deadline_s=deadline_s)

    def reboot(self, instance_ids: list[str]) -> RepairOutcome:
        return self._repair(instance_ids, self.hyperpod.reboot, self.ec2.reboot)

    def replace(self, instance_ids: list[str]) -> RepairOutcome:
        """HyperPod nodes get new instances from SageMaker (their volumes are destroyed);
        a Karpenter node's NodeClaim is deleted, and Karpenter provisions a new node if
        pods are left waiting for one."""
        return self._repair(instance_ids, self.hyperpod.replace, self._delete_nodeclaims)

    def start_deep_health_check(self, instance_ids: list[str], checks: list[str]) -> bool:
        """HyperPod's deep health checks; EKS burst nodes have none (False)."""
        return self.hyperpod.start_deep_health_check(instance_ids, checks)

    def dispatch(self, job: Job, nodes: list[str]) -> bool:
        """Submit this run of `job` pinned to `nodes` (instance ids). False when this run
        (same job id and restart count) was already submitted."""
        node_names = [self.kubernetes.node_name(instance_id) for instance_id in nodes]
        return self.kubernetes.create_job(job_manifest(job, node_names))

    def stop_job(self, job_id: str) -> bool:
        """Delete every run of the job, with its pods. False when none was left to stop."""
        return self.kubernetes.delete_jobs({JOB_ID_LABEL: job_name(job_id)})

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

    def _burst_node(self, instance_id: str, kube: KubeNode) -> Node:
        """An EKS node as Karpenter labels it (its instance type is the EC2 name)."""
        instance_type = kube.labels.get(INSTANCE_TYPE_LABEL, "")
        status = _kube_status(kube)
        spot = kube.labels.get(CAPACITY_TYPE_LABEL) == "spot"
        return Node(
            instance_id=instance_id,
            cluster=self.kubernetes.cluster_name,
            pool=kube.labels[NODEPOOL_LABEL],
            platform=EKS_PLATFORM,
            instance_type=instance_type,
            capacity_type="Spot" if spot else "OnDemand",
            accelerators=accelerators_of(self.hyperpod.catalogue, instance_type),
            status=status,
            schedulable=not kube.unschedulable,
            node_name=kube.name,
            labels=kube.labels,
            taints=kube.taints,
            launch_time=kube.created,
            healthy=status is NodeStatus.RUNNING and not _problems(kube),
        )


def _kube_status(kube: KubeNode) -> NodeStatus:
    """HyperPod's status vocabulary for a plain Kubernetes node: being deleted → ShuttingDown;
    not Ready yet (no Ready condition) → Pending; Ready → Running; otherwise Failure."""
    if kube.deleting:
        return NodeStatus.SHUTTING_DOWN
    ready = next((c for c in kube.conditions if c.type == "Ready"), None)
    if ready is None:
        return NodeStatus.PENDING
    return NodeStatus.RUNNING if ready.status == "True" else NodeStatus.FAILURE


def _is_problem(condition: NodeCondition) -> bool:
    # "*Ready" conditions (the EKS node monitoring agent's) are healthy when True; problem
    # conditions (MemoryPressure, node-problem-detector's KernelDeadlock, ...) when not True.
    if condition.type.endswith("Ready"):
        return condition.status != "True"
    return condition.status == "True"


def _problems(kube: KubeNode) -> list[NodeCondition]:
    return [c for c in kube.conditions if _is_problem(c)]


def _merge(node: Node, kube: KubeNode | None) -> Node:
    """HyperPod's view of a node, completed with what the API server knows about it."""
    if kube is None:
        return node
    health_label = kube.labels.get(HEALTH_LABEL)
    return node.model_copy(
        update={
            "node_name": kube.name,
            "schedulable": not kube.unschedulable,
            "labels": kube.labels,
            "taints": kube.taints,
            # SageMaker can say Running while the kubelet or the EKS node monitoring agent
            # reports a problem (KernelReady=False): the node is not healthy then.
            "healthy": node.healthy
            and health_label not in UNHEALTHY_LABEL_VALUES
            and not _problems(kube),
        }
    )
