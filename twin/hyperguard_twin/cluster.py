"""The simulated cloud behind the twin's real APIs: SageMaker HyperPod and EC2 capacity with
a Kubernetes cluster on top that runs the upstream control plane (`hyperguard_twin.plane`).

The service never calls this module. It calls SageMaker (the emulator routes HyperPod's
operations here, `hyperguard_twin.aws`), EC2 (Karpenter's launches, HyperGuard's reboots of burst
instances) and the real kube-apiserver. What has no open-source original is played by the
controllers of `hyperguard_twin.cloud`, one per system, over one shared core:

- `hyperpod`: SageMaker HyperPod's API and node lifecycle;
- `ec2`: the instances Karpenter launches through the EC2 API;
- `kubelets`: the nodes' kubelets (registration) and health agents (labels, conditions,
  HyperPod's health events), with KWOK (upstream) keeping the nodes' heartbeats and pods;
- `operator`: the HyperPod training operator (HyperPodPyTorchJob → Kueue Workload → pods);
- `training`: what the training processes do (steps, checkpoints, exits);
- `patching`: HyperPod's automatic patching;

This class is their façade: the knobs of the world (add nodes, inject faults, set capacity)
and what tests and scenarios read back (instances, runs, timelines). It composes the parts
that have modules of their own: `cloud.nodepools` (Karpenter's NodePools), `cloud.faults` (a
node's hardware breaking), `cloud.inspection` (the reads) and `cloud.api`, the cloud's side
of the SageMaker and EC2 operations (`SimulatedCluster.api`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from hyperguard.models import NodeStatus
from hyperguard_twin.clock import Clock
from hyperguard_twin.cloud.api import CloudApi
from hyperguard_twin.cloud.core import (
    AZ,
    AZ_ID,
    CapacityType,
    Effect,
    FaultKind,
    Instance,
    SimTimings,
    World,
)
from hyperguard_twin.cloud.ec2 import Ec2
from hyperguard_twin.cloud.faults import NodeFaults
from hyperguard_twin.cloud.hyperpod import HyperPod
from hyperguard_twin.cloud.hyperpod_nodes import NodeRecovery
from hyperguard_twin.cloud.inspection import Inspection
from hyperguard_twin.cloud.kubelets import Kubelets
from hyperguard_twin.cloud.logs import ContainerLogs
from hyperguard_twin.cloud.nodepools import NodePools
from hyperguard_twin.cloud.operator import TrainingOperator
from hyperguard_twin.cloud.patching import Patching
from hyperguard_twin.cloud.training import Training
from hyperguard_twin.cloud.training_run import Progress, Run, checkpoint_uri
from hyperguard_twin.ids import hyperpod_cluster_arn
from hyperguard_twin.plane.kube import KubeClient

__all__ = [
    "AZ",
    "AZ_ID",
    "CapacityType",
    "Effect",
    "FaultKind",
    "Instance",
    "Progress",
    "Run",
    "SimTimings",
    "SimulatedCluster",
    "checkpoint_uri",
]


class SimulatedCluster:
    def __init__(
        self,
        clock: Clock,
        kube: KubeClient,
        *,
        effects: Callable[[Effect], None],
        hyperpod_cluster: str = "hyperguard-twin",
        eks_cluster: str = "hyperguard-eks",
        region: str = "us-east-1",
        account: str = "123456789012",
        timings: SimTimings | None = None,
        seed: int = 7,
        node_recovery: NodeRecovery = "Automatic",
        logs_dir: Path | None = None,
    ) -> None:
        """`node_recovery`: the HyperPod cluster's NodeRecovery (AWS's default: Automatic);
        `logs_dir`: where the pods' log files are kept for the kubelets' API (None: none)."""
        self.world = World(
            clock,
            kube,
            effects=effects,
            hyperpod_cluster=hyperpod_cluster,
            eks_cluster=eks_cluster,
            region=region,
            account=account,
            timings=timings,
            seed=seed,
        )
        self.kubelets = Kubelets(self.world)
        self.training = Training(self.world, ContainerLogs(kube, logs_dir))
        self.hyperpod = HyperPod(self.world, self.kubelets, self.training.node_down)
        self.hyperpod.node_recovery = node_recovery
        self.ec2 = Ec2(self.world, self.kubelets, self.training.node_down)
        self.operator = TrainingOperator(self.world)
        self.patching = Patching(self.world, self.hyperpod)
        self.hyperpod.on_replaced.append(self.operator.node_replaced)
        self.operator.on_resize.append(self.training.resized)
        self.nodepools = NodePools(self.world)
        self.node_faults = NodeFaults(self.world, self.hyperpod, self.kubelets, self.training)
        self.inspection = Inspection(self.world, self.hyperpod, self.training)
        self.api = CloudApi(self.world, self.hyperpod, self.ec2)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    @property
    def clock(self) -> Clock:
        return self.world.clock

    @property
    def timings(self) -> SimTimings:
        return self.world.timings

    @property
    def hyperpod_cluster(self) -> str:
        return self.world.hyperpod_cluster

    @property
    def eks_cluster(self) -> str:
        return self.world.eks_cluster

    @property
    def cluster_arn(self) -> str:
        w = self.world
        return hyperpod_cluster_arn(w.hyperpod_cluster, w.region, w.account)

    # ------------------------------------------------------------------ running

    def start(self) -> None:
        """Start watching the API server (the controllers that react to it)."""
        kube = self.world.kube
        for controller in (self.training, self.operator):
            self._threads.extend(controller.watch(kube, self._stop))

    def stop(self) -> None:
        self._stop.set()

    def advance(self) -> None:
        """Play everything due up to the clock's time."""
        with self.world.settled():
            pass

    def quiesce(self, quiet_s: float = 0.5, timeout_s: float = 60.0) -> None:
        """Until the API server has told the controllers of no change for `quiet_s`: the
        upstream controllers (scheduler, Job controller, Kueue, Karpenter, KWOK) act in wall
        time, and a test on a manual clock waits for them before it moves the clock on."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() - self.world.touched < quiet_s:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the cluster did not settle within {timeout_s:.0f} s")
            time.sleep(0.05)
            self.advance()

    # ------------------------------------------------------------------ the world

    def add_instance_group(self, group: str, instance_type: str, count: int) -> list[str]:
        with self.world.settled() as now:
            return self.hyperpod.add_group(group, instance_type, count, now)

    def schedule_patch(
        self,
        group: str,
        at: datetime,
        *,
        strategy: str = "WhenIdle",
        idle_wait_s: float = 3600.0,
        batch: int = 1,
    ) -> None:
        """The operator's UpdateCluster with the group's AutoPatchConfig."""
        with self.world.settled() as now:
            self.patching.schedule(group, at, strategy, idle_wait_s, batch, now)

    def add_nodepool(self, name: str, instance_type: str) -> None:
        self.nodepools.add(name, instance_type)

    def set_nodepool_limits(self, name: str, limits: dict[str, str] | None) -> None:
        self.nodepools.set_limits(name, limits)

    def set_nodepool_disruption(self, name: str, disruption: dict[str, Any]) -> None:
        self.nodepools.set_disruption(name, disruption)

    def add_burst_nodes(
        self,
        nodepool: str,
        instance_type: str,
        count: int,
        *,
        spot: bool = False,
        timeout_s: float = 120.0,
    ) -> list[str]:
        return self.nodepools.add_burst_nodes(
            nodepool, instance_type, count, spot=spot, timeout_s=timeout_s
        )

    def set_ec2_capacity(
        self, instance_type: str, capacity_type: CapacityType, available: int | None
    ) -> None:
        with self.world.lock:
            self.ec2.set_capacity(instance_type, capacity_type, available)

    def set_hyperpod_capacity(self, group: str, available: int | None) -> None:
        with self.world.lock:
            self.hyperpod.set_capacity(group, available)

    def seed_checkpoint(self, location: str, step: int) -> None:
        """A job trained before the twin started: its latest checkpoint is in S3."""
        with self.world.settled():
            self.training.seed_checkpoint(location, step)

    def inject_fault(self, instance_id: str, kind: FaultKind = "gpu") -> None:
        self.node_faults.inject(instance_id, kind)

    def clear_fault(self, instance_id: str) -> None:
        self.node_faults.clear(instance_id)

    def fail_next_repairs(self, error_code: str, count: int = 1) -> None:
        with self.world.lock:
            self.hyperpod.fail_next_repairs(error_code, count)

    def replacement_never_healthy(self, instance_id: str) -> None:
        with self.world.lock:
            self.hyperpod.replacement_never_healthy(instance_id)

    @contextmanager
    def repairs_held(self) -> Iterator[None]:
        with self.hyperpod.repairs_held():
            yield

    def configure_scaling(
        self, *, continuous: bool = True, autoscaling: bool | None = None
    ) -> None:
        """How the cluster was created or updated: in Continuous node provisioning mode (the
        default; otherwise BatchAddClusterNodes is refused) and with HyperPod's managed
        Karpenter autoscaling enabled (True), disabled (False) or never configured (None)."""
        with self.world.lock:
            self.hyperpod.continuous_provisioning = continuous
            self.hyperpod.autoscaling = (
                None
                if autoscaling is None
                else {
                    "Mode": "Enable" if autoscaling else "Disable",
                    "AutoScalerType": "Karpenter",
                    "Status": "InService",
                }
            )

    def keep_logical_ids_on_replace(self, keep: bool) -> None:
        with self.world.lock:
            self.hyperpod.keep_logical_ids = keep

    def fail_job(self, job_id: str, exit_code: int = 1) -> None:
        with self.world.settled() as now:
            self.training.fail(job_id, exit_code, now)

    def slow_node(self, instance_id: str, speed: float) -> None:
        if not 0 < speed <= 1:
            raise ValueError("speed must be above 0 and at most 1")
        with self.world.settled() as now:
            self.training.slow(self.world.instance(instance_id), speed, now)

    def hang_job(self, job_id: str) -> None:
        with self.world.settled() as now:
            self.training.hang(job_id, now)

    # ------------------------------------------------------------------ inspection

    def instances(self) -> list[Instance]:
        return self.inspection.instances()

    def instance(self, instance_id: str) -> Instance | None:
        return self.inspection.instance(instance_id)

    def node_status(self, instance_id: str) -> NodeStatus | None:
        return self.inspection.node_status(instance_id)

    def replacement_of(self, instance_id: str) -> str | None:
        return self.inspection.replacement_of(instance_id)

    def runs(self) -> dict[str, Run]:
        return self.inspection.runs()

    def job_instances(self, job_id: str) -> list[str]:
        return self.inspection.job_instances(job_id)

    def schedulable(self, instance_id: str) -> bool:
        return self.inspection.schedulable(instance_id)

    def step_of(self, job_id: str) -> int:
        return self.inspection.step_of(job_id)

    def checkpoint_step(self, job_id: str) -> int | None:
        return self.inspection.checkpoint_step(job_id)

    def timeline(self, job_id: str) -> list[Progress]:
        return self.inspection.timeline(job_id)

    def snapshot(self) -> dict[str, Any]:
        return self.inspection.snapshot()
