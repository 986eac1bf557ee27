"""What kube-apiserver does to an object before it stores it: prune unknown fields, apply
defaults and validate it against the resource's structural schema, and refuse it with
422 Invalid (a Status whose details.causes name the fields) when it does not conform.

The schemas are the real ones. Custom resources are checked against the openAPIV3Schema of
the served version of the upstream CRDs vendored unmodified in crds/ (their sources are in
crds/SOURCES.md). Built-in kinds are checked against structural schemas built from the same
generated k8s.io/api types: the PodSpec that Kueue's Workload CRD embeds (controller-gen
output of core/v1.PodSpec) plus the rules of kube-apiserver's own validation that the
service can break (a container's image, restartPolicy, toleration operator and effect, a
Job template's restartPolicy), and hand-written top-level schemas for the rest (the
Kubernetes API reference, v1.31). The HyperPod training operator's CRD is not published:
HyperPodPyTorchJob's schema is written from the model the HyperPod CLI generates from it.

Honoured: type (with x-kubernetes-int-or-string), nullable, required, enum, minimum,
maximum (and exclusive), multipleOf, minLength, maxLength, pattern, minItems, maxItems,
minProperties, maxProperties, additionalProperties, allOf / anyOf / oneOf / not,
x-kubernetes-preserve-unknown-fields, x-kubernetes-embedded-resource, x-kubernetes-list-type
set and map (duplicates), default; labels and annotations of every object (the syntax
ObjectMeta validation enforces). Unknown fields are pruned and reported as warnings, as
kube-apiserver does with its default fieldValidation=Warn; fieldValidation=Strict refuses
them with 400 ("strict decoding error"), as documented in "Kubernetes API Concepts: Field
validation" (kubernetes.io/docs/reference/using-api/api-concepts/#field-validation).

Not emulated: x-kubernetes-validations (CEL rules), format (date-time, duration, ...),
validation ratcheting beyond leaving an unchanged status alone, and ObjectMeta beyond name,
labels and annotations.
"""

from __future__ import annotations

import copy
import functools
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from hyperguard.twin.kube.store import KubeError, Obj, ResourceType

CRD_DIR = Path(__file__).parent / "crds"
Schema = dict[str, Any]
_PREFIX = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_JSON_TYPES = {dict: "object", list: "array", str: "string", bool: "boolean"}
_ANNOTATIONS_MAX_BYTES = 256 * 1024
_LABEL_VALUE = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
_QUALIFIED_NAME = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$"
)


@dataclass(frozen=True, slots=True)
class Cause:
    """One field error, as kube-apiserver lists it in a Status's details.causes."""

    reason: str
    field: str
    detail: str

    @property
    def text(self) -> str:
        return f"{self.field}: {self.detail}"

    def as_status(self) -> dict[str, str]:
        return {"reason": self.reason, "message": self.detail, "field": self.field}


