"""The twin's Kubernetes API server over HTTPS, driven by the real lightkube client and by the
service's own KubernetesAdapter, authenticated with EKS tokens that moto's STS vouches for."""

from __future__ import annotations

import base64
import http.client as http_client
import json
import ssl
import uuid
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import httpx2
import pytest
from lightkube import ALL_NS, ApiError, Client, KubeConfig
from lightkube.config.models import Cluster, User
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Node, Pod
from moto.server import ThreadedMotoServer
from tests.conftest import REGION

from hyperguard.cluster import NodeNotFoundError
from hyperguard.cluster.conventions import INCIDENT_TAINT, REASON_LABEL, label_safe
from hyperguard.cluster.eks_token import EksTokenSource, generate_eks_token
from hyperguard.cluster.kubernetes import KubernetesAdapter
from hyperguard.cluster.workloads import (
    JOB_ID_LABEL,
    batch_job_manifest,
    hyperpod_job_manifest,
    job_name,
    run_status,
)
from hyperguard.models import Job
from hyperguard.twin.kube import (
    EVENTS,
    JOBS,
    NAMESPACES,
    NODECLAIMS,
    NODES,
    PDBS,
    PODS,
    EksTokenAuthenticator,
    KubeApiServer,
    ObjectStore,
    ResourceType,
    StaticTokenAuthenticator,
)
from hyperguard.twin.kube.auth import urllib_fetch
from hyperguard.twin.kube.server import MAX_REQUEST_BODY_BYTES
from hyperguard.twin.kube.store import HYPERPOD_PYTORCH_JOBS

CLUSTER = "hyperguard-twin"
INSTANCE = "i-0123456789abcdef0"
OTHER_INSTANCE = "i-0fedcba9876543210"
NS = "hyperpod-ns-ml"


def with_team_namespace(store: ObjectStore) -> ObjectStore:
    """The store with the team namespace the tests' objects live in (the API server
    refuses objects in a namespace that does not exist)."""
    if store.find(NAMESPACES, NS) is None:
        store.create(NAMESPACES, {"metadata": {"name": NS}})
    return store


@pytest.fixture(scope="module")
def moto_url() -> Iterator[str]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    _, port = server.get_host_and_port()
    yield f"http://127.0.0.1:{port}"
    server.stop()


@pytest.fixture(scope="module")
def identity(moto_url: str) -> tuple[Any, str]:
    """An STS client signing as an IAM user moto knows, and that user's ARN."""
    admin = {"aws_access_key_id": "x", "aws_secret_access_key": "x", "region_name": REGION}
    iam = boto3.client("iam", endpoint_url=moto_url, **admin)
    # moto's backends are process-wide: a unique name keeps other suites' users apart.
    name = f"operator-{uuid.uuid4().hex[:8]}"
    arn = iam.create_user(UserName=name)["User"]["Arn"]
    key = iam.create_access_key(UserName=name)["AccessKey"]
    sts = boto3.client(
        "sts",
        endpoint_url=moto_url,
        region_name=REGION,
        aws_access_key_id=key["AccessKeyId"],
        aws_secret_access_key=key["SecretAccessKey"],
    )
    return sts, arn


@pytest.fixture
def sts(identity: tuple[Any, str]) -> Any:
    return identity[0]


@pytest.fixture
def operator_arn(identity: tuple[Any, str]) -> str:
    return identity[1]


class Recorder:
    """A store listener: who changed what."""

    def __init__(self) -> None:
        self.changes: list[tuple[str, str, str, str | None]] = []

    def __call__(
        self, event: str, rt: ResourceType, obj: dict[str, Any], old: Any, user: str | None
    ) -> None:
        self.changes.append((event, rt.plural, obj["metadata"]["name"], user))


@pytest.fixture
def serve() -> Iterator[Callable[..., KubeApiServer]]:
    servers: list[KubeApiServer] = []

    def start(store: ObjectStore | None = None, **auth: Any) -> KubeApiServer:
        authenticator = EksTokenAuthenticator(CLUSTER, **auth)
        store = with_team_namespace(store or ObjectStore())
        server = KubeApiServer(store, authenticator=authenticator)
        server.start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def server(serve: Callable[..., KubeApiServer]) -> KubeApiServer:
    return serve()


