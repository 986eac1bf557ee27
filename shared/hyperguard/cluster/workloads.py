"""What a job becomes on the cluster, and what the cluster says about it.

A job is dispatched as one *run* at a time, numbered by `Job.run`:
- on HyperPod nodes, a `HyperPodPyTorchJob` (sagemaker.amazonaws.com/v1, the HyperPod
  training operator): `replicaSpecs` with `spares`, `runPolicy`, and the job's
  `elasticPolicy`; an elastic run is resized in place by patching it;
- on EKS burst nodes (Karpenter), a batch/v1 Job, which cannot change size: a resize is a
  new run.
Both follow HyperPod task governance's conventions: namespace `hyperpod-ns-<team>`, priority
class label `<class>-priority`; their Kueue local queue is `hyperguard-runs` (the team's
`hyperpod-ns-<team>-localqueue` holds the jobs applied with kubectl until HyperGuard admits
them: D170). Pods
are pinned to the nodes HyperGuard placed the job on (required node affinity on
`metadata.name`), select the instance type by the name those nodes carry (`ml.*` on
HyperPod, the EC2 name on Karpenter's), tolerate the burst NodePool's taints and carry
`karpenter.sh/do-not-disrupt`.

`run_status` reads a run back as a RunStatus. How a run ends:
- batch Job: condition `Complete` → succeeded; `Failed` with reason `PodFailurePolicy` →
  lost (our podFailurePolicy fails the Job when a pod gets the `DisruptionTarget` condition:
  evicted, preempted, its node gone); any other `Failed` → failed (the workload's own error,
  e.g. BackoffLimitExceeded);
- HyperPodPyTorchJob: condition `Completed` → succeeded; `Failed` → lost when the operator
  names faulty instances (`status.latestFaultyPodInstanceList.faultyInstanceIdList`),
  otherwise failed. `jobMaxRetryCount` is `Job.operator_retries()` (D168): 0 unless the job
  asks, opted into HyperPod auto-resume or has log monitoring rules, so that a node fault
  ends the run and HyperGuard's recovery strategy decides.
"""

from __future__ import annotations

import copy
import hashlib
import re
from datetime import datetime
from typing import Any

from pydantic import BaseModel

from hyperguard.catalogue import InstanceSpec, ec2_name, ml_name
from hyperguard.cluster.conventions import INSTANCE_GROUP_LABEL, INSTANCE_TYPE_LABEL
from hyperguard.models import Job
from hyperguard.models.cluster import RunKind, RunPhase, RunStatus

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
# Kueue picks a Workload's WorkloadPriorityClass from this label. spec.priorityClassName is
# left unset: it must name an existing PriorityClass, and HyperGuard creates none.
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
JOB_ID_LABEL = "hyperguard.io/job-id"
RUN_LABEL = "hyperguard.io/run"
JOB_ID_ANNOTATION = "hyperguard.io/job-id"
WORKLOAD_ANNOTATION = "hyperguard.io/workload"
"""On a held object HyperGuard admitted: its Workload's name. HyperGuard's own runs never carry
it, which is how a stop tells the two apart."""
DO_NOT_DISRUPT_ANNOTATION = "karpenter.sh/do-not-disrupt"
"""Karpenter v1's pod annotation: no voluntary disruption of the pod's node while it runs."""
AUTO_RESUME_ANNOTATION = "sagemaker.amazonaws.com/enable-job-auto-resume"
HPJOB_POD_LABEL = "HPJob"
"""The label the HyperPod training operator puts on a HyperPodPyTorchJob's pods."""
REPLICA_SPEC = "pods"
CONTAINER = "main"
"""The training container of a run's pods."""
HYPERPOD_JOB_API = ("sagemaker.amazonaws.com", "v1", "HyperPodPyTorchJob", "hyperpodpytorchjobs")
FINISHED_TTL_S = 86_400
"""Finished runs are kept a day for their logs, then Kubernetes deletes them."""
# What a training container is told: which job it is, where it checkpoints (to report new
# checkpoints: POST /jobs/{jobId}/checkpoints), how long the training is, and, on a restart,
# the latest complete checkpoint to resume from (by the `_COMPLETE` marker convention,
# hyperguard.store.checkpoints).
JOB_ID_ENV = "HYPERGUARD_JOB_ID"
RUN_ENV = "HYPERGUARD_RUN"
"""The job's run (`job.run`): the trainer kit names it in its markers, which fences a stale
writer of an earlier run off (D164)."""
NODE_NAME_ENV = "HYPERGUARD_NODE_NAME"
"""The pod's node, from the downward API: the kit reads the instance id off it."""
GRACE_ENV = "HYPERGUARD_GRACE_S"
"""The pod's termination grace period: the kit's graceful stop saves within it."""
DEFAULT_GRACE_S = 30
"""Kubernetes' default terminationGracePeriodSeconds."""
CHECKPOINT_ENV = "HYPERGUARD_CHECKPOINT_URI"
RESUME_FROM_ENV = "HYPERGUARD_RESUME_FROM"
RESUME_STEP_ENV = "HYPERGUARD_RESUME_STEP"
MAX_STEPS_ENV = "HYPERGUARD_MAX_STEPS"
RENDEZVOUS_PORT = 29500
"""torchrun's default --master_port: where rank 0 of a burst run listens for the others."""
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
"""The label the Job controller puts on its pods: the run's headless Service selects them."""

