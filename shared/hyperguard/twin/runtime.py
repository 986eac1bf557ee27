"""The running twin: emulator + deployed stack + in-process functions + simulated cluster."""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import uuid
import warnings
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from werkzeug.serving import make_server

from hyperguard import aws
from hyperguard.cluster import NodeNotFoundError, factory
from hyperguard.cluster.clock import ScaledClock
from hyperguard.cluster.simulated import SimulatedCluster
from hyperguard.models import Checkpoint
from hyperguard.models.governance import ComputeQuota, SchedulerConfig
from hyperguard.store import JobStore, NodeStore, TeamStore
from hyperguard.store.checkpoints import CheckpointStore
from hyperguard.twin.api_gateway import DEFAULT_PRINCIPAL, ApiGatewayProxy
from hyperguard.twin.deploy import EMULATOR_GAPS, Deployment, deploy
from hyperguard.twin.emulator import Emulator, QuietRequestHandler, detach_inline_sqs_triggers
from hyperguard.twin.executor import FunctionSpec, InProcessExecutor
from hyperguard.twin.inject import put_entry, retarget
from hyperguard.twin.poller import SqsMapping, SqsPoller
from hyperguard.twin.telemetry import (
    CloudWatchSink,
    install_stdout_router,
    outside_invocation,
)

REGION = "us-east-1"
CHECKPOINT_BUCKET = "hyperguard-twin-checkpoints"
ACCOUNT = "123456789012"
AGENT_SAMPLE = "hyperpod-node-health-unhealthy.json"
# The seeded jobs' teams and their nominal quotas in ml.p5.48xlarge instances.
SEED_QUOTAS = {"nlp": 8, "vision": 4}
SEED_POLICY = SchedulerConfig.model_validate(
    {
        "PriorityClasses": [
            {"Name": "inference", "Weight": 100},
            {"Name": "training", "Weight": 50},
            {"Name": "experiment", "Weight": 10},
        ],
        "FairShare": "Enabled",
        "IdleResourceSharing": "Enabled",
    }
)


def seed_quota(team: str, instances: int, cluster_arn: str) -> ComputeQuota:
    return ComputeQuota.model_validate(
        {
            "Name": f"{team}-quota",
            "ClusterArn": cluster_arn,
            "ComputeQuotaConfig": {
                "ComputeQuotaResources": [{"InstanceType": "ml.p5.48xlarge", "Count": instances}],
                "ResourceSharingConfig": {"Strategy": "LendAndBorrow", "BorrowLimit": 50},
                "PreemptTeamTasks": "LowerPriority",
            },
            "ComputeQuotaTarget": {"TeamName": team, "FairShareWeight": 10},
            "ActivationState": "Enabled",
        }
    )


TWIN_ENV = {
    "AWS_ACCESS_KEY_ID": "twin",
    "AWS_SECRET_ACCESS_KEY": "twin",
    "AWS_DEFAULT_REGION": REGION,
    "AWS_REGION": REGION,
}


@dataclass
class TwinConfig:
    root: Path
    host: str = "127.0.0.1"
    port: int = 4566
    stack_name: str = "hyperguard"
    cluster_name: str = "hyperguard-twin"
    eks_cluster_name: str = "hyperguard-burst"
    hyperpod_nodes: int = 16
    time_scale: float = 60.0
    api_port: int = 3000
    seed_jobs: bool = True
    burst_nodes: int = 4

    @property
    def parameters(self) -> dict[str, str]:
        arn = f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:cluster/{self.cluster_name}"
        return {
            "HyperPodClusterName": self.cluster_name,
            "HyperPodClusterArn": arn,
            "EksClusterName": self.eks_cluster_name,
            "ClusterBackend": "simulated",
            "CheckpointBucketName": CHECKPOINT_BUCKET,
            "TimeScale": str(self.time_scale),
            "AdminPrincipalArns": DEFAULT_PRINCIPAL,
        }


