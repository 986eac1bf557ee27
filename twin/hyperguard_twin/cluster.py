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
- `jobstatus`: the in-cluster forwarder's event for a run that ended.

This class is their façade: the knobs of the world (add nodes, inject faults, set capacity)
and what tests and scenarios read back (instances, runs, timelines).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from hyperguard.cluster.conventions import CAPACITY_TYPE_LABEL, INSTANCE_TYPE_LABEL, NODEPOOL_LABEL
from hyperguard.cluster.workloads import accelerator_resource
from hyperguard.models import NodeStatus
from hyperguard_twin.clock import Clock
from hyperguard_twin.cloud.core import (
    AZ,
    AZ_ID,
    CapacityType,
    Effect,
    Fault,
    FaultKind,
    Instance,
    SimTimings,
    World,
    order,
)
from hyperguard_twin.cloud.ec2 import Ec2
from hyperguard_twin.cloud.hyperpod import HyperPod
from hyperguard_twin.cloud.hyperpod_nodes import NodeRecovery
from hyperguard_twin.cloud.jobstatus import JobStatusForwarder
from hyperguard_twin.cloud.kubelets import Kubelets
from hyperguard_twin.cloud.logs import ContainerLogs
from hyperguard_twin.cloud.operator import TrainingOperator
from hyperguard_twin.cloud.patching import Patching
from hyperguard_twin.cloud.training import Training
from hyperguard_twin.cloud.training_run import Progress, Run, checkpoint_uri
from hyperguard_twin.ids import hyperpod_cluster_arn
from hyperguard_twin.plane.kube import NODECLAIMS, NODEPOOLS, NODES, KubeClient, wait_for

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
NODE_CLASS = "default"
FIELD_MANAGER = "hyperguard-twin"


NODEPOOL_ACCELERATOR_LIMIT = "512"
"""What the twin's NodePools may launch in all, in accelerators (64 eight-GPU nodes): a bound
as a platform team sets one (`hyperguard preflight` warns of a NodePool without limits)."""


