"""The cluster behind real APIs, in-process: the twin's simulated HyperPod and EC2 on a manual
clock, behind moto's SageMaker / EKS / EC2 (extended as on the twin), on the upstream
Kubernetes control plane (etcd, kube-apiserver with RBAC, kube-controller-manager,
kube-scheduler, KWOK, Kueue, Karpenter), reached through the service's real adapters.

Used inside the `aws_env` fixture (moto in-process). One control plane serves every test of a
worker process (it takes seconds to start); each test gets a fresh simulated cloud on it and
leaves the cluster as it found it (`clean_cluster`). Karpenter's cloud provider reaches the EC2 API
through a moto server on 127.0.0.1 in this process, which shares moto's backends with the
in-process mock. The service signs its EKS tokens as it does on AWS; the token authenticator
checks them with moto's STS in-process and gives every caller the groups of HyperGuard's
functions (FUNCTION_GROUPS), whose RBAC (deploy/kubernetes/hyperguard-rbac.yaml) is applied: an
adapter call no function may make is refused here too (the e2e tier holds each function to
its own group).
"""

from __future__ import annotations

import atexit
import itertools
import threading
from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from xml.sax.saxutils import escape

import boto3
from botocore.config import Config
from tests.conftest import ROOT
from tests.deadlines import loaded
from tests.integration.api_harness import CHECKPOINT_BUCKET

from hyperguard.cluster import kubernetes as kubernetes_module
from hyperguard.cluster.catalogue import Ec2InstanceCatalogue
from hyperguard.cluster.hyperpod import HyperPodAdapter
from hyperguard.cluster.hyperpod_eks import HyperPodEksGateway
from hyperguard.cluster.kubernetes import KubernetesAdapter
from hyperguard.cluster.kueue import shared_objects, team_objects
from hyperguard.cluster.workloads import HPJOB_POD_LABEL
from hyperguard.governance.jobs import JobLifecycle, SubmissionRules
from hyperguard.models import Checkpoint, Job, JobStatus
from hyperguard.models.governance import PriorityClass
from hyperguard.provider_ids import parse_provider_id
from hyperguard.store import JobStore, TeamStore
from hyperguard_twin import aws as twin_aws
from hyperguard_twin.clock import ManualClock
from hyperguard_twin.cloud.account import install_karpenter_account
from hyperguard_twin.cloud.core import AZ
from hyperguard_twin.cloud.ec2 import karpenter_instance_types
from hyperguard_twin.cloud.hyperpod_nodes import NodeRecovery
from hyperguard_twin.cluster import SimulatedCluster
from hyperguard_twin.effects import EffectRunner
from hyperguard_twin.plane.authn import Identity
from hyperguard_twin.plane.components import ensure_built
from hyperguard_twin.plane.eks_token import EksTokenAuthenticator
from hyperguard_twin.plane.kube import (
    EC2NODECLASSES,
    HYPERPOD_PYTORCH_JOBS,
    JOBS,
    NAMESPACES,
    NODECLAIMS,
    NODEPOOLS,
    NODES,
    PODS,
    PRIORITY_CLASSES,
    WORKLOADS,
    KubeApiError,
    KubeClient,
    Resource,
    resource,
    wait_for,
)
from hyperguard_twin.plane.plane import ControlPlane
from hyperguard_twin.plane.settings import (
    MIN_NOT_READY_TOLERATION_S,
    PlaneSettings,
    PlaneTimings,
)

HYPERPOD = "hyperguard-twin"
EKS = "hyperguard-eks"
BUCKET = CHECKPOINT_BUCKET
P5 = "ml.p5.48xlarge"
ACCOUNT, REGION = "123456789012", "us-east-1"
FUNCTION_GROUPS = tuple(
    f"hyperguard-{name}"
    for name in ("ingest-health", "inventory", "recovery", "scheduler", "burst")
)
"""Every function's group but the API's: the API's group is also held back, by an admission
policy, from any create of a run that is not a dry run (hyperguard-api-dry-run-only, D151),
which would hold back every caller of one identity with all the groups. The API's own
grants are the others' (nodes, Events) or its dry runs and logs, which the e2e tier
checks under its own identity."""
# job id, team, nodes, HyperPod auto-resume, step of its latest checkpoint
SEED_JOBS: tuple[tuple[str, str, int, bool, int], ...] = (
    ("llama3-70b-pretrain", "nlp", 4, False, 1200),
    ("mistral-7b-sft", "nlp", 2, True, 300),
    ("vit-h14-pretrain", "vision", 3, False, 640),
)
KUEUE = "kueue.x-k8s.io/v1beta2"
LOCAL_QUEUES = resource(KUEUE, "localqueues")
CLUSTER_QUEUES = resource(KUEUE, "clusterqueues", namespaced=False)
ROLE_BINDINGS = resource("rbac.authorization.k8s.io/v1", "rolebindings")
POD_DISRUPTION_BUDGETS = resource("policy/v1", "poddisruptionbudgets")
_IN_TEAM = (
    HYPERPOD_PYTORCH_JOBS,
    JOBS,
    WORKLOADS,
    LOCAL_QUEUES,
    ROLE_BINDINGS,
    POD_DISRUPTION_BUDGETS,
)
_CLUSTER_SCOPED_KUEUE = (
    CLUSTER_QUEUES,
    resource(KUEUE, "admissionchecks", namespaced=False),
    resource(KUEUE, "resourceflavors", namespaced=False),
    PRIORITY_CLASSES,
)