EFA_RESOURCE = "vpc.amazonaws.com/efa"
"""What the EFA device plugin advertises: one per Elastic Fabric Adapter interface."""
MEMORY_SHARE = 0.9
"""A replica's memory request, unless its template says: this share of its instance's
memory, times the share of the instance's accelerators it takes. The rest is left to the
kubelet's reserve and the node's daemons (the EKS AMI reserves 255 MiB + 11 MiB per pod, and
evicts below 100 MiB)."""
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"
_NAME_UNSAFE = re.compile(r"[^a-z0-9-]+")


class DryRunObject(BaseModel):
    """A run object a dispatch would create, as the API server answered its dry run."""

    path: str
    """Where the object runs: `hyperpod` (HyperPod nodes) or `burst` (EKS burst nodes)."""
    object: dict[str, Any]
    refused: str | None
    """The API server's refusal in one line; None: it would be created."""


class ReplicaLog(BaseModel):
    """The tail of one replica's log, as the API server's pods/log answers it."""

    replica: int
    pod: str
    node: str
    phase: str
    lines: list[str]
    truncated: bool = False
    """Cut at the byte limit (the oldest of the tail kept)."""
    unavailable: str | None = None
    """Why the API server gave no log (e.g. the container has not started)."""


COMPLETION_INDEX_LABEL = "batch.kubernetes.io/job-completion-index"


def replica_index(meta: dict[str, Any]) -> int | None:
    """A run pod's replica: an Indexed Job's completion index (its label), or the HyperPod
    training operator's `<job>-<replica spec>-<index>` name; None when it has neither."""
    label = (meta.get("labels") or {}).get(COMPLETION_INDEX_LABEL)
    if label is not None and str(label).isdigit():
        return int(label)
    suffix = str(meta.get("name") or "").rsplit("-", 1)[-1]
    return int(suffix) if suffix.isdigit() else None


def team_namespace(team: str) -> str:
    return f"hyperpod-ns-{team}"


def local_queue(team: str) -> str:
    """The team's LocalQueue as HyperPod task governance names it: what kubectl users and
    the HyperPod CLI label their jobs with, held on HyperGuard's admission check (D170)."""
    return f"{team_namespace(team)}-localqueue"


RUNS_QUEUE = "hyperguard-runs"
"""The LocalQueue of HyperGuard's own runs in every team namespace: already admitted by
HyperGuard, so its ClusterQueue has no admission check (D170)."""


