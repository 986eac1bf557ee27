"""Jobs a team applies itself, held by Kueue until HyperGuard admits them (D170).

A team that applies a batch/v1 Job or a HyperPodPyTorchJob to its namespace
`hyperpod-ns-<team>` with kubectl or the HyperPod CLI labels it with its LocalQueue
(`kueue.x-k8s.io/queue-name: hyperpod-ns-<team>-localqueue`, as HyperPod task governance asks).
Kueue then suspends it and makes a Workload for it (kueue.x-k8s.io/v1beta2). The LocalQueue's
ClusterQueue names HyperGuard's AdmissionCheck, so Kueue reserves the Workload's quota (a
quota no cluster reaches, D71) and keeps the job suspended while that check is `Pending`. The
in-cluster forwarder sees such a Workload (hyperguard.forwarder) and wakes a pass. The pass
reads the Workload and records the job as a job of the team (source `cluster`), and from then
on the job is queued, admitted, preempted and recovered as any other. The object stays the
job's only run:

- admitted: the object is labelled as a run of the job (`hyperguard.io/job-id`, the run
  number) and the check is set `Ready`, with a pod set update that labels its pods the same
  way; Kueue admits the Workload and unsuspends the job;
- stopped (preempted, requeued for a recovery, cancelled): the check is set `Retry`; Kueue
  evicts the Workload (the job is suspended and its pods deleted), puts the check back to
  `Pending` and queues the Workload again; the run label is then taken off, so the held object
  is no run until its next admission;
- refused (not a team's namespace, a shape HyperGuard cannot run, the job already ended): the
  check is set `Rejected` with the reason; Kueue deactivates the Workload and says why in its
  status.

This module is pure: what a Workload says, and the Job it becomes. The job records the
object's shape (instance type, replicas, accelerators, priority class, image and command),
not its pod template: the object on the cluster is the template, and HyperGuard renders
nothing from it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from hyperguard.cluster.pod_template import INSTANCE_TYPE_SELECTOR
from hyperguard.models.jobs import ClusterObject, Job, JobSource

TEAM_NAMESPACE_PREFIX = "hyperpod-ns-"
OWNER_KINDS = {"Job": "batch/v1", "HyperPodPyTorchJob": "sagemaker.amazonaws.com/v1"}
"""The objects HyperGuard governs, by kind, with the apiVersion they must have."""
ACCELERATOR_RESOURCES = ("nvidia.com/gpu", "aws.amazon.com/neuron")
WORKLOAD_PRIORITY_KIND = "WorkloadPriorityClass"
PRIORITY_SUFFIX = "-priority"


class HeldRefusal(ValueError):
    """A held Workload HyperGuard will not run, with the reason its check is rejected with."""


def team_of(namespace: str) -> str | None:
    """The team whose namespace this is (`hyperpod-ns-<team>`), else None."""
    if namespace.startswith(TEAM_NAMESPACE_PREFIX) and len(namespace) > len(TEAM_NAMESPACE_PREFIX):
        return namespace.removeprefix(TEAM_NAMESPACE_PREFIX)
    return None


def check_state(workload: Mapping[str, Any], check: str) -> str | None:
    """The state of admission check `check` on the Workload (Pending, Ready, Retry,
    Rejected), None when it has none."""
    for state in (workload.get("status") or {}).get("admissionChecks") or []:
        if isinstance(state, dict) and state.get("name") == check:
            return str(state.get("state") or "")
    return None


def waiting(workload: Mapping[str, Any], check: str) -> bool:
    """Whether the Workload waits on admission check `check`: its state Pending, the
    Workload active (Kueue puts a Rejected check back to Pending when it deactivates the
    Workload: that one waits for nobody) and `reserved`."""
    return active(workload) and check_state(workload, check) == "Pending" and reserved(workload)


def active(workload: Mapping[str, Any]) -> bool:
    """Whether the Workload is active: Kueue deactivates one whose check was Rejected."""
    return (workload.get("spec") or {}).get("active") is not False


def reserved(workload: Mapping[str, Any]) -> bool:
    """Whether Kueue holds quota for the Workload and is not evicting it: the only time an
    admission check's state may be set (D185). Kueue's own provisioning check controller
    waits for the same (kueue v0.19.2, pkg/controller/admissionchecks/provisioning). Before
    the reservation, Kueue's scheduler reserves with its queued copy of the Workload, its
    checks included, by a forced server-side apply: a Ready set meanwhile can be put back to
    Pending, and the object then waits for good. During an eviction Kueue is still resetting
    the checks."""
    return _condition(workload, "QuotaReserved") and not _condition(workload, "Evicted")


def finished(workload: Mapping[str, Any]) -> bool:
    """Whether Kueue marked the Workload Finished: its object succeeded or failed (its own
    controller's retries spent), and no admission runs it again."""
    return _condition(workload, "Finished")


def _condition(workload: Mapping[str, Any], kind: str) -> bool:
    conditions = (workload.get("status") or {}).get("conditions") or []
    return any(
        isinstance(c, dict) and c.get("type") == kind and c.get("status") == "True"
        for c in conditions
    )


def owner_of(workload: Mapping[str, Any]) -> dict[str, Any] | None:
    """The Workload's controller owner reference when it is a kind HyperGuard governs."""
    for ref in (workload.get("metadata") or {}).get("ownerReferences") or []:
        if not isinstance(ref, dict) or not ref.get("controller"):
            continue
        if OWNER_KINDS.get(str(ref.get("kind"))) == ref.get("apiVersion"):
            return ref
        return None
    return None


def job_id_of(team: str, created: datetime, owner_uid: str) -> str:
    """A cluster job's id: the team, when its Workload was made and its object's uid, so that
    every pass that reads it records the same job (and a job reapplied under the same name,
    a new object, is a new job)."""
    return f"{team}-{created:%Y%m%d%H%M%S}-{owner_uid.replace('-', '')[:6]}"


def held_job(
    workload: Mapping[str, Any],
    *,
    instance_type: Callable[[str], tuple[str, int]],
) -> Job:
    """The job a held Workload asks for; HeldRefusal when HyperGuard cannot run it.
    `instance_type` gives HyperPod's name of an instance type and its accelerators
    (UnknownInstanceTypeError, a KeyError, when the catalogue has none)."""
    meta = workload.get("metadata") or {}
    namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
    team = team_of(namespace)
    if team is None:
        raise HeldRefusal(f"namespace {namespace} is no team's (hyperpod-ns-<team>)")
    owner = owner_of(workload)
    if owner is None:
        kinds = " or ".join(f"{v} {k}" for k, v in OWNER_KINDS.items())
        raise HeldRefusal(f"HyperGuard governs a {kinds}; this Workload belongs to neither")
    pod_set = _one_pod_set(workload)
    spec = (pod_set.get("template") or {}).get("spec") or {}
    ml_type, accelerators = _shape(spec, instance_type)
    created = _created(meta.get("creationTimestamp"))
    containers = spec.get("containers") or [{}]
    return Job(
        job_id=job_id_of(team, created, str(owner["uid"])),
        name=str(owner["name"]),
        team=team,
        priority_class=_priority_class(workload),
        instance_type=ml_type,
        accelerators_per_replica=accelerators,
        replicas=pod_set["count"],
        image=str(containers[0].get("image") or ""),
        command=[str(c) for c in containers[0].get("command") or []],
        submitted_at=created,
        source=JobSource.CLUSTER,
        cluster_object=ClusterObject(
            kind=str(owner["kind"]),
            namespace=namespace,
            name=str(owner["name"]),
            uid=str(owner["uid"]),
            workload=name,
            pod_set=str(pod_set.get("name") or "main"),
        ),
    )


def _one_pod_set(workload: Mapping[str, Any]) -> dict[str, Any]:
    pod_sets = (workload.get("spec") or {}).get("podSets") or []
    if len(pod_sets) != 1:
        raise HeldRefusal(f"HyperGuard runs jobs of one pod set; this one has {len(pod_sets)}")
    pod_set: dict[str, Any] = pod_sets[0]
    replicas = pod_set.get("count")
    if type(replicas) is not int or replicas < 1:
        raise HeldRefusal(f"pod set count {replicas!r} is not a positive number")
    return pod_set


def _shape(
    spec: Mapping[str, Any], instance_type: Callable[[str], tuple[str, int]]
) -> tuple[str, int]:
    """The pods' instance type (HyperPod's name) and the accelerators each asks for."""
    asked = str((spec.get("nodeSelector") or {}).get(INSTANCE_TYPE_SELECTOR) or "")
    if not asked:
        raise HeldRefusal(f"name the instance type: nodeSelector {INSTANCE_TYPE_SELECTOR}")
    try:
        ml_type, per_instance = instance_type(asked)
    except KeyError:
        raise HeldRefusal(f"unknown instance type {asked!r}") from None
    accelerators = _accelerators(spec.get("containers") or [])
    if not 1 <= accelerators <= per_instance:
        raise HeldRefusal(
            f"a pod asks for {accelerators} accelerators; {ml_type} has {per_instance}"
        )
    return ml_type, accelerators


def _accelerators(containers: list[Any]) -> int:
    """The accelerators a pod asks for: its containers' GPU or Neuron limits (else requests),
    summed."""
    total = 0
    for container in containers:
        resources = (container or {}).get("resources") or {}
        asked = {**(resources.get("requests") or {}), **(resources.get("limits") or {})}
        for resource in ACCELERATOR_RESOURCES:
            value = str(asked.get(resource, "0"))
            if not value.isdigit():
                raise HeldRefusal(f"{resource} {value!r} is not a whole number")
            total += int(value)
    return total


def _priority_class(workload: Mapping[str, Any]) -> str | None:
    ref = (workload.get("spec") or {}).get("priorityClassRef") or {}
    name = str(ref.get("name") or "")
    if ref.get("kind") != WORKLOAD_PRIORITY_KIND or not name.endswith(PRIORITY_SUFFIX):
        return None
    return name.removesuffix(PRIORITY_SUFFIX)


def _created(value: Any) -> datetime:
    if isinstance(value, datetime):
        return value
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        raise HeldRefusal(f"creationTimestamp {value!r} is not a time") from None
