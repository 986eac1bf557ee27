"""Kubernetes adapter and the HyperPod-on-EKS gateway, tested at the HTTP boundary.

No API server is available here. lightkube's Client is given an httpx2.MockTransport whose
handler is a small in-memory API server: it answers real-shaped Node / PodList / Job /
Status JSON, applies JSON merge patches (RFC 7386) honouring metadata.resourceVersion, and
records every request so tests can check method, path, query, content type and body
against the Kubernetes API.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

import boto3
import httpx2
import pytest
from botocore.stub import Stubber
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from lightkube import Client, KubeConfig
from lightkube.config.models import Cluster, User
from tests.conftest import catalogue

from hyperguard.cluster import ClusterError, NodeNotFoundError
from hyperguard.cluster.conventions import (
    UNKNOWN_PROVIDER_ID_METRIC,
    HyperPodHealthStatus,
    label_safe,
)
from hyperguard.cluster.hyperpod import HyperPodAdapter
from hyperguard.cluster.hyperpod_eks import HyperPodEksGateway
from hyperguard.cluster.kubernetes import KubernetesAdapter
from hyperguard.cluster.workloads import JOB_ID_LABEL, job_name, team_namespace
from hyperguard.models import Job, JobStatus, NodeStatus
from hyperguard.models.jobs import ElasticPolicy
from hyperguard.observability import metrics
from hyperguard.provider_ids import hyperpod_provider_id

CATALOGUE = catalogue()

MERGE_PATCH = "application/merge-patch+json"
SERVER = "https://ABCDEF0123456789.gr7.us-west-2.eks.amazonaws.com"
INSTANCE = "i-0123456789abcdef0"
OTHER_INSTANCE = "i-0fedcba9876543210"
CLUSTER_ID = "tqci9uwuwqiz"
NODE = f"hyperpod-{INSTANCE}"
OTHER_NODE = f"hyperpod-{OTHER_INSTANCE}"
RUNS = {"jobs": "Job", "hyperpodpytorchjobs": "HyperPodPyTorchJob"}


def status(code: int, reason: str, message: str, **details: Any) -> httpx2.Response:
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success" if code < 400 else "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details:
        body["details"] = details
    return httpx2.Response(code, json=body)


def merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return patch
    merged = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = merge_patch(merged.get(key), value)
    return merged


def node_json(name: str, instance_id: str, **spec: Any) -> dict[str, Any]:
    return {
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "resourceVersion": "1000",
            "creationTimestamp": "2025-01-01T00:00:00Z",
            "labels": {
                "kubernetes.io/hostname": name,
                "node.kubernetes.io/instance-type": "ml.p5.48xlarge",
                "sagemaker.amazonaws.com/compute-type": "hyperpod",
                "sagemaker.amazonaws.com/node-health-status": "Schedulable",
            },
            "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
        },
        # HyperPod's providerID form, as a live HyperPod EKS node carries it.
        "spec": {"providerID": hyperpod_provider_id("usw2-az1", CLUSTER_ID, instance_id), **spec},
        "status": {
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "lastHeartbeatTime": "2025-01-01T01:00:00Z",
                    "lastTransitionTime": "2025-01-01T00:01:00Z",
                    "reason": "KubeletReady",
                    "message": "kubelet is posting ready status",
                },
                {
                    "type": "AcceleratedHardwareReady",
                    "status": "False",
                    "lastHeartbeatTime": "2025-01-01T01:00:00Z",
                    "lastTransitionTime": "2025-01-01T00:59:00Z",
                    "reason": "NvidiaXID79Error",
                    "message": "GPU has fallen off the bus",
                },
            ],
            "nodeInfo": {
                "machineID": "ec2a1b2c3d4e5f60718293a4b5c6d7e8",
                "systemUUID": "ec2a1b2c-3d4e-5f60-7182-93a4b5c6d7e8",
                "bootID": "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0",
                "kernelVersion": "5.10.230-223.885.amzn2.x86_64",
                "osImage": "Amazon Linux 2",
                "containerRuntimeVersion": "containerd://1.7.23",
                "kubeletVersion": "v1.31.4-eks-aeac579",
                "kubeProxyVersion": "v1.31.4-eks-aeac579",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        },
    }


def burst_node_json(
    name: str, instance_id: str, *, nodepool: str = "gpu-burst", capacity_type: str = "spot"
) -> dict[str, Any]:
    """A node Karpenter launched for NodePool `nodepool`, owned by its NodeClaim."""
    node = node_json(name, instance_id)
    node["metadata"]["labels"] = {
        "kubernetes.io/hostname": name,
        "node.kubernetes.io/instance-type": "p5.48xlarge",
        "karpenter.sh/nodepool": nodepool,
        "karpenter.sh/capacity-type": capacity_type,
        "karpenter.sh/initialized": "true",
        "karpenter.sh/registered": "true",
        "karpenter.k8s.aws/ec2nodeclass": "gpu",
    }
    node["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "name": nodeclaim_name(instance_id),
            "uid": f"uid-{nodeclaim_name(instance_id)}",
            "blockOwnerDeletion": True,
        }
    ]
    node["spec"]["providerID"] = f"aws:///us-west-2b/{instance_id}"
    return node


def nodeclaim_name(instance_id: str, nodepool: str = "gpu-burst") -> str:
    return f"{nodepool}-{instance_id[-5:]}"


def nodeclaim_json(
    instance_id: str, node_name: str | None, *, nodepool: str = "gpu-burst"
) -> dict[str, Any]:
    """A karpenter.sh/v1 NodeClaim as Karpenter writes it, after launch and registration."""
    name = nodeclaim_name(instance_id, nodepool)
    status: dict[str, Any] = {
        "providerID": f"aws:///us-west-2b/{instance_id}",
        "imageID": "ami-0a1b2c3d4e5f67890",
        "capacity": {"cpu": "192", "memory": "2063937Mi", "nvidia.com/gpu": "8", "pods": "100"},
        "conditions": [
            {
                "type": "Launched",
                "status": "True",
                "reason": "Launched",
                "message": "",
                "lastTransitionTime": "2025-01-01T00:00:30Z",
            }
        ],
    }
    if node_name:
        status["nodeName"] = node_name
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "resourceVersion": "3000",
            "generation": 1,
            "creationTimestamp": "2025-01-01T00:00:00Z",
            "finalizers": ["karpenter.sh/termination"],
            "labels": {
                "karpenter.sh/nodepool": nodepool,
                "karpenter.sh/capacity-type": "spot",
                "node.kubernetes.io/instance-type": "p5.48xlarge",
            },
            "ownerReferences": [
                {
                    "apiVersion": "karpenter.sh/v1",
                    "kind": "NodePool",
                    "name": nodepool,
                    "uid": f"uid-{nodepool}",
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "gpu"},
            "requirements": [
                {"key": "karpenter.sh/nodepool", "operator": "In", "values": [nodepool]},
                {
                    "key": "node.kubernetes.io/instance-type",
                    "operator": "In",
                    "values": ["p5.48xlarge"],
                },
            ],
            "expireAfter": "720h",
        },
        "status": status,
    }


def pod_json(
    name: str, namespace: str, node: str, *, owner: str | None = None, mirror: bool = False
) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": f"uid-{name}",
        "resourceVersion": "2000",
    }
    if owner:
        metadata["ownerReferences"] = [
            {
                "apiVersion": "apps/v1" if owner != "Job" else "batch/v1",
                "kind": owner,
                "name": f"{name}-owner",
                "uid": f"uid-{name}-owner",
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
    if mirror:
        metadata["annotations"] = {"kubernetes.io/config.mirror": "0c5f8c5e0a"}
    return {
        "metadata": metadata,
        "spec": {"nodeName": node, "containers": [{"name": "main", "image": "busybox"}]},
        "status": {"phase": "Running"},
    }


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    content_type: str | None
    body: Any
    authorization: str | None


@dataclass
class FakeApiServer:
    """The few Kubernetes API endpoints the adapter uses, in memory."""

    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    pods: dict[str, dict[str, Any]] = field(default_factory=dict)
    jobs: dict[str, dict[str, Any]] = field(default_factory=dict)
    """batch/v1 Jobs by namespace/name."""
    hyperpod_jobs: dict[str, dict[str, Any]] = field(default_factory=dict)
    """HyperPodPyTorchJobs by namespace/name."""
    nodeclaims: dict[str, dict[str, Any]] = field(default_factory=dict)
    nodepools: dict[str, dict[str, Any]] = field(default_factory=dict)
    services: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Services by namespace/name."""
    # NodeClaims a list still returns although they are gone (a list served from a lagging
    # cache): a DELETE that follows finds nothing.
    stale_nodeclaims: list[dict[str, Any]] = field(default_factory=list)
    pdb_refusals: dict[str, int] = field(default_factory=dict)
    # (method, path) → HTTP status the server answers with instead of serving the request
    errors: dict[tuple[str, str], int] = field(default_factory=dict)
    conflicts: int = 0
    requests: list[Request] = field(default_factory=list)
    version: int = 1000

    def add_node(self, node: dict[str, Any]) -> None:
        self.nodes[node["metadata"]["name"]] = node

    def add_nodeclaim(self, claim: dict[str, Any]) -> None:
        self.nodeclaims[claim["metadata"]["name"]] = claim

    def add_pod(self, pod: dict[str, Any]) -> None:
        self.pods[f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"] = pod

    def calls(self, method: str | None = None) -> list[Request]:
        return [r for r in self.requests if method is None or r.method == method]

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        body: Any = json.loads(request.content) if request.content else None  # what was sent
        query = parse_qs(
            request.url.query.decode()
            if isinstance(request.url.query, bytes)
            else request.url.query
        )
        self.requests.append(
            Request(
                request.method,
                request.url.path,
                query,
                request.headers.get("content-type"),
                body,
                request.headers.get("authorization"),
            )
        )
        if (request.method, request.url.path) in self.errors:
            code = self.errors[(request.method, request.url.path)]
            return status(code, "InternalError", "etcdserver: request timed out")
        parts = request.url.path.strip("/").split("/")
        match request.method, parts:
            case "GET", ["api", "v1", "nodes"]:
                return self._list("NodeList", "v1", list(self.nodes.values()))
            case "GET", ["api", "v1", "nodes", name]:
                return self._get(self.nodes, name, "nodes")
            case "PATCH", ["api", "v1", "nodes", name]:
                return self._patch_node(name, body)
            case "GET", ["api", "v1", *place, "pods"]:
                return self._list("PodList", "v1", self._pods(place, query))
            case "POST", ["api", "v1", "namespaces", ns, "pods", name, "eviction"]:
                return self._evict(f"{ns}/{name}")
            case "DELETE", ["api", "v1", "namespaces", ns, "pods", name]:
                if self.pods.pop(f"{ns}/{name}", None) is None:
                    return status(
                        404, "NotFound", f'pods "{name}" not found', name=name, kind="pods"
                    )
                return status(200, "", "")
            case "GET", ["apis", "karpenter.sh", "v1", "nodeclaims"]:
                items = [*self.nodeclaims.values(), *self.stale_nodeclaims]
                return self._list("NodeClaimList", "karpenter.sh/v1", items)
            case "DELETE", ["apis", "karpenter.sh", "v1", "nodeclaims", name]:
                return self._delete_nodeclaim(name)
            case "GET", ["apis", "karpenter.sh", "v1", "nodepools", name]:
                return self._get(self.nodepools, name, "nodepools")
            case "POST", ["apis", group, "v1", "namespaces", ns, plural] if plural in RUNS:
                return self._create_run(plural, ns, body)
            case "POST", ["api", "v1", "namespaces", ns, "services"]:
                key = f"{ns}/{body['metadata']['name']}"
                if key in self.services:
                    return status(409, "AlreadyExists", f"services {key} already exists")
                self.services[key] = body
                return httpx2.Response(201, json=body)
            case "GET", ["apis", group, "v1", plural] if plural in RUNS:
                wanted = [p.split("=", 1) for p in query["labelSelector"][0].split(",")]
                items = [
                    j
                    for j in self._runs(plural).values()
                    if all(
                        k in j["metadata"].get("labels", {})
                        and (len(kv) == 1 or j["metadata"]["labels"][k] == kv[1])
                        for kv in wanted
                        for k in kv[:1]
                    )
                ]
                return self._list(f"{RUNS[plural]}List", f"{group}/v1", items)
            case "PATCH", ["apis", group, "v1", "namespaces", ns, plural, name] if plural in RUNS:
                key = f"{ns}/{name}"
                if key not in self._runs(plural):
                    return status(404, "NotFound", f'{plural} "{name}" not found')
                self._runs(plural)[key] = merge_patch(self._runs(plural)[key], body)
                return httpx2.Response(200, json=self._runs(plural)[key])
            case "DELETE", ["apis", group, "v1", "namespaces", ns, plural, name] if plural in RUNS:
                if self._runs(plural).pop(f"{ns}/{name}", None) is None:
                    return status(
                        404,
                        "NotFound",
                        f'{plural}.{group} "{name}" not found',
                        name=name,
                        group=group,
                        kind=plural,
                    )
                return status(200, "", "")
        return status(404, "NotFound", "the server could not find the requested resource")

    def _pods(self, place: list[str], query: dict[str, list[str]]) -> list[dict[str, Any]]:
        """A node's pods (a field selector), or a namespace's of some jobs (`key in (...)`)."""
        if not place:
            node_name = query["fieldSelector"][0].removeprefix("spec.nodeName=")
            return [p for p in self.pods.values() if p["spec"]["nodeName"] == node_name]
        key, _, values = query["labelSelector"][0].partition(" in ")
        wanted = set(values.strip("()").split(","))
        return [
            p
            for p in self.pods.values()
            if p["metadata"]["namespace"] == place[-1]
            and (p["metadata"].get("labels") or {}).get(key) in wanted
        ]

    def _list(self, kind: str, api_version: str, items: list[dict[str, Any]]) -> httpx2.Response:
        return httpx2.Response(
            200,
            json={
                "kind": kind,
                "apiVersion": api_version,
                "metadata": {"resourceVersion": str(self.version)},
                "items": items,
            },
        )

    def _get(self, store: dict[str, dict[str, Any]], name: str, kind: str) -> httpx2.Response:
        if name not in store:
            return status(404, "NotFound", f'{kind} "{name}" not found', name=name, kind=kind)
        return httpx2.Response(200, json=store[name])

    def _patch_node(self, name: str, patch: dict[str, Any]) -> httpx2.Response:
        if name not in self.nodes:
            return status(404, "NotFound", f'nodes "{name}" not found', name=name, kind="nodes")
        node = self.nodes[name]
        wanted_version = patch.get("metadata", {}).get("resourceVersion")
        if self.conflicts:
            # another writer got there first
            self.conflicts -= 1
            self.version += 1
            node["metadata"]["resourceVersion"] = str(self.version)
        if wanted_version is not None and wanted_version != node["metadata"]["resourceVersion"]:
            return status(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on nodes "{name}": the object has been modified; '
                "please apply your changes to the latest version and try again",
                name=name,
                kind="nodes",
            )
        self.version += 1
        updated = merge_patch(node, patch)
        updated["metadata"]["resourceVersion"] = str(self.version)
        self.nodes[name] = updated
        return httpx2.Response(200, json=updated)

    def _delete_nodeclaim(self, name: str) -> httpx2.Response:
        """Karpenter's termination finalizer keeps a deleted NodeClaim, with its
        deletionTimestamp set, until the instance is gone."""
        claim = self.nodeclaims.get(name)
        if claim is None:
            return status(
                404,
                "NotFound",
                f'nodeclaims.karpenter.sh "{name}" not found',
                name=name,
                group="karpenter.sh",
                kind="nodeclaims",
            )
        meta = claim["metadata"]
        if not meta.get("finalizers"):
            del self.nodeclaims[name]
        elif "deletionTimestamp" not in meta:
            self.version += 1
            meta.update(
                deletionTimestamp="2025-01-01T02:00:00Z",
                deletionGracePeriodSeconds=0,
                resourceVersion=str(self.version),
            )
        return httpx2.Response(200, json=claim)

    def _evict(self, key: str) -> httpx2.Response:
        if key not in self.pods:
            return status(404, "NotFound", f'pods "{key.split("/")[1]}" not found')
        if self.pdb_refusals.get(key, 0) != 0:
            self.pdb_refusals[key] -= 1
            return status(
                429,
                "TooManyRequests",
                "Cannot evict pod as it would violate the pod's disruption budget.",
                causes=[
                    {
                        "reason": "DisruptionBudget",
                        "message": "The disruption budget trainer-pdb needs 1 healthy pods "
                        "and has 1 currently",
                    }
                ],
            )
        del self.pods[key]
        return status(201, "", "")

    def _runs(self, plural: str) -> dict[str, dict[str, Any]]:
        return self.jobs if plural == "jobs" else self.hyperpod_jobs

    def _create_run(self, plural: str, namespace: str, job: dict[str, Any]) -> httpx2.Response:
        name = job["metadata"]["name"]
        key = f"{namespace}/{name}"
        if key in self._runs(plural):
            return status(
                409,
                "AlreadyExists",
                f'{plural} "{name}" already exists',
                name=name,
                kind=plural,
            )
        self.version += 1
        stored = merge_patch(
            job, {"metadata": {"uid": f"uid-{name}", "resourceVersion": str(self.version)}}
        )
        self._runs(plural)[key] = stored
        return httpx2.Response(201, json=stored)


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


@pytest.fixture
def api() -> FakeApiServer:
    server = FakeApiServer()
    server.add_node(
        node_json(
            NODE,
            INSTANCE,
            taints=[{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}],
        )
    )
    server.add_node(node_json(OTHER_NODE, OTHER_INSTANCE))
    return server


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def lightkube_client(api: FakeApiServer) -> Client:
    config = KubeConfig.from_one(cluster=Cluster(server=SERVER), user=User(token="k8s-aws-v1.test"))
    return Client(config=config, transport=httpx2.MockTransport(api), trust_env=False)


@pytest.fixture
def kube(api: FakeApiServer, clock: FakeClock) -> KubernetesAdapter:
    return KubernetesAdapter(
        "gpu-eks", client=lightkube_client(api), sleep=clock.sleep, clock=clock
    )


# node lookup


def test_finds_a_node_by_provider_id_and_remembers_its_name(
    kube: KubernetesAdapter, api: FakeApiServer
) -> None:
    node = kube.find_node(INSTANCE)
    assert node.name == NODE
    assert node.instance_id == INSTANCE
    assert [(r.method, r.path) for r in api.requests] == [("GET", "/api/v1/nodes")]

    kube.find_node(INSTANCE)
    assert (api.requests[-1].method, api.requests[-1].path) == ("GET", f"/api/v1/nodes/{NODE}")


def test_unknown_instance_is_node_not_found(kube: KubernetesAdapter) -> None:
    with pytest.raises(NodeNotFoundError):
        kube.find_node("i-00000000000000000")


def test_finds_a_node_by_either_provider_id_form(
    kube: KubernetesAdapter, api: FakeApiServer
) -> None:
    burst = "i-0b0b0b0b0b0b0b0b0"
    api.add_node(burst_node_json("ip-10-0-0-7.ec2.internal", burst))
    assert kube.find_node(INSTANCE).name == NODE  # HyperPod's form
    assert kube.find_node(burst).name == "ip-10-0-0-7.ec2.internal"  # EKS's form


def test_a_provider_id_of_an_unknown_form_is_counted_and_its_node_not_found(
    kube: KubernetesAdapter, api: FakeApiServer
) -> None:
    """The instance id is never guessed from an unknown form (the last segment here would be
    a valid-looking id): the node is not found, and the unknown form is counted."""
    instance = "i-0d0d0d0d0d0d0d0d0"
    api.add_node(node_json("odd", instance))
    api.nodes["odd"]["spec"]["providerID"] = f"aws:///usw2-az1/somewhere/else/{instance}"
    metrics.clear_metrics()
    with pytest.raises(NodeNotFoundError):
        kube.find_node(instance)
    assert metrics.metric_set[UNKNOWN_PROVIDER_ID_METRIC]["Value"] == [1.0]
    assert instance not in {n.instance_id for n in kube.list_nodes()}
    metrics.clear_metrics()


def test_node_conditions(kube: KubernetesAdapter) -> None:
    conditions = {c.type: c for c in kube.node_conditions(INSTANCE)}
    assert conditions["Ready"].status == "True"
    hardware = conditions["AcceleratedHardwareReady"]
    assert (hardware.status, hardware.reason) == ("False", "NvidiaXID79Error")
    assert hardware.last_transition_time == dt.datetime(2025, 1, 1, 0, 59, tzinfo=dt.UTC)


# cordon and uncordon


def test_cordon_patches_unschedulable_taint_and_label_in_one_merge_patch(
    kube: KubernetesAdapter, api: FakeApiServer
) -> None:
    assert kube.cordon(INSTANCE, incident_id="inc-42", reason="GPU XID 79: fell off the bus")

    (patch,) = api.calls("PATCH")
    assert patch.path == f"/api/v1/nodes/{NODE}"
    assert patch.content_type == MERGE_PATCH
    assert patch.body == {
        "metadata": {
            "labels": {"hyperguard.io/reason": "GPU-XID-79-fell-off-the-bus"},
            "resourceVersion": "1000",
        },
        "spec": {
            "unschedulable": True,
            "taints": [
                {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"},
                {"key": "hyperguard.io/incident", "value": "inc-42", "effect": "NoSchedule"},
            ],
        },
    }
    assert api.nodes[NODE]["spec"]["unschedulable"] is True
    assert api.nodes[OTHER_NODE]["spec"].get("unschedulable") is None


def test_cordon_twice_for_one_incident_changes_nothing(
    kube: KubernetesAdapter, api: FakeApiServer
) -> None:
    assert kube.cordon(INSTANCE, incident_id="inc-42", reason="xid")
    assert not kube.cordon(INSTANCE, incident_id="inc-42", reason="a different reason")
    assert len(api.calls("PATCH")) == 1


def test_cordon_for_a_new_incident_replaces_the_old_incident_taint(
    kube: KubernetesAdapter, api: FakeApiServer
) -> None:
    kube.cordon(INSTANCE, incident_id="inc-1", reason="xid")
    assert kube.cordon(INSTANCE, incident_id="inc-2", reason="ecc")
    taints = api.nodes[NODE]["spec"]["taints"]
    assert [t["value"] for t in taints if t["key"] == "hyperguard.io/incident"] == ["inc-2"]


def test_cordon_rereads_the_node_after_a_conflict(
    kube: KubernetesAdapter, api: FakeApiServer
) -> None:
    api.conflicts = 1
    assert kube.cordon(INSTANCE, incident_id="inc-42", reason="xid")
    first, second = api.calls("PATCH")
    assert first.body["metadata"]["resourceVersion"] == "1000"
    assert second.body["metadata"]["resourceVersion"] == "1001"
    assert api.nodes[NODE]["spec"]["unschedulable"] is True


def test_cordon_gives_up_when_the_node_keeps_changing(
    kube: KubernetesAdapter, api: FakeApiServer
) -> None:
    api.conflicts = 10
    with pytest.raises(ClusterError):
        kube.cordon(INSTANCE, incident_id="inc-42", reason="xid")


def test_uncordon_removes_only_what_cordon_added(
    kube: KubernetesAdapter, api: FakeApiServer
) -> None:
    kube.cordon(INSTANCE, incident_id="inc-42", reason="xid")
    assert kube.uncordon(INSTANCE)

    patch = api.calls("PATCH")[-1]
    assert patch.content_type == MERGE_PATCH
    assert patch.body["metadata"]["labels"] == {"hyperguard.io/reason": None}
    assert patch.body["spec"] == {
        "taints": [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}],
        "unschedulable": False,
    }
    node = api.nodes[NODE]
    assert node["spec"]["unschedulable"] is False
    assert "hyperguard.io/reason" not in node["metadata"]["labels"]
    assert not kube.uncordon(INSTANCE)
    assert len(api.calls("PATCH")) == 2


def test_uncordon_leaves_a_node_an_operator_had_cordoned_unschedulable(
    kube: KubernetesAdapter, api: FakeApiServer
) -> None:
    api.nodes[NODE]["spec"]["unschedulable"] = True
    kube.cordon(INSTANCE, incident_id="inc-42", reason="xid")
    assert api.calls("PATCH")[0].body["metadata"]["annotations"] == {
        "hyperguard.io/prior-unschedulable": "true"
    }

    kube.uncordon(INSTANCE)

    node = api.nodes[NODE]
    assert node["spec"]["unschedulable"] is True
    assert "hyperguard.io/prior-unschedulable" not in node["metadata"]["annotations"]
    assert all(t["key"] != "hyperguard.io/incident" for t in node["spec"]["taints"])


def test_label_safe_values() -> None:
    assert label_safe("GPU XID 79: fell off the bus") == "GPU-XID-79-fell-off-the-bus"
    assert label_safe("-" * 5) == "unspecified"
    long = label_safe("a" * 62 + "-bcd")
    assert len(long) <= 63 and long[-1].isalnum()


# HyperPod node-health-status label


def test_set_node_health_status_label(kube: KubernetesAdapter, api: FakeApiServer) -> None:
    assert kube.set_node_health_status(INSTANCE, HyperPodHealthStatus.UNSCHEDULABLE_PENDING_REBOOT)
    (patch,) = api.calls("PATCH")
    assert patch.content_type == MERGE_PATCH
    assert patch.body == {
        "metadata": {
            "labels": {"sagemaker.amazonaws.com/node-health-status": "UnschedulablePendingReboot"},
            "resourceVersion": "1000",
        }
    }
    assert not kube.set_node_health_status(
        INSTANCE, HyperPodHealthStatus.UNSCHEDULABLE_PENDING_REBOOT
    )
    assert len(api.calls("PATCH")) == 1


# drain


def add_workload(api: FakeApiServer) -> None:
    api.add_pod(pod_json("trainer-0", "hyperpod-ns-team-a", NODE, owner="Job"))
    api.add_pod(pod_json("notebook", "hyperpod-ns-team-b", NODE))
    api.add_pod(pod_json("dcgm-exporter-x7k2p", "kube-system", NODE, owner="DaemonSet"))
    api.add_pod(pod_json("kube-proxy-static", "kube-system", NODE, mirror=True))
    api.add_pod(pod_json("elsewhere", "hyperpod-ns-team-a", OTHER_NODE, owner="Job"))


def test_drain_evicts_pods_but_not_daemonset_or_mirror_pods(
    kube: KubernetesAdapter, api: FakeApiServer
) -> None:
    add_workload(api)

    result = kube.drain(INSTANCE, deadline_s=60)

    assert sorted(result.evicted) == ["hyperpod-ns-team-a/trainer-0", "hyperpod-ns-team-b/notebook"]
    assert result.forced == [] and result.blocked == [] and result.complete
    pod_list = next(r for r in api.requests if r.path == "/api/v1/pods")
    assert pod_list.query == {"fieldSelector": [f"spec.nodeName={NODE}"]}
    evictions = api.calls("POST")
    assert {r.path for r in evictions} == {
        "/api/v1/namespaces/hyperpod-ns-team-a/pods/trainer-0/eviction",
        "/api/v1/namespaces/hyperpod-ns-team-b/pods/notebook/eviction",
    }
    trainer = next(r for r in evictions if "trainer-0" in r.path)
    assert trainer.content_type == "application/json"
    assert trainer.body == {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": "trainer-0", "namespace": "hyperpod-ns-team-a"},
    }
    assert "kube-system/dcgm-exporter-x7k2p" in api.pods
    assert "kube-system/kube-proxy-static" in api.pods
    assert "hyperpod-ns-team-a/elsewhere" in api.pods
    assert api.calls("DELETE") == []


def test_drain_retries_a_pdb_refusal_until_the_eviction_is_allowed(
    kube: KubernetesAdapter, api: FakeApiServer, clock: FakeClock
) -> None:
    add_workload(api)
    api.pdb_refusals["hyperpod-ns-team-a/trainer-0"] = 2

    result = kube.drain(INSTANCE, deadline_s=60)

    assert sorted(result.evicted) == ["hyperpod-ns-team-a/trainer-0", "hyperpod-ns-team-b/notebook"]
    assert result.forced == []
    assert clock.sleeps == [5.0, 5.0]
    assert len([r for r in api.calls("POST") if "trainer-0" in r.path]) == 3


def test_drain_force_deletes_what_a_pdb_still_protects_at_the_deadline(
    kube: KubernetesAdapter, api: FakeApiServer, clock: FakeClock
) -> None:
    add_workload(api)
    api.pdb_refusals["hyperpod-ns-team-a/trainer-0"] = -1  # refuses for ever

    result = kube.drain(INSTANCE, deadline_s=12)

    assert result.evicted == ["hyperpod-ns-team-b/notebook"]
    assert result.forced == ["hyperpod-ns-team-a/trainer-0"]
    assert result.blocked == []
    assert clock.sleeps == [5.0, 5.0, 2.0]
    (delete,) = api.calls("DELETE")
    assert delete.path == "/api/v1/namespaces/hyperpod-ns-team-a/pods/trainer-0"
    assert delete.query == {"gracePeriodSeconds": ["0"]}
    assert "hyperpod-ns-team-a/trainer-0" not in api.pods


def test_drain_of_an_unknown_instance_is_node_not_found(kube: KubernetesAdapter) -> None:
    with pytest.raises(NodeNotFoundError):
        kube.drain("i-00000000000000000", deadline_s=10)


# Karpenter NodeClaims

BURST_INSTANCE = "i-0b0b0b0b0b0b0b0b0"
BURST_NODE = "ip-10-0-12-34.us-west-2.compute.internal"
BURST_CLAIM = nodeclaim_name(BURST_INSTANCE)
NODECLAIMS = "/apis/karpenter.sh/v1/nodeclaims"


@pytest.fixture
def burst(api: FakeApiServer) -> FakeApiServer:
    """The API server with one Karpenter node and its NodeClaim next to the HyperPod nodes,
    and a NodeClaim launched for another instance whose node has not registered yet."""
    api.add_node(burst_node_json(BURST_NODE, BURST_INSTANCE))
    api.add_nodeclaim(nodeclaim_json(BURST_INSTANCE, BURST_NODE))
    api.add_nodeclaim(nodeclaim_json("i-0c0c0c0c0c0c0c0c0", None))
    return api


def test_delete_nodeclaim_finds_the_claim_by_provider_id_and_deletes_it(
    kube: KubernetesAdapter, burst: FakeApiServer
) -> None:
    assert kube.delete_nodeclaim(BURST_INSTANCE)

    assert [(r.method, r.path, r.query) for r in burst.requests] == [
        ("GET", NODECLAIMS, {}),
        ("DELETE", f"{NODECLAIMS}/{BURST_CLAIM}", {}),
    ]
    assert burst.nodeclaims[BURST_CLAIM]["metadata"]["deletionTimestamp"]
    other = burst.nodeclaims[nodeclaim_name("i-0c0c0c0c0c0c0c0c0")]
    assert "deletionTimestamp" not in other["metadata"]


def test_delete_nodeclaim_twice_deletes_once(kube: KubernetesAdapter, burst: FakeApiServer) -> None:
    assert kube.delete_nodeclaim(BURST_INSTANCE)
    assert not kube.delete_nodeclaim(BURST_INSTANCE)

    assert len(burst.calls("DELETE")) == 1
    assert len(burst.calls("GET")) == 2


def test_delete_nodeclaim_of_a_claim_that_is_already_gone(
    kube: KubernetesAdapter, burst: FakeApiServer
) -> None:
    del burst.nodeclaims[BURST_CLAIM]
    assert not kube.delete_nodeclaim(BURST_INSTANCE)
    assert burst.calls("DELETE") == []


def test_delete_nodeclaim_that_vanishes_between_list_and_delete_is_false(
    kube: KubernetesAdapter, burst: FakeApiServer
) -> None:
    burst.stale_nodeclaims.append(burst.nodeclaims.pop(BURST_CLAIM))

    assert not kube.delete_nodeclaim(BURST_INSTANCE)

    (delete,) = burst.calls("DELETE")
    assert delete.path == f"{NODECLAIMS}/{BURST_CLAIM}"


def test_a_hyperpod_node_has_no_nodeclaim(kube: KubernetesAdapter, burst: FakeApiServer) -> None:
    assert not kube.delete_nodeclaim(INSTANCE)
    assert burst.calls("DELETE") == []


def test_delete_nodeclaim_api_failures_are_cluster_errors(
    kube: KubernetesAdapter, burst: FakeApiServer
) -> None:
    burst.errors[("DELETE", f"{NODECLAIMS}/{BURST_CLAIM}")] = 500
    with pytest.raises(ClusterError):
        kube.delete_nodeclaim(BURST_INSTANCE)
    burst.errors = {("GET", NODECLAIMS): 503}
    with pytest.raises(ClusterError):
        kube.delete_nodeclaim(BURST_INSTANCE)


def test_get_nodepool_reads_the_pool_or_none_and_wraps_failures(
    kube: KubernetesAdapter, api: FakeApiServer
) -> None:
    api.nodepools["gpu-burst"] = {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "gpu-burst", "resourceVersion": "7"},
        "spec": {"limits": {"nvidia.com/gpu": "64"}, "template": {"spec": {}}},
    }
    pool = kube.get_nodepool("gpu-burst")
    assert pool is not None and pool["spec"]["limits"] == {"nvidia.com/gpu": "64"}
    assert kube.get_nodepool("gone") is None
    api.errors[("GET", "/apis/karpenter.sh/v1/nodepools/gpu-burst")] = 500
    with pytest.raises(ClusterError, match="get NodePool gpu-burst on gpu-eks"):
        kube.get_nodepool("gpu-burst")


