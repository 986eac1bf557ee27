"""kube-scheduler's filters as pure functions: which nodes may take a pod, and what the
scheduler writes on a pod that none may take.

Emulated: kube-scheduler's default Filter plugins that decide for the pods the twin runs,
in the framework's order, a node failing on the first plugin that rejects it
(kubernetes/kubernetes pkg/scheduler/framework/plugins, apis/config/v1/default_plugins.go):
- NodeUnschedulable: `spec.unschedulable`, unless the pod tolerates
  `node.kubernetes.io/unschedulable:NoSchedule` ("node(s) were unschedulable");
- TaintToleration: every NoSchedule and NoExecute taint must be tolerated; PreferNoSchedule
  only scores ("node(s) had untolerated taint {key: value}");
- NodeAffinity: `spec.nodeSelector`, and the required node affinity: terms ORed, each
  term's matchExpressions (In, NotIn, Exists, DoesNotExist, Gt, Lt) and matchFields
  (`metadata.name`) ANDed ("node(s) didn't match Pod's node affinity/selector");
- NodeResourcesFit: the pod's requests (its containers' sum, at least its largest init
  container; a limit stands for a missing request, as API defaulting does) within the
  node's allocatable less what the pods bound there request ("Insufficient <resource>",
  "Too many pods").
The message is FitError.Error()'s (pkg/scheduler/framework/types.go): the reasons'
histogram sorted as strings, then DefaultPreemption's verdict per node.

Not emulated: scoring (the caller prefers a node), pod (anti-)affinity, topology spread,
host ports, volumes, scheduling gates, and preemption itself: no pod of the twin has a
lower priority than another, so there are never victims.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
UNSCHEDULABLE = "node(s) were unschedulable"
AFFINITY_MISMATCH = "node(s) didn't match Pod's node affinity/selector"
TOO_MANY_PODS = "Too many pods"
NO_NODES = "no nodes available to schedule pods"
_BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")
_FINISHED_PHASES = ("Succeeded", "Failed")
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": "1e-9", "u": "1e-6", "m": "1e-3", "k": "1e3", "M": "1e6", "G": "1e9"}
_DECIMAL |= {"T": "1e12", "P": "1e15", "E": "1e18"}

Obj = Mapping[str, Any]


def quantity(value: object) -> Decimal:
    """A Kubernetes resource quantity ("500m", "2", "80Gi", "1e3") as a number."""
    text = str(value).strip()
    for suffix, factor in _BINARY.items():
        if text.endswith(suffix):
            return _number(text[: -len(suffix)]) * factor
    if text and text[-1] in _DECIMAL:
        return _number(text[:-1]) * Decimal(_DECIMAL[text[-1]])
    return _number(text)


def _number(text: str) -> Decimal:
    try:
        return Decimal(text)
    except InvalidOperation:
        raise ValueError(f"not a resource quantity: {text!r}") from None


def tolerates(tolerations: Iterable[Obj], taint: Obj) -> bool:
    """Whether a toleration matches the taint (core/v1 Toleration.ToleratesTaint)."""
    return any(_tolerates(t, taint) for t in tolerations)


def _tolerates(toleration: Obj, taint: Obj) -> bool:
    if toleration.get("effect") and toleration.get("effect") != taint.get("effect"):
        return False
    if toleration.get("key") and toleration.get("key") != taint.get("key"):
        return False
    if toleration.get("operator") == "Exists":
        return True
    return (toleration.get("value") or "") == (taint.get("value") or "")


def pod_requests(pod_spec: Obj) -> dict[str, Decimal]:
    """What the pod asks of a node: its containers' requests summed, at least each init
    container's, a limit standing for a request the container does not state."""
    total: dict[str, Decimal] = {}
    for container in pod_spec.get("containers") or []:
        for name, amount in _container_requests(container).items():
            total[name] = total.get(name, Decimal(0)) + amount
    for init in pod_spec.get("initContainers") or []:
        for name, amount in _container_requests(init).items():
            total[name] = max(total.get(name, Decimal(0)), amount)
    return total


def _container_requests(container: Obj) -> dict[str, Decimal]:
    resources = container.get("resources") or {}
    asked = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
    return {name: quantity(amount) for name, amount in asked.items()}


def fits(pod_spec: Obj, node: Obj, bound_pods: Iterable[Obj]) -> list[str]:
    """Why the node cannot take the pod (kube-scheduler's reasons; [] when it can).
    `bound_pods` are the pods already bound to the node; finished ones take nothing."""
    tolerations = pod_spec.get("tolerations") or []
    spec = node.get("spec") or {}
    if spec.get("unschedulable") and not tolerates(
        tolerations, {"key": UNSCHEDULABLE_TAINT, "effect": "NoSchedule"}
    ):
        return [UNSCHEDULABLE]
    for taint in spec.get("taints") or []:
        if taint.get("effect") in _BLOCKING_EFFECTS and not tolerates(tolerations, taint):
            return [
                f"node(s) had untolerated taint {{{taint.get('key')}: {taint.get('value') or ''}}}"
            ]
    if not matches_node_affinity(pod_spec, node):
        return [AFFINITY_MISMATCH]
    return _insufficient(pod_spec, node, bound_pods)


