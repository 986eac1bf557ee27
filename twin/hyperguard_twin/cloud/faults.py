"""A node's hardware breaking and healing: the fault kept in the shared core, the training
processes on the node crashing, and its health agents (HyperPod's, or the kubelet's for a
Karpenter node) reporting it."""

from __future__ import annotations

from datetime import datetime

from hyperguard_twin.cloud.core import Fault, FaultKind, Instance, World
from hyperguard_twin.cloud.hyperpod import HyperPod
from hyperguard_twin.cloud.kubelets import Kubelets
from hyperguard_twin.cloud.training import Training


class NodeFaults:
    def __init__(
        self, world: World, hyperpod: HyperPod, kubelets: Kubelets, training: Training
    ) -> None:
        self.world = world
        self.hyperpod = hyperpod
        self.kubelets = kubelets
        self.training = training

    def inject(self, instance_id: str, kind: FaultKind) -> None:
        """Break a node the way hardware does: the training processes on it crash (their
        pods fail), and its health agents report the fault."""
        with self.world.settled() as now:
            instance = self.world.instance(instance_id)
            self.world.faults[instance_id] = Fault(kind, heal_on_reboot=kind != "persistent")
            self._show_health(instance, now)
            self.training.gpu_failed(instance, now)
            automatic = self.hyperpod.node_recovery == "Automatic"
            self.kubelets.report_fault(instance, kind, automatic=automatic)

    def clear(self, instance_id: str) -> None:
        """The node's fault clears by itself: its health agent shows it healthy again."""
        with self.world.settled() as now:
            instance = self.world.instance(instance_id)
            self.world.faults.pop(instance_id, None)
            self._show_health(instance, now)

    def _show_health(self, instance: Instance, now: datetime) -> None:
        if instance.repair is None and not self.hyperpod.joining(instance.instance_id):
            if instance.platform == "hyperpod":
                self.hyperpod.show_health(instance, now)
            else:
                self.kubelets.publish(instance, now)