def test_list_nodes_reports_karpenter_nodes_with_their_labels(
    kube: KubernetesAdapter, burst: FakeApiServer
) -> None:
    burst.nodes[BURST_NODE]["metadata"]["deletionTimestamp"] = "2025-01-01T02:00:00Z"

    nodes = {n.instance_id: n for n in kube.list_nodes()}

    node = nodes[BURST_INSTANCE]
    assert node.name == BURST_NODE
    assert node.labels["karpenter.sh/nodepool"] == "gpu-burst"
    assert node.deleting and not nodes[INSTANCE].deleting
    assert node.created == dt.datetime(2025, 1, 1, tzinfo=dt.UTC)


# client construction from endpoint + CA data + EKS token


@pytest.fixture(scope="module")
def ca_data() -> str:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kubernetes")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    return base64.b64encode(cert.public_bytes(serialization.Encoding.PEM)).decode()


class CountingTokens:
    def __init__(self) -> None:
        self.current = "k8s-aws-v1.first"

    def token(self) -> str:
        return self.current


def test_client_is_built_from_endpoint_ca_and_token_and_rebuilt_on_refresh(
    api: FakeApiServer, ca_data: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    built: list[Client] = []
    real_client = Client

    def client_with_mock_transport(*args: Any, **kwargs: Any) -> Client:
        kwargs["transport"] = httpx2.MockTransport(api)
        client = real_client(*args, **kwargs)
        built.append(client)
        return client

    monkeypatch.setattr("hyperguard.cluster.kubernetes.Client", client_with_mock_transport)
    tokens = CountingTokens()
    kube = KubernetesAdapter("gpu-eks", endpoint=SERVER, ca_data=ca_data, tokens=tokens)

    kube.find_node(INSTANCE)
    kube.find_node(INSTANCE)
    tokens.current = "k8s-aws-v1.second"
    kube.find_node(INSTANCE)

    assert len(built) == 2
    assert built[0].config.cluster.server == SERVER
    assert built[0].config.cluster.certificate_auth_data == ca_data
    assert [r.authorization for r in api.requests] == [
        "Bearer k8s-aws-v1.first",
        "Bearer k8s-aws-v1.first",
        "Bearer k8s-aws-v1.second",
    ]


# HyperPod on EKS: the composite gateway


SageMaker = tuple[Any, Stubber]
"""A SageMaker client and the Stubber that answers it."""


@pytest.fixture
def sagemaker() -> Iterator[SageMaker]:
    client = boto3.client(
        "sagemaker", region_name="us-west-2", aws_access_key_id="x", aws_secret_access_key="x"
    )
    with Stubber(client) as stubber:
        yield client, stubber
        stubber.assert_no_pending_responses()


@pytest.fixture
def gateway(sagemaker: SageMaker, kube: KubernetesAdapter) -> HyperPodEksGateway:
    client, _ = sagemaker
    return HyperPodEksGateway(
        HyperPodAdapter("ml-cluster", catalogue=CATALOGUE, client=client), kube
    )


def summary(instance_id: str, status: str = "Running") -> dict[str, Any]:
    return {
        "InstanceGroupName": "gpu-workers",
        "InstanceId": instance_id,
        "InstanceType": "ml.p5.48xlarge",
        "LaunchTime": dt.datetime(2025, 1, 1, tzinfo=dt.UTC),
        "InstanceStatus": {"Status": status, "Message": ""},
    }


def test_gateway_lists_hyperpod_nodes_completed_by_the_api_server(
    gateway: HyperPodEksGateway, sagemaker: SageMaker, api: FakeApiServer
) -> None:
    _, stubber = sagemaker
    api.nodes[NODE]["metadata"]["labels"]["sagemaker.amazonaws.com/node-health-status"] = (
        "UnschedulablePendingReboot"
    )
    api.nodes[NODE]["spec"]["unschedulable"] = True
    # The other node: SageMaker says Running, HyperPod's label says Schedulable, and the EKS
    # node monitoring agent reports its GPUs fine; a third says AcceleratedHardwareReady=False.
    for condition in api.nodes[OTHER_NODE]["status"]["conditions"]:
        condition["status"] = "True"
    api.add_node(node_json("hyperpod-i-0bbbbbbbbbbbbbbbb", "i-0bbbbbbbbbbbbbbbb"))
    # A fourth is back from a reboot: its GPUs fine, its kubelet not yet Ready.
    booting = node_json("hyperpod-i-0cccccccccccccccc", "i-0cccccccccccccccc")
    for condition in booting["status"]["conditions"]:
        condition["status"] = "False" if condition["type"] == "Ready" else "True"
    api.add_node(booting)
    stubber.add_response(
        "list_cluster_nodes",
        {
            "ClusterNodeSummaries": [
                summary(INSTANCE),
                summary(OTHER_INSTANCE),
                summary("i-0aaaaaaaaaaaaaaaa", "Pending"),
                summary("i-0bbbbbbbbbbbbbbbb"),
                summary("i-0cccccccccccccccc"),
            ]
        },
    )

    nodes = {n.instance_id: n for n in gateway.list_nodes()}

    assert nodes[INSTANCE].node_name == NODE
    assert not nodes[INSTANCE].schedulable
    assert not nodes[INSTANCE].healthy
    assert nodes[OTHER_INSTANCE].healthy and nodes[OTHER_INSTANCE].schedulable
    # Running and Schedulable, but a node condition reports a fault: not healthy.
    assert nodes["i-0bbbbbbbbbbbbbbbb"].status is NodeStatus.RUNNING
    assert not nodes["i-0bbbbbbbbbbbbbbbb"].healthy
    # Only the kubelet's Ready missing is a node starting, not a fault (nor is a reboot
    # HyperPod's label announces, nor a fault a condition reports).
    assert not nodes["i-0cccccccccccccccc"].healthy and nodes["i-0cccccccccccccccc"].booting
    assert not any(nodes[i].booting for i in (INSTANCE, OTHER_INSTANCE, "i-0bbbbbbbbbbbbbbbb"))
    pending = nodes["i-0aaaaaaaaaaaaaaaa"]
    assert pending.node_name is None and pending.status is NodeStatus.PENDING


def test_gateway_node_status_without_a_kubernetes_node(
    gateway: HyperPodEksGateway, sagemaker: SageMaker
) -> None:
    _, stubber = sagemaker
    stubber.add_response(
        "describe_cluster_node", {"NodeDetails": summary("i-0aaaaaaaaaaaaaaaa", "Pending")}
    )
    node = gateway.node_status("i-0aaaaaaaaaaaaaaaa")
    assert node.status is NodeStatus.PENDING and node.node_name is None


def test_gateway_repairs_through_sagemaker_and_cordons_through_kubernetes(
    gateway: HyperPodEksGateway, sagemaker: SageMaker, api: FakeApiServer
) -> None:
    _, stubber = sagemaker
    stubber.add_response(
        "list_cluster_nodes",
        {"ClusterNodeSummaries": [summary(INSTANCE), summary(OTHER_INSTANCE)]},
        {"ClusterName": "ml-cluster", "MaxResults": 100, "IncludeNodeLogicalIds": True},
    )
    stubber.add_response(
        "batch_reboot_cluster_nodes",
        {"Successful": [INSTANCE]},
        {"ClusterName": "ml-cluster", "NodeIds": [INSTANCE]},
    )
    assert gateway.cordon(INSTANCE, incident_id="inc-1", reason="xid")
    assert gateway.drain(INSTANCE, deadline_s=1).complete
    assert gateway.reboot([INSTANCE]).successful == [INSTANCE]
    assert gateway.uncordon(INSTANCE)
    # every id was SageMaker's: only cordon's node lookup listed the API server's nodes
    assert [r.path for r in api.calls("GET")].count("/api/v1/nodes") == 1


def training_job(**overrides: Any) -> Job:
    values: dict[str, Any] = {
        "job_id": "llama-70b-pretrain",
        "team": "team-a",
        "priority_class": "training",
        "image": "123456789012.dkr.ecr.us-west-2.amazonaws.com/trainer:1.0",
        "command": ["torchrun", "train.py"],
        "replicas": 2,
    }
    values.update(overrides)
    return Job(**values)


def test_dispatch_on_hyperpod_nodes_creates_a_hyperpod_pytorch_job(
    gateway: HyperPodEksGateway, api: FakeApiServer
) -> None:
    assert gateway.dispatch(training_job(auto_resume=True), [INSTANCE, OTHER_INSTANCE])

    (create,) = api.calls("POST")
    assert create.path == (
        "/apis/sagemaker.amazonaws.com/v1/namespaces/hyperpod-ns-team-a/hyperpodpytorchjobs"
    )
    job = create.body
    assert (job["apiVersion"], job["kind"]) == ("sagemaker.amazonaws.com/v1", "HyperPodPyTorchJob")
    assert job["metadata"]["name"] == "llama-70b-pretrain"
    assert job["metadata"]["namespace"] == "hyperpod-ns-team-a"
    assert job["metadata"]["labels"] == {
        "kueue.x-k8s.io/queue-name": "hyperguard-runs",
        "kueue.x-k8s.io/priority-class": "training-priority",
        "hyperguard.io/job-id": "llama-70b-pretrain",
        "hyperguard.io/run": "0",
    }
    assert job["metadata"]["annotations"] == {
        "hyperguard.io/job-id": "llama-70b-pretrain",
        "sagemaker.amazonaws.com/enable-job-auto-resume": "true",
    }
    spec = job["spec"]
    assert spec["nprocPerNode"] == "8"
    # auto-resume: HyperPod's operator restarts the job itself
    assert spec["runPolicy"]["jobMaxRetryCount"] == 10
    assert spec["runPolicy"]["suspend"] is True
    assert "elasticPolicy" not in spec
    (replicas,) = spec["replicaSpecs"]
    assert (replicas["name"], replicas["replicas"], replicas["spares"]) == ("pods", 2, 0)
    pod = replicas["template"]["spec"]
    assert pod["nodeSelector"] == {"node.kubernetes.io/instance-type": "ml.p5.48xlarge"}
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    # kube-apiserver refuses a node field selector with more than one value: a term a node.
    assert terms == [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [name]}]}
        for name in (NODE, OTHER_NODE)
    ]
    (container,) = pod["containers"]
    # A p5.48xlarge replica asks for its 8 GPUs, its 32 EFA interfaces (EC2's EfaInfo) and
    # 90 % of its 2 TiB of memory.
    assert container["resources"] == {
        "limits": {"nvidia.com/gpu": "8", "vpc.amazonaws.com/efa": "32"},
        "requests": {"nvidia.com/gpu": "8", "vpc.amazonaws.com/efa": "32", "memory": "1887436Mi"},
    }
    assert container["command"] == ["torchrun", "train.py"]