def sts_in_process(url: str, headers: Mapping[str, str]) -> tuple[int, bytes]:
    """What STS answers a replayed GetCallerIdentity URL signed for the EKS cluster."""
    if headers.get("x-k8s-aws-id") != EKS:
        return 403, b"<Error>SignatureDoesNotMatch</Error>"
    arn = boto3.client("sts", region_name=REGION).get_caller_identity()["Arn"]
    body = (
        "<GetCallerIdentityResponse><GetCallerIdentityResult>"
        f"<Arn>{escape(arn)}</Arn></GetCallerIdentityResult></GetCallerIdentityResponse>"
    )
    return 200, body.encode()


@dataclass
class SharedPlane:
    plane: ControlPlane
    aws_endpoint: str


_shared: SharedPlane | None = None
_seeds = itertools.count(1000)
_shared_lock = threading.Lock()


def shared_plane() -> SharedPlane:
    """This worker's control plane, started on first use (and stopped at exit)."""
    global _shared
    with _shared_lock:
        if _shared is not None:
            return _shared
        from moto.server import ThreadedMotoServer

        from hyperguard_twin.plane.processes import free_port

        port = free_port()
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
        server.start()
        tokens = EksTokenAuthenticator(EKS, fetch=sts_in_process)

        def authenticate(token: str) -> Identity | None:
            arn = tokens.authenticate(token)
            return Identity(arn, (*FUNCTION_GROUPS, "system:authenticated")) if arn else None

        endpoint = f"http://127.0.0.1:{port}"
        plane = ControlPlane(
            ensure_built(ROOT),
            PlaneSettings(
                cluster_name=EKS,
                authenticate=authenticate,
                aws_env={
                    "AWS_ACCESS_KEY_ID": "testing",
                    "AWS_SECRET_ACCESS_KEY": "testing",
                    "AWS_REGION": REGION,
                    "AWS_ENDPOINT_URL": endpoint,
                    "AWS_EC2_METADATA_DISABLED": "true",
                },
                instance_types=karpenter_instance_types(AZ),
                timings=PlaneTimings(not_ready_toleration_s=MIN_NOT_READY_TOLERATION_S),
            ),
        )
        plane.start()
        admin = plane.client()
        admin.apply_file(ROOT / "deploy" / "kubernetes" / "hyperguard-rbac.yaml")

        def stop() -> None:
            plane.stop()
            server.stop()

        atexit.register(stop)
        _shared = SharedPlane(plane, endpoint)
        return _shared


@dataclass
class ClusterApis:
    clock: ManualClock
    kube: KubeClient
    cluster: SimulatedCluster
    effects: EffectRunner
    gateway: HyperPodEksGateway
    catalogue: Ec2InstanceCatalogue
    hyperpod: list[str]
    burst: list[str]

    def settle(self) -> None:
        """Play the cluster up to now, let the upstream controllers act on it, and let its
        S3 writes and events land. Kueue decides in its own (wall) time, at times after a
        pause longer than the controllers' quiet: the cluster is settled once it has decided
        on every Workload, the operator has acted on that, and kube-scheduler has decided
        on every pod the operator made."""
        self.cluster.advance()
        self.cluster.quiesce()
        wait_for(lambda: _kueue_decided(self.kube), loaded(60), "Kueue to decide on every Workload")
        self.cluster.quiesce()
        wait_for(
            lambda: _pods_placed_and_started(self.kube), loaded(60), "the runs' pods to be placed"
        )
        self.cluster.quiesce()
        self.effects.wait()

    def advance(self, seconds: float) -> None:
        self.settle()
        self.clock.advance(seconds)
        self.settle()


