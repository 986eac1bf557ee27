"""Kueue in the twin's cluster: what kubernetes-sigs/kueue v0.14 (kueue.x-k8s.io/v1beta1)
does with a suspended batch Job or HyperPodPyTorchJob, so that a run starts only where a real
cluster would start it.

A run carrying `kueue.x-k8s.io/queue-name` gets a Workload (owned by the run, named as
jobframework's GetWorkloadNameForOwnerWithGVK names it) once the WorkloadPriorityClass its
`kueue.x-k8s.io/priority-class` label names exists: without it Kueue's job reconciler cannot
build the Workload (jobframework.ExtractPriority → GetPriorityFromWorkloadPriorityClass fails)
and retries, the run suspended, no Workload shown. The Workload is admitted, and the run
unsuspended by Kueue's service account, only when
- the LocalQueue exists in the run's namespace, else QuotaReserved False, reason
  Inadmissible, "LocalQueue <name> doesn't exist" (core/workload_controller.go);
- its ClusterQueue exists, else Inadmissible, "ClusterQueue <name> doesn't exist";
- the ClusterQueue's namespaceSelector takes the namespace, else reason Pending, "Workload
  namespace doesn't match ClusterQueue selector" (scheduler.go, nominate);
- a flavor of the ClusterQueue matches the pods' nodeSelector and has room for every
  resource they request: nominalQuota less what admitted Workloads use, plus what the
  cohort's other ClusterQueues lend (lendingLimit, default all their unused nominal quota),
  within the queue's borrowingLimit. Else Pending, "couldn't assign flavors to pod set
  <name>: ..." with flavorassigner's reasons ("resource X unavailable in ClusterQueue",
  "flavor F doesn't match node affinity", "insufficient unused quota for X in flavor F, N
  more needed", "insufficient quota for X in flavor F, request > maximum capacity (a > b)").
Pending workloads are tried again, oldest first, whenever a Kueue object or a namespace
changes or quota is freed (a Workload deleted, or finished with its run).

Not emulated: preemption (Kueue's and the ClusterQueue's preemption policies), fair sharing,
admission checks, partial admission, flavor taints and node affinity (only nodeSelector is
matched), LimitRanges, inactive (stopped) queues, hierarchical cohorts, queueing strategy
(every pending workload is tried, as BestEffortFIFO does), the re-admission Kueue makes when
an admitted job's pod sets change (a resized HyperPodPyTorchJob keeps its admission).
"""

from __future__ import annotations

import hashlib
import math
import re
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from hyperguard.twin.kube.store import (
    CLUSTER_QUEUES,
    HYPERPOD_PYTORCH_JOBS,
    JOBS,
    LOCAL_QUEUES,
    NAMESPACES,
    RESOURCE_FLAVORS,
    WORKLOAD_PRIORITY_CLASSES,
    WORKLOADS,
    ObjectStore,
    ResourceType,
    selects,
)