def test_an_elastic_job_carries_its_policy_bounded_by_what_was_admitted(
    gateway: HyperPodEksGateway, api: FakeApiServer
) -> None:
    policy = ElasticPolicy(
        min_replicas=1,
        max_replicas=4,
        replica_increment_step=1,
        graceful_shutdown_timeout_in_seconds=600,
        scaling_timeout_in_seconds=60,
        faulty_scale_down_timeout_in_seconds=30,
    )
    gateway.dispatch(training_job(elastic_policy=policy), [INSTANCE, OTHER_INSTANCE])

    spec = api.calls("POST")[0].body["spec"]
    assert spec["elasticPolicy"] == {
        "minReplicas": 1,
        "maxReplicas": 2,
        "replicaIncrementStep": 1,
        "gracefulShutdownTimeoutInSeconds": 600,
        "scalingTimeoutInSeconds": 60,
        "faultyScaleDownTimeoutInSeconds": 30,
    }
    assert spec["replicaSpecs"][0]["maxReplicas"] == 2
    assert spec["runPolicy"]["jobMaxRetryCount"] == 0


def test_dispatch_on_burst_nodes_creates_a_kueue_batch_job(
    gateway: HyperPodEksGateway, burst: FakeApiServer
) -> None:
    assert gateway.dispatch(training_job(replicas=1), [BURST_INSTANCE])

    create, service = burst.calls("POST")
    assert create.path == "/apis/batch/v1/namespaces/hyperpod-ns-team-a/jobs"
    # then its headless Service, owned by the Job just created (its uid)
    assert service.path == "/api/v1/namespaces/hyperpod-ns-team-a/services"
    owner = service.body["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["uid"]) == ("Job", f"uid-{create.body['metadata']['name']}")
    # dispatched again (a retried pass): the Job exists, its uid is read back, the Service
    # is ensured again (409: kept), and the dispatch says it was not new
    assert not gateway.dispatch(training_job(replicas=1), [BURST_INSTANCE])
    assert len(burst.services) == 1
    job = create.body
    assert (job["apiVersion"], job["kind"]) == ("batch/v1", "Job")
    spec = job["spec"]
    assert spec["suspend"] is True
    assert (spec["parallelism"], spec["completions"], spec["backoffLimit"]) == (1, 1, 0)
    # a disrupted pod (evicted, node gone) fails the Job as PodFailurePolicy: "lost"
    assert spec["podFailurePolicy"] == {
        "rules": [
            {
                "action": "FailJob",
                "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
            }
        ]
    }
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "hyperguard-runs"
    assert job["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == "training-priority"
    assert "priorityClassName" not in spec["template"]["spec"]  # no PriorityClass exists


def test_burst_pods_select_the_ec2_name_tolerate_the_pools_taints_and_block_disruption(
    gateway: HyperPodEksGateway, burst: FakeApiServer
) -> None:
    """Karpenter's nodes carry the EC2 instance-type name and the NodePool's template
    taints; a pod that selects `ml.p5.48xlarge` or lacks the tolerations never starts there."""
    burst.nodepools["gpu-burst"] = {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "gpu-burst"},
        "spec": {
            "template": {
                "spec": {
                    "taints": [
                        {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"},
                        {"key": "hyperguard.io/burst", "effect": "NoSchedule"},
                    ],
                    "startupTaints": [
                        {"key": "node.cilium.io/agent-not-ready", "effect": "NoSchedule"}
                    ],
                }
            }
        },
    }
    gateway.dispatch(training_job(replicas=1), [BURST_INSTANCE])

    template = burst.calls("POST")[0].body["spec"]["template"]
    assert template["spec"]["nodeSelector"] == {"node.kubernetes.io/instance-type": "p5.48xlarge"}
    assert template["spec"]["tolerations"] == [
        {"key": "nvidia.com/gpu", "effect": "NoSchedule", "operator": "Equal", "value": "true"},
        {"key": "hyperguard.io/burst", "effect": "NoSchedule", "operator": "Exists"},
    ]
    assert template["metadata"]["annotations"] == {"karpenter.sh/do-not-disrupt": "true"}


def test_dispatch_twice_is_already_dispatched(
    gateway: HyperPodEksGateway, api: FakeApiServer
) -> None:
    assert gateway.dispatch(training_job(), [INSTANCE])
    assert not gateway.dispatch(training_job(), [INSTANCE])
    assert len(api.hyperpod_jobs) == 1


def test_dispatch_onto_a_node_the_api_server_does_not_have_is_node_not_found(
    gateway: HyperPodEksGateway,
) -> None:
    with pytest.raises(NodeNotFoundError):
        gateway.dispatch(training_job(), ["i-0aaaaaaaaaaaaaaaa"])


def test_every_run_is_a_new_object_and_stop_job_can_spare_the_newest(
    gateway: HyperPodEksGateway, api: FakeApiServer
) -> None:
    assert gateway.dispatch(training_job(), [INSTANCE])
    assert gateway.dispatch(training_job(run=1), [OTHER_INSTANCE])
    assert not gateway.dispatch(training_job(run=1), [OTHER_INSTANCE])
    assert sorted(api.hyperpod_jobs) == [
        "hyperpod-ns-team-a/llama-70b-pretrain",
        "hyperpod-ns-team-a/llama-70b-pretrain-run-1",
    ]
    newest = api.hyperpod_jobs["hyperpod-ns-team-a/llama-70b-pretrain-run-1"]
    assert newest["metadata"]["labels"]["hyperguard.io/run"] == "1"

    assert gateway.stop_job("llama-70b-pretrain", before_run=1)
    assert sorted(api.hyperpod_jobs) == ["hyperpod-ns-team-a/llama-70b-pretrain-run-1"]
    assert not gateway.stop_job("llama-70b-pretrain", before_run=1)
    assert gateway.stop_job("llama-70b-pretrain")
    assert api.hyperpod_jobs == {}


def test_job_without_priority_class_or_auto_resume(
    gateway: HyperPodEksGateway, api: FakeApiServer
) -> None:
    gateway.dispatch(
        training_job(
            priority_class=None, instance_type="ml.trn1.32xlarge", accelerators_per_replica=16
        ),
        [],
    )
    job = api.calls("POST")[0].body
    assert "kueue.x-k8s.io/priority-class" not in job["metadata"]["labels"]
    assert "sagemaker.amazonaws.com/enable-job-auto-resume" not in job["metadata"]["annotations"]
    pod = job["spec"]["replicaSpecs"][0]["template"]["spec"]
    assert "affinity" not in pod
    assert pod["containers"][0]["resources"]["limits"] == {
        "aws.amazon.com/neuron": "16",
        "vpc.amazonaws.com/efa": "8",
    }


def test_stop_job_deletes_every_kind_of_run_with_its_pods_then_reports_nothing(
    gateway: HyperPodEksGateway, burst: FakeApiServer
) -> None:
    gateway.dispatch(training_job(), [INSTANCE])
    gateway.dispatch(training_job(run=1, replicas=1), [BURST_INSTANCE])

    assert gateway.stop_job("llama-70b-pretrain")

    listings = [c for c in burst.calls("GET") if c.path.startswith("/apis/")]
    assert {c.path for c in listings} >= {
        "/apis/batch/v1/jobs",
        "/apis/sagemaker.amazonaws.com/v1/hyperpodpytorchjobs",
    }
    assert listings[-1].query == {"labelSelector": ["hyperguard.io/job-id=llama-70b-pretrain"]}
    deletes = burst.calls("DELETE")
    assert {d.path for d in deletes} == {
        "/apis/batch/v1/namespaces/hyperpod-ns-team-a/jobs/llama-70b-pretrain-run-1",
        "/apis/sagemaker.amazonaws.com/v1/namespaces/hyperpod-ns-team-a/hyperpodpytorchjobs/"
        "llama-70b-pretrain",
    }
    assert all(d.query == {"propagationPolicy": ["Background"]} for d in deletes)
    assert burst.jobs == {} and burst.hyperpod_jobs == {}
    assert not gateway.stop_job("llama-70b-pretrain")


def test_stop_job_given_the_runs_a_pass_read_deletes_those_and_lists_nothing(
    gateway: HyperPodEksGateway, burst: FakeApiServer
) -> None:
    """D177: a preemption's victim is stopped from the runs its pass's snapshot read, one
    request a run, not three."""
    gateway.dispatch(training_job(), [INSTANCE])
    gateway.dispatch(training_job(run=1, replicas=1), [BURST_INSTANCE])
    gateway.dispatch(training_job(run=2, replicas=1), [BURST_INSTANCE])
    read = [r for r in gateway.job_runs() if r.job_id == "llama-70b-pretrain"]
    assert sorted(r.run for r in read) == [0, 1, 2]
    gone = next(r for r in read if r.run == 1).model_copy(update={"deleting": True})
    runs = [gone, *(r for r in read if r.run != 1)]
    listed = len(burst.calls("GET"))

    assert gateway.stop_job("llama-70b-pretrain", before_run=2, runs=runs)

    assert len(burst.calls("GET")) == listed
    # run 0 deleted; run 1 already being deleted; run 2 spared
    assert [d.path for d in burst.calls("DELETE")] == [
        "/apis/sagemaker.amazonaws.com/v1/namespaces/hyperpod-ns-team-a/hyperpodpytorchjobs/"
        "llama-70b-pretrain"
    ]
    assert sorted(burst.jobs) == [
        "hyperpod-ns-team-a/llama-70b-pretrain-run-1",
        "hyperpod-ns-team-a/llama-70b-pretrain-run-2",
    ]


def test_resize_patches_a_running_hyperpod_job_in_place(
    gateway: HyperPodEksGateway, api: FakeApiServer
) -> None:
    job = training_job(elastic_policy=ElasticPolicy(min_replicas=1, max_replicas=2))
    gateway.dispatch(job, [INSTANCE, OTHER_INSTANCE])
    key = "hyperpod-ns-team-a/llama-70b-pretrain"
    api.hyperpod_jobs[key]["spec"]["runPolicy"]["suspend"] = False  # Kueue admitted it
    api.hyperpod_jobs[key]["status"] = {
        "conditions": [{"type": "Running", "status": "True", "reason": "Running"}]
    }

    assert gateway.resize(job.model_copy(update={"run": 1}), [OTHER_INSTANCE])

    (patch,) = api.calls("PATCH")
    assert patch.content_type == MERGE_PATCH
    stored = api.hyperpod_jobs[key]
    assert stored["metadata"]["labels"]["hyperguard.io/run"] == "1"
    (replicas,) = stored["spec"]["replicaSpecs"]
    assert (replicas["replicas"], replicas["maxReplicas"]) == (1, 1)
    affinity = replicas["template"]["spec"]["affinity"]["nodeAffinity"]
    terms = affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms[0]["matchFields"][0]["values"] == [OTHER_NODE]
    assert stored["spec"]["elasticPolicy"]["maxReplicas"] == 1
    (run,) = gateway.job_runs()
    assert (run.job_id, run.run, run.replicas, run.phase.value) == (
        "llama-70b-pretrain",
        1,
        1,
        "running",
    )


def test_resize_of_a_batch_job_is_a_new_run(
    gateway: HyperPodEksGateway, burst: FakeApiServer
) -> None:
    job = training_job(replicas=1, elastic_policy=ElasticPolicy(min_replicas=1, max_replicas=2))
    gateway.dispatch(job, [BURST_INSTANCE])

    assert not gateway.resize(job.model_copy(update={"run": 1}), [BURST_INSTANCE])

    assert sorted(burst.jobs) == ["hyperpod-ns-team-a/llama-70b-pretrain-run-1"]


def test_job_names_are_dns_labels_and_distinct() -> None:
    assert job_name("llama-70b") == "llama-70b"
    rewritten = job_name("Team_A/Llama 70B run#1")
    assert rewritten.startswith("team-a-llama-70b-run-1-")
    assert job_name("a" * 80) != job_name("a" * 81)
    assert all(len(job_name(x)) <= 63 for x in ("a" * 80, "B" * 200, "x"))
    assert job_name("UPPER") != job_name("upper")


def test_an_auto_resume_run_may_restart_in_its_group_but_prefers_its_own_nodes() -> None:
    """kube-scheduler scores every node of the group alike: without the preference it may
    bind the pod to a node HyperGuard placed another job on (seen on the twin's real
    scheduler: that job's third pod then found no node)."""
    from hyperguard.cluster.workloads import pinned_to

    affinity = pinned_to([NODE, OTHER_NODE], "workers")["nodeAffinity"]
    required = affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert required[-1] == {
        "matchExpressions": [
            {
                "key": "sagemaker.amazonaws.com/instance-group-name",
                "operator": "In",
                "values": ["workers"],
            }
        ]
    }
    preferred = affinity["preferredDuringSchedulingIgnoredDuringExecution"]
    assert [(p["weight"], p["preference"]["matchFields"][0]["values"]) for p in preferred] == [
        (100, [NODE]),
        (100, [OTHER_NODE]),
    ]
    assert (
        "preferredDuringSchedulingIgnoredDuringExecution" not in pinned_to([NODE])["nodeAffinity"]
    )


def test_a_claim_carries_what_its_nodepool_asks_of_every_node() -> None:
    """Karpenter adds nothing of the NodePool's to a claim it did not build, and copies the
    claim's labels and taints onto the node: HyperGuard's claims carry the template's."""
    from hyperguard.cluster.karpenter import from_nodepool_template, nodeclaim_manifest
    from hyperguard.models.nodes import CapacityType

    claim = nodeclaim_manifest(
        name="hg-burst-1-0-0",
        burst_id="burst-1",
        attempt=0,
        node_pool="gpu-burst",
        node_class="default",
        instance_type="p5.48xlarge",
        capacity_type=CapacityType.SPOT,
        accelerators=8,
    )
    taint = {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}
    pool = {
        "spec": {
            "template": {
                "metadata": {"labels": {"team-pool": "gpu", "karpenter.sh/nodepool": "other"}},
                "spec": {
                    "taints": [taint],
                    "startupTaints": [{"key": "efa.init", "effect": "NoSchedule"}],
                    "expireAfter": "720h",
                    "requirements": [
                        {
                            "key": "karpenter.sh/capacity-type",
                            "operator": "In",
                            "values": ["on-demand"],
                        },
                        {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                    ],
                },
            }
        }
    }
    built = from_nodepool_template(claim, pool)
    assert built["spec"]["taints"] == [taint]
    assert built["spec"]["startupTaints"] == [{"key": "efa.init", "effect": "NoSchedule"}]
    assert built["spec"]["expireAfter"] == "720h"
    labels = built["metadata"]["labels"]
    assert labels["team-pool"] == "gpu" and labels["karpenter.sh/nodepool"] == "gpu-burst"
    keys = [r["key"] for r in built["spec"]["requirements"]]
    # The claim's own capacity type stands; the pool's architecture is added.
    assert keys.count("karpenter.sh/capacity-type") == 1 and "kubernetes.io/arch" in keys
    assert claim["spec"].get("taints") is None  # the claim given is not changed


def test_the_models_are_decoded_once_in_one_thread_before_the_first_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """msgspec 0.22.0 crashes the process (a segmentation fault) when two threads decode a
    model for the first time at once (D170): the adapter's first client is handed out only
    once every model it reads has been decoded, under the client's lock."""
    from lightkube.core import decoders

    from hyperguard.cluster import kubernetes

    monkeypatch.setattr(kubernetes, "_decoders_warm", False)
    warmed: list[str] = []
    decode_list = decoders.decode_list

    def recorded(data: bytes, res: Any) -> Any:
        warmed.append(res.__name__)
        return decode_list(data, res)

    monkeypatch.setattr(decoders, "decode_list", recorded)
    client = Client(KubeConfig.from_one(cluster=Cluster(server=SERVER), user=User(token="t")))
    adapter = KubernetesAdapter("gpu-eks", client=client)
    assert warmed == []
    assert adapter.client is client
    assert {"Node", "Pod", "Job", "Namespace", "RoleBinding"} <= set(warmed)
    count = len(warmed)
    assert adapter.client is client and len(warmed) == count  # once per process


def test_a_waiting_job_winds_down_while_a_pod_of_it_is_on_a_ready_node(
    api: FakeApiServer, gateway: HyperPodEksGateway
) -> None:
    """D210: a pod stopping within its grace period, or not yet stopped, on a Ready node holds
    its job's restart back; one on a node that is not Ready, or that ended, does not."""
    down = node_json("hyperpod-i-0000000000000dead", "i-0000000000000dead")
    down["status"]["conditions"][0].update(status="Unknown", reason="NodeStatusUnknown")
    api.add_node(down)
    namespace = team_namespace("team-a")

    def pod(job_id: str, node: str, **meta: Any) -> dict[str, Any]:
        found = pod_json(f"{job_id}-run-0-0", namespace, node, owner="Job")
        found["metadata"].update(labels={JOB_ID_LABEL: job_name(job_id)}, **meta)
        return found

    stopping = {"deletionTimestamp": "2025-01-01T01:00:30Z", "deletionGracePeriodSeconds": 30}
    api.add_pod(pod("saving", NODE, **stopping))
    api.add_pod(pod("training", OTHER_NODE))
    api.add_pod(pod("on-a-lost-node", down["metadata"]["name"], **stopping))
    ended = pod("ended", NODE)
    ended["status"]["phase"] = "Failed"
    api.add_pod(ended)
    asked = ["saving", "training", "on-a-lost-node", "ended", "gone"]
    jobs = [training_job(job_id=j, status=JobStatus.PREEMPTED) for j in asked]
    assert gateway.winding_down(jobs) == {"saving", "training"}
    assert [r.path for r in api.calls("GET")].count(f"/api/v1/namespaces/{namespace}/pods") == 1
    assert gateway.winding_down([]) == set()
