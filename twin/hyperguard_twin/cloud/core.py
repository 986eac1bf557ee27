"""The shared core of the simulated cloud: the instances, their faults, the simulated
clock's agenda, and the client every controller reaches the real Kubernetes API server with.

Each controller of `hyperguard_twin.cloud` stands for one system that has no open-source
original (SageMaker HyperPod's API and node lifecycle, EC2, the nodes' kubelets and health
agents, the HyperPod training operator, automatic patching, the training itself). They share
this core the way Karpenter's lifecycle sub-reconcilers share their NodeClaim: one lock, one
set of instances, one agenda of what is due when. Everything that takes time is worked out
from the injected clock whenever the world is touched (`settled`), never by sleeping;
durations are virtual (`ScaledClock` in the twin, `ManualClock` in tests), timestamps shown
through an API are the real time at which they happen (`clock.wall`).
"""

from __future__ import annotations

import heapq
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from hyperguard.models import NodeStatus
from hyperguard_twin.clock import Clock
from hyperguard_twin.plane.kube import KubeClient

FaultKind = Literal["gpu", "persistent", "kernel"]
CapacityType = Literal["reserved", "on-demand", "spot"]
"""Karpenter's `karpenter.sh/capacity-type` values."""
AZ = "us-east-1a"
AZ_ID = "use1-az1"
"""The zone's id, which HyperPod's providerIDs name (live clusters show use1-az4 and the like)."""


class SimTimings(BaseModel):
    """How long things take in the simulation, in seconds of virtual time.

    Defaults follow the published HyperPod P90 recovery figures for p5.48xlarge where there
    is one (replacement 903-981 s). Assumed, for want of a published figure: a warm reboot
    of a p5.48xlarge (300 s: firmware POST with 8 GPUs and EFA, kubelet re-registration), the
    120 s an old instance shuts down before its replacement is provisioned, 600 s of deep
    health checks, and for an EC2 instance Karpenter launches for a GPU node: 240 s from its
    launch until its kubelet registers (boot, kubelet, GPU driver and device plugin). A node
    BatchAddClusterNodes adds has its instance after 60 s and runs, joined to Kubernetes,
    after 820 s: a replacement's provisioning without the old instance's shutdown
    (940 - 120 s), for want of a published figure for an added node.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    reboot_s: float = Field(default=300.0, ge=0)
    replace_s: float = Field(default=940.0, ge=0, description="until the new node runs")
    replace_shutdown_s: float = Field(default=120.0, ge=0)
    deep_health_check_s: float = Field(default=600.0, ge=0)
    ec2_boot_s: float = Field(
        default=240.0, ge=0, description="an EC2 instance's launch until its kubelet registers"
    )
    hyperpod_launch_s: float = Field(
        default=60.0, ge=0, description="from BatchAddClusterNodes until it has an instance"
    )
    hyperpod_add_s: float = Field(
        default=820.0, ge=0, description="from BatchAddClusterNodes until the node runs"
    )
    job_restart_s: float = Field(default=60.0, ge=0, description="start/resume overhead")
    rescale_s: float = Field(
        default=60.0,
        ge=0,
        description="an elastic job restarting at a new size, its healthy pods' nodes kept",
    )
    patch_s: float = Field(
        default=900.0,
        ge=0,
        description="HyperPod's automatic patching of one instance (SystemUpdating: the root "
        "volume replaced with the new AMI, boot, lifecycle scripts), assumed",
    )
    auto_recovery_s: float = Field(
        default=120.0,
        ge=0,
        description="with NodeRecovery Automatic, from HyperPod's health agent finding a fault "
        "to HyperPod starting the node's reboot or replacement, assumed (published: detection "
        "takes 80-90 s at P90; the start of the repair after it, not)",
    )
    step_duration_s: float = Field(default=30.0, gt=0, description="one training step")
    checkpoint_interval_steps: int = Field(default=10, ge=1)

    @model_validator(mode="after")
    def _stages_in_order(self) -> Self:
        if self.replace_shutdown_s > self.replace_s:
            raise ValueError("replace_shutdown_s must not exceed replace_s")
        if self.hyperpod_launch_s > self.hyperpod_add_s:
            raise ValueError("hyperpod_launch_s must not exceed hyperpod_add_s")
        return self


@dataclass
class Instance:
    instance_id: str
    platform: Literal["hyperpod", "eks"]
    cluster: str
    group: str
    """HyperPod instance group or Karpenter NodePool."""
    instance_type: str
    """HyperPod's `ml.` name, or the EC2 name for a burst node."""
    node_name: str
    launch_time: datetime
    capacity_type: str = "OnDemand"
    logical_id: str | None = None
    nodeclaim: str | None = None
    status: NodeStatus = NodeStatus.RUNNING
    deep_health_check: str | None = None
    """InProgress, Passed or Failed: HyperPod's deep-health-check-status label."""
    patched_at: datetime | None = None
    """When HyperPod's automatic patching last updated it (LastSoftwareUpdateTime)."""
    registered: bool = False
    """Whether its kubelet has registered its Node (an instance that never boots: never)."""
    repair: Literal["reboot", "replace"] | None = None
    """The repair HyperPod (or EC2, a reboot) has in progress on it."""
    boots: int = 0
    """How many times it booted after its first start (its kubelet's boot id counts them)."""


