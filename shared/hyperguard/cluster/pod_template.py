"""A job's own pod template, and the parts of it that are HyperGuard's.

A job may bring a pod template as Kubernetes defines it (core/v1 `PodTemplateSpec`: env,
volumes, a service account, tolerations, affinity, resources, ...). It is checked at
submission against Kubernetes' own schema, the one kube-apiserver decodes with (the
`PodTemplateSpec` of lightkube-models, generated from Kubernetes' OpenAPI at the release it
is versioned by), unknown fields refused as kube-apiserver's strict field validation refuses
them. What the API server checks beyond the schema (names, references between volumes and
mounts, quantities) it checks at `jobs submit --dry-run` and at dispatch.

HyperGuard then owns a few parts of every run's pods (`hyperguard.cluster.workloads` adds
them): where they run (node pins, the instance-type selector, a burst NodePool's
tolerations), their identity on the cluster (HyperGuard's, Kueue's and Karpenter's labels and
annotations, the rendezvous hostname), how they end (restartPolicy Never: a failed pod fails
the run, and HyperGuard's recovery decides), their priority (the job's priority class, through
Kueue) and the variables it tells the training container (the first container). A template
that sets one of those is refused, naming the field, rather than silently overridden.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from hyperguard.cluster.kueue import UNBOUNDED_QUOTA

MAX_POD_TEMPLATE_BYTES = 32 * 1024
"""A template's size as compact JSON, at most: far above AWS's own HyperPodPyTorchJob example
(about 2 KiB), and small enough to keep a job's record a fraction of DynamoDB's 400 KB item."""

OWNED_LABEL_PREFIXES = (
    "hyperguard.io/",
    "kueue.x-k8s.io/",
    "karpenter.sh/",
    "batch.kubernetes.io/",
)
"""Label and annotation keys that HyperGuard, Kueue, Karpenter or the Job controller set on a
run's pods."""
OWNED_ENV = re.compile(
    r"^((?!HYPERGUARD_API_URL$|HYPERGUARD_INSTANCE_ID$)HYPERGUARD_.*"
    r"|MASTER_ADDR|MASTER_PORT|WORLD_SIZE|RANK|NODE_RANK|LOCAL_RANK|PET_.*)$"
)
"""Variables of the training container that HyperGuard (its job, run, checkpoint and resume
variables) or the rendezvous (HyperGuard's on EKS burst, the training operator's on HyperPod)
sets. `HYPERGUARD_API_URL` (where the trainer kit reports checkpoints) and
`HYPERGUARD_INSTANCE_ID` are the team's to set (docs/trainer.md)."""
OWNED_SPEC_FIELDS = {
    "nodeName": "HyperGuard places the job's pods",
    "hostname": "the rendezvous names the pods",
    "subdomain": "the rendezvous names the pods",
    "priorityClassName": "the job's priority_class is its priority (through Kueue)",
    "priority": "the job's priority_class is its priority (through Kueue)",
}
INSTANCE_TYPE_SELECTOR = "node.kubernetes.io/instance-type"
"""The node label HyperGuard selects the job's instance type by."""
METADATA_FIELDS = frozenset({"labels", "annotations"})
"""What a template's metadata may say: the rest (name, namespace, owners) is the run's."""


class PodTemplateError(ValueError):
    """A pod template that is not a valid PodTemplateSpec, or sets what HyperGuard owns:
    `field` is the path in the template (`spec.containers[0].env[2].name`)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}" if field else message)
        self.field = field
        self.message = message


def check_pod_template(
    template: Mapping[str, Any], *, accelerator_resource: str, accelerators: int
) -> None:
    """Raises PodTemplateError when `template` is over the size limit, is not a valid
    PodTemplateSpec, or sets what HyperGuard owns; the training container (the first) must
    name its image and may ask for `accelerators` of `accelerator_resource`, no other count."""
    size = len(json.dumps(template, separators=(",", ":")))
    if size > MAX_POD_TEMPLATE_BYTES:
        raise PodTemplateError(
            "", f"the template is {size} bytes as JSON; at most {MAX_POD_TEMPLATE_BYTES}"
        )
    _check_schema(template)
    _check_ownership(template, accelerator_resource, accelerators)


def _check_schema(template: Mapping[str, Any]) -> None:
    import msgspec
    from lightkube.models.core_v1 import PodTemplateSpec

    try:
        decoded = msgspec.convert(template, PodTemplateSpec)
    except msgspec.ValidationError as error:
        message, _, at = str(error).rpartition(" - at `$")
        if not message:
            raise PodTemplateError("", str(error)) from None
        raise PodTemplateError(at.rstrip("`").lstrip("."), message) from None
    unknown = _unknown_field(template, msgspec.to_builtins(decoded), "")
    if unknown is not None:
        raise PodTemplateError(unknown, "unknown field")
    empty = _empty_key(template, "")
    if empty is not None:
        raise PodTemplateError(empty, "an empty key (no Kubernetes map takes one)")
    if not (template.get("spec") or {}).get("containers"):
        raise PodTemplateError("spec.containers", "a pod needs at least one container")


def _unknown_field(given: Any, known: Any, at: str) -> str | None:
    """The first field of `given` (a template as sent) that its decoding `known` dropped: a
    field the schema does not have. A field given as null is unset, not unknown."""
    if isinstance(given, Mapping) and isinstance(known, Mapping):
        for key, value in given.items():
            path = f"{at}.{key}" if at else str(key)
            if key not in known:
                if value is not None:
                    return path
                continue
            found = _unknown_field(value, known[key], path)
            if found is not None:
                return found
    elif isinstance(given, list) and isinstance(known, list):
        for index, (value, decoded) in enumerate(zip(given, known, strict=False)):
            found = _unknown_field(value, decoded, f"{at}[{index}]")
            if found is not None:
                return found
    return None


def _empty_key(value: Any, at: str) -> str | None:
    """The path of the first map of `value` with an empty key: Kubernetes refuses one in
    every map a pod has (labels, annotations, selectors, volume attributes), and a stored
    job's record could not keep it."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            if key == "":
                return at or "(top)"
            found = _empty_key(item, f"{at}.{key}" if at else str(key))
            if found is not None:
                return found
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found = _empty_key(item, f"{at}[{index}]")
            if found is not None:
                return found
    return None