@pytest.fixture
def connect() -> Iterator[Callable[[KubeApiServer, str], Client]]:
    clients: list[Client] = []

    def make(server: KubeApiServer, token: str) -> Client:
        config = KubeConfig.from_one(
            cluster=Cluster(server=server.endpoint, certificate_auth_data=server.ca_data),
            user=User(token=token),
        )
        client = Client(config=config, trust_env=False)
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()


def adapter_for(server: KubeApiServer, sts: Any, **kwargs: Any) -> KubernetesAdapter:
    return KubernetesAdapter(
        CLUSTER,
        endpoint=server.endpoint,
        ca_data=server.ca_data,
        tokens=EksTokenSource(CLUSTER, sts_client=sts),
        **kwargs,
    )


def seed_node(store: ObjectStore, name: str, instance_id: str, **labels: str) -> None:
    store.create(
        NODES,
        {
            "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": "burst", **labels}},
            "spec": {"providerID": f"aws:///us-east-1a/{instance_id}"},
            "status": {
                "conditions": [
                    {"type": "Ready", "status": "True", "reason": "KubeletReady"},
                    {"type": "MemoryPressure", "status": "False"},
                ]
            },
        },
    )


def seed_pod(
    store: ObjectStore, name: str, node: str, namespace: str = NS, **metadata: Any
) -> None:
    store.create(
        PODS,
        {
            "metadata": {"name": name, **metadata},
            "spec": {"nodeName": node, "containers": [{"name": "main", "image": "busybox"}]},
            "status": {"phase": "Running"},
        },
        namespace,
    )


def names(objects: list[dict[str, Any]]) -> list[str]:
    return [obj["metadata"]["name"] for obj in objects]


# lightkube


def test_lightkube_creates_lists_and_gets_nodes(
    server: KubeApiServer,
    connect: Callable[[KubeApiServer, str], Client],
    sts: Any,
    operator_arn: str,
) -> None:
    recorder = Recorder()
    server.store.add_listener(recorder)
    client = connect(server, generate_eks_token(CLUSTER, sts))

    created = client.create(Node(metadata=ObjectMeta(name="gpu-1", labels={"pool": "gpu"})))
    client.create(Node(metadata=ObjectMeta(name="cpu-1", labels={"pool": "cpu"})))

    assert created.metadata is not None and created.metadata.uid
    assert [n.metadata.name for n in client.list(Node) if n.metadata] == ["cpu-1", "gpu-1"]
    selected = client.list(Node, labels={"pool": "gpu"})
    assert [n.metadata.name for n in selected if n.metadata] == ["gpu-1"]
    fetched = client.get(Node, "gpu-1")
    assert fetched.metadata is not None and fetched.metadata.uid == created.metadata.uid
    assert recorder.changes == [
        ("ADDED", "nodes", "gpu-1", operator_arn),
        ("ADDED", "nodes", "cpu-1", operator_arn),
    ]
    assert server.stats["create nodes"] == 2 and server.stats["list nodes"] == 2
    assert server.stats["get nodes"] == 1


def test_lightkube_create_of_existing_name_is_409(
    server: KubeApiServer, connect: Callable[[KubeApiServer, str], Client], sts: Any
) -> None:
    client = connect(server, generate_eks_token(CLUSTER, sts))
    client.create(Node(metadata=ObjectMeta(name="gpu-1")))
    with pytest.raises(ApiError) as caught:
        client.create(Node(metadata=ObjectMeta(name="gpu-1")))
    assert caught.value.status.code == 409 and caught.value.status.reason == "AlreadyExists"


