"""What the twin installs into its cluster before anyone uses it, as an EKS cluster with
HyperPod task governance and Karpenter has it: the upstream CRDs (Kueue's and the Karpenter
AWS provider's, copied from the modules the components are built from), the HyperPod
training operator's HyperPodPyTorchJob CRD, Kueue's admission webhooks (pointed at Kueue on
127.0.0.1), Kueue's configuration, and Karpenter's Deployment as its Helm chart writes it.

Two choices the twin makes, and why:
- Kueue v0.19.2 is the newest release the Go module proxy serves here; v0.20 no longer
  serves `v1beta1`. The twin installs v0.19.2's CRDs with `v1beta1` not served, so a
  client writing `v1beta1` is refused as v0.20 refuses it; with one version served the
  CRDs need no conversion webhook.
- Kueue's webhooks are installed only for what the twin's Kueue serves (its own kinds and
  batch/v1 Jobs), with the namespace selector Kueue's kustomize base adds; an installed
  webhook for an integration Kueue does not run would refuse every object of its kind.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hyperguard_twin.plane.components import Built
from hyperguard_twin.plane.kube import (
    KubeApiError,
    KubeClient,
    manifest_documents,
    resource,
    wait_for,
)

KWOK_ANNOTATION = "kwok.x-k8s.io/node"
SERVICE_ACCOUNTS = resource("v1", "serviceaccounts")
CRDS = resource("apiextensions.k8s.io/v1", "customresourcedefinitions", namespaced=False)
FIELD_MANAGER = "hyperguard-twin"
KUEUE_NAMESPACE = "kueue-system"
HYPERPOD_JOB_FRAMEWORK = "HyperPodPyTorchJob.v1.sagemaker.amazonaws.com"
KUEUE_WEBHOOK_RESOURCES = frozenset(
    {"clusterqueues", "cohorts", "resourceflavors", "workloads", "jobs"}
)
_UNSERVED_KUEUE_VERSION = "v1beta1"


def kueue_crds(built: Built) -> list[dict[str, Any]]:
    crds = []
    for path in sorted((built.manifests / "crds").glob("*.yaml")):
        for crd in manifest_documents(path):  # freshly parsed: changed in place
            for version in crd["spec"]["versions"]:
                if version["name"] == _UNSERVED_KUEUE_VERSION:
                    version["served"] = False
            crd["spec"].pop("conversion", None)
            crds.append(crd)
    return crds


def karpenter_crds(built: Built) -> list[dict[str, Any]]:
    return [
        d
        for path in sorted((built.manifests / "crds").glob("*.yaml"))
        for d in manifest_documents(path)
    ]


def pod_template_schema(kueue: list[dict[str, Any]]) -> dict[str, Any]:
    """core/v1 PodTemplateSpec's structural schema, as controller-gen writes it into Kueue's
    Workload CRD (spec.podSets[].template): the same generated k8s.io/api types."""
    workload = next(c for c in kueue if c["spec"]["names"]["kind"] == "Workload")
    served = next(v for v in workload["spec"]["versions"] if v["storage"])
    pod_sets = served["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["podSets"]
    return copy.deepcopy(pod_sets["items"]["properties"]["template"])


_INT = {"type": "integer", "format": "int32"}
_STR = {"type": "string"}
_TIME = {"type": "string", "format": "date-time"}


def hyperpod_pytorch_job_crd(template: dict[str, Any]) -> dict[str, Any]:
    """sagemaker.amazonaws.com/v1 HyperPodPyTorchJob. The HyperPod training operator is an
    EKS add-on whose CRD is not published; this one is written from the model the HyperPod
    CLI generates from it (aws/sagemaker-hyperpod-cli, src/sagemaker/hyperpod/training/
    config/hyperpod_pytorch_job_unified_config.py: _HyperPodPytorchJob, ReplicaSpec,
    RunPolicy, RestartPolicy, LogMonitoringConfiguration and HyperPodPytorchJobStatus, all
    extra="forbid"), with the elasticPolicy and replica maxReplicas AWS documents for elastic
    training ("Elastic training", HyperPod developer guide)."""
    log_rule = {
        "type": "object",
        "required": ["name", "logPattern"],
        "properties": {
            "name": _STR,
            "logPattern": _STR,
            "stopPattern": _STR,
            "expectedStartCutOffInSeconds": _INT,
            "expectedRecurringFrequencyInSeconds": _INT,
            "metricEvaluationDataPoints": _INT,
            "metricThreshold": _INT,
            "operator": {"type": "string", "enum": ["gt", "gteq", "lt", "lteq", "eq"]},
        },
    }
    restart_policy = {
        "type": "object",
        "required": ["evalPeriodSeconds"],
        "properties": {
            "evalPeriodSeconds": _INT,
            "maxFullJobRestarts": _INT,
            "numRestartBeforeFullJobRestart": _INT,
        },
    }
    run_policy = {
        "type": "object",
        "properties": {
            "activeDeadlineSeconds": _INT,
            "cleanPodPolicy": {"type": "string", "default": "All"},
            "faultDeadlineSeconds": _INT,
            "jobMaxRetryCount": _INT,
            "logMonitoringConfiguration": {"type": "array", "items": log_rule},
            "restartPolicy": restart_policy,
            "startupDeadlineSeconds": _INT,
            "suspend": {"type": "boolean"},
            "ttlSecondsAfterFinished": {"type": "integer", "format": "int32", "default": 0},
        },
    }
    elastic = {
        "type": "object",
        "properties": {
            **{
                name: _INT
                for name in (
                    "minReplicas",
                    "maxReplicas",
                    "replicaIncrementStep",
                    "scalingTimeoutInSeconds",
                    "gracefulShutdownTimeoutInSeconds",
                    "faultyScaleDownTimeoutInSeconds",
                )
            },
            "replicaDiscreteValues": {"type": "array", "items": _INT},
        },
    }
    replica = {
        "type": "object",
        "required": ["name"],
        "properties": {
            "name": _STR,
            "replicas": {"type": "integer", "format": "int32", "default": 1},
            "maxReplicas": _INT,
            "spares": {"type": "integer", "format": "int32", "default": 0},
            "template": template,
        },
    }
    reference = {
        "type": "object",
        "properties": {
            name: _STR
            for name in (
                "apiVersion",
                "fieldPath",
                "kind",
                "name",
                "namespace",
                "resourceVersion",
                "uid",
            )
        },
    }
    condition = {
        "type": "object",
        "required": ["status", "type"],
        "properties": {
            "lastProbeTime": _TIME,
            "lastTransitionTime": _TIME,
            "message": _STR,
            "reason": _STR,
            "status": _STR,
            "type": _STR,
        },
    }
    pod_set_info = {
        "type": "object",
        "properties": {
            "annotations": {"type": "object", "additionalProperties": _STR},
            "labels": {"type": "object", "additionalProperties": _STR},
            "nodeSelector": {"type": "object", "additionalProperties": _STR},
            "tolerations": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "effect": _STR,
                        "key": _STR,
                        "operator": _STR,
                        "tolerationSeconds": {"type": "integer", "format": "int64"},
                        "value": _STR,
                    },
                },
            },
        },
    }
    status = {
        "type": "object",
        "properties": {
            "completionTime": _TIME,
            "conditions": {"type": "array", "items": condition},
            "jobPods": {"type": "array", "items": reference},
            "managerPods": reference,
            "masterAddr": _STR,
            "masterPort": _STR,
            "podManagerStatuses": {"type": "array", "items": reference},
            "podSetInfos": {"type": "array", "items": pod_set_info},
            "podSets": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["count", "template"],
                    "properties": {
                        "count": _INT,
                        "minCount": _INT,
                        "name": _STR,
                        "template": template,
                    },
                },
            },
            "restartCount": {"type": "integer", "format": "int32", "default": 0},
            "restartStatus": {
                "type": "object",
                "required": ["currentEvalPeriod", "fullJobRestartCount", "restartCount"],
                "properties": {
                    "currentEvalPeriod": _INT,
                    "fullJobRestartCount": _INT,
                    "restartCount": _INT,
                },
            },
            "elasticScalingStatus": {
                "type": "object",
                "properties": {
                    "targetReplicas": {"type": "object", "additionalProperties": _INT},
                    "lastScalingTime": _TIME,
                    "consecutiveScalingFailures": _INT,
                },
            },
            "startTime": _TIME,
        },
    }
    spec = {
        "type": "object",
        "properties": {
            "nprocPerNode": {"type": "string", "default": "auto"},
            "replicaSpecs": {"type": "array", "items": replica},
            "runPolicy": run_policy,
            "elasticPolicy": elastic,
        },
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "hyperpodpytorchjobs.sagemaker.amazonaws.com"},
        "spec": {
            "group": "sagemaker.amazonaws.com",
            "names": {
                "kind": "HyperPodPyTorchJob",
                "listKind": "HyperPodPyTorchJobList",
                "plural": "hyperpodpytorchjobs",
                "singular": "hyperpodpytorchjob",
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "apiVersion": _STR,
                                "kind": _STR,
                                "metadata": {"type": "object"},
                                "spec": spec,
                                "status": status,
                            },
                        }
                    },
                }
            ],
        },
    }


def install_crds(client: KubeClient, built: Mapping[str, Built], timeout_s: float) -> None:
    """Every CRD the cluster serves, applied and Established."""
    kueue = kueue_crds(built["kueue"])
    crds = [
        *kueue,
        *karpenter_crds(built["karpenter"]),
        hyperpod_pytorch_job_crd(pod_template_schema(kueue)),
    ]
    if "kwok" in built:  # KWOK's Logs: each simulated container's log file (twin.cloud.logs)
        crds += manifest_documents(built["kwok"].manifests / "logs-crd.yaml")
    for crd in crds:
        client.apply(crd, FIELD_MANAGER)

    def established() -> bool:
        for crd in crds:
            found = client.get(CRDS, crd["metadata"]["name"]) or {}
            conditions = {
                c["type"]: c["status"] for c in (found.get("status") or {}).get("conditions") or []
            }
            if conditions.get("Established") != "True" or not _lists(client, crd):
                return False
        return True

    wait_for(established, timeout_s, "the CRDs were not established")


def _lists(client: KubeClient, crd: dict[str, Any]) -> bool:
    """Whether the API server lists the CRD's objects: for a moment after a CRD is
    Established, kube-apiserver answers 429 "storage is (re)initializing" while the
    resource's watch cache starts."""
    spec = crd["spec"]
    served = next(v["name"] for v in spec["versions"] if v["served"])
    rt = resource(
        f"{spec['group']}/{served}",
        spec["names"]["plural"],
        namespaced=spec["scope"] == "Namespaced",
    )
    try:
        client.request("GET", rt.path(), params={"limit": "1"})
    except KubeApiError as error:
        if error.code != 429:
            raise
        return False
    return True


