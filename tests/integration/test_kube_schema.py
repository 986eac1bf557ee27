"""The twin's Kubernetes API server admits what kube-apiserver admits: custom resources against
the vendored upstream CRDs' structural schemas, built-in kinds against theirs, unknown fields
pruned with a Warning (fieldValidation=Warn, the default), refused under Strict, and invalid
objects refused with 422 and the fields in details.causes. Each test would pass on a server
that stores whatever it is sent only if that server also refused what these refuse."""

from __future__ import annotations

import base64
import ssl
from collections.abc import Callable, Iterator
from typing import Any

import httpx2
import pytest

from hyperguard.cluster.karpenter import nodeclaim_manifest
from hyperguard.cluster.kueue import shared_objects, team_objects
from hyperguard.cluster.workloads import batch_job_manifest, hyperpod_job_manifest
from hyperguard.models import Job
from hyperguard.models.governance import PriorityClass
from hyperguard.models.nodes import CapacityType
from hyperguard.twin.kube import (
    NAMESPACES,
    NODECLAIMS,
    NODES,
    KubeApiServer,
    ObjectStore,
    StaticTokenAuthenticator,
)

NS = "hyperpod-ns-ml"
CLAIMS = "/apis/karpenter.sh/v1/nodeclaims"
JOBS_URL = f"/apis/batch/v1/namespaces/{NS}/jobs"
PODS_URL = f"/api/v1/namespaces/{NS}/pods"
HPJOBS_URL = f"/apis/sagemaker.amazonaws.com/v1/namespaces/{NS}/hyperpodpytorchjobs"
KUEUE = "/apis/kueue.x-k8s.io/v1beta1"
RBAC = "/apis/rbac.authorization.k8s.io/v1"
Http = Callable[[], tuple[KubeApiServer, httpx2.Client]]


@pytest.fixture
def http() -> Iterator[Http]:
    opened: list[tuple[KubeApiServer, httpx2.Client]] = []

    def make() -> tuple[KubeApiServer, httpx2.Client]:
        store = ObjectStore()
        if store.find(NAMESPACES, NS) is None:
            store.create(NAMESPACES, {"metadata": {"name": NS}})
        server = KubeApiServer(store, authenticator=StaticTokenAuthenticator({"t": "tester"}))
        server.start()
        client = httpx2.Client(
            base_url=server.endpoint,
            verify=ssl.create_default_context(cadata=base64.b64decode(server.ca_data).decode()),
            headers={"Authorization": "Bearer t"},
            trust_env=False,
        )
        opened.append((server, client))
        return server, client

    yield make
    for server, client in opened:
        client.close()
        server.stop()


def claim(name: str = "burst-1") -> dict[str, Any]:
    return nodeclaim_manifest(
        name=name,
        burst_id="b-1",
        attempt=1,
        node_pool="burst",
        node_class="default",
        instance_type="p5.48xlarge",
        capacity_type=CapacityType.ON_DEMAND,
        accelerators=8,
    )


def job(**fields: Any) -> Job:
    values: dict[str, Any] = {
        "job_id": "train-1",
        "team": "ml",
        "image": "example.com/train:1",
        "instance_type": "ml.p5.48xlarge",
        "replicas": 2,
        "accelerators_per_replica": 8,
        "priority_class": "training",
        **fields,
    }
    return Job.model_validate(values)


def causes(response: httpx2.Response) -> dict[str, str]:
    """The 422's causes as field → reason."""
    assert response.status_code == 422, response.text
    body = response.json()
    assert (body["kind"], body["reason"], body["code"]) == ("Status", "Invalid", 422)
    return {c["field"]: c["reason"] for c in body["details"]["causes"]}


def test_the_services_manifests_are_admitted_unchanged(http: Http) -> None:
    _, client = http()
    sent = [
        (CLAIMS, claim()),
        (JOBS_URL, batch_job_manifest(job(), ["node-a", "node-b"])),
        (HPJOBS_URL, hyperpod_job_manifest(job(), ["node-a", "node-b"])),
    ]
    for url, manifest in sent:
        response = client.post(url, json=manifest)
        assert response.status_code == 201, response.text
        assert "Warning" not in response.headers, (url, response.headers.get("Warning"))
        stored = response.json()
        assert stored["spec"] == {**stored["spec"], **manifest["spec"]}


def test_unknown_fields_are_pruned_with_a_warning_by_default(http: Http) -> None:
    server, client = http()
    manifest = claim()
    manifest["spec"]["spotPrice"] = "1.0"
    manifest["spec"]["requirements"][0]["minimumValues"] = 2
    response = client.post(CLAIMS, json=manifest)
    assert response.status_code == 201
    assert sorted(response.headers.get_list("Warning")) == [
        '299 - "unknown field \\"spec.requirements[0].minimumValues\\""',
        '299 - "unknown field \\"spec.spotPrice\\""',
    ]
    stored = server.store.get(NODECLAIMS, "burst-1")
    assert "spotPrice" not in stored["spec"]
    assert "minimumValues" not in stored["spec"]["requirements"][0]