def test_lightkube_lists_pods_of_a_node_across_namespaces(
    server: KubeApiServer, connect: Callable[[KubeApiServer, str], Client], sts: Any
) -> None:
    seed_pod(server.store, "train-0", "node-a", NS, labels={"app": "train"})
    seed_pod(server.store, "coredns", "node-a", "kube-system", labels={"app": "dns"})
    seed_pod(server.store, "train-1", "node-b", NS, labels={"app": "train"})
    client = connect(server, generate_eks_token(CLUSTER, sts))

    on_a = client.list(Pod, namespace=ALL_NS, fields={"spec.nodeName": "node-a"})
    assert sorted(p.metadata.name or "" for p in on_a if p.metadata) == ["coredns", "train-0"]
    training = client.list(Pod, namespace=NS, labels={"app": "train"})
    assert [p.metadata.name for p in training if p.metadata] == ["train-0", "train-1"]
    with pytest.raises(ApiError) as caught:
        list(client.list(Pod, namespace=ALL_NS, fields={"spec.hostname": "x"}))
    assert caught.value.status.code == 400


@pytest.mark.parametrize("token", ["k8s-aws-v1.Z2FyYmFnZQ", "not-an-eks-token"])
def test_garbage_token_is_401(
    server: KubeApiServer, connect: Callable[[KubeApiServer, str], Client], token: str
) -> None:
    with pytest.raises(ApiError) as caught:
        list(connect(server, token).list(Node))
    assert caught.value.status.code == 401 and caught.value.status.reason == "Unauthorized"
    assert not server.stats


# authentication


def _token_url(token: str) -> str:
    encoded = token.removeprefix("k8s-aws-v1.")
    return base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode()


def _token_for(url: str) -> str:
    return "k8s-aws-v1." + base64.urlsafe_b64encode(url.encode()).decode().rstrip("=")


class CountingFetch:
    def __init__(self, answer: Callable[[str, Mapping[str, str]], tuple[int, bytes]]) -> None:
        self.answer = answer
        self.calls: list[Mapping[str, str]] = []

    def __call__(self, url: str, headers: Mapping[str, str]) -> tuple[int, bytes]:
        self.calls.append(headers)
        return self.answer(url, headers)


def test_token_is_replayed_to_sts_once(sts: Any, operator_arn: str) -> None:
    fetch = CountingFetch(urllib_fetch)
    authenticator = EksTokenAuthenticator(CLUSTER, fetch=fetch)
    token = generate_eks_token(CLUSTER, sts)

    assert {authenticator.authenticate(token) for _ in range(5)} == {operator_arn}
    assert len(fetch.calls) == 1
    assert fetch.calls[0]["x-k8s-aws-id"] == CLUSTER


def test_unknown_access_key_is_moto_default_user(moto_url: str) -> None:
    sts = boto3.client(
        "sts",
        endpoint_url=moto_url,
        region_name=REGION,
        aws_access_key_id="x",
        aws_secret_access_key="x",
    )
    token = generate_eks_token(CLUSTER, sts)
    user = EksTokenAuthenticator(CLUSTER).authenticate(token)
    assert user == "arn:aws:sts::123456789012:user/moto"


def test_a_storm_of_requests_costs_one_sts_call(
    serve: Callable[..., KubeApiServer],
    connect: Callable[[KubeApiServer, str], Client],
    sts: Any,
) -> None:
    fetch = CountingFetch(urllib_fetch)
    server = serve(fetch=fetch)
    seed_node(server.store, "node-a", INSTANCE)
    client = connect(server, generate_eks_token(CLUSTER, sts))
    with ThreadPoolExecutor(max_workers=8) as pool:
        found = list(pool.map(lambda _: client.get(Node, "node-a"), range(16)))
    assert {n.metadata.name for n in found if n.metadata} == {"node-a"}
    assert len(fetch.calls) == 1 and server.stats["get nodes"] == 16


def test_token_older_than_15_minutes_is_refused(sts: Any, operator_arn: str) -> None:
    token = generate_eks_token(CLUSTER, sts)

    def later(minutes: int) -> EksTokenAuthenticator:
        moment = datetime.now(UTC) + timedelta(minutes=minutes)
        return EksTokenAuthenticator(CLUSTER, now=lambda: moment)

    assert later(14).authenticate(token) == operator_arn
    assert later(16).authenticate(token) is None


