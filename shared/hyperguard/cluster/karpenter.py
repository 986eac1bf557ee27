"""Karpenter NodeClaims HyperGuard creates to raise burst capacity, and how it reads them.

A NodeClaim (karpenter.sh/v1, cluster-scoped) asks Karpenter for one node: the instance
type, the capacity type (`reserved`, `on-demand`, `spot`) and the NodePool whose EC2NodeClass
it launches with. Karpenter launches an instance and reports progress in the claim's status
conditions (Launched, Registered, Initialized, Ready); an insufficient-capacity error shows
as Launched=False and Karpenter then deletes the claim, as it does a claim whose node has not
registered within 15 minutes. Deleting a claim drains its node and terminates the instance.

A NodePool's `spec.limits` (cpu, memory, an accelerator resource, nodes) bound the nodes
of all its claims, but Karpenter checks them only eventually, so a fast scale-out overruns
them. `nodes_within_limits` counts the claims of the pool that exist (whoever created them)
and says how many more nodes of a type the limits leave room for, before HyperGuard creates
one.

HyperGuard labels its claims with the burst that created them (`hyperguard.io/burst`) and
the attempt (`hyperguard.io/burst-attempt`: one capacity type per attempt), and keeps the
time a claim's node was first seen idle in an annotation (`hyperguard.io/idle-since`), so
that scale-in survives any number of scheduler passes without a table of its own.

Its claims carry `karpenter.sh/do-not-disrupt: "true"`, which Karpenter copies onto the node
at registration (syncNode in pkg/controllers/nodeclaim/lifecycle/registration.go) and which
keeps its consolidation away from the node (ValidateNodeDisruptable in
pkg/controllers/state/statenode.go). Without it a NodePool at Karpenter's defaults
(WhenEmptyOrUnderutilized, consolidateAfter 0s) deletes a bought node the moment it is
ready and still empty, before HyperGuard dispatches the job it was bought for, and an idle
one HyperGuard keeps until its own scale-in (D99).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any

from lightkube.utils.quantity import parse_quantity

from hyperguard.catalogue import InstanceSpec, UnknownInstanceTypeError
from hyperguard.cluster.conventions import (
    CAPACITY_TYPE_LABEL,
    INSTANCE_TYPE_LABEL,
    NODEPOOL_LABEL,
    instance_id_from_provider_id,
)
from hyperguard.cluster.workloads import DO_NOT_DISRUPT_ANNOTATION, accelerator_resource
from hyperguard.models.cluster import BurstClaim
from hyperguard.models.nodes import BURST_LABEL, CapacityType

ATTEMPT_LABEL = "hyperguard.io/burst-attempt"
IDLE_SINCE_ANNOTATION = "hyperguard.io/idle-since"
LOGICAL_ID_ANNOTATION = "hyperguard.io/node-logical-id"
"""On a HyperPod node a burst added: its NodeLogicalId, by which it is given back."""
DISRUPTED_TAINT = "karpenter.sh/disrupted"
"""The NoSchedule taint Karpenter puts on a node it disrupts (its NodeClaim deleted, by
consolidation or by anyone), before draining it (Karpenter's docs, concepts/disruption)."""


def nodeclaim_manifest(
    *,
    name: str,
    burst_id: str,
    attempt: int,
    node_pool: str,
    node_class: str,
    instance_type: str,
    capacity_type: CapacityType,
    accelerators: int,
) -> dict[str, Any]:
    """A NodeClaim for one node of `instance_type` (EC2 name) and `capacity_type`, launched
    with the NodePool's EC2NodeClass `node_class`, requesting the node's accelerators."""
    resource = accelerator_resource(instance_type)
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {
            "name": name,
            "labels": {
                NODEPOOL_LABEL: node_pool,
                BURST_LABEL: burst_id,
                ATTEMPT_LABEL: str(attempt),
            },
            # Karpenter copies a claim's annotations onto its node at registration; with
            # this one its consolidation never takes the node: HyperGuard alone gives it
            # back (scale-in, D99).
            "annotations": {DO_NOT_DISRUPT_ANNOTATION: "true"},
        },
        "spec": {
            "nodeClassRef": {
                "group": "karpenter.k8s.aws",
                "kind": "EC2NodeClass",
                "name": node_class,
            },
            "requirements": [
                {"key": INSTANCE_TYPE_LABEL, "operator": "In", "values": [instance_type]},
                {"key": CAPACITY_TYPE_LABEL, "operator": "In", "values": [capacity_type.value]},
                {"key": NODEPOOL_LABEL, "operator": "In", "values": [node_pool]},
            ],
            "resources": {"requests": {resource: str(accelerators)}},
        },
    }


def from_nodepool_template(
    manifest: Mapping[str, Any], nodepool: Mapping[str, Any]
) -> dict[str, Any]:
    """The NodeClaim with what its NodePool's template asks of every node, as Karpenter's
    provisioner builds a claim from it (NodeClaimTemplate in kubernetes-sigs/karpenter
    pkg/controllers/provisioning/scheduling): the template's labels, taints and startup
    taints, its requirements on keys the claim does not constrain itself, and its expiry
    and termination grace period. Karpenter copies a claim's labels and taints onto its
    node at registration and adds nothing of the NodePool's to a claim it did not build:
    a claim without them gives a node without the pool's taints (D133)."""
    claim = {**manifest, "metadata": dict(manifest["metadata"]), "spec": dict(manifest["spec"])}
    template = (nodepool.get("spec") or {}).get("template") or {}
    spec = template.get("spec") or {}
    labels = (template.get("metadata") or {}).get("labels") or {}
    claim["metadata"]["labels"] = {**labels, **(claim["metadata"].get("labels") or {})}
    for field in ("taints", "startupTaints", "expireAfter", "terminationGracePeriod"):
        if field in spec and field not in claim["spec"]:
            claim["spec"][field] = spec[field]
    own = {r.get("key") for r in claim["spec"].get("requirements") or []}
    claim["spec"]["requirements"] = [
        *(claim["spec"].get("requirements") or []),
        *(r for r in spec.get("requirements") or [] if r.get("key") not in own),
    ]
    return claim


