"""HyperGuard's burst path at scale on the upstream control plane (issue 33).

    python bench/plane_burst.py [--pods 1000] [--per-job 8] [--timeout 900]

Prints one JSON object (progress on stderr).

What runs: the twin's Kubernetes as `hyperguard twin up` starts it (etcd, kube-apiserver with
RBAC and EKS token authentication, kube-controller-manager, kube-scheduler, KWOK, Kueue,
Karpenter's core with the twin's AWS provider), the twin's simulated EC2 behind moto's EC2
API (in this process, plus a moto server for Karpenter's provider), and HyperGuard's own
adapters (`HyperPodEksGateway`, lightkube) signing EKS tokens as the burst and scheduler
functions do, under deploy/kubernetes/hyperguard-rbac.yaml. The bench does what the burst
workflow and a scheduling pass do, in their order:
1. one NodeClaim per node (`nodeclaim_manifest`, p5.48xlarge on demand) through
   `request_burst_nodes`, as the burst workflow's request step does;
2. Karpenter launches each through EC2 (RunInstances on the emulator), the instance boots
   (`SimTimings.ec2_boot_s`, simulated on a x60 clock: the one modelled duration), its
   kubelet registers the node, Karpenter registers and initializes it;
3. as soon as a job's nodes are all Ready, its batch Job pinned to them (`dispatch`, one pod
   per node, `--per-job` nodes a job), as a scheduling pass dispatches onto burst nodes;
4. Kueue admits each Job, the Job controller creates its pods, kube-scheduler binds them.

Measured, wall clock on this machine: from the first claim's creation to every NodeClaim
Launched, Registered and Ready; to every pod bound (`PodScheduled` True); per pod, from its
creation to its binding (p50 / p99); the API requests HyperGuard's identities made (the API
server's audit log). Karpenter's own perf suite provisions 1,000 pods in under 2 minutes on
a real cluster with real instances; this is not that measurement (its pods ask Karpenter
for nodes, HyperGuard's claims ask for them directly), and it runs every component on one
2-core machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "shared"))

ACCOUNT, REGION = "123456789012", "us-east-1"
HYPERPOD, EKS = "bench-hyperpod", "bench-eks"
POOL, INSTANCE_TYPE, GPUS = "gpu-burst", "p5.48xlarge", 8
TEAM = "burst-bench"
GROUPS = ("hyperguard-burst", "hyperguard-scheduler", "system:authenticated")
"""The identity the bench's adapters get: the burst function's (claims) and the scheduler's
(runs), whose RBAC decides what they may do."""


def log(message: str) -> None:
    print(f"[{datetime.now(UTC):%H:%M:%S}] {message}", file=sys.stderr, flush=True)


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _condition_time(obj: Mapping[str, Any], kind: str) -> datetime | None:
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind and condition.get("status") == "True":
            return datetime.fromisoformat(condition["lastTransitionTime"])
    return None


@contextmanager
def cloud() -> Iterator[Any]:
    """moto in-process, a moto server for Karpenter, the control plane with HyperGuard's RBAC,
    and the simulated cloud on it; yields (plane, cluster)."""
    import boto3
    from moto import mock_aws
    from moto.server import ThreadedMotoServer

    from hyperguard_twin import aws as twin_aws
    from hyperguard_twin.clock import ScaledClock
    from hyperguard_twin.cloud.account import install_karpenter_account
    from hyperguard_twin.cloud.core import AZ
    from hyperguard_twin.cloud.ec2 import karpenter_instance_types
    from hyperguard_twin.cluster import SimulatedCluster
    from hyperguard_twin.plane.authn import Identity
    from hyperguard_twin.plane.components import ensure_built
    from hyperguard_twin.plane.eks_token import EksTokenAuthenticator
    from hyperguard_twin.plane.plane import ControlPlane
    from hyperguard_twin.plane.processes import free_port
    from hyperguard_twin.plane.settings import PlaneSettings, PlaneTimings

    env = {
        "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": "bench",
        "AWS_DEFAULT_REGION": REGION,
        "AWS_REGION": REGION,
    }
    os.environ.update(env)
    os.environ.pop("AWS_ENDPOINT_URL", None)
    with ExitStack() as stack:
        stack.enter_context(mock_aws())
        port = free_port()
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
        server.start()
        stack.callback(server.stop)

        def sts(_url: str, headers: Mapping[str, str]) -> tuple[int, bytes]:
            if headers.get("x-k8s-aws-id") != EKS:
                return 403, b"<Error>SignatureDoesNotMatch</Error>"
            arn = boto3.client("sts").get_caller_identity()["Arn"]
            body = (
                "<GetCallerIdentityResponse><GetCallerIdentityResult>"
                f"<Arn>{arn}</Arn></GetCallerIdentityResult></GetCallerIdentityResponse>"
            )
            return 200, body.encode()

        tokens = EksTokenAuthenticator(EKS, fetch=sts)

        def authenticate(token: str) -> Identity | None:
            arn = tokens.authenticate(token)
            return Identity(arn, GROUPS) if arn else None

        plane = ControlPlane(
            ensure_built(ROOT),
            PlaneSettings(
                cluster_name=EKS,
                authenticate=authenticate,
                aws_env={
                    **env,
                    "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
                    "AWS_EC2_METADATA_DISABLED": "true",
                },
                instance_types=karpenter_instance_types(AZ),
                timings=PlaneTimings.for_scale(60.0),
            ),
        )
        started = time.monotonic()
        plane.start()
        stack.callback(plane.stop)
        log(f"control plane up in {time.monotonic() - started:.1f} s")
        admin = plane.client()
        admin.apply_file(ROOT / "deploy" / "kubernetes" / "hyperguard-rbac.yaml")
        cluster = SimulatedCluster(
            ScaledClock(60.0),
            admin,
            effects=lambda _effect: None,  # no service listens for S3 writes or events here
            hyperpod_cluster=HYPERPOD,
            eks_cluster=EKS,
            region=REGION,
            account=ACCOUNT,
        )
        twin_aws.attach(cluster)
        stack.callback(twin_aws.attach, None)
        cluster.start()
        stack.callback(cluster.stop)
        # The simulated cloud's clock moves as on the twin (Twin._tick): what is due (an
        # instance booted, its kubelet registering) happens when the world is looked at.
        stop = threading.Event()

        def tick() -> None:
            while not stop.wait(0.2):
                cluster.advance()

        ticker = threading.Thread(target=tick, name="cluster-clock", daemon=True)
        ticker.start()
        stack.callback(ticker.join, 5)
        stack.callback(stop.set)
        cluster.add_instance_group("workers", f"ml.{INSTANCE_TYPE}", 1)
        boto3.client("eks").create_cluster(
            name=EKS, roleArn=f"arn:aws:iam::{ACCOUNT}:role/eks", resourcesVpcConfig={}
        )
        twin_aws.point_eks_cluster(EKS, plane.endpoint, plane.ca_data, ACCOUNT, REGION)
        install_karpenter_account(boto3.client("ec2"), admin, EKS)
        cluster.add_nodepool(POOL, INSTANCE_TYPE)
        cluster.set_nodepool_limits(POOL, None)
        yield plane, cluster


class Watcher:
    """When each NodeClaim turned Launched, Registered and Ready, and each pod was bound, as
    the API server's objects say (polled; the conditions carry their own times)."""

    def __init__(self, kube: Any) -> None:
        self.kube = kube
        self.claims: dict[str, dict[str, Any]] = {}
        self.pods: dict[str, dict[str, Any]] = {}

    def poll(self) -> None:
        from hyperguard_twin.plane.kube import NODECLAIMS, PODS

        self.claims = {c["metadata"]["name"]: c for c in self.kube.list_objects(NODECLAIMS)}
        from hyperguard.cluster.workloads import team_namespace

        self.pods = {
            p["metadata"]["name"]: p for p in self.kube.list_objects(PODS, team_namespace(TEAM))
        }

    def claims_with(self, kind: str) -> int:
        return sum(1 for c in self.claims.values() if _condition_time(c, kind) is not None)

    def bound(self) -> int:
        return sum(1 for p in self.pods.values() if _condition_time(p, "PodScheduled"))