def test_cached_token_expires_with_its_age(sts: Any, operator_arn: str) -> None:
    moment = [datetime.now(UTC)]
    fetch = CountingFetch(urllib_fetch)
    authenticator = EksTokenAuthenticator(CLUSTER, fetch=fetch, now=lambda: moment[0])
    token = generate_eks_token(CLUSTER, sts)
    assert authenticator.authenticate(token) == operator_arn
    moment[0] += timedelta(minutes=16)
    assert authenticator.authenticate(token) is None
    assert len(fetch.calls) == 1


@pytest.mark.parametrize(
    "tamper",
    [
        lambda url: url.replace("x-k8s-aws-id", "x-other"),
        lambda url: url.replace("Action=GetCallerIdentity", "Action=AssumeRole"),
        lambda url: url.replace("&X-Amz-Signature=", "&X-Amz-Nothing="),
        lambda url: "file:///etc/passwd?" + url.split("?", 1)[1],
    ],
)
def test_malformed_presigned_url_is_refused_without_sts(
    sts: Any, tamper: Callable[[str], str]
) -> None:
    fetch = CountingFetch(urllib_fetch)
    token = _token_for(tamper(_token_url(generate_eks_token(CLUSTER, sts))))
    assert EksTokenAuthenticator(CLUSTER, fetch=fetch).authenticate(token) is None
    assert fetch.calls == []


def _unreachable(url: str, headers: Mapping[str, str]) -> tuple[int, bytes]:
    raise OSError("connection refused")


@pytest.mark.parametrize(
    "answer",
    [
        _unreachable,
        lambda url, headers: (403, b"<ErrorResponse><Error><Code>SignatureDoesNotMatch"),
        lambda url, headers: (200, b"<ListAllMyBucketsResult/>"),
        lambda url, headers: (200, b"not xml"),
    ],
)
def test_sts_failure_refuses_the_token(
    sts: Any, answer: Callable[[str, Mapping[str, str]], tuple[int, bytes]]
) -> None:
    fetch = CountingFetch(answer)
    token = generate_eks_token(CLUSTER, sts)
    assert EksTokenAuthenticator(CLUSTER, fetch=fetch).authenticate(token) is None
    assert len(fetch.calls) == 1


# the service's adapter


def test_adapter_lists_and_finds_nodes(server: KubeApiServer, sts: Any) -> None:
    seed_node(
        server.store, "node-a", INSTANCE, **{"node.kubernetes.io/instance-type": "p5.48xlarge"}
    )
    seed_node(server.store, "node-b", OTHER_INSTANCE)
    adapter = adapter_for(server, sts)

    nodes = {n.instance_id: n for n in adapter.list_nodes()}
    assert set(nodes) == {INSTANCE, OTHER_INSTANCE}
    node = adapter.find_node(INSTANCE)
    assert node.name == "node-a" and not node.unschedulable and node.created is not None
    assert node.labels["node.kubernetes.io/instance-type"] == "p5.48xlarge"
    assert [(c.type, c.status) for c in node.conditions] == [
        ("Ready", "True"),
        ("MemoryPressure", "False"),
    ]
    with pytest.raises(NodeNotFoundError):
        adapter.find_node("i-00000000000000000")


def test_adapter_cordons_and_uncordons(server: KubeApiServer, sts: Any, operator_arn: str) -> None:
    seed_node(server.store, "node-a", INSTANCE)
    recorder = Recorder()
    server.store.add_listener(recorder)
    adapter = adapter_for(server, sts)

    assert adapter.cordon(INSTANCE, incident_id="inc-1", reason="xid 79") is True
    node = server.store.get(NODES, "node-a")
    assert node["spec"]["unschedulable"] is True
    assert node["spec"]["taints"] == [
        {"key": INCIDENT_TAINT, "value": "inc-1", "effect": "NoSchedule"}
    ]
    assert node["metadata"]["labels"][REASON_LABEL] == label_safe("xid 79")
    assert adapter.cordon(INSTANCE, incident_id="inc-1", reason="xid 79") is False
    (event,) = [c for c in recorder.changes if c[1] == "events"]
    assert recorder.changes == [("MODIFIED", "nodes", "node-a", operator_arn), event]
    # What `kubectl describe node node-a` lists: an Event in default about the Node.
    (recorded,) = server.store.list(EVENTS, namespace="default")
    assert recorded["involvedObject"] == {
        "apiVersion": "v1",
        "kind": "Node",
        "name": "node-a",
        "uid": server.store.get(NODES, "node-a")["metadata"]["uid"],
    }
    assert (recorded["type"], recorded["reason"]) == ("Warning", "HyperGuardCordoned")
    assert recorded["message"] == "cordoned for incident inc-1: xid 79"
    assert recorded["source"] == {"component": "hyperguard"}

    assert adapter.uncordon(INSTANCE) is True
    node = server.store.get(NODES, "node-a")
    assert node["spec"] == {
        "providerID": f"aws:///us-east-1a/{INSTANCE}",
        "taints": [],
        "unschedulable": False,
    }
    assert REASON_LABEL not in node["metadata"]["labels"]
    assert adapter.uncordon(INSTANCE) is False
    reasons = [e["reason"] for e in server.store.list(EVENTS, namespace="default")]
    assert sorted(reasons) == ["HyperGuardCordoned", "HyperGuardUncordoned"]


