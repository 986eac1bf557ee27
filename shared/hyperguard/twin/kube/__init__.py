"""An in-memory Kubernetes API server over HTTPS: the twin's stand-in for an EKS cluster's."""

from hyperguard.twin.kube.auth import (
    Authenticator,
    EksTokenAuthenticator,
    StaticTokenAuthenticator,
)
from hyperguard.twin.kube.server import KubeApiServer
from hyperguard.twin.kube.store import (
    EVENTS,
    HYPERPOD_PYTORCH_JOBS,
    JOBS,
    NAMESPACES,
    NODECLAIMS,
    NODEPOOLS,
    NODES,
    PDBS,
    PODS,
    RESOURCES,
    KubeError,
    ObjectStore,
    ResourceType,
    resource_for,
)
from hyperguard.twin.kube.tls import generate_certificates

__all__ = [
    "EVENTS",
    "HYPERPOD_PYTORCH_JOBS",
    "JOBS",
    "NAMESPACES",
    "NODECLAIMS",
    "NODEPOOLS",
    "NODES",
    "PDBS",
    "PODS",
    "RESOURCES",
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