@dataclass(slots=True)
class _Walk:
    """One pass over an object: `prune` drops what the schema does not know (recording the
    paths in `unknown`), and applies defaults; without it (inside allOf/anyOf/oneOf/not,
    which only validate) the value is left as it is."""

    prune: bool = True
    unknown: list[str] = field(default_factory=list)
    causes: list[Cause] = field(default_factory=list)

    def fail(self, reason: str, path: str, detail: str) -> None:
        self.causes.append(Cause(reason, path, detail))

    def value(self, schema: Schema, value: Any, path: str) -> Any:
        if not self._typed(schema, value, path):
            return value
        if isinstance(value, dict):
            value = self._object(schema, value, path)
        elif isinstance(value, list):
            value = self._array(schema, value, path)
        else:
            self._scalar(schema, value, path)
        self._enum(schema, value, path)
        self._combinators(schema, value, path)
        return value

    def _typed(self, schema: Schema, value: Any, path: str) -> bool:
        wanted = schema.get("type")
        actual = _json_type(value)
        if schema.get("x-kubernetes-int-or-string"):
            ok = actual in ("integer", "string")
            wanted = "integer or string" if not ok else wanted
        elif wanted is None:
            return True
        else:
            ok = actual == wanted or (wanted == "number" and actual == "integer")
        if not ok:
            self.fail(
                "FieldValueTypeInvalid",
                path,
                f'Invalid value: "{actual}": {path} in body must be of type {wanted}: "{actual}"',
            )
        return ok

    def _object(self, schema: Schema, value: dict[str, Any], path: str) -> dict[str, Any]:
        properties: dict[str, Schema] = schema.get("properties") or {}
        result: dict[str, Any] = {}
        for key, item in value.items():
            known = properties.get(key)
            if item is None and self.prune and not (known or {}).get("nullable"):
                continue  # null of a field that is not nullable: pruned (then defaulted)
            kept = self._member(schema, known, key, item, path)
            if kept is not _PRUNED:
                result[key] = kept
        if self.prune:
            for key, known in properties.items():
                if key not in result and "default" in known:
                    default = copy.deepcopy(known["default"])
                    result[key] = self.value(known, default, _child(path, key))
        for key in schema.get("required") or []:
            if key not in result:
                self.fail("FieldValueRequired", _child(path, key), "Required value")
        self._bounds(schema, len(result), path, "Properties", "properties")
        return result

    def _member(self, schema: Schema, known: Schema | None, key: str, item: Any, path: str) -> Any:
        """One member of an object as it is kept, or _PRUNED."""
        additional = schema.get("additionalProperties")
        if schema.get("x-kubernetes-embedded-resource") and key in _EMBEDDED:
            return item  # an embedded object's type and ObjectMeta are kept whole
        if known is not None:
            return self.value(known, item, _child(path, key))
        if isinstance(additional, dict):
            return self.value(additional, item, f"{path}[{key}]")
        untyped = "properties" not in schema and additional is None and "type" not in schema
        if (
            schema.get("x-kubernetes-preserve-unknown-fields")
            or additional is True
            or not self.prune
            or untyped
        ):
            return item
        self.unknown.append(_child(path, key))
        return _PRUNED

    def _array(self, schema: Schema, value: list[Any], path: str) -> list[Any]:
        items = schema.get("items")
        if isinstance(items, dict):
            value = [self.value(items, item, f"{path}[{i}]") for i, item in enumerate(value)]
        self._bounds(schema, len(value), path, "Items", "items")
        list_type = schema.get("x-kubernetes-list-type")
        keys = schema.get("x-kubernetes-list-map-keys") or []
        if list_type in ("set", "map"):
            seen: list[Any] = []
            for i, item in enumerate(value):
                identity = (
                    {k: item.get(k) for k in keys}
                    if list_type == "map" and isinstance(item, dict)
                    else item
                )
                if identity in seen:
                    shown = json.dumps(identity)
                    self.fail("FieldValueDuplicate", f"{path}[{i}]", f"Duplicate value: {shown}")
                seen.append(identity)
        return value

    def _bounds(self, schema: Schema, size: int, path: str, word: str, noun: str) -> None:
        low, high = schema.get(f"min{word}"), schema.get(f"max{word}")
        if low is not None and size < low:
            detail = f"Invalid value: {size}: {path} in body should have at least {low} {noun}"
            self.fail("FieldValueInvalid", path, detail)
        if high is not None and size > high:
            self.fail(
                "FieldValueTooMany", path, f"Too many: {size}: must have at most {high} {noun}"
            )

    def _scalar(self, schema: Schema, value: Any, path: str) -> None:
        if isinstance(value, str):
            self._string(schema, value, path)
        elif isinstance(value, int | float) and not isinstance(value, bool):
            self._number(schema, value, path)

    def _string(self, schema: Schema, value: str, path: str) -> None:
        shown = json.dumps(value)
        if (longest := schema.get("maxLength")) is not None and len(value) > longest:
            self.fail("FieldValueTooLong", path, f"Too long: may not be more than {longest} bytes")
        if (shortest := schema.get("minLength")) is not None and len(value) < shortest:
            detail = (
                f"Invalid value: {shown}: {path} in body should be at least {shortest} chars long"
            )
            self.fail("FieldValueInvalid", path, detail)
        pattern = schema.get("pattern")
        if pattern and (compiled := _regex(pattern)) is not None and not compiled.search(value):
            detail = f"Invalid value: {shown}: {path} in body should match '{pattern}'"
            self.fail("FieldValueInvalid", path, detail)

    def _number(self, schema: Schema, value: float, path: str) -> None:
        checks = (
            ("minimum", "exclusiveMinimum", -1, "greater than"),
            ("maximum", "exclusiveMaximum", 1, "less than"),
        )
        for key, exclusive_key, side, words in checks:
            bound = schema.get(key)
            if bound is None:
                continue
            exclusive = bool(schema.get(exclusive_key))
            beyond = (value - bound) * side
            if beyond > 0 or (exclusive and beyond == 0):
                relation = words if exclusive else f"{words} or equal to"
                detail = f"Invalid value: {value}: {path} in body should be {relation} {bound}"
                self.fail("FieldValueInvalid", path, detail)
        step = schema.get("multipleOf")
        if step and value % step:
            detail = f"Invalid value: {value}: {path} in body should be a multiple of {step}"
            self.fail("FieldValueInvalid", path, detail)

    def _enum(self, schema: Schema, value: Any, path: str) -> None:
        allowed = schema.get("enum")
        if allowed is not None and value not in allowed:
            supported = ", ".join(json.dumps(a) for a in allowed)
            detail = f"Unsupported value: {json.dumps(value)}: supported values: {supported}"
            self.fail("FieldValueNotSupported", path, detail)

    def _combinators(self, schema: Schema, value: Any, path: str) -> None:
        if schema.get("x-kubernetes-int-or-string") and set(schema) & {"anyOf", "allOf"}:
            # The int-or-string shape `anyOf: [{type: integer}, {type: string}]` is the type
            # _typed already checked.
            schema = {k: v for k, v in schema.items() if k != "anyOf"}
        for sub in schema.get("allOf") or []:
            self.causes.extend(_check(sub, value, path))
        if (any_of := schema.get("anyOf")) and all(_check(s, value, path) for s in any_of):
            self.fail(
                "FieldValueInvalid",
                path,
                f"Invalid value: {_short(value)}: {path} in body "
                "must match at least one schema in anyOf",
            )
        if (one_of := schema.get("oneOf")) is not None:
            matches = sum(1 for s in one_of if not _check(s, value, path))
            if matches != 1:
                self.fail(
                    "FieldValueInvalid",
                    path,
                    f"Invalid value: {_short(value)}: {path} in "
                    "body must validate one and only one schema (oneOf)",
                )
        if (negated := schema.get("not")) is not None and not _check(negated, value, path):
            self.fail(
                "FieldValueInvalid",
                path,
                f"Invalid value: {_short(value)}: {path} in body "
                "must not validate the schema (not)",
            )