class RacingStore(ObjectStore):
    """Plays the kubelet: the first time a node is read, it is changed before the reader
    can write back."""

    def __init__(self) -> None:
        super().__init__()
        self.raced = False

    def get(self, rt: ResourceType, name: str, namespace: str | None = None) -> dict[str, Any]:
        obj = super().get(rt, name, namespace)
        if rt == NODES and not self.raced:
            self.raced = True
            self.patch(NODES, name, {"metadata": {"labels": {"kubelet": "heartbeat"}}})
        return obj


def test_adapter_cordon_retries_after_a_conflict(
    serve: Callable[..., KubeApiServer], sts: Any
) -> None:
    store = RacingStore()
    server = serve(store)
    seed_node(store, "node-a", INSTANCE)
    adapter = adapter_for(server, sts)
    adapter.list_nodes()  # the adapter now reads the node by name

    assert adapter.cordon(INSTANCE, incident_id="inc-1", reason="ecc") is True
    assert store.raced
    assert server.stats["patch nodes"] == 2
    node = store.get(NODES, "node-a")
    assert node["metadata"]["labels"]["kubelet"] == "heartbeat"
    assert node["spec"]["taints"][0]["key"] == INCIDENT_TAINT


def test_adapter_drain_forces_the_pod_a_budget_protects(server: KubeApiServer, sts: Any) -> None:
    store = server.store
    seed_node(store, "node-a", INSTANCE)
    seed_pod(store, "web-0", "node-a", labels={"app": "web"})
    seed_pod(store, "batch-0", "node-a", labels={"app": "batch"})
    seed_pod(store, "mirror", "node-a", annotations={"kubernetes.io/config.mirror": "x"})
    daemon = {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent", "uid": "ds-uid"}
    seed_pod(store, "agent-x", "node-a", ownerReferences=[daemon])
    seed_pod(store, "web-1", "node-b", labels={"app": "web"})
    store.create(
        PDBS,
        {
            "metadata": {"name": "web"},
            "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}},
        },
        NS,
    )
    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    adapter = adapter_for(server, sts, sleep=sleep, clock=lambda: now[0])

    result = adapter.drain(INSTANCE, deadline_s=20)

    assert result.evicted == [f"{NS}/batch-0"]
    assert result.forced == [f"{NS}/web-0"] and result.blocked == []
    assert now[0] == 20
    # One eviction of batch-0; web-0 refused at t = 0, 5, 10, 15 and 20, then deleted.
    assert server.stats["create pods/eviction"] == 6
    assert server.stats["delete pods"] == 1
    assert sorted(names(store.list(PODS))) == ["agent-x", "mirror", "web-1"]


def test_adapter_creates_a_run_once(server: KubeApiServer, sts: Any) -> None:
    job = Job(job_id="llama-pretrain", team="ml", image="repo/llama:1", replicas=2)
    manifest = batch_job_manifest(job, ["node-a"])
    adapter = adapter_for(server, sts)

    assert adapter.create_run(manifest) is True
    assert adapter.create_run(manifest) is False
    stored = server.store.get(JOBS, job_name(job.job_id), NS)
    assert stored["metadata"]["labels"][JOB_ID_LABEL] == job_name(job.job_id)
    assert stored["spec"]["suspend"] is True and stored["spec"]["parallelism"] == 1
    assert server.stats["create jobs"] == 2


def test_adapter_lists_patches_and_reads_back_hyperpod_jobs(
    server: KubeApiServer, sts: Any
) -> None:
    job = Job(job_id="llama-pretrain", team="ml", image="repo/llama:1", replicas=2)
    adapter = adapter_for(server, sts)
    assert adapter.create_run(hyperpod_job_manifest(job, ["node-a", "node-b"]))

    (listed,) = adapter.list_runs({JOB_ID_LABEL: None})
    assert listed["kind"] == "HyperPodPyTorchJob"
    status = run_status(listed)
    assert status is not None
    assert (status.job_id, status.run, status.replicas, status.phase.value) == (
        "llama-pretrain",
        0,
        2,
        "pending",
    )
    assert adapter.patch_run(
        status.kind, status.namespace, status.name, {"spec": {"runPolicy": {"suspend": False}}}
    )
    assert not adapter.patch_run(status.kind, status.namespace, "gone", {"spec": {}})
    server.store.patch(
        HYPERPOD_PYTORCH_JOBS,
        status.name,
        {"status": {"conditions": [{"type": "Completed", "status": "True", "reason": "Done"}]}},
        NS,
        subresource="status",
    )
    (done,) = adapter.list_runs({JOB_ID_LABEL: job_name(job.job_id)})
    finished = run_status(done)
    assert finished is not None and finished.phase.value == "succeeded"


def test_adapter_deletes_runs_with_their_pods(server: KubeApiServer, sts: Any) -> None:
    store = server.store
    adapter = adapter_for(server, sts)
    job = Job(job_id="llama-pretrain", team="ml", image="repo/llama:1")
    other = Job(job_id="bert-finetune", team="ml", image="repo/bert:1")
    adapter.create_run(batch_job_manifest(job, []))
    adapter.create_run(batch_job_manifest(other, []))
    for run in (job, other):
        created = store.get(JOBS, job_name(run.job_id), NS)
        owner = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "name": created["metadata"]["name"],
            "uid": created["metadata"]["uid"],
            "controller": True,
        }
        for index in range(2):
            seed_pod(store, f"{job_name(run.job_id)}-{index}", "node-a", ownerReferences=[owner])

    assert adapter.delete_runs({JOB_ID_LABEL: job_name(job.job_id)}) is True
    assert names(store.list(JOBS)) == [job_name(other.job_id)]
    assert names(store.list(PODS)) == ["bert-finetune-0", "bert-finetune-1"]
    assert adapter.delete_runs({JOB_ID_LABEL: job_name(job.job_id)}) is False


