"""An in-memory Kubernetes API server over HTTPS: the twin's stand-in for an EKS cluster's."""

from hyperguard.twin.kube.auth import (
    Authenticator,
    EksTokenAuthenticator,
    StaticTokenAuthenticator,
)
from hyperguard.twin.kube.server import KubeApiServer
from hyperguard.twin.kube.store import (
    CLUSTER_QUEUES,
    EVENTS,
    HYPERPOD_PYTORCH_JOBS,
    JOBS,
    LOCAL_QUEUES,
    NAMESPACES,
    NODECLAIMS,
    NODEPOOLS,
    NODES,
    PDBS,
    PODS,
    RESOURCE_FLAVORS,
    RESOURCES,
    WORKLOAD_PRIORITY_CLASSES,
    WORKLOADS,
    KubeError,
    ObjectStore,
    ResourceType,
    resource_for,
)
from hyperguard.twin.kube.tls import generate_certificates

__all__ = [
    "CLUSTER_QUEUES",
    "EVENTS",
    "HYPERPOD_PYTORCH_JOBS",
    "JOBS",
    "LOCAL_QUEUES",
    "NAMESPACES",
    "NODECLAIMS",
    "NODEPOOLS",
    "NODES",
    "PDBS",
    "PODS",
    "RESOURCES",
    "RESOURCE_FLAVORS",
    "WORKLOADS",
    "WORKLOAD_PRIORITY_CLASSES",
    "Authenticator",
    "EksTokenAuthenticator",
    "KubeApiServer",
    "KubeError",
    "ObjectStore",
    "ResourceType",
    "StaticTokenAuthenticator",
    "generate_certificates",
    "resource_for",
]
