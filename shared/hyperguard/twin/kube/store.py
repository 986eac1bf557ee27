"""The object store behind the twin's Kubernetes API server: what etcd and the API server's
registry do for the handful of resources HyperGuard touches.

Emulated: create (generateName, uid, resourceVersion, creationTimestamp), get, list with
label and field selectors, JSON merge patch and replace with resourceVersion preconditions,
the status subresource, metadata.generation, finalizers and deletionTimestamp, garbage
collection through ownerReferences (Orphan, Background, Foreground: the last removes the
dependents first rather than waiting on a foregroundDeletion finalizer), and the pod
Eviction subresource checked against PodDisruptionBudgets. Listeners see every committed
change, which is how the twin's simulated kubelet and controllers react to API calls.
Namespaces as kube-apiserver keeps them: `default`, `kube-system`, `kube-public` and
`kube-node-lease` exist from the start, a new one gets the `kubernetes.io/metadata.name`
label, nothing is created in a namespace that does not exist (404, NamespaceLifecycle), and
deleting a namespace deletes what is in it.

A write may carry an `admit` step: the API server passes the schema admission (pruning,
defaulting, validation: hyperguard.twin.kube.schema) so that it runs on the object as it
would be stored, after a patch is merged. Direct writes (the twin's controllers) are stored
as given: lightkube decodes strictly, so an object its model rejects, such as a Pod without
spec.containers, fails the client: store complete objects.

Not emulated: JSON patch and server-side apply, strategic merge patch's list merging
(lists are replaced), a namespace's Terminating phase (it goes at once, even while
finalizers hold some of its objects), pod graceful termination (a pod without finalizers
is removed at once), and the disruption controller (a budget's allowance is computed on each
eviction from the pods it selects).
"""

from __future__ import annotations

import copy
import logging
import math
import re
import secrets
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from hyperguard.twin.clock import Clock

Obj = dict[str, Any]
Event = Literal["ADDED", "MODIFIED", "DELETED"]

_log = logging.getLogger(__name__)

PROPAGATION_POLICIES = ("Orphan", "Background", "Foreground")
FIELD_SELECTORS = ("metadata.name", "metadata.namespace", "spec.nodeName", "status.phase")
# Fields the server owns: a write through patch or replace cannot change them.
_SERVER_METADATA = (
    "name",
    "namespace",
    "uid",
    "creationTimestamp",
    "generation",
    "resourceVersion",
)
_DELETION_METADATA = ("deletionTimestamp", "deletionGracePeriodSeconds")
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_GENERATE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_LABEL_REQUIREMENT = re.compile(
    r"^(?:!\s*(?P<absent>[\w./-]+)"
    r"|(?P<key>[\w./-]+)\s*(?:(?P<op>==|!=|=)\s*(?P<value>[\w.-]*)"
    r"|\s+(?P<setop>in|notin)\s+\((?P<values>[^)]*)\))?)$"
)
_FIELD_REQUIREMENT = re.compile(r"^(?P<field>[\w.]+)\s*(?P<op>==|!=|=)\s*(?P<value>.*)$")
_CONFLICT = (
    "the object has been modified; please apply your changes to the latest version and try again"
)