def test_adapter_deletes_a_nodeclaim_karpenter_holds(
    server: KubeApiServer, sts: Any, operator_arn: str
) -> None:
    store = server.store
    store.create(
        NODECLAIMS,
        {
            "metadata": {"name": "burst-abcde", "finalizers": ["karpenter.sh/termination"]},
            "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass"}},
            "status": {"providerID": f"aws:///us-east-1a/{INSTANCE}", "nodeName": "node-a"},
        },
    )
    recorder = Recorder()
    store.add_listener(recorder)
    adapter = adapter_for(server, sts)

    assert adapter.delete_nodeclaim(INSTANCE) is True
    claim = store.get(NODECLAIMS, "burst-abcde")
    assert claim["metadata"]["deletionTimestamp"]
    assert recorder.changes == [("MODIFIED", "nodeclaims", "burst-abcde", operator_arn)]
    assert adapter.delete_nodeclaim(INSTANCE) is False
    assert adapter.delete_nodeclaim(OTHER_INSTANCE) is False
    assert server.stats["delete nodeclaims"] == 1


# the REST surface lightkube does not exercise


@pytest.fixture
def http() -> Iterator[Callable[[KubeApiServer], httpx2.Client]]:
    clients: list[httpx2.Client] = []

    def make(server: KubeApiServer) -> httpx2.Client:
        ca = base64.b64decode(server.ca_data).decode()
        client = httpx2.Client(
            base_url=server.endpoint,
            verify=ssl.create_default_context(cadata=ca),
            headers={"Authorization": "Bearer static"},
            trust_env=False,
        )
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()