@dataclass(frozen=True)
class Fault:
    kind: FaultKind
    heal_on_reboot: bool


@dataclass(frozen=True)
class Effect:
    """Work for the outside world, done after the world's lock is released.

    - "put_event": (entry,) — a PutEvents entry; `EventBusName` is "default" or "service";
    - "write_checkpoint": (location, step) — shards, then the `_COMPLETE` marker, in S3;
    - "report_checkpoint": (job_id, team, step, uri, node_step_seconds by instance id) —
      POST /jobs/{jobId}/checkpoints.
    """

    kind: Literal["put_event", "write_checkpoint", "report_checkpoint"]
    args: tuple[Any, ...]


@dataclass(order=True, frozen=True)
class Due:
    at: datetime
    seq: int
    what: str = field(compare=False)
    key: str = field(compare=False)


Handler = Callable[[str, datetime], None]


class World:
    """The state every controller shares, and the agenda they schedule on."""

    def __init__(
        self,
        clock: Clock,
        kube: KubeClient,
        *,
        effects: Callable[[Effect], None],
        hyperpod_cluster: str,
        eks_cluster: str,
        region: str,
        account: str,
        timings: SimTimings | None = None,
        seed: int = 7,
    ) -> None:
        self.clock = clock
        self.kube = kube
        self.timings = timings or SimTimings()
        self.hyperpod_cluster = hyperpod_cluster
        self.eks_cluster = eks_cluster
        self.region = region
        self.account = account
        self.effects = effects
        self.rng = random.Random(seed)
        self.lock = threading.RLock()
        self.instances: dict[str, Instance] = {}
        self.faults: dict[str, Fault] = {}
        self._issued: set[str] = set()
        self._agenda: list[Due] = []
        self._seq = 0
        self._handlers: dict[str, Handler] = {}
        self._after: list[Callable[[datetime], None]] = []
        self._horizon: list[Callable[[datetime], None]] = []
        self._settling: datetime | None = None
        self._settled_at = clock.now()
        self.touched = time.monotonic()
        """When the API server last told a controller of a change (monotonic seconds)."""
        self.held: list[Due] | None = None
        """While repairs are held (`hold`): the happenings of `holdable` kinds that came due."""
        self.holdable: frozenset[str] = frozenset()

    # ------------------------------------------------------------------ registration

    def handle(self, what: str, handler: Handler) -> None:
        """`handler(key, at)` runs when a happening `what` scheduled for `key` is due."""
        self._handlers[what] = handler

    def after_each(self, hook: Callable[[datetime], None]) -> None:
        """`hook(at)` runs after every happening, and once more when the world is settled."""
        self._after.append(hook)

    def up_to(self, hook: Callable[[datetime], None]) -> None:
        """`hook(until)` plays continuous processes (training) up to each moment the world
        is brought to, before that moment's happening."""
        self._horizon.append(hook)

    # ------------------------------------------------------------------ time

    def touch(self) -> None:
        """A watch event arrived: the cluster is still moving."""
        self.touched = time.monotonic()

    def schedule(self, now: datetime, after_s: float, what: str, key: str) -> None:
        self._seq += 1
        heapq.heappush(self._agenda, Due(now + timedelta(seconds=after_s), self._seq, what, key))

    @contextmanager
    def settled(self) -> Iterator[datetime]:
        """The world brought up to the clock's time, then held there while the caller acts.

        A call back in while settling (a controller reacting to its own change) acts at the
        moment being settled and leaves the agenda to the outer call."""
        with self.lock:
            if self._settling is not None:
                yield self._settling
                return
            now = max(self.clock.now(), self._settled_at)
            try:
                while True:
                    due = self._agenda[0].at if self._agenda and self._agenda[0].at <= now else None
                    horizon = self._settling = due or now
                    for hook in self._horizon:
                        hook(horizon)
                    if due is None:
                        break
                    happening = heapq.heappop(self._agenda)
                    if self.held is not None and happening.what in self.holdable:
                        self.held.append(happening)
                        continue
                    handler = self._handlers.get(happening.what)
                    if handler is not None:
                        handler(happening.key, happening.at)
                    for hook in self._after:
                        hook(happening.at)
                self._settled_at = self._settling = now
                yield now
                for hook in self._after:
                    hook(now)
            finally:
                self._settling = None

    def release_held(self) -> None:
        with self.lock:
            held, self.held = self.held or [], None
            now = max(self.clock.now(), self._settled_at)
            for due in held:
                self.schedule(now, 0, due.what, due.key)

    def stamp(self, when: datetime) -> str:
        """A virtual time as an API shows it: the real time at which it happens."""
        return self.clock.wall(when).strftime("%Y-%m-%dT%H:%M:%SZ")

    # ------------------------------------------------------------------ instances

    def new_instance_id(self) -> str:
        while True:
            instance_id = f"i-0{self.rng.getrandbits(64):016x}"
            if instance_id not in self._issued:
                self._issued.add(instance_id)
                return instance_id

    def reserve_instance_id(self, instance_id: str) -> None:
        """An id EC2 gave out (the emulator's): never issued again here."""
        self._issued.add(instance_id)

    def new_logical_id(self) -> str:
        return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))

    def instance(self, instance_id: str) -> Instance:
        try:
            return self.instances[instance_id]
        except KeyError:
            raise LookupError(f"no such node {instance_id} in the simulated cluster") from None

    def rebooted(self, instance_id: str) -> Instance | None:
        """A reboot ends (EC2's or HyperPod's): a fault that heals on reboot is gone, the
        instance has booted once more. None for an instance no longer there."""
        instance = self.instances.get(instance_id)
        if instance is None:
            return None
        fault = self.faults.get(instance_id)
        if fault is not None and fault.heal_on_reboot:
            del self.faults[instance_id]
        instance.repair = None
        instance.boots += 1
        return instance

    def by_node(self, node_name: str) -> Instance | None:
        return next((i for i in self.instances.values() if i.node_name == node_name), None)

    def healthy(self, instance: Instance) -> bool:
        return instance.status is NodeStatus.RUNNING and instance.instance_id not in self.faults

    def node_ready(self, node_name: str) -> bool:
        instance = self.by_node(node_name)
        return instance is not None and self.healthy(instance)


def order(instance: Instance) -> tuple[datetime, str]:
    return instance.launch_time, instance.instance_id