def job_name(job_id: str) -> str:
    """A DNS-1123 label for `job_id`; ids that need rewriting get a short hash so that two
    different ids never share a name."""
    cleaned = _NAME_UNSAFE.sub("-", job_id.lower()).strip("-")
    if cleaned == job_id and len(cleaned) <= 63:
        return cleaned
    digest = hashlib.sha256(job_id.encode()).hexdigest()[:8]
    return f"{cleaned[:54].strip('-') or 'job'}-{digest}"


def run_name(job: Job) -> str:
    """The object name of this run of `job`: every run is a new object, so that dispatching
    a restart is not mistaken for a repeat of an earlier dispatch. A job a team applied has
    one object, whatever the run (D170)."""
    if job.cluster_object is not None:
        return job.cluster_object.name
    if job.run == 0:
        return job_name(job.job_id)
    return job_name(f"{job.job_id}-run-{job.run}")


def accelerator_resource(instance_type: str) -> str:
    """The extended resource a pod (or a NodeClaim) requests for the instance type's
    accelerators: AWS Trainium and Inferentia are Neuron devices, the rest GPUs."""
    neuron = ec2_name(instance_type).startswith(("trn", "inf"))
    return "aws.amazon.com/neuron" if neuron else "nvidia.com/gpu"


def _pod_template(
    job: Job,
    node_names: list[str],
    *,
    instance_type: str,
    instance: InstanceSpec | None = None,
    tolerations: list[dict[str, Any]] | None = None,
    group: str | None = None,
) -> dict[str, Any]:
    """A run's pod template: the job's own (`Job.pod_template`, or one container of its
    image and command) with what HyperGuard owns added (hyperguard.cluster.pod_template):
    it selects `instance_type` as the nodes spell it (HyperPod's ml. name, the EC2 name on
    Karpenter's nodes), is pinned to `node_names`, tolerates `tolerations`, tells the
    training container (the first) HyperGuard's variables and what it requests, and asks
    Karpenter (v1) not to disrupt the node while the pod runs: consolidation would otherwise
    take a burst node from under a training run."""
    given = copy.deepcopy(job.pod_template) if job.pod_template else {}
    meta = given.get("metadata") or {}
    spec = given.get("spec") or {}
    if not spec.get("containers"):
        short: dict[str, Any] = {"name": CONTAINER, "image": job.image}
        if job.command:
            short["command"] = list(job.command)
        spec["containers"] = [short]
    spec["restartPolicy"] = "Never"
    spec["nodeSelector"] = {**(spec.get("nodeSelector") or {}), INSTANCE_TYPE_LABEL: instance_type}
    container = spec["containers"][0]
    grace = spec.get("terminationGracePeriodSeconds")  # (a template's null is unset)
    grace = DEFAULT_GRACE_S if grace is None else grace
    container["env"] = [*(container.get("env") or []), *_hyperguard_env(job, grace)]
    container["resources"] = _resources(job, container.get("resources") or {}, instance)
    if node_names:
        spec["affinity"] = _pinned(spec.get("affinity") or {}, node_names, group)
    if tolerations:
        spec["tolerations"] = [*(spec.get("tolerations") or []), *tolerations]
    return {
        "metadata": {
            "labels": {**(meta.get("labels") or {}), JOB_ID_LABEL: job_name(job.job_id)},
            "annotations": {**(meta.get("annotations") or {}), DO_NOT_DISRUPT_ANNOTATION: "true"},
        },
        "spec": spec,
    }