def kueue_configuration(webhook_port: int, probe_port: int, cert_dir: Path) -> dict[str, Any]:
    """Kueue's Configuration (config.kueue.x-k8s.io/v1beta2) as the twin runs it: out of the
    cluster, its webhooks on 127.0.0.1 with the twin's certificate (Kueue's internal
    certificate management off, as envtest setups run it), no leader election; Jobs and the
    HyperPod training operator's HyperPodPyTorchJobs (an external framework, as HyperPod task
    governance registers it) managed only when they name a queue."""
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": KUEUE_NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{probe_port}"},
        "metrics": {"bindAddress": "0"},
        "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "manageJobsWithoutQueueName": False,
        "integrations": {
            "frameworks": ["batch/job"],
            "externalFrameworks": [HYPERPOD_JOB_FRAMEWORK],
        },
    }


def kueue_webhooks(built: Built, port: int, ca_pem: bytes) -> list[dict[str, Any]]:
    """Kueue's webhook configurations for what the twin's Kueue serves, each webhook's
    service reference replaced by Kueue's address on 127.0.0.1."""
    import base64

    ca_bundle = base64.b64encode(ca_pem).decode()
    job_selector = {
        "matchExpressions": [
            {
                "key": "kubernetes.io/metadata.name",
                "operator": "NotIn",
                "values": ["kube-system", KUEUE_NAMESPACE],
            }
        ]
    }
    out = []
    for document in manifest_documents(built.manifests / "webhooks.yaml"):
        kept = []
        for webhook in document.get("webhooks") or []:
            resources = {
                r for rule in webhook.get("rules") or [] for r in rule.get("resources") or []
            }
            if not {r.split("/")[0] for r in resources} <= KUEUE_WEBHOOK_RESOURCES:
                continue
            webhook = copy.deepcopy(webhook)
            path = webhook["clientConfig"]["service"]["path"]
            webhook["clientConfig"] = {
                "url": f"https://127.0.0.1:{port}{path}",
                "caBundle": ca_bundle,
            }
            if "jobs" in resources:
                webhook["namespaceSelector"] = job_selector
            kept.append(webhook)
        out.append(
            {
                **document,
                "metadata": {"name": f"kueue-{document['metadata']['name']}"},
                "webhooks": kept,
            }
        )
    return out