@dataclass
class Twin:
    config: TwinConfig
    emulator: Emulator = field(init=False)
    executor: InProcessExecutor = field(init=False)
    cluster: SimulatedCluster = field(init=False)
    deployment: Deployment | None = None
    poller: SqsPoller | None = None
    started_at: float = 0.0
    jobs: JobStore | None = None
    ticks: int = 0
    _api_server: Any = None
    _saved_env: dict[str, str | None] = field(default_factory=dict)
    sink: CloudWatchSink | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.emulator = Emulator(self.config.host, self.config.port)
        self.executor = InProcessExecutor(REGION, ACCOUNT, output_sink=self._ship_output)
        self.cluster = SimulatedCluster(
            ScaledClock(self.config.time_scale), checkpoint_sink=self._record_checkpoint
        )

    region: str = REGION
    account: str = ACCOUNT

    def client(self, service: str) -> Any:
        import boto3

        return boto3.client(service, endpoint_url=self.emulator.endpoint, region_name=REGION)

    def _ship_output(self, function_name: str, output: str) -> None:
        if self.sink is None:
            self.sink = CloudWatchSink(self.client("logs"), self.client("cloudwatch"))
        self.sink.ship(function_name, output)

    def up(self) -> Deployment:
        install_stdout_router()  # before any handler creates its powertools Logger
        # The emulator's own notes on what it cannot create are reported by status().
        warnings.filterwarnings("ignore", message="Tried to parse", category=UserWarning)
        logging.getLogger("moto").setLevel(logging.ERROR)
        changed = {**TWIN_ENV, "AWS_ENDPOINT_URL": self.emulator.endpoint}
        self._saved_env = {k: os.environ.get(k) for k in changed}
        os.environ.update(changed)
        aws.client.cache_clear()  # clients made before now point elsewhere
        aws.dynamodb_table.cache_clear()
        self.emulator.start(self.executor.invoke)
        self.started_at = time.time()
        self.deployment = deploy(
            root=self.config.root,
            stack_name=self.config.stack_name,
            parameters=self.config.parameters,
            cfn=self.client("cloudformation"),
            s3=self.client("s3"),
        )
        factory.use_simulated(self.cluster)
        self._register_functions(self.deployment)
        detach_inline_sqs_triggers()
        self.poller = SqsPoller(self.client("sqs"), self.executor, self._sqs_mappings(), REGION)
        self._seed_cluster(self.deployment)
        self.emulator.routes["/_hyperguard/status"] = lambda _env: (200, self.status())
        self.emulator.routes["/_hyperguard/nodes"] = lambda _env: (200, self.cluster.snapshot())
        self.emulator.routes["/_hyperguard/fault"] = self._fault_route
        self._spawn("sqs-poller", lambda: self.poller.run(self._stop) if self.poller else None)
        self._spawn("cluster-clock", self._tick)
        self._spawn("scheduler-tick", self._schedule_tick)
        self._serve_api(self.deployment)
        return self.deployment

    @property
    def api_endpoint(self) -> str:
        return f"http://{self.config.host}:{self.config.api_port}"

    def _serve_api(self, deployment: Deployment) -> None:
        """API Gateway in front of the API function, as `sam local start-api` would."""
        paths = json.loads((self.config.root / "docs" / "openapi.json").read_text())["paths"]
        name = deployment.functions["ApiFunction"]["name"]

        def invoke(event: dict[str, Any]) -> dict[str, Any]:
            payload, errored, _ = self.executor.invoke(name, event)
            if errored:  # what API Gateway answers when the integration fails
                return {"statusCode": 502, "body": json.dumps({"message": "Internal server error"})}
            return dict(json.loads(payload))

        proxy = ApiGatewayProxy(invoke, paths)
        self._api_server = make_server(
            self.config.host,
            self.config.api_port,
            proxy,
            threaded=True,
            request_handler=QuietRequestHandler,
        )
        self._spawn("api-gateway", self._api_server.serve_forever)

    def _schedule_tick(self) -> None:
        """The `rate(1 minute)` schedule of the scheduler, on the twin's scaled time: moto
        creates the rule but delivers to SQS, logs and buses only, never to Lambda."""
        assert self.deployment is not None
        name = self.deployment.functions["SchedulerFunction"]["name"]
        period = max(60.0 / self.config.time_scale, 0.5)
        while not self._stop.wait(period):
            event = {
                "version": "0",
                "id": str(uuid.uuid4()),
                "detail-type": "Scheduled Event",
                "source": "aws.events",
                "account": ACCOUNT,
                "time": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                "region": REGION,
                "resources": [],
                "detail": {},
            }
            self.executor.invoke(name, event)
            self.ticks += 1

    def _spawn(self, name: str, target: Any) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def _register_functions(self, deployment: Deployment) -> None:
        lam = self.client("lambda")
        for logical_id, fn in deployment.functions.items():
            config = lam.get_function_configuration(FunctionName=fn["name"])
            self.executor.register(
                FunctionSpec(
                    name=fn["name"],
                    logical_id=logical_id,
                    code_dir=fn["code_dir"],
                    handler=fn["handler"],
                    # Lambda environment values are strings; moto keeps Number parameters as floats.
                    environment={
                        k: str(v)
                        for k, v in config.get("Environment", {}).get("Variables", {}).items()
                    },
                    timeout_s=int(fn["timeout"]),
                    memory_mb=int(fn["memory"]),
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

    def _fault_route(self, environ: dict[str, Any]) -> tuple[int, Any]:
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = json.loads(environ["wsgi.input"].read(length) or b"{}")
        try:
            return 200, self.fault(body["instance_id"], body.get("kind", "gpu"))
        except (KeyError, NodeNotFoundError) as exc:
            return 404, {"error": f"no such node: {exc}"}

    def fault(self, instance_id: str, kind: str = "gpu") -> dict[str, Any]:
        """Break a node the way hardware does, and report it the way HyperPod's health
        agent does: the node goes to Failure and a node health event (the published
        sample's shape) reaches EventBridge."""
        assert self.deployment is not None
        self.cluster.inject_fault(instance_id, kind="persistent" if kind == "persistent" else "gpu")
        sample = json.loads((self.config.root / "tests" / "events" / AGENT_SAMPLE).read_text())
        event = retarget(sample, instance_id, self.config.cluster_name)
        result = self.client("events").put_events(
            Entries=[put_entry(event, self.deployment.outputs["EventBusName"])]
        )
        return {
            "instance_id": instance_id,
            "kind": kind,
            "event_id": result["Entries"][0].get("EventId"),
        }

    def _seed_cluster(self, deployment: Deployment) -> None:
        """Seed the simulator and write its inventory and jobs where the service reads them;
        the seeded jobs' teams get quotas that cover them, so the scheduler governs them."""
        self.cluster.seed_default(
            cluster_name=self.config.cluster_name,
            hyperpod_nodes=self.config.hyperpod_nodes,
            eks_cluster=self.config.eks_cluster_name,
            jobs=self.config.seed_jobs,
            burst_nodes=self.config.burst_nodes,
        )
        teams = TeamStore(deployment.outputs["TeamsTableName"])
        for team, instances in SEED_QUOTAS.items() if self.config.seed_jobs else ():
            quota = seed_quota(team, instances, self.config.parameters["HyperPodClusterArn"])
            teams.put_quota(quota, target_version=None)
        if self.config.seed_jobs:
            teams.put_scheduler_config(SEED_POLICY, target_version=None)
        NodeStore(deployment.outputs["NodesTableName"]).upsert_inventory(self.cluster.list_nodes())
        self.client("s3").create_bucket(Bucket=CHECKPOINT_BUCKET)
        self.jobs = JobStore(deployment.outputs["JobsTableName"])
        for job in self.cluster.jobs():
            self.jobs.put(job)

    def _record_checkpoint(self, job_id: str, step: int, uri: str) -> None:
        """The simulated jobs checkpoint as a training job should: shards, then the
        completion marker, in S3; then they report it (what POST .../checkpoints does)."""
        if self.jobs is None:
            return
        with outside_invocation():
            self._write_checkpoint(job_id, step)

    def _write_checkpoint(self, job_id: str, step: int) -> None:
        assert self.jobs is not None
        job = next((j for j in self.cluster.jobs() if j.job_id == job_id), None)
        if job is None or job.checkpoint_location is None:
            return
        folder = CheckpointStore(self.client("s3")).write(job.checkpoint_location, step)
        checkpoint = Checkpoint(step=step, uri=folder, completed_at=datetime.now(UTC))
        self.jobs.record_checkpoint(job_id, checkpoint)

    def _tick(self) -> None:
        while not self._stop.wait(0.5):
            self.cluster.advance()

    def status(self) -> dict[str, Any]:
        assert self.deployment is not None
        present = {r["type"] for r in self.deployment.resources.values()}
        present |= set(self.deployment.skipped.values())
        skipped = set(self.deployment.skipped.values())
        gaps = [
            {
                "type": kind,
                "created": kind not in skipped,
                "twin_does": what,
            }
            for kind, what in EMULATOR_GAPS.items()
            if kind in present
        ]
        sqs = self.client("sqs")
        depth: dict[str, int] = {}
        for key in ("HealthQueueUrl", "HealthDLQUrl"):
            attrs = sqs.get_queue_attributes(
                QueueUrl=self.deployment.outputs[key],
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
        return {
            "endpoint": self.emulator.endpoint,
            "stack": self.deployment.stack_name,
            "uptime_s": round(time.time() - self.started_at, 1),
            "time_scale": self.config.time_scale,
            "outputs": self.deployment.outputs,
            "resources": self.deployment.resources,
            "not_created": self.deployment.skipped,
            "emulator_gaps": gaps,
            "invocations": dict(self.executor.invocations),
            "function_errors": dict(self.executor.errors),
            "sqs_poller": dict(self.poller.stats) if self.poller else {},
            "queue_depth": depth,
            "executions": dict(executions),
        }

    def down(self) -> None:
        """Stop serving and forget every emulated resource: moto's state is per process,
        so a later twin in the same process starts clean."""
        from moto.moto_api._internal.models import moto_api_backend

        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=2)
        self.emulator.stop()
        if self._api_server is not None:
            self._api_server.shutdown()
            self._api_server.server_close()
        factory.use_simulated(None)
        moto_api_backend.reset()
        for key, value in self._saved_env.items():  # leave the process as it found it
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        aws.client.cache_clear()
        aws.dynamodb_table.cache_clear()
