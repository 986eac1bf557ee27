"""What a plane is started with: the account around the cluster, and the controller
settings the twin sets (`PlaneTimings`; why each, docs/architecture.md, "Clocks")."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from hyperguard_twin.plane.authn import Identity

NODE_MONITOR_PERIOD_S = 1
"""kube-controller-manager's `--node-monitor-period` on the twin (its default: 5 s). Its node
lifecycle controller lifts a node's `node.kubernetes.io/not-ready:NoExecute` taint only in
its node-monitor pass (`processTaintBaseEviction`, k8s.io/kubernetes v1.36.0
pkg/controller/nodelifecycle/node_lifecycle_controller.go), up to one period after the node is
Ready again. On a cluster that lag is at most 5 s against a 300 s toleration; the twin's
cluster lives 60 of its seconds in each wall second, so its pass runs every second, as
kwokctl lifts the controllers' client limits for a simulated cluster (`UNLIMITED_CLIENT`)."""

MIN_NOT_READY_TOLERATION_S = 5 * NODE_MONITOR_PERIOD_S
"""The shortest toleration the twin gives (300 / 60 at x60): several node-monitor passes, so
the pods the scheduler binds to a node just back Ready stay, as on a cluster. A toleration
scaled below kcm's wall-time lag (1 s in the tests and at x240, against passes 5 s apart)
evicted them: an elastic job grown back onto its repaired node failed when its new pod was
evicted a second after it was bound (D207)."""


@dataclass(frozen=True)
class PlaneTimings:
    """Controller settings the twin sets (real controllers run on wall time; the simulated
    cluster's durations stay data of the simulator).

    `node_monitor_grace_s`: how long kube-controller-manager waits for a node's heartbeat
    before it marks the node Unknown (its default 50 s: KWOK renews the leases, so only a
    stopped KWOK would reach it). `karpenter_batch_idle_s` / `karpenter_batch_max_s`:
    Karpenter's provisioning batch window (its defaults 1 s / 10 s)."""

    node_monitor_grace_s: int = 50
    karpenter_batch_idle_s: int = 1
    karpenter_batch_max_s: int = 10
    not_ready_toleration_s: int = 300
    """How long a pod tolerates its node being NotReady or unreachable before the taint
    manager evicts it (kube-apiserver's DefaultTolerationSeconds: 300 s); never under
    `MIN_NOT_READY_TOLERATION_S`."""

    def __post_init__(self) -> None:
        if self.not_ready_toleration_s < MIN_NOT_READY_TOLERATION_S:
            raise ValueError(
                f"not_ready_toleration_s {self.not_ready_toleration_s} is under "
                f"{MIN_NOT_READY_TOLERATION_S} s: kube-controller-manager would evict the "
                "pods bound to a node back Ready before it lifted the node's not-ready taint"
            )

    @classmethod
    def for_scale(cls, scale: float) -> PlaneTimings:
        """The defaults with the one setting that stands for a duration of the simulated
        cluster put on its clock: a NotReady node's pods are evicted after 300 simulated
        seconds (the published default), as a real cluster evicts them after 300 real ones,
        or after `MIN_NOT_READY_TOLERATION_S` where the scale would make that shorter. The
        rest stays the upstream defaults: they pace the controllers, not the cluster."""
        return cls(not_ready_toleration_s=max(MIN_NOT_READY_TOLERATION_S, round(300 / scale)))


@dataclass
class PlaneSettings:
    """What the account around the cluster gives it.

    `authenticate` maps a bearer token to an identity (None: refused), or is None for a
    plane without token authentication. `aws_env` is the environment Karpenter's cloud
    provider reaches EC2 with (the emulator's endpoint, region, credentials);
    `instance_types` the instance types it offers (its file's JSON)."""

    cluster_name: str
    authenticate: Callable[[str], Identity | None] | None = None
    aws_env: Mapping[str, str] = field(default_factory=dict)
    instance_types: list[dict[str, Any]] = field(default_factory=list)
    timings: PlaneTimings = field(default_factory=PlaneTimings)
    feature_gates: Mapping[str, Mapping[str, bool]] = field(default_factory=dict)
    """Per component (karpenter, kueue): feature gates to set, as its flag takes them."""
    api_only: bool = False
    """Only etcd and kube-apiserver, with the CRDs installed: an API server where nothing
    reconciles, for a benchmark that plays the cluster's side itself (bench/scheduler.py)."""
