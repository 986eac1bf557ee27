"""The ClusterGateway a function talks to: the HyperPod-on-EKS composite, built lazily (no
client connects until the first call)."""

from __future__ import annotations

from hyperguard.catalogue import InstanceCatalogue
from hyperguard.cluster.gateway import ClusterGateway
from hyperguard.cluster.hyperpod import HyperPodAdapter
from hyperguard.cluster.hyperpod_eks import HyperPodEksGateway
from hyperguard.cluster.kubernetes import KubernetesAdapter
from hyperguard.settings import Settings


def gateway_for(settings: Settings, catalogue: InstanceCatalogue) -> ClusterGateway:
    return HyperPodEksGateway(
        HyperPodAdapter(settings.hyperpod_cluster_name, catalogue=catalogue),
        KubernetesAdapter(settings.eks_cluster_name),
    )
