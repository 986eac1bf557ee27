"""The Kueue objects HyperGuard's runs need, and the ensure step that keeps them (D71), with
the RoleBindings that let its functions write in a team's namespace (D98).

A run is dispatched suspended into `hyperpod-ns-<team>` with `kueue.x-k8s.io/queue-name:
hyperpod-ns-<team>-localqueue` and, when the job names one, `kueue.x-k8s.io/priority-class:
<class>-priority` (hyperguard.cluster.workloads). Kueue (kubernetes-sigs/kueue, API
kueue.x-k8s.io/v1beta2: v0.15 made it the storage version and v0.20 serves no other)
unsuspends it only when that LocalQueue exists in the namespace and
points to a ClusterQueue whose namespaceSelector takes the namespace and whose quota has room,
and when the WorkloadPriorityClass exists (without it Kueue's job reconciler cannot build the
Workload: `GetPriorityFromWorkloadPriorityClass` in pkg/util/priority fails and the job is
retried, suspended). HyperGuard keeps those objects itself, per team:

- Namespace `hyperpod-ns-<team>`;
- ClusterQueue `hyperpod-ns-<team>-clusterqueue`: its namespaceSelector picks the team's
  namespace by the `kubernetes.io/metadata.name` label kube-apiserver sets; one
  ResourceFlavor `hyperguard` without node labels (HyperGuard pins a run's pods to the nodes
  it chose; a flavor's node labels would be a second placement); a nominal quota no cluster
  reaches, so that Kueue never holds back or preempts what HyperGuard's engine admitted
  (HyperGuard is the admission engine; two engines counting different numbers would
  disagree: D71); no preemption, no cohort;
- LocalQueue `hyperpod-ns-<team>-localqueue` in the namespace, pointing to that ClusterQueue;
- RoleBindings `hyperguard-scheduler` and `hyperguard-recovery` in the namespace, binding the
  ClusterRoles `hyperguard-<function>-in-team` (deploy/kubernetes/hyperguard-rbac.yaml) to
  those functions' Kubernetes groups: what they write in a team's namespace (its runs, its
  LocalQueue) is granted there, not cluster-wide (D98). They come right after the namespace,
  before the LocalQueue, which only they let the scheduler write. The scheduler may bind
  those two ClusterRoles and no other (`bind` with resourceNames);

and, for the cluster, the ResourceFlavor and one WorkloadPriorityClass `<class>-priority`
per priority class of the scheduler config (value: the class's weight).

Every object HyperGuard creates carries `app.kubernetes.io/managed-by: hyperguard`. An object
of the same name without that label belongs to someone else (SageMaker task governance, an
operator) and is left alone: the outcome says so, and docs/operations.md says what to do.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from lightkube.generic_resource import create_global_resource, create_namespaced_resource
from lightkube.resources.core_v1 import Namespace
from lightkube.resources.rbac_authorization_v1 import RoleBinding

from hyperguard.cluster.kubernetes import KubernetesAdapter
from hyperguard.cluster.workloads import RUNS_QUEUE, local_queue, team_namespace
from hyperguard.models.governance import PriorityClass

KUEUE_GROUP = "kueue.x-k8s.io"
KUEUE_VERSION = "v1beta2"
KUEUE_API_VERSION = f"{KUEUE_GROUP}/{KUEUE_VERSION}"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "hyperguard"
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
"""The label kube-apiserver puts on every namespace, its value the namespace's name."""
FLAVOR = "hyperguard"
UNBOUNDED_QUOTA: dict[str, str] = {
    "cpu": "1G",
    "memory": "4Ei",
    "nvidia.com/gpu": "100M",
    "aws.amazon.com/neuron": "100M",
    "vpc.amazonaws.com/efa": "100M",
    "ephemeral-storage": "4Ei",
    "hugepages-2Mi": "4Ei",
    "hugepages-1Gi": "4Ei",
}
"""Every resource a run's pods may request, each with a nominal quota above the largest
quota HyperGuard accepts for a team (models.governance.MAX_INSTANCES instances, and the
accelerators, vCPU and memory of that many of the largest instance) and within the int64
Kueue counts in. A resource a pod requests that its ClusterQueue does not cover leaves the
Workload inadmissible ("resource ... unavailable in ClusterQueue", Kueue's flavorassigner).
Written in the canonical form Kueue stores (1G, not 1000000000): in any other form the
stored ClusterQueue reads as changed, and every ensure patched it again."""