def _check_ownership(
    template: Mapping[str, Any], accelerator_resource: str, accelerators: int
) -> None:
    metadata = template.get("metadata") or {}
    for key in metadata:
        if key not in METADATA_FIELDS and metadata[key] is not None:
            raise PodTemplateError(
                f"metadata.{key}", "a template's metadata may give labels and annotations only"
            )
    for part in ("labels", "annotations"):
        for key in metadata.get(part) or {}:
            if key.startswith(OWNED_LABEL_PREFIXES):
                raise PodTemplateError(
                    f"metadata.{part}.{key}",
                    f"keys under {', '.join(OWNED_LABEL_PREFIXES)} are set by HyperGuard, "
                    "Kueue, Karpenter or the Job controller",
                )
    spec = template.get("spec") or {}
    for field, owner in OWNED_SPEC_FIELDS.items():
        if spec.get(field) is not None:
            raise PodTemplateError(f"spec.{field}", f"not a template's to set: {owner}")
    if spec.get("restartPolicy") not in (None, "Never"):
        raise PodTemplateError(
            "spec.restartPolicy",
            "must be Never (or unset): a failed pod fails the run, and HyperGuard's recovery "
            "decides what follows",
        )
    if INSTANCE_TYPE_SELECTOR in (spec.get("nodeSelector") or {}):
        raise PodTemplateError(
            f"spec.nodeSelector.{INSTANCE_TYPE_SELECTOR}",
            "the job's instance_type selects the instance type",
        )
    node_affinity = (spec.get("affinity") or {}).get("nodeAffinity") or {}
    if node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") is not None:
        raise PodTemplateError(
            "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution",
            "HyperGuard pins the pods to the nodes it placed the job on (preferred node "
            "affinity, pod affinity and anti-affinity are yours)",
        )
    _check_resources(spec)
    _check_training_container(spec["containers"][0], accelerator_resource, accelerators)


def _check_resources(spec: Mapping[str, Any]) -> None:
    """Every resource the pods ask for is one the team's Kueue ClusterQueue covers
    (kueue.UNBOUNDED_QUOTA): Kueue would leave a run asking for another inadmissible."""
    parts: list[tuple[str, Mapping[str, Any]]] = [
        (f"{kind}[{index}].resources", container.get("resources") or {})
        for kind in ("containers", "initContainers")
        for index, container in enumerate(spec.get(kind) or [])
    ]
    parts.append(("resources", spec.get("resources") or {}))
    for at, resources in parts:
        for part in ("requests", "limits"):
            for name in resources.get(part) or {}:
                if name not in UNBOUNDED_QUOTA:
                    raise PodTemplateError(
                        f"spec.{at}.{part}.{name}",
                        f"not a resource HyperGuard's Kueue queues cover "
                        f"({', '.join(UNBOUNDED_QUOTA)}): Kueue would never admit the run",
                    )


def _check_training_container(
    container: Mapping[str, Any], accelerator_resource: str, accelerators: int
) -> None:
    at = "spec.containers[0]"
    if not container.get("image"):
        raise PodTemplateError(f"{at}.image", "the training container (the first) needs an image")
    for index, variable in enumerate(container.get("env") or []):
        if OWNED_ENV.match(str(variable.get("name"))):
            raise PodTemplateError(
                f"{at}.env[{index}].name",
                f"{variable.get('name')} is set by HyperGuard or the rendezvous",
            )
    resources = container.get("resources") or {}
    for part in ("requests", "limits"):
        asked = (resources.get(part) or {}).get(accelerator_resource)
        if asked is not None and str(asked) != str(accelerators):
            raise PodTemplateError(
                f"{at}.resources.{part}.{accelerator_resource}",
                f"the job asks for {accelerators} per replica (accelerators_per_replica); "
                f"the template says {asked}",
            )