def claim(index: int) -> dict[str, Any]:
    """The burst workflow's NodeClaim for node `index` of the bench's burst."""
    from hyperguard.cluster.karpenter import nodeclaim_manifest
    from hyperguard.models.nodes import CapacityType

    return nodeclaim_manifest(
        name=f"bench-{index:04d}",
        burst_id="bench",
        attempt=1,
        node_pool=POOL,
        node_class="default",
        instance_type=INSTANCE_TYPE,
        capacity_type=CapacityType.ON_DEMAND,
        accelerators=GPUS,
    )


def dispatch_ready(gateway: Any, dispatched: set[int], jobs: int, per_job: int) -> None:
    """Dispatch each job whose nodes are all Ready, as a scheduling pass would."""
    from hyperguard.models import Job, JobStatus

    ready = {
        c.name: c.instance_id
        for c in gateway.burst_claims("bench", include_hyperpod=False)
        if c.ready and c.instance_id
    }
    for index in range(jobs):
        names = [f"bench-{i:04d}" for i in range(index * per_job, (index + 1) * per_job)]
        if index in dispatched or not all(n in ready for n in names):
            continue
        nodes = [str(ready[n]) for n in names]
        job = Job(
            job_id=f"burst-{index:04d}",
            team=TEAM,
            priority_class="training",
            instance_type=f"ml.{INSTANCE_TYPE}",
            replicas=per_job,
            image="hyperguard/trainer:bench",
            checkpoint_location=f"s3://bench/burst-{index:04d}/",
            submitted_at=datetime.now(UTC),
        ).model_copy(update={"status": JobStatus.RUNNING, "nodes": nodes, "pool": POOL})
        gateway.dispatch(job, nodes)
        dispatched.add(index)


