"""The running twin: the AWS emulator with the stack deployed, each function in its own
Lambda-like worker processes, the upstream Kubernetes control plane (etcd, kube-apiserver,
kube-controller-manager, kube-scheduler, KWOK, Kueue, Karpenter) built from its Go modules,
and a simulated HyperPod + EC2 cloud behind the emulated SageMaker, EC2 and EKS APIs.

The twin plays the cloud and the people around the service, never the service: it creates
what an account already has before HyperGuard is deployed (the HyperPod and EKS clusters,
the checkpoint bucket), deploys template.yaml, and then configures and uses the service
through its API as an operator and its users would (repair policy, scheduler policy,
principals, quotas, jobs). It writes nothing into the service's tables.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import subprocess
import threading
import time
import urllib.error
import urllib.request
import warnings
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from werkzeug.serving import make_server

from hyperguard import aws
from hyperguard.policies.burst import BurstCapacity, BurstPolicy
from hyperguard.policies.repair import DeepHealthCheck, NodeRepairConfig
from hyperguard_twin import aws as twin_aws
from hyperguard_twin import eks_access, forwarder_pod
from hyperguard_twin.api_gateway import (
    DEFAULT_PRINCIPAL,
    PRINCIPAL_HEADER,
    ApiGatewayProxy,
    stage_throttle,
)
from hyperguard_twin.clock import ScaledClock
from hyperguard_twin.cloud.account import install_karpenter_account
from hyperguard_twin.cloud.core import AZ
from hyperguard_twin.cloud.ec2 import karpenter_instance_types
from hyperguard_twin.cloud.hyperpod_nodes import NodeRecovery
from hyperguard_twin.cluster import FaultKind, SimTimings, SimulatedCluster
from hyperguard_twin.deploy import EMULATOR_GAPS, Deployment, deploy, load_template
from hyperguard_twin.effects import EffectRunner
from hyperguard_twin.emulator import Emulator, QuietRequestHandler, detach_inline_sqs_triggers
from hyperguard_twin.ids import hyperpod_cluster_arn
from hyperguard_twin.lambda_runtime import FunctionSpec, LambdaRuntime, stage_layer
from hyperguard_twin.leniencies import LENIENCIES
from hyperguard_twin.plane.authn import Identity
from hyperguard_twin.plane.components import ensure_built
from hyperguard_twin.plane.eks_token import EksTokenAuthenticator
from hyperguard_twin.plane.kube import KubeClient
from hyperguard_twin.plane.plane import ControlPlane, PlaneSettings, PlaneTimings, free_port
from hyperguard_twin.poller import SqsMapping, SqsPoller
from hyperguard_twin.telemetry import CloudWatchSink

REGION = "us-east-1"
ACCOUNT = "123456789012"
CHECKPOINT_BUCKET = "hyperguard-twin-checkpoints"
INSTANCE_TYPE = "ml.p5.48xlarge"
TWIN_ENV = {
    "AWS_ACCESS_KEY_ID": "twin",
    "AWS_SECRET_ACCESS_KEY": "twin",
    "AWS_DEFAULT_REGION": REGION,
    "AWS_REGION": REGION,
}
# The seeded teams (nominal quota in ml.p5.48xlarge instances) and their training jobs:
# (job id, team, nodes, HyperPod auto-resume, step of the checkpoint it starts from).
SEED_QUOTAS = {"nlp": 8, "vision": 4}
SEED_JOBS: tuple[tuple[str, str, int, bool, int], ...] = (
    ("llama3-70b-pretrain", "nlp", 4, False, 1200),
    ("mistral-7b-sft", "nlp", 2, True, 300),
    ("vit-h14-pretrain", "vision", 3, False, 640),
)
SEED_POLICY = {
    "PriorityClasses": [
        {"Name": "inference", "Weight": 100},
        {"Name": "training", "Weight": 50},
        {"Name": "experiment", "Weight": 10},
    ],
    "FairShare": "Enabled",
    "IdleResourceSharing": "Enabled",
}


class TwinError(RuntimeError):
    pass


def team_role(team: str) -> str:
    """The IAM role a team's members and training jobs call the API with."""
    return f"arn:aws:iam::{ACCOUNT}:role/{team}-training"