ResourceFlavor = create_global_resource(
    KUEUE_GROUP, KUEUE_VERSION, "ResourceFlavor", "resourceflavors"
)
ClusterQueue = create_global_resource(KUEUE_GROUP, KUEUE_VERSION, "ClusterQueue", "clusterqueues")
LocalQueue = create_namespaced_resource(KUEUE_GROUP, KUEUE_VERSION, "LocalQueue", "localqueues")
WorkloadPriorityClass = create_global_resource(
    KUEUE_GROUP, KUEUE_VERSION, "WorkloadPriorityClass", "workloadpriorityclasses"
)
AdmissionCheck = create_global_resource(
    KUEUE_GROUP, KUEUE_VERSION, "AdmissionCheck", "admissionchecks"
)
ADMISSION_CHECK = "hyperguard"
"""The AdmissionCheck on each team's ClusterQueue that holds the jobs teams apply themselves
until HyperGuard admits them (D170)."""
ADMISSION_CONTROLLER = "hyperguard.io/admission"
_RESOURCES: dict[str, Any] = {
    "Namespace": Namespace,
    "ResourceFlavor": ResourceFlavor,
    "ClusterQueue": ClusterQueue,
    "LocalQueue": LocalQueue,
    "WorkloadPriorityClass": WorkloadPriorityClass,
    "AdmissionCheck": AdmissionCheck,
    "RoleBinding": RoleBinding,
}
_KEPT_FIELDS = ("spec", "value", "description", "subjects")
"""What HyperGuard keeps of an object besides its label (a WorkloadPriorityClass has no
spec: its value and description are top-level; a RoleBinding's subjects are, and its
roleRef, which kube-apiserver refuses to change, is only ever created)."""
RBAC_GROUP = "rbac.authorization.k8s.io"
IN_TEAM_FUNCTIONS = ("scheduler", "recovery", "api")
"""The functions that act in a team's namespace, each through its RoleBinding there (the
API only for dry runs)."""


class EnsureOutcome(StrEnum):
    CREATED = "created"
    UPDATED = "updated"
    UNCHANGED = "unchanged"
    FOREIGN = "foreign"
    """An object of that name that HyperGuard did not create: left as it is."""


def cluster_queue(team: str) -> str:
    """The ClusterQueue of the team's LocalQueue (HyperPod task governance's name): it holds
    what the team applies itself on HyperGuard's admission check."""
    return f"{team_namespace(team)}-clusterqueue"


def runs_cluster_queue(team: str) -> str:
    """The ClusterQueue of HyperGuard's own runs of the team (LocalQueue `hyperguard-runs`)."""
    return f"{team_namespace(team)}-{RUNS_QUEUE}"


def priority_class_name(priority_class: str) -> str:
    """The WorkloadPriorityClass a run of this class names (HyperPod's convention)."""
    return f"{priority_class}-priority"


def in_team_role(function: str) -> str:
    """The ClusterRole a team namespace's RoleBinding grants `function`'s group there."""
    return f"hyperguard-{function}-in-team"


def team_role_binding(function: str, namespace: str) -> dict[str, Any]:
    """The RoleBinding that lets `function` write in a team's namespace."""
    group = f"hyperguard-{function}"
    return {
        "apiVersion": f"{RBAC_GROUP}/v1",
        "kind": "RoleBinding",
        "metadata": _meta(group, namespace),
        "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": in_team_role(function)},
        "subjects": [{"apiGroup": RBAC_GROUP, "kind": "Group", "name": group}],
    }


def _meta(name: str, namespace: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": {MANAGED_BY_LABEL: MANAGED_BY}}
    if namespace is not None:
        meta["namespace"] = namespace
    return meta


def priority_class_object(name: str, value: int, description: str) -> dict[str, Any]:
    """The WorkloadPriorityClass `<name>-priority` a run of class `name` names."""
    return {
        "apiVersion": KUEUE_API_VERSION,
        "kind": "WorkloadPriorityClass",
        "metadata": _meta(priority_class_name(name)),
        "value": value,
        "description": description,
    }


def shared_objects(priority_classes: Iterable[PriorityClass]) -> list[dict[str, Any]]:
    """The cluster-wide objects every team's runs need: the ResourceFlavor, HyperGuard's
    AdmissionCheck and a WorkloadPriorityClass per priority class."""
    flavor = {
        "apiVersion": KUEUE_API_VERSION,
        "kind": "ResourceFlavor",
        "metadata": _meta(FLAVOR),
        "spec": {},
    }
    check = {
        "apiVersion": KUEUE_API_VERSION,
        "kind": "AdmissionCheck",
        "metadata": _meta(ADMISSION_CHECK),
        "spec": {"controllerName": ADMISSION_CONTROLLER},
    }
    classes = [
        priority_class_object(
            pc.name, pc.weight, f"HyperGuard priority class {pc.name} (weight {pc.weight})"
        )
        for pc in priority_classes
    ]
    return [flavor, check, *classes]


def _cluster_queue(name: str, namespace: str, *, held: bool) -> dict[str, Any]:
    resources = [
        {"name": resource, "nominalQuota": quota} for resource, quota in UNBOUNDED_QUOTA.items()
    ]
    spec: dict[str, Any] = {
        "namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: namespace}},
        "queueingStrategy": "BestEffortFIFO",
        "preemption": {"reclaimWithinCohort": "Never", "withinClusterQueue": "Never"},
        "resourceGroups": [
            {
                "coveredResources": list(UNBOUNDED_QUOTA),
                "flavors": [{"name": FLAVOR, "resources": resources}],
            }
        ],
    }
    if held:
        spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": ADMISSION_CHECK}]}
    return {
        "apiVersion": KUEUE_API_VERSION,
        "kind": "ClusterQueue",
        "metadata": _meta(name),
        "spec": spec,
    }


def _local_queue(name: str, namespace: str, cluster_queue_name: str) -> dict[str, Any]:
    return {
        "apiVersion": KUEUE_API_VERSION,
        "kind": "LocalQueue",
        "metadata": _meta(name, namespace),
        "spec": {"clusterQueue": cluster_queue_name},
    }


def team_objects(team: str) -> list[dict[str, Any]]:
    """The team's Namespace, RoleBindings, ClusterQueues and LocalQueues, in the order they
    must exist: the team's own queue, held on HyperGuard's admission check, and the queue of
    HyperGuard's runs (D170)."""
    namespace = team_namespace(team)
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": _meta(namespace)},
        *(team_role_binding(function, namespace) for function in IN_TEAM_FUNCTIONS),
        _cluster_queue(cluster_queue(team), namespace, held=True),
        _local_queue(local_queue(team), namespace, cluster_queue(team)),
        _cluster_queue(runs_cluster_queue(team), namespace, held=False),
        _local_queue(RUNS_QUEUE, namespace, runs_cluster_queue(team)),
    ]