def _hyperguard_env(job: Job, grace_s: int) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = [
        {"name": JOB_ID_ENV, "value": job.job_id},
        {"name": RUN_ENV, "value": str(job.run)},
        {"name": NODE_NAME_ENV, "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        {"name": GRACE_ENV, "value": str(grace_s)},
    ]
    if job.checkpoint_location:
        env.append({"name": CHECKPOINT_ENV, "value": job.checkpoint_location})
    if job.last_checkpoint is not None:
        env.append({"name": RESUME_FROM_ENV, "value": job.last_checkpoint.uri})
        env.append({"name": RESUME_STEP_ENV, "value": str(job.last_checkpoint.step)})
    if job.max_steps is not None:
        env.append({"name": MAX_STEPS_ENV, "value": str(job.max_steps)})
    return env


def _resources(job: Job, given: dict[str, Any], instance: InstanceSpec | None) -> dict[str, Any]:
    """The training container's resources: the job's accelerators per replica, and (from the
    catalogue, unless the template asks otherwise) the instance's EFA interfaces and
    MEMORY_SHARE of its memory in proportion to the accelerators the replica takes of it: a
    replica of all 8 GPUs of a p5.48xlarge asks for its 32 interfaces, one of 1 GPU for 4,
    so that replicas sharing a node fit on it together. Extended resources are requested and
    limited alike, as Kubernetes requires."""
    requests = dict(given.get("requests") or {})
    limits = dict(given.get("limits") or {})
    fixed = {accelerator_resource(job.instance_type): str(job.accelerators_per_replica)}
    if instance is not None and instance.accelerators:
        taken = min(job.accelerators_per_replica, instance.accelerators)
        efa = instance.efa_interfaces * taken // instance.accelerators
        if efa and EFA_RESOURCE not in requests | limits:
            fixed[EFA_RESOURCE] = str(efa)
        if "memory" not in requests | limits:
            memory = instance.memory_mib * MEMORY_SHARE * taken / instance.accelerators
            requests["memory"] = f"{int(memory)}Mi"
    return {**given, "requests": requests | fixed, "limits": limits | fixed}


def _pinned(affinity: dict[str, Any], node_names: list[str], group: str | None) -> dict[str, Any]:
    """`affinity` with HyperGuard's pin (pinned_to) as its required node affinity, the
    template's preferred node affinity kept after the pin's own preferences."""
    pin = pinned_to(node_names, group)["nodeAffinity"]
    node = dict(affinity.get("nodeAffinity") or {})
    node[REQUIRED] = pin[REQUIRED]
    preferred = [*pin.get(PREFERRED, []), *(node.get(PREFERRED) or [])]
    if preferred:
        node[PREFERRED] = preferred
    return {**affinity, "nodeAffinity": node}


def pinned_to(node_names: list[str], group: str | None = None) -> dict[str, Any]:
    """Required node affinity to exactly these nodes, or (with `group`) to any node of that
    HyperPod instance group as well: HyperPod's auto-resume recreates a job's pods from
    this template on a replacement node, whose name no pin could know (docs/decisions.md,
    "Burst pods select what Karpenter's nodes carry; auto-resume runs may restart in their
    group"). With a group, the pinned nodes are also preferred, and strongly: kube-scheduler
    otherwise scores every node of the group alike and may bind a pod to a node HyperGuard
    placed another job on, leaving that job's pod nowhere to go."""
    # One term per node: kube-apiserver takes exactly one value in a node field selector's
    # In (ValidateNodeFieldSelectorRequirement); terms are ORed.
    terms: list[dict[str, Any]] = [_on_node(name) for name in node_names]
    affinity: dict[str, Any] = {REQUIRED: {"nodeSelectorTerms": terms}}
    if group:
        terms.append(
            {
                "matchExpressions": [
                    {"key": INSTANCE_GROUP_LABEL, "operator": "In", "values": [group]}
                ]
            }
        )
        affinity[PREFERRED] = [{"weight": 100, "preference": _on_node(name)} for name in node_names]
    return {"nodeAffinity": affinity}


def _on_node(name: str) -> dict[str, Any]:
    return {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [name]}]}