def _kueue_decided(kube: KubeClient) -> bool:
    """Whether Kueue has reserved quota for every Workload, or said why not (or it ended)."""
    for workload in kube.list_objects(WORKLOADS):
        if (workload.get("metadata") or {}).get("deletionTimestamp"):
            continue
        conditions = (workload.get("status") or {}).get("conditions") or []
        if not any(c.get("type") in ("QuotaReserved", "Finished") for c in conditions):
            return False
    return True


def _pods_placed_and_started(kube: KubeClient) -> bool:
    """Whether kube-scheduler has bound every run's pod or said why it cannot (PodScheduled
    False), and KWOK has started every bound one: both act in wall time, and under load the
    scheduler can take longer than the controllers' quiet to bind a pod."""
    nodes = {n["metadata"]["name"] for n in kube.list_objects(NODES)}
    for pod in kube.list_objects(PODS, label_selector=HPJOB_POD_LABEL):
        meta, spec, status = (
            pod.get("metadata") or {},
            pod.get("spec") or {},
            pod.get("status") or {},
        )
        if meta.get("deletionTimestamp"):
            continue
        node = spec.get("nodeName")
        if node is None:
            refused = any(
                c.get("type") == "PodScheduled" and c.get("status") == "False"
                for c in status.get("conditions") or []
            )
            if not refused:
                return False
        elif node in nodes and status.get("phase") in (None, "Pending"):
            return False
    return True


def clean_cluster(kube: KubeClient) -> None:
    """Leave the shared cluster as a new test expects it: no run, no claim, no node, no Kueue
    object of HyperGuard's. The teams' namespaces stay (HyperGuard finds its own there and
    keeps them); what is in them goes, pods at once (as `kubectl delete --force`)."""
    teams = [
        n["metadata"]["name"]
        for n in kube.list_objects(NAMESPACES)
        if n["metadata"]["name"].startswith("hyperpod-ns-")
    ]
    for namespace in teams:
        for rt in _IN_TEAM:
            kube.delete_collection(rt, namespace)
        kube.delete_collection(PODS, namespace, grace_period_s=0)
    for claim in kube.list_objects(NODECLAIMS):
        _force_delete(kube, NODECLAIMS, claim["metadata"]["name"])
    for rt in (NODEPOOLS, EC2NODECLASSES, *_CLUSTER_SCOPED_KUEUE):
        kube.delete_collection(rt)
    for node in kube.list_objects(NODES):
        _force_delete(kube, NODES, node["metadata"]["name"])

    def clean() -> bool:
        if kube.list_objects(NODES) or kube.list_objects(NODECLAIMS):
            return False
        return not any(kube.list_objects(rt, ns) for ns in teams for rt in (PODS, *_IN_TEAM))

    wait_for(clean, loaded(60), "the cluster to be clean")


def _force_delete(kube: KubeClient, rt: Resource, name: str) -> None:
    """Delete without waiting for its finalizers; gone already is fine (Karpenter takes a
    claim's node as the claim goes)."""
    try:
        kube.patch(rt, name, {"metadata": {"finalizers": None}})
    except KubeApiError as error:
        if error.code != 404:
            raise
        return
    kube.delete(rt, name)