def fast_policy(time_scale: float) -> NodeRepairConfig:
    """The repair policy an operator of the twin stores: the published defaults on the
    simulated cluster's clock (every wait divided by its speed), and a deep health check
    after each reboot so that the whole path shows."""
    defaults = NodeRepairConfig()
    return defaults.model_copy(
        update={
            name: getattr(defaults, name) / time_scale
            for name in (
                "accelerator_fault_wait_mins",
                "other_fault_wait_mins",
                "repeat_fault_window_mins",
                "scheduled_change_lead_mins",
                "health_budget_mins",
                "drain_deadline_s",
            )
        }
        | {
            "poll_interval_s": max(1, round(defaults.poll_interval_s / time_scale)),
            "failed_run_grace_s": max(1, round(defaults.failed_run_grace_s / time_scale)),
            "deep_health_checks": [DeepHealthCheck.INSTANCE_STRESS],
        }
    )


def fast_burst_policy(time_scale: float, max_nodes: int = 8) -> BurstPolicy:
    """The burst policy an operator of the twin stores: bursting on (up to `max_nodes`
    NodeClaims), its waits the published defaults on the simulated cluster's clock."""
    defaults = BurstCapacity()
    return BurstPolicy(
        capacity=defaults.model_copy(
            update={
                "max_nodes": max_nodes,
                "poll_interval_s": 1,
                "launch_timeout_s": max(5, round(defaults.launch_timeout_s / time_scale)),
                "scale_in_after_s": round(defaults.scale_in_after_s / time_scale),
                "retry_after_s": max(5, round(defaults.retry_after_s / time_scale)),
            }
        )
    )


@dataclass
class TwinConfig:
    """`port` (the AWS emulator) and `api_port` (the API): 0 means any free port."""

    root: Path
    host: str = "127.0.0.1"
    port: int = 4566
    api_port: int = 3000
    stack_name: str = "hyperguard"
    cluster_name: str = "hyperguard-twin"
    eks_cluster_name: str = "hyperguard-eks"
    hyperpod_nodes: int = 16
    burst_nodes: int = 4
    """Karpenter nodes running at start, spot for half of them (0: the NodePool is empty)."""
    time_scale: float = 60.0
    seed_jobs: bool = True
    max_concurrency: int = 4
    cache_dir: Path | None = None
    timings: SimTimings | None = None
    """The simulated cluster's own durations (None: SimTimings' defaults)."""
    node_recovery: NodeRecovery = "Automatic"
    """The HyperPod cluster's NodeRecovery, AWS's default unless told (D142): Automatic, and
    HyperPod reboots or replaces what its health agent finds faulty; None, and only
    HyperGuard repairs."""
    stack_parameters: dict[str, str] = field(default_factory=dict)
    """More of the template's parameters, as `sam deploy --parameter-overrides` sets them
    (WebhookUrl, for one)."""

    @property
    def cluster_arn(self) -> str:
        return hyperpod_cluster_arn(self.cluster_name, REGION, ACCOUNT)

    @property
    def parameters(self) -> dict[str, str]:
        return {
            "HyperPodClusterName": self.cluster_name,
            "HyperPodClusterArn": self.cluster_arn,
            "EksClusterName": self.eks_cluster_name,
            "CheckpointBucketName": CHECKPOINT_BUCKET,
            "AdminPrincipalArns": DEFAULT_PRINCIPAL,
            **self.stack_parameters,
        }