def summary(
    watcher: Watcher, started: datetime, pods: int, requests: list[dict[str, Any]]
) -> dict[str, Any]:
    """The measured times (seconds from the first claim's creation; the conditions' times
    have a resolution of one second) and HyperGuard's requests."""

    def since(moments: list[datetime | None]) -> float | None:
        if not moments or any(m is None for m in moments):
            return None
        return round((max(m for m in moments if m is not None) - started).total_seconds(), 1)

    claims = list(watcher.claims.values())
    bound = [_condition_time(p, "PodScheduled") for p in watcher.pods.values()]
    per_pod = [
        (at - datetime.fromisoformat(p["metadata"]["creationTimestamp"])).total_seconds()
        for p, at in zip(watcher.pods.values(), bound, strict=True)
        if at is not None
    ]
    return {
        "complete": watcher.bound() >= pods,
        "all_launched_s": since([_condition_time(c, "Launched") for c in claims]),
        "all_registered_s": since([_condition_time(c, "Registered") for c in claims]),
        "all_ready_s": since([_condition_time(c, "Ready") for c in claims]),
        "all_pods_bound_s": since(bound) if len(bound) == pods else None,
        "pod_created_to_bound_s": {
            "p50": round(statistics.median(per_pod), 2) if per_pod else None,
            "p99": round(_percentile(per_pod, 0.99), 2) if per_pod else None,
        },
        "hyperguard_requests": dict(
            Counter(f"{r['verb']} {r['resource']}" for r in requests).most_common()
        ),
        "refused_requests": sum(1 for r in requests if not r["authorized"]),
    }


def run(pods: int, per_job: int, timeout_s: float) -> dict[str, Any]:
    from hyperguard.cluster.catalogue import Ec2InstanceCatalogue
    from hyperguard.cluster.hyperpod import HyperPodAdapter
    from hyperguard.cluster.hyperpod_eks import HyperPodEksGateway
    from hyperguard.cluster.kubernetes import KubernetesAdapter
    from hyperguard.cluster.kueue import shared_objects, team_objects
    from hyperguard.models.governance import PriorityClass

    if pods % per_job:
        raise SystemExit("--pods must be a multiple of --per-job")
    with cloud() as (plane, _cluster):
        catalogue = Ec2InstanceCatalogue()
        gateway = HyperPodEksGateway(
            HyperPodAdapter(HYPERPOD, catalogue=catalogue, sleep=lambda _s: None),
            KubernetesAdapter(EKS),
        )
        gateway.ensure_queues(
            [*shared_objects([PriorityClass(name="training", weight=50)]), *team_objects(TEAM)]
        )
        audited = len(plane.requests())
        watcher = Watcher(plane.client())
        log(f"requesting {pods} burst nodes")
        started = datetime.now(UTC)
        t0 = time.monotonic()
        gateway.request_burst_nodes([claim(index) for index in range(pods)])
        requested_s = time.monotonic() - t0
        log(f"{pods} claims created in {requested_s:.1f} s")
        dispatched: set[int] = set()
        last = ""
        while time.monotonic() < t0 + timeout_s and watcher.bound() < pods:
            dispatch_ready(gateway, dispatched, pods // per_job, per_job)
            watcher.poll()
            state = (
                f"claims launched {watcher.claims_with('Launched')}, registered "
                f"{watcher.claims_with('Registered')}, ready {watcher.claims_with('Ready')}; "
                f"jobs dispatched {len(dispatched)}/{pods // per_job}; "
                f"pods bound {watcher.bound()}/{pods}"
            )
            if state != last:
                log(state)
                last = state
            time.sleep(0.5)  # a poll interval: the conditions carry their own times
        wall_s = time.monotonic() - t0
        watcher.poll()
        return {
            "benchmark": "plane_burst",
            "date": datetime.now(UTC).date().isoformat(),
            "machine": {
                "cpus": os.cpu_count(),
                "platform": platform.platform(),
                "python": platform.python_version(),
            },
            "pods": pods,
            "nodes": pods,
            "pods_per_job": per_job,
            "claims_created_s": round(requested_s, 1),
            "wall_s": round(wall_s, 1),
            **summary(watcher, started, pods, plane.requests()[audited:]),
            "rss_mb": {
                c["name"]: round(c["rss_bytes"] / 2**20)
                for c in plane.components()
                if c["rss_bytes"]
            },
            "modelled": "the instances' boot (SimTimings.ec2_boot_s on a x60 clock)",
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--per-job", type=int, default=8)
    parser.add_argument("--timeout", type=float, default=900.0)
    args = parser.parse_args()
    threading.current_thread().name = "bench"
    print(json.dumps(run(args.pods, args.per_job, args.timeout), indent=2))


if __name__ == "__main__":
    main()