_EMBEDDED = ("apiVersion", "kind", "metadata")
_PRUNED = object()


def _child(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _check(schema: Schema, value: Any, path: str) -> list[Cause]:
    walk = _Walk(prune=False)
    walk.value(schema, value, path)
    return walk.causes


def _json_type(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return "boolean" if value is not None else "null"
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer()):
        return "integer"
    if isinstance(value, float):
        return "number"
    return _JSON_TYPES.get(type(value), type(value).__name__)


def _short(value: Any) -> str:
    return json.dumps(value)[:80]


@functools.cache
def _regex(pattern: str) -> re.Pattern[str] | None:
    """The schema's pattern (Go RE2 syntax) as a Python regex; None when Python cannot read
    it, and then it is not enforced."""
    try:
        return re.compile(pattern)
    except re.error:
        return None


# the schemas


@functools.cache
def _crd(path: Path) -> tuple[str, dict[str, Schema]]:
    """A CRD file: its resource key (<plural>.<group>) and the schema of each served version."""
    with path.open() as stream:
        crd = yaml.load(stream, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    spec = crd["spec"]
    versions = {
        version["name"]: version["schema"]["openAPIV3Schema"]
        for version in spec["versions"]
        if version.get("served")
    }
    return f"{spec['names']['plural']}.{spec['group']}", versions


@functools.cache
def _crd_schemas() -> dict[tuple[str, str], Schema]:
    schemas: dict[tuple[str, str], Schema] = {}
    for path in sorted(CRD_DIR.glob("*.yaml")):
        key, versions = _crd(path)
        for version, schema in versions.items():
            schemas[(key, version)] = schema
    return schemas


@functools.cache
def pod_spec_schema() -> Schema:
    """core/v1 PodSpec as a structural schema: the one Kueue's Workload CRD embeds in
    spec.podSets[].template (controller-gen output of k8s.io/api), with the enums and
    required fields kube-apiserver's own validation (pkg/apis/core/validation) adds."""
    workload = _crd_schemas()[("workloads.kueue.x-k8s.io", "v1beta1")]
    pod_set = workload["properties"]["spec"]["properties"]["podSets"]["items"]
    spec: Schema = copy.deepcopy(pod_set["properties"]["template"]["properties"]["spec"])
    props = spec["properties"]
    props["restartPolicy"]["enum"] = ["Always", "OnFailure", "Never"]
    for containers in ("containers", "initContainers"):
        item = props[containers]["items"]
        item["required"] = sorted({*item.get("required", []), "image"})
        item["properties"]["image"]["minLength"] = 1  # an empty image is no image either
    toleration = props["tolerations"]["items"]["properties"]
    toleration["operator"]["enum"] = ["", "Exists", "Equal"]
    toleration["effect"]["enum"] = ["", "NoSchedule", "PreferNoSchedule", "NoExecute"]
    return spec


_META: Schema = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
_OPEN: Schema = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
_INT: Schema = {"type": "integer"}
_STRING: Schema = {"type": "string"}
_BOOL: Schema = {"type": "boolean"}


def _kind(spec: Schema | None = None, *, required: tuple[str, ...] = (), **extra: Schema) -> Schema:
    properties: dict[str, Schema] = {
        "apiVersion": _STRING,
        "kind": _STRING,
        "metadata": _META,
        "status": _OPEN,
        **extra,
    }
    if spec is not None:
        properties["spec"] = spec
    return {"type": "object", "properties": properties, "required": list(required)}


def _template(*, restart_policies: tuple[str, ...] | None = None) -> Schema:
    spec = pod_spec_schema()
    if restart_policies is not None:
        spec = copy.deepcopy(spec)
        spec["properties"]["restartPolicy"]["enum"] = list(restart_policies)
        spec["required"] = sorted({*spec.get("required", []), "restartPolicy"})
    return {"type": "object", "properties": {"metadata": _META, "spec": spec}}


def _job_spec() -> Schema:
    """batch/v1 JobSpec (API reference v1.31); a Job's pods may only restart OnFailure or
    Never (pkg/apis/batch/validation)."""
    pod_condition = {
        "type": "object",
        "required": ["type"],
        "properties": {"type": _STRING, "status": {"type": "string"}},
    }
    rule = {
        "type": "object",
        "required": ["action"],
        "properties": {
            "action": {"type": "string", "enum": ["FailJob", "FailIndex", "Ignore", "Count"]},
            "onExitCodes": _OPEN,
            "onPodConditions": {"type": "array", "items": pod_condition},
        },
    }
    return {
        "type": "object",
        "required": ["template"],
        "properties": {
            "activeDeadlineSeconds": {"type": "integer", "minimum": 1},
            "backoffLimit": {"type": "integer", "minimum": 0},
            "backoffLimitPerIndex": {"type": "integer", "minimum": 0},
            "completionMode": {"type": "string", "enum": ["NonIndexed", "Indexed"]},
            "completions": {"type": "integer", "minimum": 0},
            "managedBy": _STRING,
            "manualSelector": _BOOL,
            "maxFailedIndexes": {"type": "integer", "minimum": 0},
            "parallelism": {"type": "integer", "minimum": 0},
            "podFailurePolicy": {
                "type": "object",
                "required": ["rules"],
                "properties": {"rules": {"type": "array", "maxItems": 20, "items": rule}},
            },
            "podReplacementPolicy": {"type": "string", "enum": ["TerminatingOrFailed", "Failed"]},
            "selector": _OPEN,
            "successPolicy": _OPEN,
            "suspend": _BOOL,
            "template": _template(restart_policies=("OnFailure", "Never")),
            "ttlSecondsAfterFinished": {"type": "integer", "minimum": 0},
        },
    }


def _node_spec() -> Schema:
    """core/v1 NodeSpec (API reference v1.31); a taint's key is a qualified name and its
    value a label value (pkg/apis/core/validation, validateNodeTaints)."""
    taint = {
        "type": "object",
        "required": ["key", "effect"],
        "properties": {
            "key": {"type": "string", "pattern": _QUALIFIED_NAME},
            "value": {"type": "string", "maxLength": 63, "pattern": _LABEL_VALUE},
            "effect": {"type": "string", "enum": ["NoSchedule", "PreferNoSchedule", "NoExecute"]},
            "timeAdded": _STRING,
        },
    }
    return {
        "type": "object",
        "properties": {
            "configSource": _OPEN,
            "externalID": _STRING,
            "podCIDR": _STRING,
            "podCIDRs": {"type": "array", "items": _STRING},
            "providerID": _STRING,
            "taints": {"type": "array", "items": taint},
            "unschedulable": _BOOL,
        },
    }


def _hyperpod_job_spec() -> Schema:
    """sagemaker.amazonaws.com/v1 HyperPodPyTorchJob's spec. The training operator's CRD is
    not published; these are the fields (and required ones) of the model the HyperPod CLI
    generates from it (aws/sagemaker-hyperpod-cli, src/sagemaker/hyperpod/training/config/
    hyperpod_pytorch_job_unified_config.py at c64811d: _HyperPodPytorchJob, ReplicaSpec,
    RunPolicy, ElasticPolicy, all extra="forbid")."""
    replica = {
        "type": "object",
        "required": ["name"],
        "properties": {
            "name": _STRING,
            "replicas": _INT,
            "maxReplicas": _INT,
            "spares": _INT,
            "template": _template(),
        },
    }
    run_policy = {
        "type": "object",
        "properties": {
            "activeDeadlineSeconds": _INT,
            "cleanPodPolicy": _STRING,
            "faultDeadlineSeconds": _INT,
            "jobMaxRetryCount": _INT,
            "logMonitoringConfiguration": {"type": "array", "items": _LOG_RULE},
            "restartPolicy": _OPEN,
            "startupDeadlineSeconds": _INT,
            "suspend": _BOOL,
            "ttlSecondsAfterFinished": _INT,
            "workloadMode": _STRING,
        },
    }
    elastic = {
        "type": "object",
        "properties": {
            name: _INT
            for name in (
                "minReplicas",
                "maxReplicas",
                "replicaIncrementStep",
                "scalingTimeoutInSeconds",
                "gracefulShutdownTimeoutInSeconds",
                "faultyScaleDownTimeoutInSeconds",
            )
        }
        | {"replicaDiscreteValues": {"type": "array", "items": _INT}},
    }
    return {
        "type": "object",
        "properties": {
            "nprocPerNode": _STRING,
            "replicaSpecs": {"type": "array", "items": replica},
            "runPolicy": run_policy,
            "elasticPolicy": elastic,
        },
    }


_LOG_RULE: Schema = {
    # A rule of runPolicy.logMonitoringConfiguration, as the HyperPod training operator's
    # documentation lists its fields ("Using the training operator to run jobs").
    "type": "object",
    "properties": {
        "name": _STRING,
        "logPattern": _STRING,
        "stopPattern": _STRING,
        "expectedStartCutOffInSeconds": _INT,
        "expectedRecurringFrequencyInSeconds": _INT,
        "metricEvaluationDataPoints": _INT,
        "metricThreshold": {"type": "number"},
        "operator": {"type": "string", "enum": ["gt", "gteq", "lt", "lteq", "eq"]},
    },
    "required": ["name", "logPattern"],
}


def _event_fields() -> dict[str, Schema]:
    """core/v1 Event (API reference v1.31, "Event v1 core"); kube-apiserver's validation
    (pkg/apis/core/validation ValidateEvent) requires the involved object's kind and name,
    and a Normal or Warning type where one is given (legacy events)."""
    reference = {
        "type": "object",
        "properties": {
            name: _STRING
            for name in (
                "apiVersion",
                "kind",
                "name",
                "namespace",
                "uid",
                "resourceVersion",
                "fieldPath",
            )
        },
        "required": ["kind", "name"],
    }
    return {
        "involvedObject": reference,
        "related": reference,
        "reason": _STRING,
        "message": _STRING,
        "type": {"type": "string", "enum": ["Normal", "Warning"]},
        "source": {"type": "object", "properties": {"component": _STRING, "host": _STRING}},
        "firstTimestamp": _STRING,
        "lastTimestamp": _STRING,
        "eventTime": _STRING,
        "count": _INT,
        "action": _STRING,
        "reportingComponent": _STRING,
        "reportingInstance": _STRING,
        "series": _OPEN,
    }


def _role_binding() -> Schema:
    """rbac.authorization.k8s.io/v1 RoleBinding (API reference v1.31); kube-apiserver's
    validation (pkg/apis/rbac/validation ValidateRoleBinding) requires a roleRef naming a
    Role or a ClusterRole of this API group, and subjects each of a known kind with a name,
    a Group or User in this API group. It has no status."""
    rbac = "rbac.authorization.k8s.io"
    role_ref = {
        "type": "object",
        "properties": {
            "apiGroup": {"type": "string", "enum": [rbac]},
            "kind": {"type": "string", "enum": ["Role", "ClusterRole"]},
            "name": {"type": "string", "minLength": 1},
        },
        "required": ["apiGroup", "kind", "name"],
    }
    subject = {
        "type": "object",
        "properties": {
            "apiGroup": {"type": "string", "enum": ["", rbac]},
            "kind": {"type": "string", "enum": ["ServiceAccount", "User", "Group"]},
            "name": {"type": "string", "minLength": 1},
            "namespace": _STRING,
        },
        "required": ["kind", "name"],
    }
    schema = _kind(
        required=("roleRef",), roleRef=role_ref, subjects={"type": "array", "items": subject}
    )
    schema["properties"].pop("status")
    return schema


@functools.cache
def _builtin_schemas() -> dict[tuple[str, str], Schema]:
    namespace_spec = {"type": "object", "properties": {"finalizers": {"type": "array"}}}
    eviction = _kind(deleteOptions=_OPEN)
    eviction["properties"].pop("status")
    return {
        ("pods", "v1"): _kind(pod_spec_schema(), required=("spec",)),
        ("jobs.batch", "v1"): _kind(_job_spec(), required=("spec",)),
        ("nodes", "v1"): _kind(_node_spec()),
        ("namespaces", "v1"): _kind(namespace_spec),
        ("events", "v1"): _kind(required=("involvedObject",), **_event_fields()),
        ("evictions.policy", "v1"): eviction,
        ("rolebindings.rbac.authorization.k8s.io", "v1"): _role_binding(),
        ("hyperpodpytorchjobs.sagemaker.amazonaws.com", "v1"): _kind(
            _hyperpod_job_spec(), required=("spec",)
        ),
    }


def schema_for(rt: ResourceType) -> Schema | None:
    """The structural schema of the resource; None for a resource the twin does not check."""
    key = (rt.key, rt.version)
    return _crd_schemas().get(key) or _builtin_schemas().get(key)


# ObjectMeta: labels and annotations (k8s.io/apimachinery validation: ValidateLabels,
# ValidateAnnotations; "Labels and Selectors: Syntax and character set").


def _qualified_name(key: str) -> str | None:
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not _PREFIX.match(prefix)):
        return "prefix part must be a lowercase RFC 1123 subdomain"
    if not name or len(name) > 63 or not _LABEL_NAME.match(name):
        return (
            "name part must consist of alphanumeric characters, '-', '_' or '.', and must "
            "start and end with an alphanumeric character, at most 63 characters"
        )
    return None


def _metadata_causes(meta: Any) -> Iterator[Cause]:
    if not isinstance(meta, dict):
        return
    for section in ("labels", "annotations"):
        values = meta.get(section) or {}
        if not isinstance(values, dict):
            yield Cause("FieldValueTypeInvalid", f"metadata.{section}", "must be a map")
            continue
        for key, value in values.items():
            if (problem := _qualified_name(key)) is not None:
                yield Cause(
                    "FieldValueInvalid",
                    f"metadata.{section}",
                    f"Invalid value: {json.dumps(key)}: {problem}",
                )
            if not isinstance(value, str):
                yield Cause(
                    "FieldValueTypeInvalid", f"metadata.{section}[{key}]", "must be a string"
                )
            elif (
                section == "labels" and value and (len(value) > 63 or not _LABEL_NAME.match(value))
            ):
                detail = (
                    f"Invalid value: {json.dumps(value)}: a valid label must be an empty string or "
                    "consist of alphanumeric characters, '-', '_' or '.', and must start and end "
                    "with an alphanumeric character, at most 63 characters"
                )
                yield Cause("FieldValueInvalid", f"metadata.labels[{key}]", detail)
    annotations = meta.get("annotations")
    if isinstance(annotations, dict):
        size = sum(len(k) + len(str(v)) for k, v in annotations.items())
        if size > _ANNOTATIONS_MAX_BYTES:
            detail = f"Too long: may not be more than {_ANNOTATIONS_MAX_BYTES} bytes"
            yield Cause("FieldValueTooLong", "metadata.annotations", detail)


# admission


def admit(
    rt: ResourceType,
    obj: Obj,
    *,
    subresource: str | None = None,
    strict: bool = False,
    warnings: list[str] | None = None,
) -> Obj:
    """The object as kube-apiserver would store it: unknown fields pruned (each added to
    `warnings`, or refused with 400 when `strict`), defaults applied; 422 Invalid when it
    does not conform. Only what the write may change is checked: where there is a status
    subresource, a write to the main resource leaves status alone (the server keeps the
    stored one) and a write to /status changes only status."""
    schema = schema_for(rt)
    causes = list(_metadata_causes(obj.get("metadata")))
    if schema is None:
        _refuse(rt, obj, causes)
        return obj
    walk = _Walk()
    checked, kept = _writable(rt, obj, subresource)
    if "status" in checked and subresource == "status":
        schema = {**schema, "required": []}
    admitted = walk.value(schema, checked, "")
    causes += walk.causes
    if strict and walk.unknown:
        fields = ", ".join(f'unknown field "{path}"' for path in walk.unknown)
        message = (
            f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}: '
            f"strict decoding error: {fields}"
        )
        raise KubeError(400, "BadRequest", message)
    _refuse(rt, obj, causes)
    if warnings is not None:
        warnings.extend(f'unknown field "{path}"' for path in walk.unknown)
    assert isinstance(admitted, dict)
    return {**kept, **admitted}


