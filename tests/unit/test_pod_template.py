"""A job's own pod template: checked against Kubernetes' schema and HyperGuard's parts at
submission, then carried into both kinds of run with only HyperGuard's parts added."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from hyperguard.catalogue import InstanceSpec
from hyperguard.cluster.pod_template import (
    MAX_POD_TEMPLATE_BYTES,
    PodTemplateError,
    check_pod_template,
)
from hyperguard.cluster.workloads import (
    JOB_ID_LABEL,
    batch_job_manifest,
    hyperpod_job_manifest,
    resize_patch,
)
from hyperguard.models import Checkpoint, Job
from hyperguard.models.jobs import ElasticPolicy

P5 = InstanceSpec(accelerators=8, vcpu=192, memory_mib=2_097_152, efa_interfaces=32)


def training_template() -> dict[str, Any]:
    """A template as AWS's HyperPodPyTorchJob example and the FSx for Lustre docs write one:
    a service account, extra env, an FSx claim, /dev/shm in memory, EFA and hugepages."""
    return {
        "metadata": {"labels": {"app": "llama"}, "annotations": {"team.example/cost": "a1"}},
        "spec": {
            "serviceAccountName": "trainer",
            "containers": [
                {
                    "name": "pytorch",
                    "image": "123456789012.dkr.ecr.us-west-2.amazonaws.com/llama:1",
                    "command": ["torchrun"],
                    "args": ["train.py", "--config", "/config/llama.yaml"],
                    "env": [
                        {"name": "NCCL_DEBUG", "value": "INFO"},
                        {"name": "FI_PROVIDER", "value": "efa"},
                    ],
                    "envFrom": [{"configMapRef": {"name": "llama-config"}}],
                    "resources": {
                        "requests": {
                            "nvidia.com/gpu": 8,
                            "vpc.amazonaws.com/efa": 32,
                            "hugepages-2Mi": "5120Mi",
                            "memory": "32000Mi",
                        },
                        "limits": {
                            "nvidia.com/gpu": 8,
                            "vpc.amazonaws.com/efa": 32,
                            "hugepages-2Mi": "5120Mi",
                        },
                    },
                    "volumeMounts": [
                        {"name": "fsx", "mountPath": "/fsx"},
                        {"name": "shm", "mountPath": "/dev/shm"},
                    ],
                    "securityContext": {"capabilities": {"add": ["IPC_LOCK"]}},
                },
                {"name": "sidecar", "image": "fluent-bit:3"},
            ],
            "volumes": [
                {"name": "fsx", "persistentVolumeClaim": {"claimName": "fsx-claim"}},
                {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "64Gi"}},
            ],
            "tolerations": [{"key": "example.com/gpu", "operator": "Exists"}],
            "affinity": {
                "podAntiAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "weight": 10,
                            "podAffinityTerm": {
                                "topologyKey": "kubernetes.io/hostname",
                                "labelSelector": {"matchLabels": {"app": "other"}},
                            },
                        }
                    ]
                }
            },
        },
    }


def check(template: dict[str, Any], accelerators: int = 8) -> None:
    check_pod_template(template, accelerator_resource="nvidia.com/gpu", accelerators=accelerators)


def test_a_real_training_template_passes() -> None:
    check(training_template())


def _with(path: str, value: Any) -> dict[str, Any]:
    """The training template with `value` set at `path` (dots; [i] for list items)."""
    template = training_template()
    parts = path.replace("[", ".[").split(".")
    node: Any = template
    for part in parts[:-1]:
        node = node[int(part[1:-1])] if part.startswith("[") else node.setdefault(part, {})
    last = parts[-1]
    if last.startswith("["):
        node[int(last[1:-1])] = value
    else:
        node[last] = value
    return template


@pytest.mark.parametrize(
    ("path", "value", "field", "says"),
    [
        # The schema: unknown fields (as kube-apiserver's strict field validation) and types.
        (
            "spec.containers[0].imagePullPolicyy",
            "Always",
            "spec.containers[0].imagePullPolicyy",
            "unknown field",
        ),
        (
            "spec.volumes[1].emptyDir.medum",
            "Memory",
            "spec.volumes[1].emptyDir.medum",
            "unknown field",
        ),
        ("spec.bogus", 1, "spec.bogus", "unknown field"),
        (
            "spec.containers[0].args",
            "train.py",
            "spec.containers[0].args",
            "Expected `array | null`",
        ),
        (
            "spec.containers[0].env[0]",
            {"value": "x"},
            "spec.containers[0].env[0]",
            "missing required field `name`",
        ),
        ("spec.containers", [], "spec.containers", "at least one container"),
        # What HyperGuard owns.
        ("spec.nodeName", "ip-10-0-0-1", "spec.nodeName", "HyperGuard places"),
        ("spec.hostname", "rank0", "spec.hostname", "rendezvous"),
        ("spec.subdomain", "x", "spec.subdomain", "rendezvous"),
        (
            "spec.priorityClassName",
            "system-node-critical",
            "spec.priorityClassName",
            "priority_class",
        ),
        ("spec.restartPolicy", "OnFailure", "spec.restartPolicy", "must be Never"),
        (
            "spec.nodeSelector",
            {"node.kubernetes.io/instance-type": "p4d.24xlarge"},
            "spec.nodeSelector.node.kubernetes.io/instance-type",
            "instance_type",
        ),
        (
            "spec.affinity.nodeAffinity",
            {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}},
            "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution",
            "pins",
        ),
        ("metadata.name", "mine", "metadata.name", "labels and annotations only"),
        (
            "metadata.labels",
            {"kueue.x-k8s.io/queue-name": "other"},
            "metadata.labels.kueue.x-k8s.io/queue-name",
            "set by HyperGuard",
        ),
        (
            "metadata.annotations",
            {"karpenter.sh/do-not-disrupt": "false"},
            "metadata.annotations.karpenter.sh/do-not-disrupt",
            "set by HyperGuard",
        ),
        (
            "spec.containers[0].env[1]",
            {"name": "MASTER_ADDR", "value": "x"},
            "spec.containers[0].env[1].name",
            "set by HyperGuard",
        ),
        (
            "spec.containers[0].env[1]",
            {"name": "HYPERGUARD_RESUME_STEP", "value": "9"},
            "spec.containers[0].env[1].name",
            "set by HyperGuard",
        ),
        (
            "spec.containers[0].resources.limits.nvidia.com/gpu",
            4,
            "spec.containers[0].resources.limits.nvidia.com/gpu",
            "asks for 8",
        ),
        ("spec.containers[0].image", "", "spec.containers[0].image", "needs an image"),
    ],
)
def test_a_refused_template_names_the_field(path: str, value: Any, field: str, says: str) -> None:
    template = (
        _with(path, value)
        if "nvidia.com/gpu" not in path
        else _set_gpu_limit(training_template(), value)
    )
    with pytest.raises(PodTemplateError) as refused:
        check(template)
    assert refused.value.field == field
    assert says in refused.value.message


def _set_gpu_limit(template: dict[str, Any], value: Any) -> dict[str, Any]:
    template["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = value
    return template


@pytest.mark.parametrize(("given", "told"), [(None, "30"), (0, "0"), (120, "120")])
def test_the_grace_period_the_container_is_told_is_the_pods(given: int | None, told: str) -> None:
    """`terminationGracePeriodSeconds` as the template gives it; null is unset, Kubernetes'
    default of 30 s (the trainer kit refuses a grace that is not a whole number)."""
    template = training_template()
    template["spec"]["terminationGracePeriodSeconds"] = given
    pod = _pod(batch_job_manifest(_job(pod_template=template), ["ip-10-0-0-1"], [], instance=P5))
    (grace,) = [e for e in pod["spec"]["containers"][0]["env"] if e["name"] == "HYPERGUARD_GRACE_S"]
    assert grace["value"] == told


def test_the_trainer_kits_own_settings_are_the_teams_to_give() -> None:
    template = training_template()
    template["spec"]["containers"][0]["env"].extend(
        [
            {
                "name": "HYPERGUARD_API_URL",
                "value": "https://abc.execute-api.us-east-1.amazonaws.com/v1",
            },
            {"name": "HYPERGUARD_INSTANCE_ID", "value": "i-0123456789abcdef0"},
        ]
    )
    check(template)


def test_a_resource_kueues_queues_do_not_cover_is_refused() -> None:
    """Kueue leaves a Workload asking for a resource its ClusterQueue does not cover
    inadmissible: the run would wait forever."""
    template = training_template()
    template["spec"]["initContainers"] = [
        {"name": "fetch", "image": "busybox", "resources": {"limits": {"example.com/fpga": 1}}}
    ]
    with pytest.raises(PodTemplateError, match="Kueue would never admit") as refused:
        check(template)
    assert refused.value.field == "spec.initContainers[0].resources.limits.example.com/fpga"


def test_an_empty_map_key_is_refused_where_it_is() -> None:
    template = training_template()
    template["spec"]["nodeSelector"] = {"": "x"}
    with pytest.raises(PodTemplateError, match="empty key") as refused:
        check(template)
    assert refused.value.field == "spec.nodeSelector"


def test_a_field_given_as_null_is_unset_not_unknown() -> None:
    template = training_template()
    template["spec"]["nodeName"] = None
    template["spec"]["containers"][0]["workingDir"] = None
    check(template)


def test_an_oversized_template_is_refused_by_its_size() -> None:
    template = training_template()
    template["metadata"]["annotations"]["note"] = "x" * MAX_POD_TEMPLATE_BYTES
    with pytest.raises(PodTemplateError, match=f"at most {MAX_POD_TEMPLATE_BYTES}") as refused:
        check(template)
    assert refused.value.field == ""


def _job(**changes: Any) -> Job:
    fields: dict[str, Any] = {
        "job_id": "nlp-1",
        "team": "nlp",
        "instance_type": "ml.p5.48xlarge",
        "pod_template": training_template(),
        "checkpoint_location": "s3://ckpt/nlp-1",
        "last_checkpoint": Checkpoint(
            step=40, uri="s3://ckpt/nlp-1/40", completed_at="2026-11-26T00:00:00Z"
        ),
        "pool": "workers",
    }
    return Job(**(fields | changes))


def _pod(manifest: dict[str, Any]) -> dict[str, Any]:
    spec = manifest["spec"]
    template: dict[str, Any] = (
        spec["replicaSpecs"][0]["template"] if "replicaSpecs" in spec else spec["template"]
    )
    return template


@pytest.mark.parametrize("path", ["hyperpod", "burst"])
def test_every_field_of_the_template_reaches_the_run_and_hyperguard_adds_only_its_own(
    path: str,
) -> None:
    job = _job()
    given = copy.deepcopy(job.pod_template)
    taint = {"key": "hyperguard.io/burst", "operator": "Exists", "effect": "NoSchedule"}
    manifest = (
        hyperpod_job_manifest(job, ["hyperpod-i-0a"], instance=P5)
        if path == "hyperpod"
        else batch_job_manifest(job, ["ip-10-0-0-1"], [taint], instance=P5)
    )
    assert job.pod_template == given  # the stored template is not changed by a dispatch
    assert given is not None
    pod = _pod(manifest)
    meta, spec = pod["metadata"], pod["spec"]
    assert meta["labels"] == {"app": "llama", JOB_ID_LABEL: "nlp-1"}
    assert meta["annotations"] == {"team.example/cost": "a1", "karpenter.sh/do-not-disrupt": "true"}
    for key in ("serviceAccountName", "volumes"):
        assert spec[key] == given["spec"][key]
    assert spec["tolerations"][0] == given["spec"]["tolerations"][0]
    assert spec["tolerations"][1:] == ([taint] if path == "burst" else [])
    assert spec["affinity"]["podAntiAffinity"] == given["spec"]["affinity"]["podAntiAffinity"]
    assert spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert spec["restartPolicy"] == "Never"
    trainer, sidecar = spec["containers"]
    assert sidecar == given["spec"]["containers"][1]  # only the first container is told
    mine = given["spec"]["containers"][0]
    for key in ("name", "image", "command", "args", "envFrom", "volumeMounts", "securityContext"):
        assert trainer[key] == mine[key]
    names = [variable["name"] for variable in trainer["env"]]
    assert names[:2] == ["NCCL_DEBUG", "FI_PROVIDER"]
    assert {"HYPERGUARD_JOB_ID", "HYPERGUARD_RESUME_FROM", "HYPERGUARD_RESUME_STEP"} <= set(names)
    told = {v["name"]: v.get("value", v.get("valueFrom")) for v in trainer["env"]}
    assert told["HYPERGUARD_RUN"] == str(job.run)  # what the trainer kit's markers name
    assert told["HYPERGUARD_NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert told["HYPERGUARD_GRACE_S"] == str(given["spec"].get("terminationGracePeriodSeconds", 30))
    assert ("MASTER_ADDR" in names) == (path == "burst")
    # The team's own requests stand as given (its EFA, memory, hugepages); the accelerators
    # are the job's.
    assert trainer["resources"]["requests"] == {
        "nvidia.com/gpu": "8",
        "vpc.amazonaws.com/efa": 32,
        "hugepages-2Mi": "5120Mi",
        "memory": "32000Mi",
    }
    assert trainer["resources"]["limits"]["hugepages-2Mi"] == "5120Mi"
    json.dumps(manifest)  # what goes to the API server is plain JSON


def test_a_template_without_requests_gets_the_instances_efa_and_memory() -> None:
    template: dict[str, Any] = {"spec": {"containers": [{"name": "pytorch", "image": "llama:1"}]}}
    job = _job(pod_template=template)
    resources = _pod(hyperpod_job_manifest(job, [], instance=P5))["spec"]["containers"][0][
        "resources"
    ]
    assert resources == {
        "requests": {"memory": "1887436Mi", "nvidia.com/gpu": "8", "vpc.amazonaws.com/efa": "32"},
        "limits": {"nvidia.com/gpu": "8", "vpc.amazonaws.com/efa": "32"},
    }
    opted_out = copy.deepcopy(template)
    opted_out["spec"]["containers"][0]["resources"] = {"limits": {"vpc.amazonaws.com/efa": 0}}
    resources = _pod(batch_job_manifest(_job(pod_template=opted_out), [], instance=P5))["spec"][
        "containers"
    ][0]["resources"]
    assert resources["limits"]["vpc.amazonaws.com/efa"] == 0


@pytest.mark.parametrize(
    ("accelerators", "efa", "memory"),
    [(8, "32", "1887436Mi"), (4, "16", "943718Mi"), (1, "4", "235929Mi")],
)
def test_a_replica_asks_for_its_share_of_the_instance_so_replicas_sharing_a_node_fit(
    accelerators: int, efa: str, memory: str
) -> None:
    job = _job(pod_template=None, image="llama:1", accelerators_per_replica=accelerators)
    resources = _pod(batch_job_manifest(job, [], instance=P5))["spec"]["containers"][0]["resources"]
    assert resources["limits"] == {
        "nvidia.com/gpu": str(accelerators),
        "vpc.amazonaws.com/efa": efa,
    }
    assert resources["requests"]["memory"] == memory
    # Eight 1-GPU replicas fit on one p5.48xlarge: 32 EFA interfaces, 90 % of its memory.
    assert 8 // accelerators * int(memory.removesuffix("Mi")) <= 0.9 * P5.memory_mib


def test_an_auto_resume_run_keeps_the_templates_preferred_node_affinity_after_the_pins() -> None:
    template = training_template()
    preference = {
        "weight": 5,
        "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
    }
    template["spec"]["affinity"]["nodeAffinity"] = {
        "preferredDuringSchedulingIgnoredDuringExecution": [preference]
    }
    job = _job(pod_template=template, auto_resume=True)
    node = _pod(hyperpod_job_manifest(job, ["hyperpod-i-0a"], instance=P5))["spec"]["affinity"][
        "nodeAffinity"
    ]
    preferred = node["preferredDuringSchedulingIgnoredDuringExecution"]
    assert preferred[-1] == preference and len(preferred) == 2
    terms = node["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert len(terms) == 2  # the pinned node, or any node of its instance group


def test_a_resize_keeps_the_template() -> None:
    policy = ElasticPolicy(min_replicas=1, max_replicas=4)
    patch = resize_patch(_job(elastic_policy=policy, run=2), ["a", "b"], instance=P5)
    pod = patch["spec"]["replicaSpecs"][0]["template"]["spec"]
    assert pod["volumes"] == training_template()["spec"]["volumes"]
    assert pod["containers"][0]["resources"]["requests"]["vpc.amazonaws.com/efa"] == 32