@dataclass(frozen=True, slots=True)
class ResourceType:
    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool
    status_subresource: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def key(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural


NODES = ResourceType("", "v1", "Node", "nodes", namespaced=False)
PODS = ResourceType("", "v1", "Pod", "pods", namespaced=True)
NAMESPACES = ResourceType("", "v1", "Namespace", "namespaces", namespaced=False)
EVENTS = ResourceType("", "v1", "Event", "events", namespaced=True, status_subresource=False)
JOBS = ResourceType("batch", "v1", "Job", "jobs", namespaced=True)
PDBS = ResourceType("policy", "v1", "PodDisruptionBudget", "poddisruptionbudgets", True)
NODECLAIMS = ResourceType("karpenter.sh", "v1", "NodeClaim", "nodeclaims", namespaced=False)
NODEPOOLS = ResourceType("karpenter.sh", "v1", "NodePool", "nodepools", namespaced=False)
HYPERPOD_PYTORCH_JOBS = ResourceType(
    "sagemaker.amazonaws.com", "v1", "HyperPodPyTorchJob", "hyperpodpytorchjobs", True
)
# Kueue's API (kubernetes-sigs/kueue v0.14, kueue.x-k8s.io/v1beta1), served as the CRDs
# Kueue installs declare them: WorkloadPriorityClass has no status subresource.
KUEUE_GROUP = "kueue.x-k8s.io"
RESOURCE_FLAVORS = ResourceType(KUEUE_GROUP, "v1beta1", "ResourceFlavor", "resourceflavors", False)
CLUSTER_QUEUES = ResourceType(KUEUE_GROUP, "v1beta1", "ClusterQueue", "clusterqueues", False)
LOCAL_QUEUES = ResourceType(KUEUE_GROUP, "v1beta1", "LocalQueue", "localqueues", True)
WORKLOADS = ResourceType(KUEUE_GROUP, "v1beta1", "Workload", "workloads", True)
WORKLOAD_PRIORITY_CLASSES = ResourceType(
    KUEUE_GROUP,
    "v1beta1",
    "WorkloadPriorityClass",
    "workloadpriorityclasses",
    namespaced=False,
    status_subresource=False,
)
ROLE_BINDINGS = ResourceType(
    "rbac.authorization.k8s.io", "v1", "RoleBinding", "rolebindings", True, False
)
RESOURCES: dict[str, ResourceType] = {
    rt.key: rt
    for rt in (
        NODES,
        PODS,
        NAMESPACES,
        EVENTS,
        JOBS,
        PDBS,
        NODECLAIMS,
        NODEPOOLS,
        HYPERPOD_PYTORCH_JOBS,
        RESOURCE_FLAVORS,
        CLUSTER_QUEUES,
        LOCAL_QUEUES,
        WORKLOADS,
        WORKLOAD_PRIORITY_CLASSES,
        ROLE_BINDINGS,
    )
}
INITIAL_NAMESPACES = ("default", "kube-node-lease", "kube-public", "kube-system")
"""The namespaces kube-apiserver creates at start (its system namespaces controller)."""
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
"""Set by kube-apiserver on every namespace to the namespace's name (since 1.22)."""
Listener = Callable[[Event, ResourceType, Obj, Obj | None, str | None], None]
Admission = Callable[[Obj], Obj]
"""What the API server does to an object a request writes before it is stored (schema
validation, pruning, defaulting: hyperguard.twin.kube.schema); it raises KubeError to
refuse it. Writes the twin's controllers make directly are not admitted."""


class KubeError(Exception):
    """A failed API call, carried to the client as a Kubernetes Status."""

    def __init__(
        self, code: int, reason: str, message: str, details: Mapping[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = dict(details or {})


def resource_for(group: str, version: str, plural: str) -> ResourceType:
    rt = RESOURCES.get(f"{plural}.{group}" if group else plural)
    if rt is None or rt.version != version:
        raise KubeError(404, "NotFound", "the server could not find the requested resource")
    return rt


def _not_found(rt: ResourceType, name: str) -> KubeError:
    details = {"name": name, "group": rt.group, "kind": rt.plural}
    return KubeError(404, "NotFound", f'{rt.key} "{name}" not found', details)


def _now(clock: Clock | None) -> str:
    # Timestamps are shown through the API, so they are in the service's (wall) time.
    when = clock.wall(clock.now()) if clock else datetime.now(UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: null removes a key, objects merge, anything else (lists too) replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def parse_label_selector(selector: str | None) -> Callable[[Mapping[str, str]], bool]:
    """A labelSelector query parameter as a predicate on an object's labels."""
    requirements: list[tuple[str, str, frozenset[str]]] = []
    for term in re.split(r",(?![^()]*\))", selector or ""):
        if not term.strip():
            continue
        found = _LABEL_REQUIREMENT.match(term.strip())
        if found is None:
            raise KubeError(400, "BadRequest", f"unable to parse requirement: {term.strip()!r}")
        if found["absent"]:
            requirements.append(("!", found["absent"], frozenset()))
        elif found["op"]:
            requirements.append((found["op"], found["key"], frozenset([found["value"]])))
        else:
            values = frozenset(v.strip() for v in (found["values"] or "").split(",") if v.strip())
            requirements.append((found["setop"] or "exists", found["key"], values))
    return lambda labels: all(_label_matches(*req, labels) for req in requirements)


def _label_matches(op: str, key: str, values: frozenset[str], labels: Mapping[str, str]) -> bool:
    if op in ("=", "==", "in"):
        return labels.get(key) in values
    if op in ("!=", "notin"):
        return labels.get(key) not in values
    return (key in labels) == (op == "exists")


def parse_field_selector(selector: str | None) -> Callable[[Obj], bool]:
    """A fieldSelector query parameter as a predicate; only FIELD_SELECTORS are known."""
    checks: list[tuple[str, bool, str]] = []
    for term in (selector or "").split(","):
        if not term.strip():
            continue
        found = _FIELD_REQUIREMENT.match(term.strip())
        if found is None:
            raise KubeError(400, "BadRequest", f"invalid field selector: {term.strip()!r}")
        if found["field"] not in FIELD_SELECTORS:
            known = ", ".join(f'"{f}"' for f in FIELD_SELECTORS)
            message = f'"{found["field"]}" is not a known field selector: only {known}'
            raise KubeError(400, "BadRequest", message)
        checks.append((found["field"], found["op"] != "!=", found["value"].strip()))

    def value(obj: Obj, path: str) -> str:
        section, name = path.split(".")
        return str((obj.get(section) or {}).get(name) or "")

    return lambda obj: all((value(obj, f) == v) == equal for f, equal, v in checks)


def selects(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A metav1.LabelSelector (matchLabels and matchExpressions); null selects nothing."""
    if selector is None:
        return False
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expression in selector.get("matchExpressions") or []:
        key, values = expression.get("key"), expression.get("values") or []
        matched = {
            "In": key in labels and labels[key] in values,
            "NotIn": key not in labels or labels[key] not in values,
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }.get(expression.get("operator", ""), False)
        if not matched:
            return False
    return True


def _scaled(value: int | str, total: int) -> int:
    """An IntOrString budget: a count, or a percentage of `total` rounded up (as Kubernetes)."""
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.endswith("%") and value[:-1].isdigit():
        return math.ceil(int(value[:-1]) * total / 100)
    raise KubeError(422, "Invalid", f"invalid disruption budget value {value!r}")


def _dress_namespace(namespace: Obj) -> None:
    """What kube-apiserver adds to a new namespace: the name label, the `kubernetes`
    finalizer the namespace controller removes once the namespace is empty, phase Active."""
    meta = namespace["metadata"]
    meta["labels"] = {**(meta.get("labels") or {}), NAMESPACE_NAME_LABEL: meta["name"]}
    namespace["spec"] = {"finalizers": ["kubernetes"]}
    namespace["status"] = {"phase": "Active"}


def _spec_of(obj: Obj) -> Obj:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "apiVersion", "kind")}


def _owner_uids(obj: Obj | None) -> set[str]:
    if obj is None:
        return set()
    return {str(ref.get("uid")) for ref in obj["metadata"].get("ownerReferences") or []}


class ObjectStore:
    """Kubernetes objects in memory, one lock for everything.

    Reads return deep copies and writes copy their input, so no caller shares a dict with
    the store. Every write is committed under `lock`, which is re-entrant so that listeners
    (called while it is held) may write back into the store. `user` names who made a change
    (the authenticated caller of an API request, also for the garbage collection that
    request caused); direct calls leave it None. `clock` is the twin's virtual clock;
    creation and deletion times are stamped with its wall time.
    """

    def __init__(self, *, clock: Clock | None = None) -> None:
        self.lock = threading.RLock()
        self._clock = clock
        self._objects: dict[str, dict[tuple[str, str], Obj]] = {key: {} for key in RESOURCES}
        self._owned: dict[str, dict[tuple[str, tuple[str, str]], None]] = {}
        """The garbage collector's graph: an owner's uid, and the (resource, slot) of every
        object whose ownerReferences name it, in the order they came to."""
        self._rv = 0
        self._listeners: list[tuple[Listener, bool]] = []
        """Each listener, and whether it gets copies (False: the objects as stored, which
        the store replaces and never changes in place)."""
        # Propagation asked for by a delete that finalizers are holding up, by owner uid.
        self._pending_propagation: dict[str, str] = {}
        for name in INITIAL_NAMESPACES:
            self.create(NAMESPACES, {"metadata": {"name": name}})

    @property
    def current_resource_version(self) -> str:
        with self.lock:
            return str(self._rv)

    def add_listener(self, listener: Listener, *, copies: bool = True) -> None:
        """`listener` is told every change. `copies` False: it gets the objects as stored,
        and must neither change nor hand them out (the watch history, which serialises
        them)."""
        with self.lock:
            self._listeners.append((listener, copies))

    # reads

    def get(self, rt: ResourceType, name: str, namespace: str | None = None) -> Obj:
        with self.lock:
            return copy.deepcopy(self._stored(rt, name, namespace))

    def find(self, rt: ResourceType, name: str, namespace: str | None = None) -> Obj | None:
        with self.lock:
            found = self._objects[rt.key].get(self._slot(rt, name, namespace))
            return copy.deepcopy(found) if found is not None else None

    def peek(self, rt: ResourceType, name: str, namespace: str | None = None) -> Obj | None:
        """The stored object itself, not a copy: for the twin's controllers, which call it
        under `lock` and must not change what it returns."""
        return self._objects[rt.key].get(self._slot(rt, name, namespace))

    def peek_all(self, rt: ResourceType) -> list[Obj]:
        """Every stored object of a kind, in name order, not copied (as `peek`)."""
        return list(self._iter(rt, None))

    def select(
        self, rt: ResourceType, keep: Callable[[Obj], bool], namespace: str | None = None
    ) -> list[Obj]:
        """Copies of the objects `keep` accepts, in name order. `keep` sees each stored object
        as it is and must not change it: the twin's controllers look for a few objects among
        many (Kueue's suspended runs among every run), and copying all of them to keep a few
        made each new run cost the number of runs ever created."""
        with self.lock:
            return [copy.deepcopy(obj) for obj in self._iter(rt, namespace) if keep(obj)]

    def list(
        self,
        rt: ResourceType,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        *,
        copies: bool = True,
    ) -> list[Obj]:
        """Objects in `namespace` (every namespace when None), in name order. `copies`
        False: the stored objects themselves, for a caller that holds `lock` while it reads
        them and changes none (the API server, serialising a list)."""
        labels_match = parse_label_selector(label_selector)
        fields_match = parse_field_selector(field_selector)
        with self.lock:
            return [
                copy.deepcopy(obj) if copies else obj
                for obj in self._iter(rt, namespace)
                if labels_match(obj["metadata"].get("labels") or {}) and fields_match(obj)
            ]

    # writes

    def create(
        self,
        rt: ResourceType,
        obj: Obj,
        namespace: str | None = None,
        *,
        user: str | None = None,
        admit: Admission | None = None,
    ) -> Obj:
        new = copy.deepcopy(obj)
        meta = new.setdefault("metadata", {})
        if rt.namespaced:
            if namespace and meta.get("namespace") not in (None, namespace):
                raise KubeError(
                    400,
                    "BadRequest",
                    "the namespace of the provided object does not match the namespace "
                    "sent on the request",
                )
            meta["namespace"] = namespace or meta.get("namespace") or "default"
        else:
            meta.pop("namespace", None)
        with self.lock:
            if not meta.get("name") and meta.get("generateName"):
                meta["name"] = self._generated_name(rt, meta["generateName"], meta.get("namespace"))
            name = meta.get("name") or ""
            if not _NAME.match(name):
                message = f'{rt.kind} "{name}" is invalid: metadata.name: Invalid value: {name!r}'
                raise KubeError(422, "Invalid", message, {"name": name, "kind": rt.plural})
            if admit is not None:
                new = admit(new)
                meta = new["metadata"]
            slot = self._slot(rt, name, meta.get("namespace"))
            if slot in self._objects[rt.key]:
                details = {"name": name, "group": rt.group, "kind": rt.plural}
                message = f'{rt.key} "{name}" already exists'
                raise KubeError(409, "AlreadyExists", message, details)
            if rt.namespaced:
                self._require_namespace(meta["namespace"])
            if rt == NAMESPACES:
                _dress_namespace(new)
            for server_owned in _DELETION_METADATA:
                meta.pop(server_owned, None)
            self._rv += 1
            meta.update(
                uid=str(uuid.uuid4()),
                resourceVersion=str(self._rv),
                creationTimestamp=_now(self._clock),
                generation=1,
            )
            new["apiVersion"], new["kind"] = rt.api_version, rt.kind
            self._objects[rt.key][slot] = new
            self._index_owners(rt, slot, None, new)
            self._notify("ADDED", rt, new, None, user)
            return copy.deepcopy(new)

    def patch(
        self,
        rt: ResourceType,
        name: str,
        patch: Any,
        namespace: str | None = None,
        *,
        patch_type: str = "merge",
        subresource: str | None = None,
        user: str | None = None,
        admit: Admission | None = None,
    ) -> Obj:
        """Apply a JSON merge patch. "strategic" is accepted and applied as a merge patch:
        lists are replaced whole rather than merged by their patch keys."""
        if patch_type not in ("merge", "strategic"):
            raise KubeError(
                415,
                "UnsupportedMediaType",
                f"the body of the request was in an unknown format ({patch_type}) - accepted "
                "media types include: application/merge-patch+json, "
                "application/strategic-merge-patch+json",
            )
        if not isinstance(patch, dict):
            raise KubeError(400, "BadRequest", "a merge patch must be a JSON object")
        with self.lock:
            current = self._stored(rt, name, namespace)
            self._check_precondition(rt, current, patch)
            merged = merge_patch(copy.deepcopy(current), patch)
            return self._update(rt, current, merged, subresource, user, admit)

    def replace(
        self,
        rt: ResourceType,
        name: str,
        obj: Obj,
        namespace: str | None = None,
        *,
        subresource: str | None = None,
        user: str | None = None,
        admit: Admission | None = None,
    ) -> Obj:
        """PUT: the whole object; without metadata.resourceVersion the update is
        unconditional, as Kubernetes allows for these resources."""
        with self.lock:
            current = self._stored(rt, name, namespace)
            self._check_precondition(rt, current, obj)
            return self._update(rt, current, copy.deepcopy(obj), subresource, user, admit)

    def delete(
        self,
        rt: ResourceType,
        name: str,
        namespace: str | None = None,
        *,
        grace_period_s: int | None = None,
        propagation: str | None = None,
        user: str | None = None,
    ) -> Obj:
        """Delete, or only mark deleted while finalizers remain. Dependents are collected
        when the object is actually removed. Jobs orphan their pods unless asked otherwise
        (the REST API's default for batch/v1 Jobs); everything else defaults to Background."""
        policy = propagation or ("Orphan" if rt == JOBS else "Background")
        if policy not in PROPAGATION_POLICIES:
            message = f"propagationPolicy: Unsupported value: {policy!r}"
            raise KubeError(422, "Invalid", message)
        with self.lock:
            current = self._stored(rt, name, namespace)
            meta = current["metadata"]
            if rt == NAMESPACES:
                self._empty_namespace(name, user)
            if not meta.get("finalizers"):
                self._rv += 1
                final = copy.deepcopy(current)
                final["metadata"]["resourceVersion"] = str(self._rv)
                self._remove(rt, final, policy, user)
                return copy.deepcopy(final)
            if meta.get("deletionTimestamp"):
                return copy.deepcopy(current)
            self._pending_propagation[meta["uid"]] = policy
            marked = copy.deepcopy(current)
            marked["metadata"].update(
                deletionTimestamp=_now(self._clock),
                deletionGracePeriodSeconds=grace_period_s or 0,
            )
            return self._commit(rt, current, marked, user)

    def evict(self, namespace: str, pod_name: str, *, user: str | None = None) -> None:
        """The pods/eviction subresource: delete the pod unless that would take its
        PodDisruptionBudget below its budget. Pods that are not running (Pending, finished,
        or already being deleted) are evicted without consulting a budget, as Kubernetes
        does."""
        with self.lock:
            pod = self._stored(PODS, pod_name, namespace)
            phase = (pod.get("status") or {}).get("phase")
            running = phase not in ("Pending", "Succeeded", "Failed")
            if running and not pod["metadata"].get("deletionTimestamp"):
                labels = pod["metadata"].get("labels") or {}
                budgets = [
                    pdb
                    for pdb in self._iter(PDBS, namespace)
                    if selects((pdb.get("spec") or {}).get("selector"), labels)
                ]
                if len(budgets) > 1:
                    message = (
                        "This pod has more than one PodDisruptionBudget, which the eviction "
                        "subresource does not support."
                    )
                    raise KubeError(500, "InternalError", message)
                if budgets and self._disruptions_allowed(budgets[0]) <= 0:
                    message = "Cannot evict pod as it would violate the pod's disruption budget."
                    details = {"name": pod_name, "kind": "pods"}
                    raise KubeError(429, "TooManyRequests", message, details)
            self.delete(PODS, pod_name, namespace, user=user)

    # internals

    def _require_namespace(self, namespace: str) -> None:
        """kube-apiserver's NamespaceLifecycle admission: nothing is created in a namespace
        that does not exist; the Status is NotFound for `namespaces` (core group, so no
        `group` in its details), as `kubectl create -n absent` shows."""
        if self._slot(NAMESPACES, namespace, None) not in self._objects[NAMESPACES.key]:
            details = {"name": namespace, "kind": NAMESPACES.plural}
            raise KubeError(404, "NotFound", f'namespaces "{namespace}" not found', details)

    def _empty_namespace(self, namespace: str, user: str | None) -> None:
        """The namespace controller's work: delete everything in a namespace being deleted."""
        for rt in RESOURCES.values():
            if rt.namespaced:
                for obj in list(self._iter(rt, namespace)):
                    name = obj["metadata"]["name"]
                    if self._objects[rt.key].get(self._slot(rt, name, namespace)) is not None:
                        self.delete(rt, name, namespace, user=user)

    @staticmethod
    def _slot(rt: ResourceType, name: str, namespace: str | None) -> tuple[str, str]:
        return ((namespace or "default") if rt.namespaced else "", name)

    def _stored(self, rt: ResourceType, name: str, namespace: str | None) -> Obj:
        found = self._objects[rt.key].get(self._slot(rt, name, namespace))
        if found is None:
            raise _not_found(rt, name)
        return found

    def _iter(self, rt: ResourceType, namespace: str | None) -> Iterator[Obj]:
        for (ns, _), obj in sorted(self._objects[rt.key].items()):
            if namespace is None or not rt.namespaced or ns == namespace:
                yield obj

    def _generated_name(self, rt: ResourceType, prefix: str, namespace: str | None) -> str:
        while True:
            name = prefix + "".join(secrets.choice(_GENERATE_ALPHABET) for _ in range(5))
            if self._slot(rt, name, namespace) not in self._objects[rt.key]:
                return name

    @staticmethod
    def _check_precondition(rt: ResourceType, current: Obj, body: Obj) -> None:
        meta = body.get("metadata")
        wanted = meta.get("resourceVersion") if isinstance(meta, dict) else None
        if wanted is not None and wanted != current["metadata"]["resourceVersion"]:
            name = current["metadata"]["name"]
            details = {"name": name, "group": rt.group, "kind": rt.plural}
            message = f'Operation cannot be fulfilled on {rt.key} "{name}": {_CONFLICT}'
            raise KubeError(409, "Conflict", message, details)

    def _update(
        self,
        rt: ResourceType,
        current: Obj,
        new: Obj,
        subresource: str | None,
        user: str | None,
        admit: Admission | None = None,
    ) -> Obj:
        """Apply the status subresource rules, then commit `new` in place of `current`."""
        if subresource is not None:
            if subresource != "status" or not rt.status_subresource:
                raise _not_found(rt, current["metadata"]["name"])
            status = new.get("status")
            new = copy.deepcopy(current)
            new.pop("status", None)
            if status is not None:
                new["status"] = status
        elif rt.status_subresource:
            new.pop("status", None)
            if "status" in current:
                new["status"] = copy.deepcopy(current["status"])
        meta = new.get("metadata")
        meta = new["metadata"] = dict(meta) if isinstance(meta, dict) else {}
        for field in _SERVER_METADATA + _DELETION_METADATA:
            meta.pop(field, None)
            if field in current["metadata"]:
                meta[field] = current["metadata"][field]
        new["apiVersion"], new["kind"] = rt.api_version, rt.kind
        if admit is not None:
            new = admit(new)
        if new == current:
            return copy.deepcopy(current)
        if _spec_of(new) != _spec_of(current):
            meta["generation"] = current["metadata"].get("generation", 1) + 1
        return self._commit(rt, current, new, user)

    def _commit(self, rt: ResourceType, current: Obj, new: Obj, user: str | None) -> Obj:
        self._rv += 1
        meta = new["metadata"]
        meta["resourceVersion"] = str(self._rv)
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            policy = self._pending_propagation.get(meta["uid"], "Background")
            self._remove(rt, new, policy, user)
            return copy.deepcopy(new)
        slot = self._slot(rt, meta["name"], meta.get("namespace"))
        self._index_owners(rt, slot, self._objects[rt.key].get(slot), new)
        self._objects[rt.key][slot] = new
        self._notify("MODIFIED", rt, new, current, user)
        return copy.deepcopy(new)

    def _remove(self, rt: ResourceType, final: Obj, policy: str, user: str | None) -> None:
        meta = final["metadata"]
        uid = meta["uid"]
        if policy == "Foreground":
            self._collect(uid, policy, user)
        slot = self._slot(rt, meta["name"], meta.get("namespace"))
        old = self._objects[rt.key].pop(slot)
        self._index_owners(rt, slot, old, None)
        self._pending_propagation.pop(uid, None)
        self._notify("DELETED", rt, final, old, user)
        if policy != "Foreground":
            self._collect(uid, policy, user)

    def _index_owners(
        self, rt: ResourceType, slot: tuple[str, str], old: Obj | None, new: Obj | None
    ) -> None:
        before, after = _owner_uids(old), _owner_uids(new)
        for uid in before - after:
            owned = self._owned.get(uid, {})
            owned.pop((rt.key, slot), None)
            if not owned:
                self._owned.pop(uid, None)
        for uid in after - before:
            self._owned.setdefault(uid, {})[(rt.key, slot)] = None

    def _collect(self, owner_uid: str, policy: str, user: str | None) -> None:
        """The garbage collector's work for one removed owner: its dependents by kind, in
        the order they were made (the graph `_owned` names them, as kube-controller-
        manager's graph builder does, instead of a scan of every object)."""
        order = {key: i for i, key in enumerate(RESOURCES)}
        named = sorted(self._owned.get(owner_uid, {}), key=lambda entry: order[entry[0]])
        dependents = [
            (RESOURCES[key], obj)
            for key, slot in named
            if (obj := self._objects[key].get(slot)) is not None
            and any(
                ref.get("uid") == owner_uid for ref in obj["metadata"].get("ownerReferences", [])
            )
        ]
        for rt, obj in dependents:
            name, namespace = obj["metadata"]["name"], obj["metadata"].get("namespace")
            current = self._objects[rt.key].get(self._slot(rt, name, namespace))
            if current is None:
                continue
            if policy == "Orphan":
                orphan = copy.deepcopy(current)
                refs = [
                    r for r in orphan["metadata"]["ownerReferences"] if r.get("uid") != owner_uid
                ]
                orphan["metadata"]["ownerReferences"] = refs
                if not refs:
                    del orphan["metadata"]["ownerReferences"]
                self._commit(rt, current, orphan, user)
            else:
                self.delete(rt, name, namespace, propagation=policy, user=user)

    def _disruptions_allowed(self, pdb: Obj) -> int:
        spec = pdb.get("spec") or {}
        namespace = pdb["metadata"]["namespace"]
        matching = [
            pod
            for pod in self._iter(PODS, namespace)
            if selects(spec.get("selector"), pod["metadata"].get("labels") or {})
        ]
        healthy = sum(
            1
            for pod in matching
            if (pod.get("status") or {}).get("phase") == "Running"
            and not pod["metadata"].get("deletionTimestamp")
        )
        if spec.get("minAvailable") is not None:
            return healthy - _scaled(spec["minAvailable"], len(matching))
        if spec.get("maxUnavailable") is not None:
            return _scaled(spec["maxUnavailable"], len(matching)) - (len(matching) - healthy)
        return healthy

    def _notify(
        self, event: Event, rt: ResourceType, obj: Obj, old: Obj | None, user: str | None
    ) -> None:
        for listener, copies in list(self._listeners):
            try:
                if copies:
                    listener(event, rt, copy.deepcopy(obj), copy.deepcopy(old), user)
                else:
                    listener(event, rt, obj, old, user)
            except Exception:
                # The change is committed; a failing observer must not undo or block it.
                _log.exception("kube store listener failed on %s %s", event, rt.plural)
