"""The running twin: the AWS emulator with the stack deployed, each function in its own
Lambda-like worker processes, the upstream Kubernetes control plane (etcd, kube-apiserver,
kube-controller-manager, kube-scheduler, KWOK, Kueue, Karpenter) built from its Go modules,
and a simulated HyperPod + EC2 cloud behind the emulated SageMaker, EC2 and EKS APIs.

The twin plays the cloud and the people around the service, never the service: it creates
what an account already has before HyperGuard is deployed (the HyperPod and EKS clusters,
the checkpoint bucket), deploys template.yaml, and then configures and uses the service
through its API as an operator and its users would (repair policy, scheduler policy,
principals, quotas, jobs). It writes nothing into the service's tables.

`Twin` starts those parts in that order and stops them; each is a module of its own
(account_setup, cluster_install, stack_functions, api_stage, service_users).
"""

from __future__ import annotations

import functools
import gc
import os
import subprocess
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from hyperguard import aws
from hyperguard_twin import aws as twin_aws
from hyperguard_twin import eks_access
from hyperguard_twin.account_setup import (
    create_cloud_account,
    create_cluster_capacity,
    new_plane,
    simulate_hyperpod,
)
from hyperguard_twin.api_gateway import DEFAULT_PRINCIPAL
from hyperguard_twin.api_stage import ApiStage
from hyperguard_twin.cluster import FaultKind, SimulatedCluster
from hyperguard_twin.cluster_install import apply_cluster_rbac, start_forwarder
from hyperguard_twin.config import ACCOUNT, REGION, TWIN_ENV, TwinConfig, TwinError
from hyperguard_twin.deploy import Deployment, deploy
from hyperguard_twin.effects import EffectRunner
from hyperguard_twin.emulator import Emulator, quiet_moto
from hyperguard_twin.kubeconfig import function_kubeconfig
from hyperguard_twin.lambda_layer import LayerPaths, stage_layer
from hyperguard_twin.lambda_runtime import LambdaRuntime
from hyperguard_twin.leniencies import LENIENCIES
from hyperguard_twin.plane.kube import KubeClient
from hyperguard_twin.plane.plane import ControlPlane
from hyperguard_twin.plane.processes import free_port
from hyperguard_twin.poller import SqsPoller
from hyperguard_twin.routes import add_routes
from hyperguard_twin.service_users import configure_service, report_checkpoint
from hyperguard_twin.stack_functions import StackFunctions
from hyperguard_twin.status import emulator_gaps, execution_counts, queue_depth