def matches_node_affinity(pod_spec: Obj, node: Obj) -> bool:
    meta = node.get("metadata") or {}
    labels: Mapping[str, str] = meta.get("labels") or {}
    selector: Mapping[str, str] = pod_spec.get("nodeSelector") or {}
    if any(labels.get(key) != value for key, value in selector.items()):
        return False
    required = ((pod_spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if required is None:
        return True
    fields = {"metadata.name": meta.get("name", "")}
    return any(
        _term_matches(term, labels, fields) for term in required.get("nodeSelectorTerms") or []
    )


def _term_matches(term: Obj, labels: Mapping[str, str], fields: Mapping[str, str]) -> bool:
    expressions = term.get("matchExpressions") or []
    field_matches = term.get("matchFields") or []
    if not expressions and not field_matches:
        return False  # an empty term matches no node
    return all(_requirement_holds(r, labels) for r in expressions) and all(
        _requirement_holds(r, fields) for r in field_matches
    )


def _requirement_holds(requirement: Obj, values: Mapping[str, str]) -> bool:
    key, operator = requirement.get("key", ""), requirement.get("operator")
    wanted = list(requirement.get("values") or [])
    present = key in values
    match operator:
        case "In":
            return present and values[key] in wanted
        case "NotIn":
            return not present or values[key] not in wanted
        case "Exists":
            return present
        case "DoesNotExist":
            return not present
        case "Gt" | "Lt" if present and len(wanted) == 1:
            try:
                have, bound = int(values[key]), int(wanted[0])
            except ValueError:
                return False
            return have > bound if operator == "Gt" else have < bound
        case _:
            return False


def _insufficient(pod_spec: Obj, node: Obj, bound_pods: Iterable[Obj]) -> list[str]:
    status = node.get("status") or {}
    allocatable = status.get("allocatable") or status.get("capacity") or {}
    live = [p for p in bound_pods if (p.get("status") or {}).get("phase") not in _FINISHED_PHASES]
    used: dict[str, Decimal] = {}
    for pod in live:
        for name, amount in pod_requests(pod.get("spec") or {}).items():
            used[name] = used.get(name, Decimal(0)) + amount
    reasons = []
    if "pods" in allocatable and len(live) + 1 > quantity(allocatable["pods"]):
        reasons.append(TOO_MANY_PODS)
    for name, amount in sorted(pod_requests(pod_spec).items()):
        if amount > 0 and used.get(name, 0) + amount > quantity(allocatable.get(name, 0)):
            reasons.append(f"Insufficient {name}")
    return reasons


def unschedulable_message(reasons_by_node: Mapping[str, list[str]]) -> str:
    """kube-scheduler's FitError message for a pod no node takes, with DefaultPreemption's
    verdict: a node short of resources has no victims (no pod of the twin has a lower
    priority), any other failure is not one preemption could help."""
    total = len(reasons_by_node)
    if total == 0:
        return NO_NODES
    reasons = Counter(r for node_reasons in reasons_by_node.values() for r in node_reasons)
    verdicts = Counter(
        "No preemption victims found for incoming pod"
        if all(r.startswith("Insufficient ") or r == TOO_MANY_PODS for r in node_reasons)
        else "Preemption is not helpful for scheduling"
        for node_reasons in reasons_by_node.values()
    )
    return (
        f"0/{total} nodes are available: {_histogram(reasons)}. "
        f"preemption: 0/{total} nodes are available: {_histogram(verdicts)}."
    )


def _histogram(counts: Counter[str]) -> str:
    return ", ".join(sorted(f"{count} {reason}" for reason, count in counts.items()))


def bound_by_node(pods: Iterable[Obj]) -> dict[str, list[Obj]]:
    """The pods bound to each node (by spec.nodeName)."""
    by_node: dict[str, list[Obj]] = {}
    for pod in pods:
        node_name = (pod.get("spec") or {}).get("nodeName")
        if node_name:
            by_node.setdefault(node_name, []).append(pod)
    return by_node


def choose_node(
    pod_spec: Obj, nodes: Iterable[Obj], bound: Mapping[str, list[Obj]], prefer: str | None
) -> tuple[str | None, str]:
    """A node that takes the pod (`prefer` when it does, else the first by name) and "", or
    None and kube-scheduler's message."""
    reasons_by_node: dict[str, list[str]] = {}
    feasible: list[str] = []
    for node in nodes:
        name = (node.get("metadata") or {}).get("name", "")
        reasons = fits(pod_spec, node, bound.get(name, []))
        reasons_by_node[name] = reasons
        if not reasons:
            feasible.append(name)
    if not feasible:
        return None, unschedulable_message(reasons_by_node)
    return (prefer if prefer in feasible else min(feasible)), ""
