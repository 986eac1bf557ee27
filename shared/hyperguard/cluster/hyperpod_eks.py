"""ClusterGateway for a HyperPod cluster orchestrated by EKS.

SageMaker is the authority on the node inventory and repairs nodes; the EKS API server is
where pods are kept off a node and where jobs run. Jobs follow HyperPod task governance's
conventions: namespace `hyperpod-ns-<team>`, Kueue local queue
`hyperpod-ns-<team>-localqueue`, priority class label `<class>-priority`.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from hyperguard.cluster.conventions import HEALTH_LABEL, INSTANCE_TYPE_LABEL
from hyperguard.cluster.gateway import DrainResult, NodeNotFoundError
from hyperguard.cluster.hyperpod import HyperPodAdapter
from hyperguard.cluster.kubernetes import KubeNode, KubernetesAdapter
from hyperguard.models import Job, Node, RepairOutcome

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
JOB_ID_LABEL = "hyperguard.io/job-id"
JOB_ID_ANNOTATION = "hyperguard.io/job-id"
AUTO_RESUME_ANNOTATION = "sagemaker.amazonaws.com/enable-job-auto-resume"
UNHEALTHY_LABEL_VALUES = frozenset(
    {"Unschedulable", "UnschedulablePendingReplacement", "UnschedulablePendingReboot"}
)

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
    container: dict[str, Any] = {
        "name": "main",
        "image": job.image,
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
    """The full ClusterGateway port for a HyperPod cluster whose orchestrator is EKS."""

    def __init__(self, hyperpod: HyperPodAdapter, kubernetes: KubernetesAdapter) -> None:
        self.hyperpod = hyperpod
        self.kubernetes = kubernetes

    def list_nodes(self) -> list[Node]:
        kube_nodes = {n.instance_id: n for n in self.kubernetes.list_nodes() if n.instance_id}
        return [
            _merge(node, kube_nodes.get(node.instance_id)) for node in self.hyperpod.list_nodes()
        ]

    def node_status(self, instance_id: str) -> Node:
        node = self.hyperpod.node_status(instance_id)
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
        return self.hyperpod.reboot(instance_ids)

    def replace(self, instance_ids: list[str]) -> RepairOutcome:
        return self.hyperpod.replace(instance_ids)

    def dispatch(self, job: Job, nodes: list[str]) -> bool:
        """Submit this run of `job` pinned to `nodes` (instance ids). False when this run
        (same job id and restart count) was already submitted."""
        node_names = [self.kubernetes.node_name(instance_id) for instance_id in nodes]
        return self.kubernetes.create_job(job_manifest(job, node_names))

    def stop_job(self, job_id: str) -> bool:
        """Delete every run of the job, with its pods. False when none was left to stop."""
        return self.kubernetes.delete_jobs({JOB_ID_LABEL: job_name(job_id)})


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
            "healthy": node.healthy and health_label not in UNHEALTHY_LABEL_VALUES,
        }
    )
