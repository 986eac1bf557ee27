"""HyperPod's automatic patching (no open-source original): an instance group's
AutoPatchConfig as UpdateCluster sets it, and the patching that runs at its NextPatchDate
with its ClusterPatchingStrategy (botocore's sagemaker model; the strategies' documentation):
every strategy cordons the group first; WhenIdle patches each instance once it is idle,
WhenAllIdle all of them once all are, DrainFirst a batch of MaximumBatchSize at a time, its
pods evicted. Past IdleWaitWindowInSeconds the instances still busy are uncordoned and keep
the old AMI. An instance being patched is SystemUpdating for `patch_s`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from hyperguard.models import NodeStatus
from hyperguard_twin.cloud.core import Instance, World
from hyperguard_twin.cloud.hyperpod import HyperPod
from hyperguard_twin.plane.kube import NODES, PODS, KubeApiError

PATCHING_STRATEGIES = ("WhenIdle", "WhenAllIdle", "DrainFirst")
"""ClusterPatchingStrategy (botocore's sagemaker model)."""
PATCH_POLL_S = 60.0
"""How often automatic patching looks for instances that became idle (assumed)."""
PATCH_START, PATCH_CHECK, PATCH_DONE = "patch_start", "patch_check", "patch_done"


@dataclass
class Patch:
    """An instance group's AutoPatchConfig, and the patching that runs at its NextPatchDate:
    `waiting` instances not patched yet, `updating` those being patched now."""

    at: datetime
    strategy: str
    idle_wait_s: float
    batch: int
    status: str | None = None
    waiting: set[str] = field(default_factory=set)
    updating: set[str] = field(default_factory=set)


class Patching:
    def __init__(self, world: World, hyperpod: HyperPod) -> None:
        self.world = world
        self.hyperpod = hyperpod
        self.patches: dict[str, Patch] = {}
        world.handle(PATCH_START, self._start)
        world.handle(PATCH_CHECK, self._round)
        world.handle(PATCH_DONE, self._patched)
        hyperpod.views.group_extras.append(self.details)

    def schedule(
        self, group: str, at: datetime, strategy: str, idle_wait_s: float, batch: int, now: datetime
    ) -> None:
        if strategy not in PATCHING_STRATEGIES:
            raise ValueError(f"PatchingStrategy must be one of {', '.join(PATCHING_STRATEGIES)}")
        if group not in self.hyperpod.nodes.groups:
            raise ValueError(f"no instance group {group}")
        if at <= now:
            raise ValueError("NextPatchDate must be in the future")
        self.patches[group] = Patch(at, strategy, idle_wait_s, max(1, batch))
        self.world.schedule(now, (at - now).total_seconds(), PATCH_START, group)

    def details(self, group: str) -> dict[str, Any]:
        """ClusterAutoPatchConfigDetails while a patch is scheduled or runs (a one-off date:
        once done, no next one), and SoftwareUpdateStatus once it started."""
        patch = self.patches.get(group)
        if patch is None:
            return {}
        details: dict[str, Any] = {}
        if patch.status in (None, "InProgress"):
            details["AutoPatchConfig"] = {
                "PatchingStrategy": patch.strategy,
                "CurrentPatchSchedule": {"NextPatchDate": self.world.clock.wall(patch.at)},
                "IdleWaitWindowInSeconds": int(patch.idle_wait_s),
                "DeploymentConfig": {
                    "RollingUpdatePolicy": {
                        "MaximumBatchSize": {"Type": "INSTANCE_COUNT", "Value": patch.batch}
                    }
                },
            }
        if patch.status is not None:
            details["SoftwareUpdateStatus"] = patch.status
        return details

    def _start(self, group: str, now: datetime) -> None:
        patch = self.patches[group]
        patch.status = "InProgress"
        patch.waiting = {
            i.instance_id
            for i in self.world.instances.values()
            if i.platform == "hyperpod" and i.group == group
        }
        for instance_id in patch.waiting:
            self._cordon(self.world.instances[instance_id], cordon=True)
        self._round(group, now)

    def _round(self, group: str, now: datetime) -> None:
        patch = self.patches[group]
        patch.waiting &= self.world.instances.keys()
        idle = {i for i in patch.waiting if self._idle(self.world.instances[i])}
        if patch.strategy == "WhenIdle":
            chosen = idle
        elif patch.strategy == "WhenAllIdle":
            chosen = set(patch.waiting) if idle == patch.waiting else set()
        else:
            chosen = set(sorted(patch.waiting)[: max(0, patch.batch - len(patch.updating))])
        for instance_id in sorted(chosen):
            instance = self.world.instances[instance_id]
            if patch.strategy == "DrainFirst":
                self._drain(instance)
            patch.waiting.discard(instance_id)
            patch.updating.add(instance_id)
            instance.status = NodeStatus.SYSTEM_UPDATING
            self.hyperpod.nodes.kubelets.publish(instance, now)
            self.world.schedule(now, self.world.timings.patch_s, PATCH_DONE, instance_id)
        if patch.strategy != "DrainFirst" and now >= patch.at + timedelta(
            seconds=patch.idle_wait_s
        ):
            for instance_id in sorted(patch.waiting):
                self._cordon(self.world.instances[instance_id], cordon=False)
            patch.waiting.clear()
        if patch.waiting and patch.strategy != "DrainFirst":
            self.world.schedule(now, PATCH_POLL_S, PATCH_CHECK, group)
        elif not patch.waiting and not patch.updating:
            patch.status = "Succeeded"

    def _patched(self, instance_id: str, now: datetime) -> None:
        instance = self.world.instances.get(instance_id)
        if instance is None:
            return
        patch = self.patches[instance.group]
        patch.updating.discard(instance_id)
        instance.patched_at = now
        instance.boots += 1
        self.hyperpod.show_health(instance, now)
        self._cordon(instance, cordon=False)
        self._round(instance.group, now)

    def _pods_on(self, instance: Instance) -> list[dict[str, Any]]:
        return self.world.kube.list_objects(
            PODS, field_selector=f"spec.nodeName={instance.node_name}"
        )

    def _idle(self, instance: Instance) -> bool:
        """No running job: no active pod bound to the node."""
        active = [
            p
            for p in self._pods_on(instance)
            if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        ]
        return instance.status is NodeStatus.RUNNING and not active

    def _drain(self, instance: Instance) -> None:
        """DrainFirst: HyperPod evicts the instance's pods before it patches it."""
        for pod in self._pods_on(instance):
            meta = pod["metadata"]
            eviction = {
                "apiVersion": "policy/v1",
                "kind": "Eviction",
                "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
            }
            try:
                self.world.kube.request(
                    "POST", PODS.path(meta["namespace"], meta["name"], "eviction"), eviction
                )
            except KubeApiError as error:
                if error.code not in (404, 429):
                    raise

    def _cordon(self, instance: Instance, *, cordon: bool) -> None:
        if instance.registered:
            self.world.kube.patch(NODES, instance.node_name, {"spec": {"unschedulable": cordon}})