def nodepool_manifest(name: str, instance_type: str) -> dict[str, Any]:
    """A GPU NodePool as EKS's guides write one: its nodes tainted `nvidia.com/gpu` so that
    only pods asking for the GPUs (and tolerating the taint) land there; bounded by limits;
    consolidation off until an admin sets it (`set_nodepool_disruption`), so the nodes
    launched before the twin began stay while idle."""
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {
            "template": {
                "metadata": {"labels": {"hyperguard.io/pool": name}},
                "spec": {
                    "taints": [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}],
                    "requirements": [
                        {"key": INSTANCE_TYPE_LABEL, "operator": "In", "values": [instance_type]},
                        {
                            "key": CAPACITY_TYPE_LABEL,
                            "operator": "In",
                            "values": ["on-demand", "spot"],
                        },
                    ],
                    "nodeClassRef": {
                        "group": "karpenter.k8s.aws",
                        "kind": "EC2NodeClass",
                        "name": NODE_CLASS,
                    },
                    "expireAfter": "Never",
                },
            },
            "limits": {accelerator_resource(instance_type): NODEPOOL_ACCELERATOR_LIMIT},
            "disruption": {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "Never"},
        },
    }


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
        self.forwarder = JobStatusForwarder(self.world)
        self.hyperpod.on_replaced.append(self.operator.node_replaced)
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

    @property
    def continuous_provisioning(self) -> bool:
        return self.hyperpod.continuous_provisioning

    # ------------------------------------------------------------------ running

    def start(self) -> None:
        """Start watching the API server (the controllers that react to it)."""
        kube = self.world.kube
        for controller in (self.training, self.operator, self.forwarder):
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
        """A Karpenter NodePool of one EC2 instance type (kept if it exists)."""
        kube = self.world.kube
        if kube.get(NODEPOOLS, name) is None:
            kube.apply(nodepool_manifest(name, instance_type), FIELD_MANAGER)

    def set_nodepool_limits(self, name: str, limits: dict[str, str] | None) -> None:
        """What an admin's `kubectl edit nodepool` sets: the NodePool's `spec.limits`."""
        self._replace_in_nodepool(name, "limits", limits)

    def set_nodepool_disruption(self, name: str, disruption: dict[str, Any]) -> None:
        """What an admin's `kubectl edit nodepool` sets: the NodePool's `spec.disruption`,
        which Karpenter's disruption controller follows."""
        self._replace_in_nodepool(name, "disruption", disruption)

    def _replace_in_nodepool(self, name: str, field: str, value: dict[str, Any] | None) -> None:
        kube = self.world.kube
        kube.patch(NODEPOOLS, name, {"spec": {field: None}})
        if value:
            kube.patch(NODEPOOLS, name, {"spec": {field: value}})

    def add_burst_nodes(
        self,
        nodepool: str,
        instance_type: str,
        count: int,
        *,
        spot: bool = False,
        timeout_s: float = 120.0,
    ) -> list[str]:
        """Karpenter nodes of `nodepool` launched before the twin began: NodeClaims that
        Karpenter launches (through EC2) as it launched them then. Returns their instances
        once EC2 has them."""
        self.add_nodepool(nodepool, instance_type)
        if count == 0:
            return []
        capacity = "spot" if spot else "on-demand"
        resource = accelerator_resource(instance_type)
        names = []
        for _ in range(count):
            name = f"{nodepool}-{self.world.rng.getrandbits(24):06x}"
            names.append(name)
            self.world.kube.create(
                NODECLAIMS,
                {
                    "apiVersion": "karpenter.sh/v1",
                    "kind": "NodeClaim",
                    "metadata": {"name": name, "labels": {NODEPOOL_LABEL: nodepool}},
                    "spec": {
                        "nodeClassRef": {
                            "group": "karpenter.k8s.aws",
                            "kind": "EC2NodeClass",
                            "name": NODE_CLASS,
                        },
                        "requirements": [
                            {
                                "key": INSTANCE_TYPE_LABEL,
                                "operator": "In",
                                "values": [instance_type],
                            },
                            {"key": CAPACITY_TYPE_LABEL, "operator": "In", "values": [capacity]},
                            {"key": NODEPOOL_LABEL, "operator": "In", "values": [nodepool]},
                        ],
                        "resources": {"requests": {resource: "1"}},
                        "taints": [
                            {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}
                        ],
                    },
                },
            )

        def launched() -> list[str] | None:
            with self.world.lock:
                by_claim = {
                    i.nodeclaim: i.instance_id for i in self.world.instances.values() if i.nodeclaim
                }
            ids = [by_claim.get(name) for name in names]
            return [i for i in ids if i] if all(ids) else None

        ids: list[str] = wait_for(launched, timeout_s, f"Karpenter did not launch {names}")
        return ids

    def set_ec2_capacity(
        self, instance_type: str, capacity_type: CapacityType, available: int | None
    ) -> None:
        with self.world.lock:
            self.ec2.set_capacity(instance_type, capacity_type, available)

    def set_hyperpod_capacity(self, group: str, available: int | None) -> None:
        with self.world.lock:
            self.hyperpod.set_capacity(group, available)

    def fail_next_registrations(self, count: int = 1) -> None:
        with self.world.lock:
            self.ec2.fail_next_registrations(count)

    def seed_checkpoint(self, location: str, step: int) -> None:
        """A job trained before the twin started: its latest checkpoint is in S3."""
        with self.world.settled():
            self.training.seed_checkpoint(location, step)

    def inject_fault(self, instance_id: str, kind: FaultKind = "gpu") -> None:
        """Break a node the way hardware does: the training processes on it crash (their
        pods fail), and its health agents report the fault."""
        with self.world.settled() as now:
            instance = self.world.instance(instance_id)
            self.world.faults[instance_id] = Fault(kind, heal_on_reboot=kind != "persistent")
            if instance.repair is None and not self.hyperpod.joining(instance_id):
                if instance.platform == "hyperpod":
                    self.hyperpod.show_health(instance, now)
                else:
                    self.kubelets.publish(instance, now)
            self.training.gpu_failed(instance, now)
            automatic = self.hyperpod.node_recovery == "Automatic"
            self.kubelets.report_fault(instance, kind, automatic=automatic)

    def clear_fault(self, instance_id: str) -> None:
        """The node's fault clears by itself: its health agent shows it healthy again."""
        with self.world.settled() as now:
            instance = self.world.instance(instance_id)
            self.world.faults.pop(instance_id, None)
            if instance.repair is None and not self.hyperpod.joining(instance_id):
                if instance.platform == "hyperpod":
                    self.hyperpod.show_health(instance, now)
                else:
                    self.kubelets.publish(instance, now)

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
        with self.world.settled():
            return [Instance(**vars(i)) for i in sorted(self.world.instances.values(), key=order)]

    def instance(self, instance_id: str) -> Instance | None:
        with self.world.settled():
            found = self.world.instances.get(instance_id)
            return Instance(**vars(found)) if found else None

    def replacement_of(self, instance_id: str) -> str | None:
        with self.world.settled():
            return self.hyperpod.replaced_by.get(instance_id)

    def owns(self, instance_id: str) -> bool:
        with self.world.lock:
            return instance_id in self.world.instances or instance_id in self.hyperpod.replaced_by

    def runs(self) -> dict[str, Run]:
        """The latest run of each job, by job id."""
        with self.world.settled():
            latest: dict[str, Run] = {}
            for run in self.training.runs.values():
                if run.state != "stopped" or run.job_id not in latest:
                    latest[run.job_id] = run
            return {job_id: Run(**vars(run)) for job_id, run in latest.items()}

    def job_instances(self, job_id: str) -> list[str]:
        """The instances under the pods of the job's latest run, by replica."""
        with self.world.settled():
            run = self.runs()[job_id]
            by_node = {i.node_name: i.instance_id for i in self.world.instances.values()}
            return [by_node[name] for name in run.nodes if name in by_node]

    def schedulable(self, instance_id: str) -> bool:
        """Whether the node's Kubernetes object takes new pods (cordoned: False)."""
        instance = self.instance(instance_id)
        if instance is None:
            raise LookupError(f"no such node {instance_id} in the simulated cluster")
        node = self.world.kube.get(NODES, instance.node_name)
        return node is not None and not (node.get("spec") or {}).get("unschedulable")

    def step_of(self, job_id: str) -> int:
        with self.world.settled() as now:
            step = self.training._step
            runs = [r for r in self.training.runs.values() if r.job_id == job_id]
            return max((r.step_at(now, step) for r in runs), default=0)

    def checkpoint_step(self, job_id: str) -> int | None:
        with self.world.settled():
            locations = {r.location for r in self.training.runs.values() if r.job_id == job_id}
            steps = [
                self.training.checkpoints[loc]
                for loc in locations
                if loc in self.training.checkpoints
            ]
            return max(steps, default=None)

    def timeline(self, job_id: str) -> list[Progress]:
        with self.world.settled():
            return list(self.training.timelines.get(job_id, []))

    def snapshot(self) -> dict[str, Any]:
        """JSON-able state for `hyperguard twin nodes`."""
        with self.world.settled() as now:
            nodes = [
                {
                    "instance_id": i.instance_id,
                    "platform": i.platform,
                    "pool": i.group,
                    "instance_type": i.instance_type,
                    "capacity_type": i.capacity_type,
                    "status": i.status.value,
                    "healthy": self.world.healthy(i),
                    "node_name": i.node_name,
                    "logical_id": i.logical_id,
                    "fault": f.kind if (f := self.world.faults.get(i.instance_id)) else None,
                }
                for i in sorted(self.world.instances.values(), key=order)
            ]
            step = self.training._step
            jobs = [
                {
                    "job_id": run.job_id,
                    "run": run.name,
                    "state": run.state,
                    "step": run.step_at(now, step),
                    "progressing": run.anchor_at is not None and now >= run.anchor_at,
                    "nodes": run.nodes,
                    "restarts": run.restarts,
                }
                for run in self.training.runs.values()
                if run.state != "stopped"
            ]
        cordoned = {
            n["metadata"]["name"]
            for n in self.world.kube.list_objects(NODES)
            if (n.get("spec") or {}).get("unschedulable")
        }
        for node in nodes:
            node["schedulable"] = node["node_name"] not in cordoned
        return {"now": now.isoformat(), "nodes": nodes, "jobs": jobs}

    # ------------------------------------------------------------------ SageMaker API

    def describe_cluster(self) -> dict[str, Any]:
        with self.world.settled():
            return self.hyperpod.describe_cluster()

    def cluster_events(self) -> list[dict[str, Any]]:
        with self.world.settled():
            return list(self.hyperpod.events)

    def cluster_nodes(self, *, include_logical_ids: bool) -> list[dict[str, Any]]:
        with self.world.settled():
            return self.hyperpod.cluster_nodes(include_logical_ids=include_logical_ids)

    def describe_node(self, node_id: str) -> dict[str, Any] | None:
        with self.world.settled():
            return self.hyperpod.describe_node(node_id)

    def batch_repair(
        self, action: Literal["reboot", "replace"], node_ids: list[str]
    ) -> dict[str, Any]:
        with self.world.settled() as now:
            return self.hyperpod.batch_repair(action, node_ids, now)

    def add_cluster_nodes(
        self, nodes_to_add: list[dict[str, Any]], client_token: str | None = None
    ) -> dict[str, Any]:
        with self.world.settled() as now:
            return self.hyperpod.add_cluster_nodes(nodes_to_add, client_token, now)

    def delete_cluster_nodes(self, node_ids: list[str], logical_ids: list[str]) -> dict[str, Any]:
        with self.world.settled() as now:
            return self.hyperpod.delete_cluster_nodes(node_ids, logical_ids, now)

    def start_health_check(self, instance_ids: list[str]) -> None:
        with self.world.settled() as now:
            self.hyperpod.start_health_check(instance_ids, now)

    # ------------------------------------------------------------------ EC2 API

    def reboot_instances(self, instance_ids: list[str]) -> list[str]:
        """RebootInstances; returns the ids this cluster does not own."""
        with self.world.settled() as now:
            unknown = [i for i in instance_ids if i not in self.world.instances]
            for instance_id in instance_ids:
                instance = self.world.instances.get(instance_id)
                if instance is None:
                    continue
                if instance.platform == "hyperpod":
                    if instance.repair is None and not self.hyperpod.joining(instance_id):
                        self.hyperpod.start_repair(instance, "reboot", now)
                else:
                    self.ec2.reboot(instance_id, now)
            return unknown

    def ec2_launch_check(self, instance_type: str, capacity_type: CapacityType, count: int) -> None:
        with self.world.lock:
            self.ec2.check_capacity(instance_type, capacity_type, count)

    def ec2_launched(self, instance_id: str, **details: Any) -> None:
        with self.world.settled() as now:
            self.ec2.launched(instance_id, now=now, **details)

    def ec2_terminated(self, instance_ids: list[str]) -> None:
        with self.world.settled() as now:
            for instance_id in instance_ids:
                self.ec2.terminated(instance_id, now)

    def node_status(self, instance_id: str) -> NodeStatus | None:
        instance = self.instance(instance_id)
        return instance.status if instance else None