def test_strict_field_validation_refuses_unknown_fields(http: Http) -> None:
    server, client = http()
    manifest = claim()
    manifest["spec"]["spotPrice"] = "1.0"
    response = client.post(CLAIMS, params={"fieldValidation": "Strict"}, json=manifest)
    assert response.status_code == 400
    assert response.json()["reason"] == "BadRequest"
    assert 'strict decoding error: unknown field "spec.spotPrice"' in response.json()["message"]
    assert server.store.find(NODECLAIMS, "burst-1") is None
    ignored = client.post(CLAIMS, params={"fieldValidation": "Ignore"}, json=manifest)
    assert ignored.status_code == 201
    assert "Warning" not in ignored.headers
    assert "spotPrice" not in ignored.json()["spec"]


def test_an_invalid_custom_resource_is_422_with_its_fields(http: Http) -> None:
    server, client = http()
    manifest = claim()
    del manifest["spec"]["nodeClassRef"]
    manifest["spec"]["requirements"][0]["operator"] = "Within"
    manifest["spec"]["resources"]["requests"]["nvidia.com/gpu"] = "eight"
    response = client.post(CLAIMS, json=manifest)
    assert causes(response) == {
        "spec.nodeClassRef": "FieldValueRequired",
        "spec.requirements[0].operator": "FieldValueNotSupported",
        "spec.resources.requests[nvidia.com/gpu]": "FieldValueInvalid",
    }
    body = response.json()
    assert body["message"].startswith('NodeClaim.karpenter.sh "burst-1" is invalid: [')
    assert body["details"]["group"] == "karpenter.sh"
    assert server.store.find(NODECLAIMS, "burst-1") is None


def test_types_and_int_or_string_follow_the_schema(http: Http) -> None:
    _, client = http()
    manifest = claim()
    manifest["spec"]["resources"]["requests"] = {"nvidia.com/gpu": 8, "cpu": "500m"}
    assert client.post(CLAIMS, json=manifest).status_code == 201
    wrong = claim("burst-2")
    wrong["spec"]["requirements"][0]["values"] = "p5.48xlarge"
    assert causes(client.post(CLAIMS, json=wrong)) == {
        "spec.requirements[0].values": "FieldValueTypeInvalid"
    }


def test_the_crds_defaults_are_applied(http: Http) -> None:
    _, client = http()
    created = client.post(CLAIMS, json=claim()).json()
    # karpenter.sh_nodeclaims.yaml: spec.expireAfter defaults to 720h.
    assert created["spec"]["expireAfter"] == "720h"


def test_a_patch_is_validated_on_the_merged_object(http: Http) -> None:
    server, client = http()
    client.post(CLAIMS, json=claim())
    before = server.store.get(NODECLAIMS, "burst-1")
    patch = {"spec": {"taints": [{"key": "gpu", "effect": "Sometimes"}]}}
    response = client.patch(
        f"{CLAIMS}/burst-1", json=patch, headers={"Content-Type": "application/merge-patch+json"}
    )
    assert causes(response) == {"spec.taints[0].effect": "FieldValueNotSupported"}
    assert server.store.get(NODECLAIMS, "burst-1") == before