def _contains(actual: Any, wanted: Any) -> bool:
    """Whether `actual` has everything `wanted` has: fields the API server defaulted (or
    another controller added) are not a difference."""
    if isinstance(wanted, dict):
        return isinstance(actual, dict) and all(
            _contains(actual.get(key), value) for key, value in wanted.items()
        )
    if isinstance(wanted, list):
        return (
            isinstance(actual, list)
            and len(actual) == len(wanted)
            and all(_contains(a, w) for a, w in zip(actual, wanted, strict=True))
        )
    return bool(actual == wanted)


def change_for(wanted: dict[str, Any], actual: dict[str, Any]) -> dict[str, Any] | None:
    """The JSON merge patch that brings HyperGuard's object `actual` to `wanted`; None when
    it already matches."""
    patch = {
        field: wanted[field]
        for field in _KEPT_FIELDS
        if field in wanted and not _contains(actual.get(field), wanted[field])
    }
    return patch or None


def owned_by_hyperguard(obj: dict[str, Any]) -> bool:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return bool(labels.get(MANAGED_BY_LABEL) == MANAGED_BY)


class KueueObjects:
    """Ensures Kueue objects through the cluster's Kubernetes adapter: each is read, then
    created when missing or patched when HyperGuard's own copy differs."""

    def __init__(self, kubernetes: KubernetesAdapter) -> None:
        self.kubernetes = kubernetes

    def ensure(self, manifests: Sequence[dict[str, Any]]) -> dict[str, EnsureOutcome]:
        """Outcome per object, keyed `<Kind>/<name>`; raises ClusterError when the API
        refuses (the caller retries on its next pass)."""
        return {
            f"{manifest['kind']}/{manifest['metadata']['name']}": self._ensure_one(manifest)
            for manifest in manifests
        }

    def _ensure_one(self, wanted: dict[str, Any]) -> EnsureOutcome:
        resource = _RESOURCES[wanted["kind"]]
        meta = wanted["metadata"]
        name, namespace = meta["name"], meta.get("namespace")
        actual = self.kubernetes.get_object(resource, name, namespace)
        if actual is None:
            if self.kubernetes.create_object(resource, wanted):
                self._activate(wanted, None)
                return EnsureOutcome.CREATED
            # Created since the read (a concurrent pass): the next pass compares it.
            return EnsureOutcome.UNCHANGED
        if not owned_by_hyperguard(actual):
            return EnsureOutcome.FOREIGN
        patch = change_for(wanted, actual)
        activated = self._activate(wanted, actual)
        if patch is None:
            return EnsureOutcome.UPDATED if activated else EnsureOutcome.UNCHANGED
        self.kubernetes.patch_object(resource, name, patch, namespace)
        return EnsureOutcome.UPDATED

    def _activate(self, wanted: dict[str, Any], actual: dict[str, Any] | None) -> bool:
        """HyperGuard's AdmissionCheck marked Active, as its controller: Kueue keeps every
        ClusterQueue that uses an inactive check inactive (nothing admitted there). True
        when it was marked now."""
        if wanted["kind"] != "AdmissionCheck" or _active(actual):
            return False
        condition = {
            "type": "Active",
            "status": "True",
            "reason": "Active",
            "message": "HyperGuard's scheduler admits the jobs this check holds",
            "lastTransitionTime": utc_timestamp(),
        }
        status = AdmissionCheck.Status
        patch = {"status": {"conditions": [condition]}}
        return self.kubernetes.patch_object(status, wanted["metadata"]["name"], patch)


def _active(check: dict[str, Any] | None) -> bool:
    conditions = ((check or {}).get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Active" and c.get("status") == "True" for c in conditions)


def utc_timestamp() -> str:
    """Now, as Kubernetes writes a condition's time (RFC 3339, seconds)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
