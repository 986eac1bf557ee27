"""Which ClusterGateway a function talks to, chosen by settings.

`hyperpod`: the real HyperPod-on-EKS composite (SageMaker + Kubernetes API), built lazily.
`simulated`: the local twin's in-memory cluster, which the twin registers in this process.
"""

from __future__ import annotations

from hyperguard.cluster.gateway import ClusterGateway
from hyperguard.settings import Settings


class NoSimulatedClusterError(RuntimeError):
    pass


_simulated: ClusterGateway | None = None


def use_simulated(cluster: ClusterGateway | None) -> None:
    """The twin hands its simulated cluster to the in-process functions."""
    global _simulated
    _simulated = cluster


def gateway_for(settings: Settings) -> ClusterGateway:
    if settings.cluster_backend == "simulated":
        if _simulated is None:
            raise NoSimulatedClusterError(
                "CLUSTER_BACKEND=simulated needs the local twin's cluster in this process"
            )
        return _simulated
    from hyperguard.cluster.hyperpod import HyperPodAdapter
    from hyperguard.cluster.hyperpod_eks import HyperPodEksGateway
    from hyperguard.cluster.kubernetes import KubernetesAdapter

    return HyperPodEksGateway(
        HyperPodAdapter(settings.hyperpod_cluster_name),
        KubernetesAdapter(settings.eks_cluster_name),
    )