@contextmanager
def cluster_apis(
    *, hyperpod_nodes: int = 16, burst_nodes: int = 4, node_recovery: NodeRecovery = "None"
) -> Iterator[ClusterApis]:
    shared = shared_plane()
    kube = shared.plane.client()
    clean_cluster(kube)
    clock = ManualClock()
    effects = EffectRunner(
        s3=boto3.client("s3", region_name=REGION),
        events=boto3.client("events", region_name=REGION),
        service_bus="test-bus",
    )
    # A seed of its own: a node of an earlier test on this plane never shares a name with
    # one of this test (KWOK and the controllers may still remember the earlier one).
    cluster = SimulatedCluster(
        clock,
        kube,
        effects=effects.submit,
        hyperpod_cluster=HYPERPOD,
        eks_cluster=EKS,
        seed=next(_seeds),
        # HyperGuard's own repair, unless a test asks for HyperPod's (D142).
        node_recovery=node_recovery,
    )
    twin_aws.attach(cluster)
    cluster.start()
    try:
        hyperpod = cluster.add_instance_group("workers", P5, hyperpod_nodes)
        boto3.client("eks", region_name=REGION).create_cluster(
            name=EKS, roleArn=f"arn:aws:iam::{ACCOUNT}:role/eks", resourcesVpcConfig={}
        )
        twin_aws.point_eks_cluster(
            EKS, shared.plane.endpoint, shared.plane.ca_data, ACCOUNT, REGION
        )
        kubernetes_module._eks_connection.cache_clear()  # an earlier test's cluster
        boto3.client("s3", region_name=REGION).create_bucket(Bucket=BUCKET)
        install_karpenter_account(boto3.client("ec2", region_name=REGION), kube, EKS)
        cluster.add_nodepool("gpu-burst", "p5.48xlarge")
        half = burst_nodes // 2
        burst = cluster.add_burst_nodes("gpu-burst", "p5.48xlarge", burst_nodes - half)
        burst += cluster.add_burst_nodes("gpu-burst", "p5.48xlarge", half, spot=True)
        catalogue = Ec2InstanceCatalogue()
        gateway = HyperPodEksGateway(
            HyperPodAdapter(HYPERPOD, catalogue=catalogue, sleep=lambda _s: None),
            KubernetesAdapter(EKS),
        )
        effects.start()
        apis = ClusterApis(clock, kube, cluster, effects, gateway, catalogue, hyperpod, burst)
        if burst:
            apis.advance(cluster.timings.ec2_boot_s)  # the burst nodes boot and register
            wait_for(
                lambda: _claims_ready(kube, len(burst)), loaded(60), "the burst nodes to be Ready"
            )
        yield apis
    finally:
        effects.stop()
        cluster.stop()
        twin_aws.attach(None)
        kubernetes_module._eks_connection.cache_clear()
        # The client stays open until the plane stops: the cluster's watches see the stop only
        # at their next event, and closing their sockets under them frees descriptors that
        # the next test's connections reuse while a watch still reads them (TLS "bad record
        # MAC" in the next test's set-up).


NOT_READY_TAINTS = frozenset({"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"})


def _nodes_schedulable(kube: KubeClient, instance_ids: Collection[str]) -> bool:
    """Whether the nodes of these instances are Ready and the node lifecycle controller has
    lifted the taints it sets on a node that is not (kube-scheduler places nothing on them
    till then)."""
    ready = set()
    for node in kube.list_objects(NODES):
        parsed = parse_provider_id((node.get("spec") or {}).get("providerID") or "")
        conditions = (node.get("status") or {}).get("conditions") or []
        taints = (node.get("spec") or {}).get("taints") or []
        if (
            parsed is not None
            and any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
            and not any(t.get("key") in NOT_READY_TAINTS for t in taints)
        ):
            ready.add(parsed.instance_id)
    return ready >= set(instance_ids)


def until_schedulable(apis: ClusterApis, instance_ids: Collection[str]) -> None:
    """Until the nodes of these instances take pods: a HyperPod cluster's nodes are up long
    before a job is dispatched to them, and a pod sent to a node KWOK has not yet made Ready
    is refused by kube-scheduler, which does not always retry it when the node turns Ready."""
    wait_for(
        lambda: _nodes_schedulable(apis.kube, instance_ids),
        loaded(60),
        f"{len(instance_ids)} HyperPod nodes to be Ready",
    )


def _claims_ready(kube: KubeClient, count: int) -> bool:
    ready = [
        c
        for c in kube.list_objects(NODECLAIMS)
        if any(
            x["type"] == "Ready" and x["status"] == "True"
            for x in (c.get("status") or {}).get("conditions") or []
        )
    ]
    return len(ready) >= count


def ensure_queues(apis: ClusterApis, team: str) -> None:
    """What a pass does before its first dispatch for a team: the Kueue objects its runs
    need, with the `training` priority class the harness's jobs name."""
    classes = [PriorityClass(name="training", weight=50)]
    apis.gateway.ensure_queues([*shared_objects(classes), *team_objects(team)])