def static_server(store: ObjectStore | None = None) -> KubeApiServer:
    authenticator = StaticTokenAuthenticator({"static": "tester"})
    return KubeApiServer(with_team_namespace(store or ObjectStore()), authenticator=authenticator)


def test_rest_errors_are_status_objects(http: Callable[[KubeApiServer], httpx2.Client]) -> None:
    with static_server() as server:
        seed_node(server.store, "node-a", INSTANCE)
        client = http(server)
        json_patch = client.patch(
            "/api/v1/nodes/node-a",
            json=[{"op": "add", "path": "/spec/unschedulable", "value": True}],
            headers={"Content-Type": "application/json-patch+json"},
        )
        node = {"metadata": {"name": "node-b"}}
        validation = client.post("/api/v1/nodes", params={"fieldValidation": "Loose"}, json=node)
        missing = client.get("/apis/batch/v1/namespaces/ns/jobs/absent")
        unknown = client.get("/apis/example.com/v1/widgets")
        wrong_method = client.put("/api/v1/nodes", json={})
        anonymous = client.get("/api/v1/nodes", headers={"Authorization": ""})
    expected = [
        (json_patch, 415, "UnsupportedMediaType"),
        (validation, 400, "BadRequest"),
        (missing, 404, "NotFound"),
        (unknown, 404, "NotFound"),
        (wrong_method, 405, "MethodNotAllowed"),
        (anonymous, 401, "Unauthorized"),
    ]
    for response, code, reason in expected:
        assert response.status_code == code
        assert response.headers["Content-Type"] == "application/json"
        body = response.json()
        assert (body["kind"], body["status"], body["code"], body["reason"]) == (
            "Status",
            "Failure",
            code,
            reason,
        )
    assert missing.json()["details"] == {"name": "absent", "group": "batch", "kind": "jobs"}
    assert "fieldValidation" in validation.json()["message"]


def test_rest_namespaces_are_served_and_must_exist(
    http: Callable[[KubeApiServer], httpx2.Client],
) -> None:
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i"}]}}
    with static_server() as server:
        client = http(server)
        refused = client.post("/api/v1/namespaces/team-x/pods", json=pod)
        created = client.post("/api/v1/namespaces", json={"metadata": {"name": "team-x"}})
        accepted = client.post("/api/v1/namespaces/team-x/pods", json=pod)
        listed = client.get("/api/v1/namespaces").json()
        deleted = client.delete("/api/v1/namespaces/team-x")
        gone = client.get("/api/v1/namespaces/team-x/pods/p")
    # kube-apiserver's NamespaceLifecycle refusal, byte for byte the Status kubectl shows.
    assert refused.status_code == 404
    assert refused.json() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'namespaces "team-x" not found',
        "reason": "NotFound",
        "details": {"name": "team-x", "kind": "namespaces"},
        "code": 404,
    }
    assert created.status_code == 201 and accepted.status_code == 201
    labels = created.json()["metadata"]["labels"]
    assert labels == {"kubernetes.io/metadata.name": "team-x"}
    assert names(listed["items"]) == [
        "default",
        NS,
        "kube-node-lease",
        "kube-public",
        "kube-system",
        "team-x",
    ]
    assert deleted.status_code == 200 and gone.status_code == 404