def read_claim(obj: Mapping[str, Any]) -> BurstClaim | None:
    """The claim as HyperGuard tracks it; None for a claim HyperGuard did not create."""
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    burst_id = labels.get(BURST_LABEL)
    if not burst_id:
        return None
    spec = obj.get("spec") or {}
    wanted = {r.get("key"): (r.get("values") or [""])[0] for r in spec.get("requirements") or []}
    status = obj.get("status") or {}
    conditions = {c.get("type"): c for c in status.get("conditions") or []}
    launched = conditions.get("Launched") or {}
    failure = None
    if launched.get("status") == "False":
        failure = f"{launched.get('reason') or 'LaunchFailed'}: {launched.get('message') or ''}"
    annotations = meta.get("annotations") or {}
    return BurstClaim(
        name=meta.get("name", ""),
        burst_id=burst_id,
        attempt=read_attempt(labels),
        node_pool=labels.get(NODEPOOL_LABEL) or wanted.get(NODEPOOL_LABEL, ""),
        instance_type=wanted.get(INSTANCE_TYPE_LABEL, ""),
        capacity_type=labels.get(CAPACITY_TYPE_LABEL) or wanted.get(CAPACITY_TYPE_LABEL, ""),
        created=read_time(meta.get("creationTimestamp")),
        deleting=meta.get("deletionTimestamp") is not None,
        launched=launched.get("status") == "True",
        ready=(conditions.get("Ready") or {}).get("status") == "True",
        failure=failure,
        instance_id=instance_id_from_provider_id(
            status.get("providerID"), holder=f"NodeClaim {meta.get('name', '')}"
        ),
        node_name=status.get("nodeName") or None,
        idle_since=read_time(annotations.get(IDLE_SINCE_ANNOTATION)),
    )


def read_attempt(labels: Mapping[str, str]) -> int:
    """The burst attempt a claim or node is labelled with (0 when the label is unreadable)."""
    try:
        return int(labels.get(ATTEMPT_LABEL, "0"))
    except ValueError:
        return 0


def node_resources(instance_type: str, spec: InstanceSpec) -> dict[str, float]:
    """What one node of the type counts against a NodePool's limits."""
    return {
        "cpu": spec.vcpu,
        "memory": spec.memory_mib * 2**20,
        accelerator_resource(instance_type): spec.accelerators,
        "nodes": 1,
    }


def claim_instance_type(obj: Mapping[str, Any]) -> str | None:
    """The instance type a NodeClaim's node has (its label) or asks for (its requirement)."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    if labels.get(INSTANCE_TYPE_LABEL):
        return str(labels[INSTANCE_TYPE_LABEL])
    for requirement in (obj.get("spec") or {}).get("requirements") or []:
        values = requirement.get("values") or []
        if requirement.get("key") == INSTANCE_TYPE_LABEL and len(values) == 1:
            return str(values[0])
    return None


def nodes_within_limits(
    limits: Mapping[str, Any],
    claims: Iterable[Mapping[str, Any]],
    instance_type: str,
    spec_of: Callable[[str], InstanceSpec],
) -> tuple[int | None, str | None]:
    """How many more nodes of `instance_type` a NodePool's `spec.limits` leave room for,
    given the pool's NodeClaims (every claim holds its node's resources until it is gone),
    and the limit that binds; (None, None) when no limit applies. A claim whose instance type
    is unknown counts its node only."""
    used: dict[str, float] = {}
    for claim in claims:
        name = claim_instance_type(claim)
        try:
            resources = node_resources(name, spec_of(name)) if name else {"nodes": 1}
        except UnknownInstanceTypeError:
            resources = {"nodes": 1}
        for resource, amount in resources.items():
            used[resource] = used.get(resource, 0) + amount
    per_node = node_resources(instance_type, spec_of(instance_type))
    room: int | None = None
    binding: str | None = None
    for resource, quantity in limits.items():
        need = per_node.get(resource, 0)
        if not need:
            continue
        try:
            limit = float(parse_quantity(str(quantity)) or 0)
        except ValueError:
            continue  # the API server validates quantities; one it let through is no limit
        fits = max(math.floor((limit - used.get(resource, 0)) / need + 1e-9), 0)
        if room is None or fits < room:
            room = fits
            binding = f"{resource} {quantity} ({_amount(resource, used.get(resource, 0))} in use)"
    return room, binding


def _amount(resource: str, value: float) -> str:
    return f"{value / 2**30:.0f}Gi" if resource == "memory" else f"{value:g}"


def idle_mark(since: datetime | None) -> str | None:
    """The idle-since annotation's value (None: remove it)."""
    return since.strftime("%Y-%m-%dT%H:%M:%SZ") if since is not None else None


def read_time(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
