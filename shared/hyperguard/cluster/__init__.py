"""The only package that talks to SageMaker HyperPod or Kubernetes."""

from hyperguard.cluster.gateway import (
    ClusterError,
    ClusterGateway,
    DrainResult,
    NodeNotFoundError,
)

__all__ = ["ClusterError", "ClusterGateway", "DrainResult", "NodeNotFoundError"]