def seed_jobs(apis: ClusterApis, jobs: JobStore, teams: TeamStore) -> dict[str, Job]:
    """The three checkpointing training jobs, placed on the first HyperPod nodes: submitted,
    admitted (under a scheduler lease) and started through the job lifecycle, as the API
    and a scheduling pass do it, and dispatched through the Kubernetes API."""
    lifecycle = JobLifecycle(jobs, clock=apis.clock.now)
    seeded: dict[str, Job] = {}
    # Without this wait 4-6 set-ups in 46 waited over 120 s for a refused pod, when no burst
    # node's launch came after it to wake the scheduler. Only the seeded jobs' nodes: 256
    # of them took 45 s to be Ready on a loaded host.
    until_schedulable(apis, apis.hyperpod[: sum(count for _, _, count, _, _ in SEED_JOBS)])
    # The lease is taken in wall time once the nodes are Ready, as a pass takes it: taken
    # before that wait, it expired within a loaded CI run's 60 s set-up and fenced the
    # admissions out (FencedOutError, stop 73).
    lease = teams.acquire_lease("seed", "harness", loaded(60))
    assert lease is not None
    first = 0
    for job_id, team, count, auto_resume, step in SEED_JOBS:
        nodes = apis.hyperpod[first : first + count]
        first += count
        location = f"s3://{BUCKET}/{job_id}/"
        apis.cluster.seed_checkpoint(location, step)
        job = Job(
            job_id=job_id,
            team=team,
            priority_class="training",
            instance_type=P5,
            replicas=count,
            image="hyperguard/trainer:test",
            checkpoint_location=location,
            auto_resume=auto_resume,
            submitted_at=apis.clock.now(),
        )
        rules = SubmissionRules(True, frozenset({"training"}), 8)
        lifecycle.submit(job, principal="harness", rules=rules)
        checkpoint = Checkpoint(
            step=step, uri=f"{location}step-{step:08d}/", completed_at=apis.clock.now()
        )
        lifecycle.record_checkpoint(job_id, checkpoint, history=False)
        fence = [teams.lease_check(lease)]
        assert lifecycle.admit(
            job_id,
            nodes=nodes,
            pool="workers",
            replicas=count,
            restart=False,
            reason="seeded",
            fence=fence,
        )
        assert lifecycle.start(job_id, nodes=nodes, pool="workers")
        placed = job.model_copy(
            update={
                "status": JobStatus.RUNNING,
                "nodes": nodes,
                "pool": "workers",
                "last_checkpoint": checkpoint,
            }
        )
        ensure_queues(apis, team)
        apis.gateway.dispatch(placed, nodes)
        seeded[job_id] = placed
    teams.release_lease(lease)

    def seeded_running() -> bool:
        # Settled each time: a pod kube-scheduler first refused (its node not Ready yet) is
        # bound at its retry, in wall time, and the simulated training starts it only when
        # the cluster is played forward.
        apis.settle()
        runs = apis.cluster.runs()
        return len(runs) == len(SEED_JOBS) and all(r.state == "running" for r in runs.values())

    # 120 s: under a loaded CI run (two twins beside it) a pod kube-scheduler refused at
    # first was bound within a minute, but not always (twice in ~40 runs).
    wait_for_cluster(apis, seeded_running, loaded(120), "the seeded jobs to run")
    return seeded


def wait_for_cluster(
    apis: ClusterApis, condition: Callable[[], Any], timeout_s: float, what: str
) -> Any:
    """`wait_for` a state of the cluster; a timeout says what the cluster looked like."""
    try:
        return wait_for(condition, timeout_s, what)
    except TimeoutError as error:
        raise TimeoutError(f"{error}: {cluster_state(apis)}") from None


def cluster_state(apis: ClusterApis) -> str:
    """What a wait that timed out saw: each run's state, each Workload's conditions, each
    run pod's node, phase and conditions, each node's Ready, cordon and taints (for the next
    time a job is stuck)."""
    workloads = [
        (
            w["metadata"]["namespace"],
            w["metadata"]["name"],
            [
                (c.get("type"), c.get("status"), c.get("reason"), c.get("message"))
                for c in (w.get("status") or {}).get("conditions") or []
            ],
        )
        for w in apis.kube.list_objects(WORKLOADS)
    ]
    pods = [
        (
            p["metadata"]["name"],
            (p.get("spec") or {}).get("nodeName"),
            (p.get("status") or {}).get("phase"),
            [
                (c.get("type"), c.get("status"), c.get("reason"), c.get("message"))
                for c in (p.get("status") or {}).get("conditions") or []
            ],
        )
        for p in apis.kube.list_objects(PODS, label_selector=HPJOB_POD_LABEL)
    ]
    nodes = [
        (
            n["metadata"]["name"],
            next(
                (
                    c.get("status")
                    for c in (n.get("status") or {}).get("conditions") or []
                    if c.get("type") == "Ready"
                ),
                None,
            ),
            bool((n.get("spec") or {}).get("unschedulable")),
            [t.get("key") for t in (n.get("spec") or {}).get("taints") or []],
        )
        for n in apis.kube.list_objects(NODES)
    ]
    runs = {job: run.state for job, run in apis.cluster.runs().items()}
    return f"runs {runs}; workloads {workloads}; pods {pods}; nodes {nodes}"


def sagemaker() -> Any:
    return boto3.client("sagemaker", region_name=REGION)


def unchecked() -> Any:
    """A client that does not validate parameters: what reaches the server is checked there,
    as SageMaker checks it."""
    return boto3.client("sagemaker", region_name=REGION, config=Config(parameter_validation=False))