def toleration_of(taint: dict[str, Any]) -> dict[str, Any]:
    """The toleration of exactly this taint (key, value and effect; Equal, or Exists for a
    taint without a value)."""
    toleration: dict[str, Any] = {"key": taint.get("key"), "effect": taint.get("effect")}
    if taint.get("value"):
        toleration.update(operator="Equal", value=taint["value"])
    else:
        toleration["operator"] = "Exists"
    return toleration


def _metadata(job: Job) -> dict[str, Any]:
    labels = {
        QUEUE_LABEL: RUNS_QUEUE,
        JOB_ID_LABEL: job_name(job.job_id),
        RUN_LABEL: str(job.run),
    }
    if job.priority_class:
        labels[PRIORITY_LABEL] = f"{job.priority_class}-priority"
    annotations = {JOB_ID_ANNOTATION: job.job_id}
    if job.auto_resume:
        annotations[AUTO_RESUME_ANNOTATION] = "true"
    return {
        "name": run_name(job),
        "namespace": team_namespace(job.team),
        "labels": labels,
        "annotations": annotations,
    }


def batch_job_manifest(
    job: Job,
    node_names: list[str],
    tolerations: list[dict[str, Any]] | None = None,
    *,
    instance: InstanceSpec | None = None,
) -> dict[str, Any]:
    """The batch/v1 Job of this run on EKS burst nodes, suspended until Kueue admits it.
    A pod that is disrupted (DisruptionTarget) fails the Job at once with reason
    PodFailurePolicy, which is how HyperGuard tells a lost run from a failed one. Karpenter's
    nodes carry the EC2 instance-type name and their NodePool's taints (`tolerations`)."""
    replicas = len(node_names) or job.replicas
    template = _pod_template(
        job,
        node_names,
        instance_type=ec2_name(job.instance_type),
        instance=instance,
        tolerations=tolerations,
    )
    # The pods find each other as `<run>-<index>.<run>` (the Indexed Job's hostnames in the
    # run's headless Service: rendezvous_service), with torchrun's variables.
    template["spec"]["subdomain"] = run_name(job)
    template["spec"]["containers"][0]["env"] += rendezvous_env(job, replicas)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _metadata(job),
        "spec": {
            "suspend": True,
            "parallelism": replicas,
            "completions": replicas,
            "completionMode": "Indexed",
            "backoffLimit": 0,
            "ttlSecondsAfterFinished": FINISHED_TTL_S,
            "podFailurePolicy": {
                "rules": [
                    {
                        "action": "FailJob",
                        "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
                    }
                ]
            },
            "template": template,
        },
    }


def rendezvous_env(job: Job, replicas: int) -> list[dict[str, Any]]:
    """What torchrun (and PyTorch's env:// init) needs on each pod of a batch run, as
    Kubeflow's PyTorchJob sets it: rank 0's address and port, the number of nodes, this
    pod's node rank (its completion index), and the same as torchrun's `PET_` variables."""
    index = {
        "valueFrom": {
            "fieldRef": {"fieldPath": f"metadata.annotations['{COMPLETION_INDEX_LABEL}']"}
        }
    }
    name = run_name(job)
    master = f"{name}-0.{name}"
    values: list[tuple[str, dict[str, Any]]] = [
        ("MASTER_ADDR", {"value": master}),
        ("MASTER_PORT", {"value": str(RENDEZVOUS_PORT)}),
        ("WORLD_SIZE", {"value": str(replicas)}),
        ("NODE_RANK", index),
        ("RANK", index),
        ("PET_MASTER_ADDR", {"value": master}),
        ("PET_MASTER_PORT", {"value": str(RENDEZVOUS_PORT)}),
        ("PET_NNODES", {"value": str(replicas)}),
        ("PET_NODE_RANK", index),
        ("PET_NPROC_PER_NODE", {"value": str(job.accelerators_per_replica)}),
    ]
    return [{"name": key, **value} for key, value in values]