def test_rest_status_subresource_and_delete_options(
    http: Callable[[KubeApiServer], httpx2.Client],
) -> None:
    store = with_team_namespace(ObjectStore())
    job = store.create(JOBS, {"metadata": {"name": "j"}, "spec": {}}, NS)
    ref = {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": job["metadata"]["uid"]}
    seed_pod(store, "j-0", "node-a", ownerReferences=[ref])
    with static_server(store) as server:
        client = http(server)
        status = client.patch(
            f"/apis/batch/v1/namespaces/{NS}/jobs/j/status",
            json={"spec": {"suspend": True}, "status": {"active": 1}},
            headers={"Content-Type": "application/strategic-merge-patch+json"},
        )
        deleted = client.request(
            "DELETE",
            f"/apis/batch/v1/namespaces/{NS}/jobs/j",
            json={"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"},
        )
        listed = client.get("/api/v1/pods").json()
        stats = dict(server.stats)
    assert status.status_code == 200
    assert status.json()["status"] == {"active": 1} and status.json()["spec"] == {}
    assert deleted.status_code == 200 and store.find(JOBS, "j", NS) is None
    assert (listed["kind"], listed["items"]) == ("PodList", [])
    assert listed["metadata"]["resourceVersion"] == store.current_resource_version
    assert stats == {"patch jobs/status": 1, "delete jobs": 1, "list pods": 1}


class BrokenStore(ObjectStore):
    def get(self, rt: ResourceType, name: str, namespace: str | None = None) -> dict[str, Any]:
        raise RuntimeError("store bug")


def test_unexpected_error_is_a_500_status(http: Callable[[KubeApiServer], httpx2.Client]) -> None:
    with static_server(BrokenStore()) as server:
        response = http(server).get("/api/v1/nodes/node-a")
    assert response.status_code == 500
    assert response.json()["reason"] == "InternalError"


def test_version_and_discovery(http: Callable[[KubeApiServer], httpx2.Client]) -> None:
    with static_server() as server:
        client = http(server)
        version = client.get("/version", headers={"Authorization": ""}).json()
        core = client.get("/api").json()
        groups = client.get("/apis").json()
    assert version["gitVersion"].startswith("v1.31")
    assert core["versions"] == ["v1"]
    assert {g["preferredVersion"]["groupVersion"] for g in groups["groups"]} == {
        "batch/v1",
        "policy/v1",
        "karpenter.sh/v1",
        "kueue.x-k8s.io/v1beta1",
        "rbac.authorization.k8s.io/v1",
        "sagemaker.amazonaws.com/v1",
    }


def test_one_connection_serves_request_after_request_as_kube_apiserver_does(
    http: Callable[[KubeApiServer], httpx2.Client],
) -> None:
    """HTTP/1.1 keep-alive: a refused write whose body the handler never needed, a body over
    kube-apiserver's 3 MiB limit (413, and that connection closed), and a stop that ends the
    kept-alive connection."""
    with static_server() as server:
        host, port = server.endpoint.removeprefix("https://").split(":")
        context = ssl.create_default_context(cadata=base64.b64decode(server.ca_data).decode())
        connection = http_client.HTTPSConnection(host, int(port), context=context)
        headers = {"Authorization": "Bearer static", "Content-Type": "application/json"}
        answers: list[tuple[int, Any]] = []
        for method, path, body in [
            ("GET", "/api/v1/nodes", None),
            ("PUT", "/api/v1/nodes", b'{"kind": "NodeList"}'),  # 405 before the body is read
            ("POST", "/api/v1/nodes", json.dumps({"metadata": {"name": "node-a"}}).encode()),
            ("GET", "/api/v1/nodes/node-a", None),
        ]:
            connection.request(method, path, body=body, headers=headers)
            if not answers:
                first = connection.sock
            response = connection.getresponse()
            answers.append((response.status, json.loads(response.read())))
            assert connection.sock is first  # the same connection, never reopened
        assert [code for code, _ in answers] == [200, 405, 201, 200]
        assert answers[3][1]["metadata"]["name"] == "node-a"

        connection.putrequest("POST", "/api/v1/nodes")  # answered before any body is sent
        for name, value in [*headers.items(), ("Content-Length", MAX_REQUEST_BODY_BYTES + 1)]:
            connection.putheader(name, str(value))
        connection.endheaders()
        response = connection.getresponse()
        status = json.loads(response.read())
        assert (response.status, status["reason"]) == (413, "RequestEntityTooLarge")
        assert response.getheader("Connection") == "close"
        assert server.store.find(NODES, "node-a") is not None

        kept = http_client.HTTPSConnection(host, int(port), context=context)
        kept.request("GET", "/version")
        assert kept.getresponse().read()
    assert kept.sock is not None and kept.sock.recv(1) == b""  # stop() ended the connection
    kept.close()
    connection.close()