def test_status_writes_are_checked_against_the_status_schema(http: Http) -> None:
    _, client = http()
    client.post(CLAIMS, json=claim())
    response = client.patch(
        f"{CLAIMS}/burst-1/status",
        json={"status": {"capacity": {"cpu": "lots"}}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert causes(response) == {"status.capacity[cpu]": "FieldValueInvalid"}


def test_pods_need_containers_with_images(http: Http) -> None:
    _, client = http()
    no_containers = {"metadata": {"name": "p1"}, "spec": {"restartPolicy": "Never"}}
    no_image = {"metadata": {"name": "p2"}, "spec": {"containers": [{"name": "main"}]}}
    bad_toleration = {
        "metadata": {"name": "p3"},
        "spec": {
            "containers": [{"name": "main", "image": "busybox"}],
            "tolerations": [{"key": "gpu", "operator": "Matches", "effect": "NoSchedule"}],
        },
    }
    assert causes(client.post(PODS_URL, json=no_containers)) == {
        "spec.containers": "FieldValueRequired"
    }
    assert causes(client.post(PODS_URL, json=no_image)) == {
        "spec.containers[0].image": "FieldValueRequired"
    }
    assert causes(client.post(PODS_URL, json=bad_toleration)) == {
        "spec.tolerations[0].operator": "FieldValueNotSupported"
    }


def test_a_jobs_pods_may_not_restart_always(http: Http) -> None:
    _, client = http()
    manifest = batch_job_manifest(job(), ["node-a"])
    manifest["spec"]["template"]["spec"]["restartPolicy"] = "Always"
    assert causes(client.post(JOBS_URL, json=manifest)) == {
        "spec.template.spec.restartPolicy": "FieldValueNotSupported"
    }
    manifest["spec"]["completionMode"] = "Sequential"
    del manifest["spec"]["template"]["spec"]["restartPolicy"]
    assert causes(client.post(JOBS_URL, json=manifest)) == {
        "spec.completionMode": "FieldValueNotSupported",
        "spec.template.spec.restartPolicy": "FieldValueRequired",
    }


def test_a_hyperpod_job_needs_named_replica_specs(http: Http) -> None:
    _, client = http()
    manifest = hyperpod_job_manifest(job(), ["node-a"])
    del manifest["spec"]["replicaSpecs"][0]["name"]
    manifest["spec"]["runPolicy"]["jobMaxRetryCount"] = "none"
    assert causes(client.post(HPJOBS_URL, json=manifest)) == {
        "spec.replicaSpecs[0].name": "FieldValueRequired",
        "spec.runPolicy.jobMaxRetryCount": "FieldValueTypeInvalid",
    }


def test_node_taints_and_labels_are_checked(http: Http) -> None:
    server, client = http()
    node = {
        "metadata": {"name": "node-a", "labels": {"hyperguard.io/reason": "x" * 64}},
        "spec": {
            "taints": [
                {"key": "gpu", "effect": "Never"},
                {"key": "hyperguard.io/incident", "value": "a b", "effect": "NoSchedule"},
            ]
        },
    }
    assert causes(client.post("/api/v1/nodes", json=node)) == {
        "metadata.labels[hyperguard.io/reason]": "FieldValueInvalid",
        "spec.taints[0].effect": "FieldValueNotSupported",
        "spec.taints[1].value": "FieldValueInvalid",
    }
    assert server.store.find(NODES, "node-a") is None


def test_an_eviction_body_is_checked(http: Http) -> None:
    _, client = http()
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "m", "image": "x"}]}}
    assert client.post(PODS_URL, json=pod).status_code == 201
    eviction = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": "p", "namespace": NS},
        "deleteOptions": "now",
    }
    response = client.post(f"{PODS_URL}/p/eviction", json=eviction)
    assert causes(response) == {"deleteOptions": "FieldValueTypeInvalid"}


def test_hyperguards_team_objects_are_admitted_and_defaulted(http: Http) -> None:
    _, client = http()
    urls = {
        "ResourceFlavor": f"{KUEUE}/resourceflavors",
        "WorkloadPriorityClass": f"{KUEUE}/workloadpriorityclasses",
        "Namespace": "/api/v1/namespaces",
        "ClusterQueue": f"{KUEUE}/clusterqueues",
        "LocalQueue": f"{KUEUE}/namespaces/hyperpod-ns-vision/localqueues",
        "RoleBinding": f"{RBAC}/namespaces/hyperpod-ns-vision/rolebindings",
    }
    created = {}
    for obj in [
        *shared_objects([PriorityClass(name="training", weight=100)]),
        *team_objects("vision"),
    ]:
        response = client.post(urls[obj["kind"]], json=obj)
        assert response.status_code == 201, response.text
        assert "Warning" not in response.headers
        created[obj["kind"]] = response.json()
    # kueue.x-k8s.io_clusterqueues.yaml defaults (v1beta1).
    assert created["ClusterQueue"]["spec"]["queueingStrategy"] == "BestEffortFIFO"
    assert created["ClusterQueue"]["spec"]["stopPolicy"] == "None"


def test_an_invalid_cluster_queue_is_refused(http: Http) -> None:
    _, client = http()
    queue = {
        "metadata": {"name": "broken"},
        "spec": {
            "queueingStrategy": "Fastest",
            "resourceGroups": [{"flavors": [{"name": "f", "resources": [{"name": "cpu"}]}]}],
        },
    }
    assert causes(client.post(f"{KUEUE}/clusterqueues", json=queue)) == {
        "spec.queueingStrategy": "FieldValueNotSupported",
        "spec.resourceGroups[0].coveredResources": "FieldValueRequired",
        "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota": "FieldValueRequired",
    }


def test_a_role_binding_needs_a_role_of_rbacs_group_and_known_subjects(http: Http) -> None:
    """ValidateRoleBinding (pkg/apis/rbac/validation): roleRef is required, its kind a Role or
    ClusterRole of rbac.authorization.k8s.io; each subject of a known kind, with a name."""
    _, client = http()
    client.post("/api/v1/namespaces", json={"metadata": {"name": "team"}})
    url = f"{RBAC}/namespaces/team/rolebindings"
    assert causes(client.post(url, json={"metadata": {"name": "none"}})) == {
        "roleRef": "FieldValueRequired"
    }
    binding = {
        "metadata": {"name": "odd"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Policy", "name": "x"},
        "subjects": [{"kind": "Team", "name": "ml"}, {"kind": "Group"}],
    }
    assert causes(client.post(url, json=binding)) == {
        "roleRef.kind": "FieldValueNotSupported",
        "subjects[0].kind": "FieldValueNotSupported",
        "subjects[1].name": "FieldValueRequired",
    }
    good = team_objects("nowhere")[1]
    absent = client.post(f"{RBAC}/namespaces/hyperpod-ns-nowhere/rolebindings", json=good)
    assert absent.status_code == 404, absent.text