def rendezvous_service(job: Job, owner_uid: str) -> dict[str, Any]:
    """The headless Service of a batch run: a DNS name per pod (`<run>-<index>.<run>`),
    published before the pods are Ready (rank 0 must be reachable while the others start),
    owned by the run's Job so that it goes with it."""
    meta = _metadata(job)
    name = meta["name"]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": name,
            "namespace": meta["namespace"],
            "labels": {JOB_ID_LABEL: meta["labels"][JOB_ID_LABEL], RUN_LABEL: str(job.run)},
            "ownerReferences": [
                {"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": owner_uid}
            ],
        },
        "spec": {
            "clusterIP": "None",
            "selector": {JOB_NAME_LABEL: name},
            "publishNotReadyAddresses": True,
            "ports": [{"name": "rendezvous", "port": RENDEZVOUS_PORT, "protocol": "TCP"}],
        },
    }


def hyperpod_job_manifest(
    job: Job, node_names: list[str], *, instance: InstanceSpec | None = None
) -> dict[str, Any]:
    """The HyperPodPyTorchJob of this run on HyperPod nodes. Spares are not asked of the
    operator: HyperGuard keeps hot spares per pool itself (NodeRepairConfig.hotSpares)."""
    replicas = len(node_names) or job.replicas
    replica_spec: dict[str, Any] = {
        "name": REPLICA_SPEC,
        "replicas": replicas,
        "spares": 0,
        "template": _pod_template(
            job,
            node_names,
            instance_type=ml_name(job.instance_type),
            instance=instance,
            group=job.pool if job.auto_resume else None,
        ),
    }
    spec: dict[str, Any] = {
        "nprocPerNode": str(job.accelerators_per_replica),
        "runPolicy": {
            "cleanPodPolicy": "All",
            "jobMaxRetryCount": job.operator_retries(),
            "ttlSecondsAfterFinished": FINISHED_TTL_S,
            "suspend": True,
        },
        "replicaSpecs": [replica_spec],
    }
    if job.log_monitoring_configuration:
        spec["runPolicy"]["logMonitoringConfiguration"] = [
            rule.model_dump(by_alias=True, exclude_none=True, mode="json")
            for rule in job.log_monitoring_configuration
        ]
    if job.elastic_policy is not None:
        # HyperGuard admits every size change: the operator may run the job between the
        # job's minimum and what HyperGuard admitted, never above.
        policy = job.elastic_policy.model_dump(by_alias=True, exclude_none=True)
        policy["maxReplicas"] = replicas
        policy["minReplicas"] = min(policy["minReplicas"], replicas)
        spec["elasticPolicy"] = policy
        replica_spec["maxReplicas"] = replicas
    return {
        "apiVersion": "sagemaker.amazonaws.com/v1",
        "kind": RunKind.HYPERPOD.value,
        "metadata": _metadata(job),
        "spec": spec,
    }


def resize_patch(
    job: Job, node_names: list[str], *, instance: InstanceSpec | None = None
) -> dict[str, Any]:
    """A JSON merge patch that resizes a HyperPodPyTorchJob in place to `node_names` (the
    operator checkpoints and restarts the job at the new size), relabelled as `job.run`."""
    manifest = hyperpod_job_manifest(job, node_names, instance=instance)
    spec = manifest["spec"]
    patch: dict[str, Any] = {
        "metadata": {"labels": {RUN_LABEL: str(job.run)}},
        "spec": {"replicaSpecs": spec["replicaSpecs"]},
    }
    if "elasticPolicy" in spec:
        patch["spec"]["elasticPolicy"] = spec["elasticPolicy"]
    return patch


def _conditions(obj: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in (obj.get("status") or {}).get("conditions") or [] if isinstance(c, dict)]