def install_kueue_webhooks(client: KubeClient, built: Built, port: int, ca_pem: bytes) -> None:
    client.apply(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": KUEUE_NAMESPACE}},
        FIELD_MANAGER,
    )
    for configuration in kueue_webhooks(built, port, ca_pem):
        client.apply(configuration, FIELD_MANAGER)


def karpenter_deployment(feature_gates: str) -> dict[str, Any]:
    """Karpenter's Deployment in kube-system as its Helm chart (karpenter-provider-aws
    charts/karpenter/templates/deployment.yaml) writes what a cluster can read of it: the
    chart's name label and the controller's FEATURE_GATES, here the gates the twin's
    Karpenter runs with. The twin runs Karpenter as a process beside the API server, so the
    Deployment asks for no replicas: it is how the cluster shows what runs, as on EKS (D148)."""
    labels = {"app.kubernetes.io/name": "karpenter", "app.kubernetes.io/instance": "karpenter"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "karpenter",
            "namespace": "kube-system",
            "labels": labels,
            "annotations": {"hyperguard.dev/twin": "runs as a process beside the API server"},
        },
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [
                        {
                            "name": "controller",
                            "image": "public.ecr.aws/karpenter/controller",
                            "env": [{"name": "FEATURE_GATES", "value": feature_gates}],
                        }
                    ]
                },
            },
        },
    }