Obj = dict[str, Any]
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"
KUEUE_USER = "system:serviceaccount:kueue-system:kueue-controller-manager"
"""Who unsuspends an admitted job (Kueue's controller manager, as installed)."""
KUEUE_OBJECTS = (
    NAMESPACES,
    LOCAL_QUEUES,
    CLUSTER_QUEUES,
    RESOURCE_FLAVORS,
    WORKLOAD_PRIORITY_CLASSES,
)
_SUFFIXES = {
    "m": 10**-3,
    "": 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")


def resource_value(resource: str, quantity: Any) -> int:
    """A Kubernetes quantity as Kueue counts it (resources.ResourceValue): milli-units for
    cpu, whole units (rounded up) for everything else."""
    found = _QUANTITY.match(str(quantity).strip())
    if found is None:
        raise ValueError(f"quantities must match the regular expression: {quantity!r}")
    value = float(found[1]) * _SUFFIXES[found[2] or ""]
    return math.ceil(value * 1000 if resource == "cpu" else value)


def quantity_string(resource: str, value: int) -> str:
    """resources.ResourceQuantityString: cpu in cores or millicores, memory in the largest
    binary suffix that divides it, other resources in decimal SI."""
    if resource == "cpu":
        return str(value // 1000) if value % 1000 == 0 else f"{value}m"
    if resource == "memory":
        for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
            if value and value % _SUFFIXES[suffix] == 0:
                return f"{value // _SUFFIXES[suffix]}{suffix}"
        return str(value)
    for suffix in ("E", "P", "T", "G", "M", "k"):
        if value and value % _SUFFIXES[suffix] == 0:
            return f"{value // _SUFFIXES[suffix]}{suffix}"
    return str(value)


@dataclass(frozen=True)
class PodSet:
    name: str
    count: int
    requests: dict[str, int]
    """Per pod, as resource_value counts them."""
    node_selector: dict[str, str]


def workload_name(kind: str, group: str, name: str, uid: str) -> str:
    """jobframework.GetWorkloadNameForOwnerWithGVK: `<kind>-<name>-<sha1[:5]>`."""
    digest = hashlib.sha1(f"{kind}\n{group}\n{name}\n{uid}".encode()).hexdigest()
    return f"{kind.lower()}-{name}"[: 252 - 5] + "-" + digest[:5]


def _pod_requests(spec: Mapping[str, Any]) -> dict[str, int]:
    """What one pod requests: its containers' requests (limits where a request is unset,
    as Kubernetes defaults them)."""
    total: dict[str, int] = defaultdict(int)
    for container in spec.get("containers") or []:
        resources = container.get("resources") or {}
        asked = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        for resource, quantity in asked.items():
            total[resource] += resource_value(resource, quantity)
    return dict(total)


def pod_sets(rt: ResourceType, job: Obj) -> list[PodSet]:
    """The pod sets Kueue's integration builds for the job: a batch Job's single `main`
    (parallelism pods), a HyperPodPyTorchJob's replica specs (replicas + spares pods)."""
    spec = job.get("spec") or {}
    if rt == HYPERPOD_PYTORCH_JOBS:
        sets = [
            (r.get("name") or "pods", int(r.get("replicas", 1)) + int(r.get("spares", 0)), r)
            for r in spec.get("replicaSpecs") or []
        ]
    else:
        sets = [("main", int(spec.get("parallelism", 1)), spec)]
    found = []
    for name, count, holder in sets:
        pod = (holder.get("template") or {}).get("spec") or {}
        found.append(PodSet(name, count, _pod_requests(pod), dict(pod.get("nodeSelector") or {})))
    return found


def is_suspended(rt: ResourceType, job: Obj) -> bool:
    spec = job.get("spec") or {}
    if rt == HYPERPOD_PYTORCH_JOBS:
        return bool((spec.get("runPolicy") or {}).get("suspend"))
    return bool(spec.get("suspend"))


def _condition(workload: Obj, kind: str) -> Obj | None:
    conditions = (workload.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == kind), None)


def _queued(rt: ResourceType, job: Obj) -> bool:
    """A run Kueue still has to admit: queued, suspended, not being deleted."""
    meta = job["metadata"]
    return bool(
        (meta.get("labels") or {}).get(QUEUE_LABEL)
        and is_suspended(rt, job)
        and not meta.get("deletionTimestamp")
    )


def _holds_quota(workload: Obj) -> bool:
    reserved = _condition(workload, "QuotaReserved")
    finished = _condition(workload, "Finished")
    held = reserved is not None and reserved.get("status") == "True"
    return held and not (finished is not None and finished.get("status") == "True")


WPC_SOURCE = "kueue.x-k8s.io/workloadpriorityclass"
"""constants.WorkloadPriorityClassSource."""


def pod_template(rt: ResourceType, job: Obj, pod_set: str) -> Obj:
    spec = job.get("spec") or {}
    if rt == HYPERPOD_PYTORCH_JOBS:
        for replica in spec.get("replicaSpecs") or []:
            if (replica.get("name") or "pods") == pod_set:
                return dict(replica.get("template") or {})
        return {}
    return dict(spec.get("template") or {})


class Kueue:
    """Kueue's job reconciler, workload controller and scheduler over the twin's store.

    It listens to every change (its own writes carry KUEUE_USER) and acts at once: a run
    created through the API gets its Workload and is admitted or left pending in the same
    call. `stamp` gives the time an API shows."""

    def __init__(self, store: ObjectStore, stamp: Callable[[], str]) -> None:
        self.store = store
        self._stamp = stamp
        self._busy = False
        self._waiting: dict[tuple[str, str, str], None] = {}
        """The runs Kueue still has to admit (`_queued`), by (resource, namespace, name),
        kept up to date from every change: a pass looks at these, not at every run ever
        created (Kueue's own queue manager keeps its queues the same way)."""
        self._holding: dict[tuple[str, str], None] = {}
        """The Workloads holding quota (`_holds_quota`), by (namespace, name)."""
        with store.lock:
            for rt in (JOBS, HYPERPOD_PYTORCH_JOBS, WORKLOADS):
                for obj in store.peek_all(rt):
                    self._index("ADDED", rt, obj)
            store.add_listener(self._on_change)

    def _index(self, event: str, rt: ResourceType, obj: Obj) -> None:
        meta = obj["metadata"]
        namespace, name = meta.get("namespace", ""), meta["name"]
        if rt in (JOBS, HYPERPOD_PYTORCH_JOBS):
            run = (rt.key, namespace, name)
            if event != "DELETED" and _queued(rt, obj):
                self._waiting[run] = None
            else:
                self._waiting.pop(run, None)
        elif rt == WORKLOADS:
            if event != "DELETED" and _holds_quota(obj):
                self._holding[(namespace, name)] = None
            else:
                self._holding.pop((namespace, name), None)

    def _on_change(
        self, event: str, rt: ResourceType, obj: Obj, old: Obj | None, user: str | None
    ) -> None:
        """Kueue's reasons to look again: a new run, a run that ended (its quota is given
        back), a deleted Workload (its run went), any change to a Kueue object or a
        namespace."""
        self._index(event, rt, obj)
        if self._busy:
            return  # our own writes while scheduling
        if rt in (JOBS, HYPERPOD_PYTORCH_JOBS):
            if event == "MODIFIED" and _finished(rt, obj) and not _finished(rt, old or {}):
                self._finish(obj)
            elif event != "ADDED":
                return
        elif rt not in KUEUE_OBJECTS and not (rt == WORKLOADS and event == "DELETED"):
            return
        self.schedule()

    def schedule(self) -> None:
        """One pass of Kueue over every suspended queued run: a Workload for those that
        have none yet, then admission in creation order."""
        with self.store.lock:
            self._busy = True
            try:
                for rt, job in self._queued_runs():
                    workload = self._workload_of(rt, job)
                    if workload is not None and not _holds_quota(workload):
                        self._try_admit(rt, job, workload)
            finally:
                self._busy = False

    def _queued_runs(self) -> Iterator[tuple[ResourceType, Obj]]:
        kinds = {rt.key: rt for rt in (JOBS, HYPERPOD_PYTORCH_JOBS)}
        runs = [
            (kinds[kind], job)
            for kind, namespace, name in list(self._waiting)
            if (job := self.store.find(kinds[kind], name, namespace)) is not None
            and _queued(kinds[kind], job)
        ]
        runs.sort(key=lambda pair: (pair[1]["metadata"]["creationTimestamp"], _rv(pair[1])))
        yield from runs

    def _workload_of(self, rt: ResourceType, job: Obj) -> Obj | None:
        meta = job["metadata"]
        name = workload_name(rt.kind, rt.group, meta["name"], meta["uid"])
        found = self.store.find(WORKLOADS, name, meta["namespace"])
        if found is not None:
            return found
        labels = meta.get("labels") or {}
        priority_class = labels.get(PRIORITY_CLASS_LABEL)
        priority = 0
        if priority_class:
            wpc = self.store.find(WORKLOAD_PRIORITY_CLASSES, priority_class)
            if wpc is None:
                return None  # the job reconciler's error; retried, no Workload
            priority = int(wpc.get("value", 0))
        spec: Obj = {
            "queueName": labels[QUEUE_LABEL],
            "priority": priority,
            "podSets": [
                {
                    "name": ps.name,
                    "count": ps.count,
                    "template": pod_template(rt, job, ps.name),
                }
                for ps in pod_sets(rt, job)
            ],
        }
        if priority_class:
            spec.update(priorityClassName=priority_class, priorityClassSource=WPC_SOURCE)
        owner = {
            "apiVersion": rt.api_version,
            "kind": rt.kind,
            "name": meta["name"],
            "uid": meta["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
        return self.store.create(
            WORKLOADS,
            {"metadata": {"name": name, "ownerReferences": [owner]}, "spec": spec},
            meta["namespace"],
            user=KUEUE_USER,
        )

    def _try_admit(self, rt: ResourceType, job: Obj, workload: Obj) -> None:
        namespace = job["metadata"]["namespace"]
        queue_name = workload["spec"]["queueName"]
        queue = self.store.find(LOCAL_QUEUES, queue_name, namespace)
        queue_ref = (queue or {}).get("spec", {}).get("clusterQueue", "")
        cluster_queue = self.store.find(CLUSTER_QUEUES, queue_ref) if queue else None
        if queue is None:
            self._pending(workload, "Inadmissible", f"LocalQueue {queue_name} doesn't exist")
        elif cluster_queue is None:
            message = f"ClusterQueue {queue_ref} doesn't exist"
            self._pending(workload, "Inadmissible", message)
        elif not self._namespace_matches(cluster_queue, namespace):
            message = "Workload namespace doesn't match ClusterQueue selector"
            self._pending(workload, "Pending", message)
        else:
            flavors, message = self._assign(cluster_queue, pod_sets(rt, job))
            if flavors is None:
                self._pending(workload, "Pending", message)
            else:
                self._admit(rt, job, workload, cluster_queue, flavors)

    def _namespace_matches(self, cluster_queue: Obj, namespace: str) -> bool:
        found = self.store.find(NAMESPACES, namespace)
        labels = ((found or {}).get("metadata") or {}).get("labels") or {}
        selector = (cluster_queue.get("spec") or {}).get("namespaceSelector")
        return found is not None and selects(selector, labels)

    def _assign(
        self, cluster_queue: Obj, sets: list[PodSet]
    ) -> tuple[list[dict[str, Any]] | None, str]:
        """Flavors per pod set (the first of each resource group's flavors that fits, in
        order), or None and flavorassigner's message."""
        usage = self._usage()
        taken: dict[tuple[str, str], int] = defaultdict(int)
        assignments, problems = [], []
        for pod_set in sets:
            reasons: list[str] = []
            chosen = self._flavor_for(cluster_queue, pod_set, usage, taken, reasons)
            if chosen is None:
                problems.append(
                    f"couldn't assign flavors to pod set {pod_set.name}: "
                    + ", ".join(sorted(reasons))
                )
                continue
            for resource, amount in pod_set.requests.items():
                taken[(chosen, resource)] += amount * pod_set.count
            assignments.append(
                {
                    "name": pod_set.name,
                    "count": pod_set.count,
                    "flavors": {resource: chosen for resource in pod_set.requests},
                    "resourceUsage": {
                        resource: quantity_string(resource, amount * pod_set.count)
                        for resource, amount in pod_set.requests.items()
                    },
                }
            )
        if problems:
            return None, "; ".join(problems)
        return assignments, ""

    def _flavor_for(
        self,
        cluster_queue: Obj,
        pod_set: PodSet,
        usage: Mapping[tuple[str, str, str], int],
        taken: Mapping[tuple[str, str], int],
        reasons: list[str],
    ) -> str | None:
        asked = {r: v for r, v in pod_set.requests.items() if v > 0}
        group = _resource_group(cluster_queue, asked, reasons)
        if group is None:
            return None
        name = cluster_queue["metadata"]["name"]
        for flavor in group.get("flavors") or []:
            flavor_name = flavor["name"]
            mismatch = self._flavor_mismatch(flavor_name, pod_set)
            if mismatch:
                reasons.append(mismatch)
                continue
            shortfalls = [
                shortfall
                for resource, amount in asked.items()
                if (
                    shortfall := self._shortfall(
                        name,
                        flavor_name,
                        resource,
                        amount * pod_set.count + taken.get((flavor_name, resource), 0),
                        usage,
                    )
                )
            ]
            if not shortfalls:
                return str(flavor_name)
            reasons.extend(shortfalls)
        return None

    def _flavor_mismatch(self, flavor: str, pod_set: PodSet) -> str:
        """Why a flavor cannot take the pod set whatever the quota, or ''."""
        found = self.store.find(RESOURCE_FLAVORS, flavor)
        if found is None:
            return f"flavor {flavor} not found"
        node_labels = (found.get("spec") or {}).get("nodeLabels") or {}
        if any(pod_set.node_selector.get(k, v) != v for k, v in node_labels.items()):
            return f"flavor {flavor} doesn't match node affinity"
        return ""

    def _shortfall(
        self,
        queue: str,
        flavor: str,
        resource: str,
        need: int,
        usage: Mapping[tuple[str, str, str], int],
    ) -> str:
        """Why `need` of one flavor's resource does not fit `queue`, in Kueue's words, or ''."""
        room, most = self._room(queue, flavor, resource, usage)
        if need > most:
            return (
                f"insufficient quota for {resource} in flavor {flavor}, request > "
                f"maximum capacity ({quantity_string(resource, need)} > "
                f"{quantity_string(resource, most)})"
            )
        if need > room:
            return (
                f"insufficient unused quota for {resource} in flavor {flavor}, "
                f"{quantity_string(resource, need - room)} more needed"
            )
        return ""

    def _room(
        self, queue: str, flavor: str, resource: str, usage: Mapping[tuple[str, str, str], int]
    ) -> tuple[int, int]:
        """(what is free for `queue` now, the most it could ever hold) of one flavor's
        resource: its nominal quota less its usage, plus what the rest of its cohort lends,
        within its borrowingLimit."""
        quotas = self._quotas()
        own = quotas.get(queue, {}).get((flavor, resource))
        if own is None:
            return 0, 0
        cohort, nominal, borrowing, lending = own
        used = usage.get((queue, flavor, resource), 0)
        if not cohort:
            return nominal - used, nominal
        members = {q: v[(flavor, resource)] for q, v in quotas.items() if (flavor, resource) in v}
        lent_pool = sum(min(lend, nom) for c, nom, _, lend in members.values() if c == cohort)
        lent_used = sum(
            max(0, usage.get((q, flavor, resource), 0) - (nom - min(lend, nom)))
            for q, (c, nom, _, lend) in members.items()
            if c == cohort
        )
        guaranteed = nominal - min(lending, nominal)
        room = max(0, guaranteed - used) + max(0, lent_pool - lent_used)
        most = guaranteed + lent_pool
        if borrowing is not None:
            room = min(room, nominal + borrowing - used)
            most = min(most, nominal + borrowing)
        return room, most

    def _quotas(self) -> dict[str, dict[tuple[str, str], tuple[str, int, int | None, int]]]:
        """Per ClusterQueue, per (flavor, resource): (cohort, nominalQuota, borrowingLimit
        or None for no limit, lendingLimit, which defaults to the nominal quota). Read from
        the stored queues, uncopied, under the store's lock: every admission asks."""
        found: dict[str, dict[tuple[str, str], tuple[str, int, int | None, int]]] = {}
        with self.store.lock:
            for queue in self.store.list(CLUSTER_QUEUES, copies=False):
                spec = queue.get("spec") or {}
                cohort = str(spec.get("cohort") or "")
                entries = found.setdefault(queue["metadata"]["name"], {})
                for group in spec.get("resourceGroups") or []:
                    for flavor in group.get("flavors") or []:
                        for quota in flavor.get("resources") or []:
                            resource = quota["name"]
                            nominal = resource_value(resource, quota.get("nominalQuota", 0))
                            borrowing = quota.get("borrowingLimit")
                            lending = quota.get("lendingLimit")
                            entries[(flavor["name"], resource)] = (
                                cohort,
                                nominal,
                                None if borrowing is None else resource_value(resource, borrowing),
                                nominal if lending is None else resource_value(resource, lending),
                            )
        return found

    def _usage(self) -> dict[tuple[str, str, str], int]:
        """What admitted, unfinished Workloads hold: (ClusterQueue, flavor, resource)."""
        used: dict[tuple[str, str, str], int] = defaultdict(int)
        for namespace, name in self._holding:
            workload = self.store.peek(WORKLOADS, name, namespace)
            if workload is None or not _holds_quota(workload):
                continue
            admission = (workload.get("status") or {}).get("admission") or {}
            queue = admission.get("clusterQueue", "")
            for assignment in admission.get("podSetAssignments") or []:
                flavors = assignment.get("flavors") or {}
                for resource, quantity in (assignment.get("resourceUsage") or {}).items():
                    key = (queue, flavors.get(resource, ""), resource)
                    used[key] += resource_value(resource, quantity)
        return used

    def _pending(self, workload: Obj, reason: str, message: str) -> None:
        """workload.UnsetQuotaReservationWithCondition: QuotaReserved False with Kueue's
        reason and message (written only when they change)."""
        current = _condition(workload, "QuotaReserved")
        if current is not None and (current.get("reason"), current.get("message")) == (
            reason,
            message,
        ):
            return
        condition = {
            "type": "QuotaReserved",
            "status": "False",
            "reason": reason,
            "message": message,
            "lastTransitionTime": self._stamp(),
            "observedGeneration": workload["metadata"].get("generation", 1),
        }
        self._set_conditions(workload, [condition])

    def _admit(
        self,
        rt: ResourceType,
        job: Obj,
        workload: Obj,
        cluster_queue: Obj,
        assignments: list[dict[str, Any]],
    ) -> None:
        """workload.SetQuotaReservation and SyncAdmittedCondition, then the job reconciler
        unsuspends the job (startJob)."""
        now = self._stamp()
        generation = workload["metadata"].get("generation", 1)
        queue = cluster_queue["metadata"]["name"]
        conditions = [
            {
                "type": "QuotaReserved",
                "status": "True",
                "reason": "QuotaReserved",
                "message": f"Quota reserved in ClusterQueue {queue}",
                "lastTransitionTime": now,
                "observedGeneration": generation,
            },
            {
                "type": "Admitted",
                "status": "True",
                "reason": "Admitted",
                "message": "The workload is admitted",
                "lastTransitionTime": now,
                "observedGeneration": generation,
            },
        ]
        admission = {"clusterQueue": queue, "podSetAssignments": assignments}
        self._set_conditions(workload, conditions, admission=admission)
        meta = job["metadata"]
        if rt == HYPERPOD_PYTORCH_JOBS:
            unsuspend: Obj = {"spec": {"runPolicy": {"suspend": False}}}
        else:
            unsuspend = {"spec": {"suspend": False}}
        self.store.patch(rt, meta["name"], unsuspend, meta["namespace"], user=KUEUE_USER)

    def _finish(self, job: Obj) -> None:
        """The job ended: its Workload is Finished and gives its quota back."""
        meta = job["metadata"]

        def holding_for_job(workload: Obj) -> bool:
            owners = workload["metadata"].get("ownerReferences") or []
            return any(o.get("uid") == meta["uid"] for o in owners) and _holds_quota(workload)

        holding = [  # among the Workloads holding quota, not every Workload ever made
            name
            for namespace, name in list(self._holding)
            if namespace == meta["namespace"]
            and (stored := self.store.peek(WORKLOADS, name, namespace)) is not None
            and holding_for_job(stored)
        ]
        for workload in filter(
            None, (self.store.find(WORKLOADS, n, meta["namespace"]) for n in holding)
        ):
            condition = {
                "type": "Finished",
                "status": "True",
                "reason": "Succeeded" if _succeeded(job) else "Failed",
                "message": "Job finished",
                "lastTransitionTime": self._stamp(),
                "observedGeneration": workload["metadata"].get("generation", 1),
            }
            self._busy = True
            try:
                self._set_conditions(workload, [condition])
            finally:
                self._busy = False

    def _set_conditions(
        self, workload: Obj, conditions: list[Obj], *, admission: Obj | None = None
    ) -> None:
        status = dict(workload.get("status") or {})
        kinds = {c["type"] for c in conditions}
        kept = [c for c in status.get("conditions") or [] if c.get("type") not in kinds]
        status["conditions"] = [*kept, *conditions]
        if admission is not None:
            status["admission"] = admission
        elif any(c["type"] == "QuotaReserved" and c["status"] == "False" for c in conditions):
            status.pop("admission", None)
        meta = workload["metadata"]
        self.store.patch(
            WORKLOADS,
            meta["name"],
            {"status": status},
            meta["namespace"],
            subresource="status",
            user=KUEUE_USER,
        )


def _rv(obj: Obj) -> int:
    return int(obj["metadata"].get("resourceVersion") or 0)


def _finished_condition(rt: ResourceType, job: Obj) -> Obj | None:
    kinds = ("Completed", "Failed") if rt == HYPERPOD_PYTORCH_JOBS else ("Complete", "Failed")
    conditions = (job.get("status") or {}).get("conditions") or []
    return next(
        (c for c in conditions if c.get("type") in kinds and c.get("status") == "True"), None
    )


def _finished(rt: ResourceType, job: Obj) -> bool:
    return _finished_condition(rt, job) is not None


def _succeeded(job: Obj) -> bool:
    conditions = (job.get("status") or {}).get("conditions") or []
    return any(
        c.get("type") in ("Complete", "Completed") and c.get("status") == "True" for c in conditions
    )


def _resource_group(
    cluster_queue: Obj, asked: Mapping[str, int], reasons: list[str]
) -> dict[str, Any] | None:
    """The ClusterQueue's resource group that covers every resource asked for."""
    groups = (cluster_queue.get("spec") or {}).get("resourceGroups") or []
    group = next((g for g in groups if set(asked) <= set(g.get("coveredResources") or [])), None)
    if group is None:
        covered = {r for g in groups for r in g.get("coveredResources") or []}
        missing = sorted(set(asked) - covered) or sorted(asked)
        reasons.append(f"resource {missing[0]} unavailable in ClusterQueue")
        return None
    return dict(group)