def _true(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next(
        (c for c in _conditions(obj) if c.get("type") == kind and c.get("status") == "True"),
        None,
    )


def _when(condition: dict[str, Any] | None) -> datetime | None:
    value = (condition or {}).get("lastTransitionTime")
    if isinstance(value, datetime):
        return value
    if isinstance(value, str) and value:
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
    return None


def run_status(obj: dict[str, Any]) -> RunStatus | None:
    """A run object (as JSON) read back; None for an object HyperGuard did not create."""
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    job_id = (meta.get("annotations") or {}).get(JOB_ID_ANNOTATION)
    try:
        run = int(labels.get(RUN_LABEL, ""))
    except ValueError:
        return None
    if not job_id:
        return None
    kind = RunKind.HYPERPOD if obj.get("kind") == RunKind.HYPERPOD.value else RunKind.BATCH
    workload = _held_workload(meta)
    read = _hyperpod_run if kind is RunKind.HYPERPOD else _batch_run
    replicas, phase, decisive, restarts = read(obj, workload)
    return RunStatus(
        job_id=job_id,
        run=run,
        kind=kind,
        namespace=meta.get("namespace") or "",
        name=meta.get("name") or "",
        phase=phase,
        replicas=replicas,
        reason=str((decisive or {}).get("reason") or ""),
        message=str((decisive or {}).get("message") or "")[:1000],
        since=_when(decisive),
        restarts=restarts,
        workload=workload,
        deleting=bool(meta.get("deletionTimestamp")),
    )


type _Read = tuple[int, RunPhase, dict[str, Any] | None, int]
"""A run object's replicas, phase, the condition that decided it, and restarts."""


def _hyperpod_run(obj: dict[str, Any], _workload: str) -> _Read:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    replicas = sum(int(r.get("replicas") or 0) for r in spec.get("replicaSpecs") or [])
    phase, decisive = _hyperpod_phase(obj, spec, status)
    return replicas, phase, decisive, _count(status.get("restartCount"))


def _batch_run(obj: dict[str, Any], workload: str) -> _Read:
    """A team's own Job (`workload`) may let the Job controller replace a failed pod (D179);
    one HyperGuard made has a backoffLimit of 0, so a failed pod is its end, not a restart."""
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    phase, decisive = _batch_phase(obj, spec, status)
    restarts = _count(status.get("failed")) if workload else 0
    return int(spec.get("parallelism") or 0), phase, decisive, restarts


def _held_workload(meta: dict[str, Any]) -> str:
    """The Workload of a team's own object HyperGuard admitted; "" for HyperGuard's runs."""
    return str((meta.get("annotations") or {}).get(WORKLOAD_ANNOTATION) or "")


def _count(value: Any) -> int:
    """A non-negative count from a status field (anything else: 0)."""
    return value if type(value) is int and value > 0 else 0


def _batch_phase(
    obj: dict[str, Any], spec: dict[str, Any], status: dict[str, Any]
) -> tuple[RunPhase, dict[str, Any] | None]:
    if (done := _true(obj, "Complete")) is not None:
        return RunPhase.SUCCEEDED, done
    if (failed := _true(obj, "Failed")) is not None:
        lost = failed.get("reason") == "PodFailurePolicy"
        return (RunPhase.LOST if lost else RunPhase.FAILED), failed
    if spec.get("suspend"):
        return RunPhase.PENDING, None
    if int(status.get("active") or 0) > 0:
        return RunPhase.RUNNING, None
    return RunPhase.PENDING, None


def _hyperpod_phase(
    obj: dict[str, Any], spec: dict[str, Any], status: dict[str, Any]
) -> tuple[RunPhase, dict[str, Any] | None]:
    if (done := _true(obj, "Completed")) is not None:
        return RunPhase.SUCCEEDED, done
    if (failed := _true(obj, "Failed")) is not None:
        faulty = (status.get("latestFaultyPodInstanceList") or {}).get("faultyInstanceIdList")
        return (RunPhase.LOST if faulty else RunPhase.FAILED), failed
    if (spec.get("runPolicy") or {}).get("suspend"):
        return RunPhase.PENDING, None
    if _true(obj, "Running") is not None or _true(obj, "PodsRunning") is not None:
        return RunPhase.RUNNING, None
    return RunPhase.PENDING, None