@dataclass
class Twin:
    config: TwinConfig
    emulator: Emulator = field(init=False)
    api_stage: ApiStage = field(init=False)
    plane: ControlPlane | None = None
    cluster: SimulatedCluster = field(init=False)
    effects: EffectRunner | None = None
    functions: StackFunctions | None = None
    deployment: Deployment | None = None
    poller: SqsPoller | None = None
    schedules: twin_aws.ScheduleRunner | None = None
    started_at: float = 0.0
    region: str = REGION
    account: str = ACCOUNT
    _forwarder: subprocess.Popen[bytes] | None = None
    forwarder_metrics_port: int | None = None
    """Where the forwarder serves /metrics (127.0.0.1), once it runs."""
    _saved_env: dict[str, str | None] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    seeded_jobs: dict[str, str] = field(default_factory=dict)
    """The seeded jobs' names (llama3-70b-pretrain, ...) → the job ids the API gave them."""

    def __post_init__(self) -> None:
        self.emulator = Emulator(self.config.host, self.config.port)
        self.api_stage = ApiStage(self.config)

    @functools.cached_property
    def kube(self) -> KubeClient:
        """The cluster's API server as an admin (`kubectl` with the cluster's admin
        credentials): what tests and the twin's own set-up read and write with."""
        if self.plane is None:
            raise TwinError("the twin is not up")
        return self.plane.client()

    def client(self, service: str) -> Any:
        return self.emulator.client(service, REGION)

    @property
    def api_endpoint(self) -> str:
        return self.api_stage.endpoint

    @property
    def outputs(self) -> dict[str, str]:
        if self.deployment is None:
            raise TwinError("the twin is not up")
        return self.deployment.outputs

    @property
    def runtime(self) -> LambdaRuntime | None:
        """The Lambda runtime the stack's functions run in, once they are deployed."""
        return self.functions.runtime if self.functions else None

    # ------------------------------------------------------------------ start, stop

    def up(self, *, wait: bool = True, timeout_s: float = 120.0) -> Deployment:
        quiet_moto()
        self.emulator.start(self._invoke)
        self.api_stage.open(self._api_function, self._invoke)
        self._spawn("api-gateway", self.api_stage.serve_forever)
        self.started_at = time.time()
        changed = {**TWIN_ENV, "AWS_ENDPOINT_URL": self.emulator.endpoint}
        self._saved_env = {k: os.environ.get(k) for k in changed | {"MOTO_PORT": ""}}
        os.environ.update(changed)
        aws.forget_clients()  # clients made before now point elsewhere
        eks_access.install()
        self.plane = new_plane(self.config, self.emulator.endpoint)
        # The account and the stack, which need only the plane's endpoint and CA, are made
        # while the plane starts (about 7 s). The plane starts on this thread: its processes
        # die with the thread that started them (processes.py). Leaving the block waits for
        # the deployment, whether the plane started or not.
        with ThreadPoolExecutor(1, thread_name_prefix="deploy") as deploying:
            deployed = deploying.submit(self._deploy, self.plane)
            self.plane.start(settle=False)
        layer, self.deployment = deployed.result()
        self.cluster = simulate_hyperpod(
            self.config,
            self.plane,
            lambda effect: self.effects.submit(effect) if self.effects else None,
        )
        twin_aws.attach(self.cluster)
        self.cluster.start()
        self.effects = EffectRunner(
            s3=self.client("s3"),
            events=self.client("events"),
            service_bus=self.deployment.outputs["EventBusName"],
            report=functools.partial(report_checkpoint, self.api_stage),
        )
        create_cluster_capacity(self.config, self.client, self.plane, self.cluster)
        apply_cluster_rbac(self.plane, self.config.root)
        self.forwarder_metrics_port = free_port()
        self._forwarder = start_forwarder(
            self.plane,
            self.config.root,
            cluster=self.config.eks_cluster_name,
            deployment=self.deployment,
            client=self.client,
            emulator=self.emulator,
            metrics_port=self.forwarder_metrics_port,
        )
        self.functions = StackFunctions(
            layer,
            client=self.client,
            emulator=self.emulator,
            max_concurrency=self.config.max_concurrency,
        )
        self.functions.register(self.deployment)
        self.poller = self.functions.sqs_poller()
        self.poller.run(self._stop)
        self.schedules = twin_aws.ScheduleRunner(ACCOUNT, REGION, speed=self.config.time_scale)
        add_routes(
            self.emulator.routes,
            status=self.status,
            nodes=self.cluster.snapshot,
            fault=self.fault,
            kubeconfig_for=self.kubeconfig_for,
        )
        self.effects.start()
        self._spawn("schedules", lambda: self.schedules.run(self._stop) if self.schedules else None)
        self._spawn("cluster-clock", self._tick)
        self.plane.settle(timeout_s)
        self.seeded_jobs.update(configure_service(self.api_stage, self.config, self.cluster))
        if wait:
            self.wait_ready(timeout_s)
        gc.freeze()  # what the start made lives until down(): out of every collection (D194)
        return self.deployment

    def _deploy(self, plane: ControlPlane) -> tuple[LayerPaths, Deployment]:
        """The account's EKS cluster and bucket, the functions' layer, and the stack."""
        create_cloud_account(self.config, self.client, plane)
        cache = self.config.cache_dir or self.config.root / ".twin" / "cache"
        layer = stage_layer(self.config.root, cache)
        deployment = deploy(
            root=self.config.root,
            stack_name=self.config.stack_name,
            parameters=self.config.parameters,
            cfn=self.client("cloudformation"),
            s3=self.client("s3"),
            events=self.client("events"),
            eks=self.client("eks"),
            iam=self.client("iam"),
        )
        return layer, deployment

    def down(self) -> None:
        """Stop, and forget every emulated resource: a later twin in this process starts clean."""
        from moto.moto_api._internal.models import moto_api_backend

        self._stop.set()
        self.api_stage.stop()
        for thread in self._threads:
            thread.join(timeout=5)
        if self.functions is not None:
            self.functions.stop()
        if self.effects is not None:
            self.effects.stop()
        if self._forwarder is not None:
            self._forwarder.terminate()
            self._forwarder.wait(timeout=10)
        if "cluster" in vars(self):  # made once the plane has started
            self.cluster.stop()
        if self.plane is not None:
            self.plane.stop()
        self.emulator.stop()
        if self.poller is not None:  # its long polls end with the emulator's connections
            self.poller.join(timeout_s=5)
        twin_aws.attach(None)
        moto_api_backend.reset()
        for key, value in self._saved_env.items():  # leave the process as it found it
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        aws.forget_clients()
        gc.unfreeze()  # what the twin kept is garbage now, for the next full collection

    def _spawn(self, name: str, target: Any) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def _tick(self) -> None:
        while not self._stop.wait(0.2):
            self.cluster.advance()

    def _invoke(self, function_name: str, event: Any) -> tuple[str, bool, str]:
        if self.functions is None:
            raise TwinError("functions are not deployed yet")
        return self.functions.runtime.invoke(function_name, event)

    def _api_function(self) -> str | None:
        """The API function's name, once the stack is deployed."""
        if self.deployment is None:
            return None
        return str(self.deployment.functions["ApiFunction"]["name"])

    # ------------------------------------------------------------ the API

    def api(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        principal: str = DEFAULT_PRINCIPAL,
    ) -> tuple[int, Any]:
        """Call the service's API the way a user does (through the twin's API Gateway)."""
        return self.api_stage.call(method, path, body, principal=principal)

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

    def kubeconfig_for(self, logical_id: str) -> str:
        """A kubeconfig that authenticates to the cluster as the function `logical_id` does:
        an EKS token signed with its execution role's credentials, which kube-apiserver maps
        through the function's access entry to its Kubernetes group, so RBAC answers as it
        answers the function."""
        if self.deployment is None or self.plane is None:
            raise TwinError("the twin is not up")
        return function_kubeconfig(
            logical_id,
            deployment=self.deployment,
            plane=self.plane,
            cluster=self.config.eks_cluster_name,
            client=self.client,
            aws_endpoint=self.emulator.endpoint,
        )

    # ------------------------------------------------------------ status

    def function_calls(self) -> Counter[tuple[str, str]]:
        """AWS API calls the functions made: (function logical id, "service:Operation")."""
        return self.functions.calls() if self.functions else Counter()

    def status(self) -> dict[str, Any]:
        assert self.deployment is not None and self.runtime is not None
        runtime, outputs = self.runtime, self.deployment.outputs
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
            "outputs": outputs,
            "resources": self.deployment.resources,
            "not_created": self.deployment.skipped,
            "emulator_gaps": emulator_gaps(self.deployment),
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
            "queue_depth": queue_depth(self.client("sqs"), outputs),
            "executions": execution_counts(
                self.client("stepfunctions"), outputs["NodeRecoveryStateMachineArn"]
            ),
            "time": datetime.now(UTC).isoformat(),
        }
