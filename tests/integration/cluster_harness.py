"""The cluster behind real APIs, in-process: the twin's simulated HyperPod + EKS cluster on a
manual clock, behind moto's SageMaker / EKS / EC2 (extended as on the twin) and the twin's
Kubernetes API server, reached through the service's real adapters.

Used inside the `aws_env` fixture (moto in-process). The service signs its EKS tokens as it
does on AWS; the API server checks them as EKS does, except that STS's answer to the replayed
URL comes from moto in-process rather than over HTTP (the e2e tier runs that path).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from xml.sax.saxutils import escape

import boto3
from botocore.config import Config

from hyperguard.cluster import kubernetes as kubernetes_module
from hyperguard.cluster.catalogue import Ec2InstanceCatalogue
from hyperguard.cluster.hyperpod import HyperPodAdapter
from hyperguard.cluster.hyperpod_eks import HyperPodEksGateway
from hyperguard.cluster.kubernetes import KubernetesAdapter
from hyperguard.cluster.kueue import shared_objects, team_objects
from hyperguard.governance.jobs import JobLifecycle, SubmissionRules
from hyperguard.models import Checkpoint, Job, JobStatus
from hyperguard.models.governance import PriorityClass
from hyperguard.store import JobStore, TeamStore
from hyperguard.twin import aws as twin_aws
from hyperguard.twin.clock import ManualClock
from hyperguard.twin.cluster import SimulatedCluster
from hyperguard.twin.effects import EffectRunner
from hyperguard.twin.kube import EksTokenAuthenticator, KubeApiServer, ObjectStore

HYPERPOD = "hyperguard-twin"
EKS = "hyperguard-eks"
BUCKET = "hyperguard-twin-checkpoints"
P5 = "ml.p5.48xlarge"
ACCOUNT, REGION = "123456789012", "us-east-1"
# job id, team, nodes, HyperPod auto-resume, step of its latest checkpoint
SEED_JOBS: tuple[tuple[str, str, int, bool, int], ...] = (
    ("llama3-70b-pretrain", "nlp", 4, False, 1200),
    ("mistral-7b-sft", "nlp", 2, True, 300),
    ("vit-h14-pretrain", "vision", 3, False, 640),
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
class ClusterApis:
    clock: ManualClock
    store: ObjectStore
    kube: KubeApiServer
    cluster: SimulatedCluster
    effects: EffectRunner
    gateway: HyperPodEksGateway
    catalogue: Ec2InstanceCatalogue
    hyperpod: list[str]
    burst: list[str]

    def settle(self) -> None:
        """Play the cluster up to now and let its S3 writes and events land."""
        self.cluster.advance()
        self.effects.wait()

    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)
        self.settle()


@contextmanager
def cluster_apis(*, hyperpod_nodes: int = 16, burst_nodes: int = 4) -> Iterator[ClusterApis]:
    clock = ManualClock()
    store = ObjectStore()
    kube = KubeApiServer(store, authenticator=EksTokenAuthenticator(EKS, fetch=sts_in_process))
    kube.start()
    effects = EffectRunner(
        s3=boto3.client("s3", region_name=REGION),
        events=boto3.client("events", region_name=REGION),
        service_bus="test-bus",
    )
    cluster = SimulatedCluster(
        clock, store, effects=effects.submit, hyperpod_cluster=HYPERPOD, eks_cluster=EKS
    )
    twin_aws.attach(cluster)
    try:
        hyperpod = cluster.add_instance_group("workers", P5, hyperpod_nodes)
        half = burst_nodes // 2
        burst = cluster.add_burst_nodes("gpu-burst", "p5.48xlarge", burst_nodes - half)
        burst += cluster.add_burst_nodes("gpu-burst", "p5.48xlarge", half, spot=True)
        boto3.client("eks", region_name=REGION).create_cluster(
            name=EKS, roleArn=f"arn:aws:iam::{ACCOUNT}:role/eks", resourcesVpcConfig={}
        )
        twin_aws.point_eks_cluster(EKS, kube.endpoint, kube.ca_data, ACCOUNT, REGION)
        kubernetes_module._eks_connection.cache_clear()  # an earlier test's API server
        boto3.client("s3", region_name=REGION).create_bucket(Bucket=BUCKET)
        catalogue = Ec2InstanceCatalogue()
        gateway = HyperPodEksGateway(
            HyperPodAdapter(HYPERPOD, catalogue=catalogue, sleep=lambda _s: None),
            KubernetesAdapter(EKS),
        )
        effects.start()
        yield ClusterApis(clock, store, kube, cluster, effects, gateway, catalogue, hyperpod, burst)
    finally:
        effects.stop()
        kube.stop()
        twin_aws.attach(None)
        kubernetes_module._eks_connection.cache_clear()


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
    lease = teams.acquire_lease("seed", "harness", 60)
    assert lease is not None
    seeded: dict[str, Job] = {}
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
    apis.settle()
    return seeded


def sagemaker() -> Any:
    return boto3.client("sagemaker", region_name=REGION)


def unchecked() -> Any:
    """A client that does not validate parameters: what reaches the server is checked there,
    as SageMaker checks it."""
    return boto3.client("sagemaker", region_name=REGION, config=Config(parameter_validation=False))