def _writable(rt: ResourceType, obj: Obj, subresource: str | None) -> tuple[Obj, Obj]:
    """The parts of `obj` a write checks, and those it keeps as they are. The root's metadata
    is ObjectMeta whatever the schema says (a CRD's is `type: object`): the store checks its
    name, and its labels and annotations are checked on their own."""
    if rt.status_subresource and subresource == "status":
        changed: tuple[str, ...] = ("status",)
    elif rt.status_subresource:
        changed = tuple(k for k in obj if k not in ("metadata", "status"))
    else:
        changed = tuple(k for k in obj if k != "metadata")
    checked = {k: v for k, v in obj.items() if k in changed}
    return checked, {k: v for k, v in obj.items() if k not in changed}


def _refuse(rt: ResourceType, obj: Obj, causes: list[Cause]) -> None:
    if not causes:
        return
    name = (obj.get("metadata") or {}).get("name") or ""
    kind = f"{rt.kind}.{rt.group}" if rt.group else rt.kind
    listed = causes[0].text if len(causes) == 1 else "[" + ", ".join(c.text for c in causes) + "]"
    details = {
        "name": name,
        "group": rt.group,
        "kind": rt.kind,
        "causes": [c.as_status() for c in causes],
    }
    raise KubeError(422, "Invalid", f'{kind} "{name}" is invalid: {listed}', details)