@dataclass
class Twin:
    config: TwinConfig
    emulator: Emulator = field(init=False)
    plane: ControlPlane | None = None
    cluster: SimulatedCluster = field(init=False)
    effects: EffectRunner | None = None
    runtime: LambdaRuntime | None = None
    deployment: Deployment | None = None
    poller: SqsPoller | None = None
    schedules: twin_aws.ScheduleRunner | None = None
    sink: CloudWatchSink | None = None
    started_at: float = 0.0
    region: str = REGION
    account: str = ACCOUNT
    _api_server: Any = None
    _forwarder: subprocess.Popen[bytes] | None = None
    forwarder_metrics_port: int | None = None
    """Where the forwarder serves /metrics (127.0.0.1), once it runs."""
    _saved_env: dict[str, str | None] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    seeded_jobs: dict[str, str] = field(default_factory=dict)
    credential_owners: dict[str, str] = field(default_factory=dict)
    """Access key id → the function (logical id) that runs with it."""
    """The seeded jobs' names (llama3-70b-pretrain, ...) → the job ids the API gave them."""

    def __post_init__(self) -> None:
        self.emulator = Emulator(self.config.host, self.config.port)
        self._tokens = EksTokenAuthenticator(self.config.eks_cluster_name)

    def _authenticate(self, token: str) -> Identity | None:
        """What EKS's authenticator does with a bearer token: STS vouches for the caller,
        the cluster's access entries say who it is in Kubernetes."""
        arn = self._tokens.authenticate(token)
        if arn is None:
            return None
        entries = eks_access.entries_of(ACCOUNT, REGION, self.config.eks_cluster_name)
        return eks_access.identity_for(arn, entries)

    def _start_plane(self) -> None:
        """The cluster's Kubernetes: the upstream components, built (or found in the
        cache), started on 127.0.0.1."""
        built = ensure_built(self.config.root)
        scale = self.config.time_scale
        settings = PlaneSettings(
            cluster_name=self.config.eks_cluster_name,
            authenticate=self._authenticate,
            aws_env={
                **TWIN_ENV,
                "AWS_ENDPOINT_URL": self.emulator.endpoint,
                "AWS_EC2_METADATA_DISABLED": "true",
            },
            instance_types=karpenter_instance_types(AZ),
            timings=PlaneTimings.for_scale(scale),
        )
        plane = ControlPlane(built, settings)
        plane.start()  # stops what it started if it fails
        self.plane = plane
        self.cluster = SimulatedCluster(
            ScaledClock(scale),
            self.plane.client(),
            effects=lambda effect: self.effects.submit(effect) if self.effects else None,
            hyperpod_cluster=self.config.cluster_name,
            eks_cluster=self.config.eks_cluster_name,
            region=REGION,
            account=ACCOUNT,
            timings=self.config.timings,
            node_recovery=self.config.node_recovery,
            logs_dir=self.plane.logs_dir,
        )

    @functools.cached_property
    def kube(self) -> KubeClient:
        """The cluster's API server as an admin (`kubectl` with the cluster's admin
        credentials): what tests and the twin's own set-up read and write with."""
        if self.plane is None:
            raise TwinError("the twin is not up")
        return self.plane.client()

    def client(self, service: str) -> Any:
        import boto3

        return boto3.client(service, endpoint_url=self.emulator.endpoint, region_name=REGION)

    @property
    def api_endpoint(self) -> str:
        port = self._api_server.server_port if self._api_server else self.config.api_port
        return f"http://{self.config.host}:{port}"

    @property
    def outputs(self) -> dict[str, str]:
        if self.deployment is None:
            raise TwinError("the twin is not up")
        return self.deployment.outputs

    # ------------------------------------------------------------------ start, stop

    def up(self, *, wait: bool = True, timeout_s: float = 120.0) -> Deployment:
        warnings.filterwarnings("ignore", message="Tried to parse", category=UserWarning)
        logging.getLogger("moto").setLevel(logging.ERROR)
        # The Step Functions interpreter logs every failed state with a dump of its own
        # objects; the execution's history (`executions show`, `incidents show`) says it
        # readably, as on AWS.
        logging.getLogger("moto.stepfunctions.parser").setLevel(logging.CRITICAL)
        self.emulator.start(self._invoke)
        self._serve_api()
        self.started_at = time.time()
        changed = {**TWIN_ENV, "AWS_ENDPOINT_URL": self.emulator.endpoint}
        self._saved_env = {k: os.environ.get(k) for k in changed | {"MOTO_PORT": ""}}
        os.environ.update(changed)
        aws.client.cache_clear()  # clients made before now point elsewhere
        aws.dynamodb_table.cache_clear()
        eks_access.install()
        self._start_plane()
        twin_aws.attach(self.cluster)
        self.cluster.start()
        self.effects = EffectRunner(
            s3=self.client("s3"),
            events=self.client("events"),
            service_bus=f"{self.config.stack_name}-bus",
            report=self._report_checkpoint,
        )
        self._create_account_infrastructure()
        cache = self.config.cache_dir or self.config.root / ".twin" / "cache"
        layer = stage_layer(self.config.root, cache)
        self.deployment = deploy(
            root=self.config.root,
            stack_name=self.config.stack_name,
            parameters=self.config.parameters,
            cfn=self.client("cloudformation"),
            s3=self.client("s3"),
            events=self.client("events"),
            eks=self.client("eks"),
            iam=self.client("iam"),
        )
        self._apply_cluster_rbac()
        self._start_forwarder(self.deployment)
        self.effects.service_bus = self.deployment.outputs["EventBusName"]
        self.runtime = LambdaRuntime(
            layer,
            region=REGION,
            account=ACCOUNT,
            max_concurrency=self.config.max_concurrency,
            extra_env={"AWS_ENDPOINT_URL": self.emulator.endpoint},
            credentials=self._role_credentials,
            output_sink=self._ship_output,
        )
        self._register_functions(self.deployment)
        detach_inline_sqs_triggers()
        self.poller = SqsPoller(self.client("sqs"), self.runtime, self._sqs_mappings(), REGION)
        self._threads.extend(self.poller.run(self._stop))
        self.schedules = twin_aws.ScheduleRunner(ACCOUNT, REGION, speed=self.config.time_scale)
        self.emulator.routes["/_hyperguard/status"] = lambda _env: (200, self.status())
        self.emulator.routes["/_hyperguard/nodes"] = lambda _env: (200, self.cluster.snapshot())
        self.emulator.routes["/_hyperguard/fault"] = self._fault_route
        self.emulator.routes["/_hyperguard/kubeconfig"] = self._kubeconfig_route
        self.effects.start()
        self._spawn("schedules", lambda: self.schedules.run(self._stop) if self.schedules else None)
        self._spawn("cluster-clock", self._tick)
        self._configure_service()
        if wait:
            self.wait_ready(timeout_s)
        return self.deployment

    def down(self) -> None:
        """Stop serving and forget every emulated resource: moto's state is per process,
        so a later twin in the same process starts clean."""
        from moto.moto_api._internal.models import moto_api_backend

        self._stop.set()
        if self._api_server is not None:  # its serving thread ends only once it is shut down
            self._api_server.shutdown()
            self._api_server.server_close()
        for thread in self._threads:
            thread.join(timeout=5)
        if self.runtime is not None:
            self.runtime.stop()
        if self.effects is not None:
            self.effects.stop()
        if self._forwarder is not None:
            self._forwarder.terminate()
            self._forwarder.wait(timeout=10)
        if self.plane is not None:
            self.cluster.stop()
            self.plane.stop()
        self.emulator.stop()
        twin_aws.attach(None)
        moto_api_backend.reset()
        for key, value in self._saved_env.items():  # leave the process as it found it
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        aws.client.cache_clear()
        aws.dynamodb_table.cache_clear()

    def _spawn(self, name: str, target: Any) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def _tick(self) -> None:
        while not self._stop.wait(0.2):
            self.cluster.advance()

    def _invoke(self, function_name: str, event: Any) -> tuple[str, bool, str]:
        if self.runtime is None:
            raise TwinError("functions are not deployed yet")
        return self.runtime.invoke(function_name, event)

    # ------------------------------------------------------------ the account

    def _create_account_infrastructure(self) -> None:
        """What an account has before HyperGuard is deployed: the HyperPod cluster and its
        EKS orchestrator (with Karpenter's burst pool, which HyperGuard's NodeClaims launch
        into even when it starts empty), and the jobs' checkpoint bucket."""
        config = self.config
        assert self.plane is not None
        self.client("eks").create_cluster(
            name=config.eks_cluster_name,
            roleArn=f"arn:aws:iam::{ACCOUNT}:role/eks-cluster",
            resourcesVpcConfig={"subnetIds": []},
        )
        twin_aws.point_eks_cluster(
            config.eks_cluster_name, self.plane.endpoint, self.plane.ca_data, ACCOUNT, REGION
        )
        self.client("s3").create_bucket(Bucket=CHECKPOINT_BUCKET)
        self.cluster.add_instance_group("workers", INSTANCE_TYPE, config.hyperpod_nodes)
        install_karpenter_account(self.client("ec2"), self.plane.client(), config.eks_cluster_name)
        self.cluster.add_nodepool("gpu-burst", "p5.48xlarge")
        on_demand = config.burst_nodes - config.burst_nodes // 2
        self.cluster.add_burst_nodes("gpu-burst", "p5.48xlarge", on_demand)
        self.cluster.add_burst_nodes("gpu-burst", "p5.48xlarge", config.burst_nodes // 2, spot=True)

    def _apply_cluster_rbac(self) -> None:
        """What the operator does after `sam deploy`, as the install guide says:
        `kubectl apply -f deploy/kubernetes/hyperguard-rbac.yaml` (server-side here)."""
        assert self.plane is not None
        self.plane.client().apply_file(
            self.config.root / "deploy" / "kubernetes" / "hyperguard-rbac.yaml"
        )

    def _start_forwarder(self, deployment: Deployment) -> None:
        """HyperGuard's in-cluster forwarder, as deploy/kubernetes installs it, with the
        ForwarderRole's credentials (EKS Pod Identity's, on AWS)."""
        assert self.plane is not None
        role = self.client("iam").get_role(
            RoleName=deployment.resources["ForwarderRole"]["physical_id"]
        )["Role"]["Arn"]
        credentials = self.client("sts").assume_role(
            RoleArn=role, RoleSessionName="hyperguard-forwarder"
        )["Credentials"]
        self.emulator.iam.enforce(credentials["AccessKeyId"], role, "ForwarderRole")
        self.forwarder_metrics_port = free_port()
        self._forwarder = forwarder_pod.start(
            self.plane,
            self.config.root,
            cluster=self.config.eks_cluster_name,
            bus=deployment.outputs["EventBusName"],
            aws_env={
                "AWS_ACCESS_KEY_ID": credentials["AccessKeyId"],
                "AWS_SECRET_ACCESS_KEY": credentials["SecretAccessKey"],
                "AWS_SESSION_TOKEN": credentials["SessionToken"],
                "AWS_REGION": REGION,
                "AWS_DEFAULT_REGION": REGION,
                "AWS_ENDPOINT_URL": self.emulator.endpoint,
            },
            log=self.plane.workdir / "logs" / "hyperguard-forwarder.log",
            metrics_port=self.forwarder_metrics_port,
        )

    def _role_credentials(self, spec: FunctionSpec) -> dict[str, str]:
        """A function runs with its execution role's temporary credentials, as on Lambda."""
        credentials = self.client("sts").assume_role(
            RoleArn=spec.role_arn, RoleSessionName=spec.name[:64]
        )["Credentials"]
        self.credential_owners[credentials["AccessKeyId"]] = spec.logical_id
        self.emulator.iam.enforce(credentials["AccessKeyId"], spec.role_arn, spec.logical_id)
        return {
            "AWS_ACCESS_KEY_ID": credentials["AccessKeyId"],
            "AWS_SECRET_ACCESS_KEY": credentials["SecretAccessKey"],
            "AWS_SESSION_TOKEN": credentials["SessionToken"],
        }

    def _register_functions(self, deployment: Deployment) -> None:
        assert self.runtime is not None
        lam = self.client("lambda")
        for logical_id, fn in deployment.functions.items():
            configuration = lam.get_function_configuration(FunctionName=fn["name"])
            self.runtime.register(
                FunctionSpec(
                    name=fn["name"],
                    logical_id=logical_id,
                    code_dir=fn["code_dir"],
                    handler=fn["handler"],
                    # Lambda environment values are strings; moto keeps Number parameters as
                    # floats.
                    environment={
                        k: str(v)
                        for k, v in configuration.get("Environment", {})
                        .get("Variables", {})
                        .items()
                    },
                    timeout_s=float(fn["timeout"]),
                    memory_mb=int(fn["memory"]),
                    reserved_concurrency=fn["reserved_concurrency"],
                    role_arn=configuration["Role"],
                )
            )

    def _sqs_mappings(self) -> list[SqsMapping]:
        lam, sqs = self.client("lambda"), self.client("sqs")
        mappings = []
        for esm in lam.list_event_source_mappings()["EventSourceMappings"]:
            queue_arn = esm["EventSourceArn"]
            if ":sqs:" not in queue_arn:
                continue
            queue_name = queue_arn.rsplit(":", 1)[1]
            mappings.append(
                SqsMapping(
                    queue_url=sqs.get_queue_url(QueueName=queue_name)["QueueUrl"],
                    queue_arn=queue_arn,
                    function_name=esm["FunctionArn"].rsplit(":", 1)[1],
                    batch_size=int(esm.get("BatchSize", 10)),
                    report_batch_item_failures="ReportBatchItemFailures"
                    in esm.get("FunctionResponseTypes", []),
                )
            )
        return mappings

    def _ship_output(self, function_name: str, output: str) -> None:
        if self.sink is None:
            self.sink = CloudWatchSink(self.client("logs"), self.client("cloudwatch"))
        self.sink.ship(function_name, output)

    # ------------------------------------------------------------ the API

    def _serve_api(self) -> None:
        """API Gateway in front of the API function, as `sam local start-api` would. It takes
        its port before the twin opens its first outgoing connection: one of those could
        otherwise take a port of the ephemeral range (an `--api-port` picked as a free one)
        first. Until the stack is deployed it answers 503."""
        paths = json.loads((self.config.root / "docs" / "openapi.json").read_text())["paths"]

        def invoke(event: dict[str, Any]) -> dict[str, Any]:
            if self.deployment is None:
                return {"statusCode": 503, "body": json.dumps({"message": "deploying"})}
            name = self.deployment.functions["ApiFunction"]["name"]
            try:
                payload, errored, _ = self._invoke(name, event)
            except Exception as exc:  # throttled or failed: what API Gateway answers
                return {"statusCode": 502, "body": json.dumps({"message": str(exc)})}
            if errored:
                return {"statusCode": 502, "body": json.dumps({"message": "Internal server error"})}
            return dict(json.loads(payload))

        template = load_template(self.config.root / "template.yaml")
        throttle = stage_throttle(template, self.config.parameters)
        proxy = ApiGatewayProxy(invoke, paths, throttle=throttle)
        self._api_server = make_server(
            self.config.host,
            self.config.api_port,
            proxy,
            threaded=True,
            request_handler=QuietRequestHandler,
        )
        self._spawn("api-gateway", self._api_server.serve_forever)

    def api(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        principal: str = DEFAULT_PRINCIPAL,
    ) -> tuple[int, Any]:
        """Call the service's API the way a user does (through the twin's API Gateway)."""
        request = urllib.request.Request(
            self.api_endpoint + path,
            data=json.dumps(body).encode() if body is not None else None,
            headers={"Content-Type": "application/json", PRINCIPAL_HEADER: principal},
            method=method,
        )
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                raw = response.read()
                status = response.status
        except urllib.error.HTTPError as error:
            raw, status = error.read(), error.code
        return status, json.loads(raw) if raw else None

    def _api_ok(self, method: str, path: str, body: Any = None, **kwargs: Any) -> Any:
        status, answer = self.api(method, path, body, **kwargs)
        if status >= 300:
            raise TwinError(f"{method} {path} answered {status}: {answer}")
        return answer

    def _configure_service(self) -> None:
        """What an operator does after `sam deploy`, and what the seeded teams submit."""
        policy = fast_policy(self.config.time_scale)
        self._api_ok(
            "PUT", "/policies/node-repair", policy.model_dump(mode="json", exclude_none=True)
        )
        burst = fast_burst_policy(self.config.time_scale)
        self._api_ok("PUT", "/policies/burst", burst.model_dump(mode="json", by_alias=True))
        if not self.config.seed_jobs:
            return
        self._api_ok("PUT", "/scheduler-config", SEED_POLICY)
        for team, instances in SEED_QUOTAS.items():
            self._api_ok("PUT", "/principals", {"principal_arn": team_role(team), "team": team})
            self._api_ok(
                "PUT",
                f"/teams/{team}/compute-quota",
                {
                    "Name": f"{team}-quota",
                    "ClusterArn": self.config.cluster_arn,
                    "ComputeQuotaConfig": {
                        "ComputeQuotaResources": [
                            {"InstanceType": INSTANCE_TYPE, "Count": instances}
                        ],
                        "ResourceSharingConfig": {"Strategy": "LendAndBorrow", "BorrowLimit": 50},
                        "PreemptTeamTasks": "LowerPriority",
                    },
                    "ComputeQuotaTarget": {"TeamName": team, "FairShareWeight": 10},
                    "ActivationState": "Enabled",
                },
            )
        for job_id, team, nodes, auto_resume, start_step in SEED_JOBS:
            if nodes > self.config.hyperpod_nodes:
                continue
            location = f"s3://{CHECKPOINT_BUCKET}/{job_id}/"
            self.cluster.seed_checkpoint(location, start_step)
            submitted = self._api_ok(
                "POST",
                "/jobs",
                {
                    "name": job_id,
                    "priority_class": "training",
                    "instance_type": INSTANCE_TYPE,
                    "replicas": nodes,
                    "image": "hyperguard/trainer:twin",
                    "command": ["torchrun", "--nnodes", str(nodes), "train.py", "--name", job_id],
                    "checkpoint_location": location,
                    "auto_resume": auto_resume,
                },
                principal=team_role(team),
            )
            self.seeded_jobs[job_id] = submitted["job_id"]

    def _report_checkpoint(
        self, job_id: str, team: str, step: int, uri: str, timings: dict[str, float]
    ) -> None:
        """A training job reporting a completed checkpoint (POST /jobs/{jobId}/checkpoints)
        with each node's compute seconds per step; `job_id` is the job's HyperGuard id, which
        the job finds in its environment."""
        body: dict[str, Any] = {"step": step, "uri": uri}
        if timings:
            body["node_step_seconds"] = timings
        self.api("POST", f"/jobs/{job_id}/checkpoints", body, principal=team_role(team))

    def wait_ready(self, timeout_s: float = 120.0) -> None:
        """Until the service knows every node (its inventory sync has run) and the seeded
        jobs run: what `up` waits for before anyone injects a fault."""
        from hyperguard.store import NodeStore

        deadline = time.monotonic() + timeout_s
        nodes = NodeStore(self.outputs["NodesTableName"])
        expected = {i.instance_id for i in self.cluster.instances()}
        while time.monotonic() < deadline:
            known = {n.instance_id for n in nodes.all()}
            runs = self.cluster.runs()
            jobs_ok = all(
                job_id in runs and runs[job_id].state == "running"
                for job_id in self.seeded_jobs.values()
            )
            if expected <= known and jobs_ok:
                return
            time.sleep(0.2)
        status = self.status()
        raise TwinError(
            f"the twin was not ready within {timeout_s} s: the service knows "
            f"{len(expected & known)} of {len(expected)} nodes; jobs "
            f"{ {job_id: run.state for job_id, run in self.cluster.runs().items()} }; "
            f"invocations {status['invocations']}, errors {status['function_errors']}"
        )

    # ------------------------------------------------------------ the cluster

    def fault(self, instance_id: str, kind: FaultKind = "gpu") -> dict[str, Any]:
        """Break a node the way hardware does; its health agent reports it."""
        self.cluster.inject_fault(instance_id, kind)
        return {"instance_id": instance_id, "kind": kind}

    def _fault_route(self, environ: dict[str, Any]) -> tuple[int, Any]:
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = json.loads(environ["wsgi.input"].read(length) or b"{}")
        kind = body.get("kind", "gpu")
        if kind not in ("gpu", "persistent", "kernel"):
            return 400, {"error": f"unknown fault kind {kind!r}: gpu, persistent or kernel"}
        try:
            return 200, self.fault(str(body["instance_id"]), kind)
        except KeyError:
            return 400, {"error": 'name the node: {"instance_id": "i-..."}'}
        except LookupError as exc:
            return 404, {"error": str(exc)}

    def kubeconfig_for(self, logical_id: str) -> str:
        """A kubeconfig that authenticates to the cluster as the function `logical_id` does:
        an EKS token signed with its execution role's credentials (valid 15 minutes, as
        EKS's), which kube-apiserver maps through the function's access entry to its
        Kubernetes group, so RBAC answers as it answers the function."""
        from hyperguard.cluster.eks_token import generate_eks_token

        if self.deployment is None or self.plane is None:
            raise TwinError("the twin is not up")
        function = self.deployment.functions.get(logical_id)
        if function is None:
            known = ", ".join(sorted(self.deployment.functions))
            raise LookupError(f"no function {logical_id} in the stack (one of: {known})")
        role = self.client("lambda").get_function_configuration(FunctionName=function["name"])[
            "Role"
        ]
        credentials = self.client("sts").assume_role(RoleArn=role, RoleSessionName=logical_id[:64])[
            "Credentials"
        ]
        import boto3

        sts = boto3.client(
            "sts",
            endpoint_url=self.emulator.endpoint,
            region_name=REGION,
            aws_access_key_id=credentials["AccessKeyId"],
            aws_secret_access_key=credentials["SecretAccessKey"],
            aws_session_token=credentials["SessionToken"],
        )
        token = generate_eks_token(self.config.eks_cluster_name, sts)
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": self.config.eks_cluster_name,
                    "cluster": {
                        "server": self.plane.endpoint,
                        "certificate-authority-data": self.plane.ca_data,
                    },
                }
            ],
            "users": [{"name": logical_id, "user": {"token": token}}],
            "contexts": [
                {
                    "name": logical_id,
                    "context": {"cluster": self.config.eks_cluster_name, "user": logical_id},
                }
            ],
            "current-context": logical_id,
        }
        return str(yaml.safe_dump(config, sort_keys=False))

    def _kubeconfig_route(self, environ: dict[str, Any]) -> tuple[int, Any]:
        from urllib.parse import parse_qs

        wanted = (parse_qs(environ.get("QUERY_STRING", "")).get("as") or [""])[0]
        try:
            return 200, {"kubeconfig": self.kubeconfig_for(wanted)}
        except LookupError as exc:
            return 404, {"error": str(exc)}

    # ------------------------------------------------------------ status

    def function_calls(self) -> Counter[tuple[str, str]]:
        """AWS API calls the functions made: (function logical id, "service:Operation")."""
        calls: Counter[tuple[str, str]] = Counter()
        for (key, operation), count in list(self.emulator.calls.items()):
            owner = self.credential_owners.get(key)
            if owner is not None:
                calls[(owner, operation)] += count
        return calls

    def status(self) -> dict[str, Any]:
        assert self.deployment is not None and self.runtime is not None
        present = {r["type"] for r in self.deployment.resources.values()}
        skipped = set(self.deployment.skipped.values())
        gaps = [
            {"type": kind, "created": kind not in skipped, "twin_does": what}
            for kind, what in EMULATOR_GAPS.items()
            if kind in present | skipped or not kind.startswith("AWS::")
        ]
        sqs = self.client("sqs")
        depth: dict[str, int] = {}
        for key, url in self.deployment.outputs.items():
            if not key.endswith(("QueueUrl", "DLQUrl")):
                continue
            attrs = sqs.get_queue_attributes(
                QueueUrl=url,
                AttributeNames=[
                    "ApproximateNumberOfMessages",
                    "ApproximateNumberOfMessagesNotVisible",
                ],
            )["Attributes"]
            depth[key.removesuffix("Url")] = int(attrs["ApproximateNumberOfMessages"]) + int(
                attrs["ApproximateNumberOfMessagesNotVisible"]
            )
        executions: Counter[str] = Counter()
        sfn = self.client("stepfunctions")
        for page in sfn.get_paginator("list_executions").paginate(
            stateMachineArn=self.deployment.outputs["NodeRecoveryStateMachineArn"]
        ):
            executions.update(e["status"] for e in page["executions"])
        runtime = self.runtime
        return {
            "endpoint": self.emulator.endpoint,
            "api_endpoint": self.api_endpoint,
            "kubernetes_endpoint": self.plane.endpoint if self.plane else None,
            "kubernetes": {
                "components": self.plane.components() if self.plane else [],
                "leniencies": [{"emulates": what, "lenient": how} for what, how in LENIENCIES],
            },
            "stack": self.deployment.stack_name,
            "uptime_s": round(time.time() - self.started_at, 1),
            "time_scale": self.config.time_scale,
            "outputs": self.deployment.outputs,
            "resources": self.deployment.resources,
            "not_created": self.deployment.skipped,
            "emulator_gaps": gaps,
            "leniencies": [{"emulates": what, "lenient": how} for what, how in LENIENCIES],
            "invocations": dict(runtime.invocations),
            "function_errors": {name: n for name, n in runtime.errors.items() if n},
            "iam": self.emulator.iam.summary(),
            "cold_starts": dict(runtime.cold_starts),
            "throttles": dict(runtime.throttles),
            "sqs_poller": dict(self.poller.stats) if self.poller else {},
            "schedules_fired": dict(self.schedules.fired) if self.schedules else {},
            "cluster_effects": dict(self.effects.done) if self.effects else {},
            "cluster_effects_failed": dict(self.effects.failed) if self.effects else {},
            "queue_depth": depth,
            "executions": dict(executions),
            "time": datetime.now(UTC).isoformat(),
        }
