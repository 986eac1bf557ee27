"""HyperPod's node repairs (no open-source original): BatchRebootClusterNodes and
BatchReplaceClusterNodes with per-node errors, the repairs Automatic node recovery starts by
itself, and StartClusterHealthCheck's deep health checks.

A reboot takes the node down for `reboot_s` and cures a fault that heals on reboot; a
replacement shuts the old instance down, then a new instance with the same NodeLogicalId (or,
a knob of the world, a new one) boots and joins Kubernetes as a new Node; a deep health check
takes the node out of service and passes only when no fault is left.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any, Literal

from hyperguard.cluster.conventions import INSTANCE_ID_IN_USE, INSTANCE_ID_NOT_FOUND
from hyperguard.models import NodeStatus
from hyperguard_twin.cloud.core import Fault, Instance
from hyperguard_twin.cloud.hyperpod_nodes import AUTO_RECOVERY, HyperPodNodes, status_message

REBOOT_DONE, SHUTDOWN_DONE, BOOT_DONE, CHECK_DONE = (
    "reboot_done",
    "shutdown_done",
    "boot_done",
    "check_done",
)
REPAIR_ENDS = frozenset({REBOOT_DONE, SHUTDOWN_DONE, BOOT_DONE})


def _failure(node_id: str, code: str, message: str) -> dict[str, str]:
    return {"NodeId": node_id, "ErrorCode": code, "Message": f"{node_id}: {message}"}


class NodeRepairs:
    def __init__(self, nodes: HyperPodNodes) -> None:
        self.nodes = nodes
        self.world = nodes.world
        self.replaced_by: dict[str, str] = {}
        self._replacements: dict[str, str] = {}
        """A replacement in progress: the old instance id → the new one's."""
        self._never_healthy: set[str] = set()
        self._refusals: list[str] = []
        self._auto_rebooted: set[str] = set()
        self.keep_logical_ids = True
        self.on_replaced: list[Callable[[Instance, Instance], None]] = []
        """Called with (old, new) when a replacement's new instance exists."""
        for what, handler in (
            (REBOOT_DONE, self._reboot_done),
            (SHUTDOWN_DONE, self._shutdown_done),
            (BOOT_DONE, self._boot_done),
            (CHECK_DONE, self._check_done),
            (AUTO_RECOVERY, self._recover_automatically),
        ):
            self.world.handle(what, handler)
        self.world.holdable = self.world.holdable | REPAIR_ENDS

    # ------------------------------------------------------------------ the world's knobs

    def fail_next_repairs(self, error_code: str, count: int) -> None:
        self._refusals.extend([error_code] * count)

    def replacement_never_healthy(self, instance_id: str) -> None:
        self._never_healthy.add(instance_id)

    def forget(self, instance_id: str) -> None:
        """The instance was deleted: no replacement of it will come."""
        self._never_healthy.discard(instance_id)

    @contextmanager
    def held(self) -> Iterator[None]:
        """Inside, no reboot or replacement finishes; on leaving, those that were due finish
        at once. At real speed a repair takes minutes and a storm's reports reach the service
        in seconds; the twin's speed-up can make a loaded machine's ingestion the slower one,
        and this puts the two back in their real order."""
        with self.world.lock:
            self.world.held = []
        try:
            yield
        finally:
            self.world.release_held()

    # ------------------------------------------------------------------ automatic recovery

    def automatic_repair(self, instance: Instance) -> Literal["reboot", "replace"]:
        """What HyperPod's automatic recovery does to a node with a fault: a GPU fault is
        rebooted once, anything else, or a fault a reboot did not cure, replaced."""
        fault = self.world.faults.get(instance.instance_id)
        gpu = fault is not None and fault.kind == "gpu"
        return "reboot" if gpu and instance.instance_id not in self._auto_rebooted else "replace"

    def _recover_automatically(self, instance_id: str, at: datetime) -> None:
        instance = self.world.instances.get(instance_id)
        fault = self.world.faults.get(instance_id)
        if (
            instance is None
            or fault is None
            or fault.kind == "kernel"
            or instance.repair is not None
            or self.nodes.node_recovery != "Automatic"
        ):
            return  # cured, gone, or already being repaired (by whoever ordered it)
        action = self.automatic_repair(instance)
        if action == "reboot":
            self._auto_rebooted.add(instance_id)
        why = status_message(instance, fault)
        self.nodes.event(instance, at, f"Automatic node recovery started a {action}: {why}", "Warn")
        self.start(instance, action, at)

    # ------------------------------------------------------------------ repairs

    def batch_repair(
        self, action: Literal["reboot", "replace"], node_ids: list[str], now: datetime
    ) -> dict[str, Any]:
        """BatchRebootClusterNodes / BatchReplaceClusterNodes' response."""
        successful: list[str] = []
        failed: list[dict[str, str]] = []
        for node_id in node_ids:
            instance = self.world.instances.get(node_id)
            if instance is None or instance.platform != "hyperpod":
                failed.append(_failure(node_id, INSTANCE_ID_NOT_FOUND, "not in the cluster"))
            elif instance.repair is not None:
                what = f"a {instance.repair} of {node_id} is in progress"
                failed.append(_failure(node_id, INSTANCE_ID_IN_USE, what))
            elif self.nodes.joining(node_id):
                failed.append(_failure(node_id, INSTANCE_ID_IN_USE, "still joining the cluster"))
            elif self._refusals:
                failed.append(_failure(node_id, self._refusals.pop(0), "injected failure"))
            else:
                verb = "Reboot" if action == "reboot" else "Replace"
                self.nodes.event(
                    instance, now, f"Batch{verb}ClusterNodes request accepted: {action} started"
                )
                self.start(instance, action, now)
                successful.append(node_id)
        return {"Successful": successful, "Failed": failed}

    def start(
        self, instance: Instance, action: Literal["reboot", "replace"], now: datetime
    ) -> None:
        instance.repair = action
        if action == "reboot":
            instance.status = NodeStatus.PENDING
            self.world.schedule(now, self.world.timings.reboot_s, REBOOT_DONE, instance.instance_id)
        else:
            self._replacements[instance.instance_id] = self.world.new_instance_id()
            instance.status = NodeStatus.SHUTTING_DOWN
            shutdown = self.world.timings.replace_shutdown_s
            self.world.schedule(now, shutdown, SHUTDOWN_DONE, instance.instance_id)
        self.nodes.kubelets.publish(instance, now)
        self.nodes.lose(instance, now)

    def _reboot_done(self, instance_id: str, at: datetime) -> None:
        instance = self.world.rebooted(instance_id)
        if instance is None:
            return
        self.nodes.event(instance, at, "Node reboot completed")
        self.nodes.show_health(instance, at)

    def _shutdown_done(self, instance_id: str, at: datetime) -> None:
        old = self.world.instances.get(instance_id)
        new_id = self._replacements.pop(instance_id, None)
        if old is None or new_id is None:
            return
        del self.world.instances[instance_id]
        self.world.faults.pop(instance_id, None)
        self.replaced_by[instance_id] = new_id
        self.nodes.event(old, at, f"Node replaced: instance {new_id} takes its place")
        self.nodes.kubelets.deregister(old)
        logical_id = old.logical_id if self.keep_logical_ids else self.world.new_logical_id()
        new = self.nodes.new_instance(
            old.group, old.instance_type, at, logical_id, NodeStatus.PENDING, new_id
        )
        new.capacity_type = old.capacity_type
        new.repair = "replace"
        if instance_id in self._never_healthy:
            self._never_healthy.discard(instance_id)
            self.world.faults[new_id] = Fault("persistent", heal_on_reboot=False)
        remaining = self.world.timings.replace_s - self.world.timings.replace_shutdown_s
        self.world.schedule(at, remaining, BOOT_DONE, new_id)
        self.nodes.kubelets.register(new, at)
        for hook in self.on_replaced:
            hook(old, new)

    def _boot_done(self, instance_id: str, at: datetime) -> None:
        instance = self.world.instances.get(instance_id)
        if instance is None:
            return
        instance.repair = None
        self.nodes.show_health(instance, at)

    # ------------------------------------------------------------------ deep health checks

    def start_health_check(self, instance_ids: list[str], now: datetime) -> None:
        """Deep health checks on these Running nodes (StartClusterHealthCheck)."""
        for instance_id in instance_ids:
            instance = self.world.instances.get(instance_id)
            if instance is None or instance.status is not NodeStatus.RUNNING:
                continue
            instance.status = NodeStatus.DEEP_HEALTH_CHECK_IN_PROGRESS
            instance.deep_health_check = "InProgress"
            self.nodes.kubelets.publish(instance, now)
            self.nodes.lose(instance, now)
            self.world.schedule(
                now, self.world.timings.deep_health_check_s, CHECK_DONE, instance_id
            )

    def _check_done(self, instance_id: str, at: datetime) -> None:
        instance = self.world.instances.get(instance_id)
        if instance is None:
            return
        passed = instance_id not in self.world.faults
        instance.deep_health_check = "Passed" if passed else "Failed"
        self.nodes.show_health(instance, at)
