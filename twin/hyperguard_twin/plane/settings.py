"""What a plane is started with: the account around the cluster, and the controller
settings the twin sets (`PlaneTimings`; why each, docs/architecture.md, "Clocks")."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from hyperguard_twin.plane.authn import Identity


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
    manager evicts it (kube-apiserver's DefaultTolerationSeconds: 300 s)."""

    @classmethod
    def for_scale(cls, scale: float) -> PlaneTimings:
        """The defaults with the one setting that stands for a duration of the simulated
        cluster put on its clock: a NotReady node's pods are evicted after 300 simulated
        seconds (the published default), as a real cluster evicts them after 300 real ones.
        The rest stays the upstream defaults: they pace the controllers, not the cluster."""
        return cls(not_ready_toleration_s=max(1, round(300 / scale)))


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
