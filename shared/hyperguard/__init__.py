"""HyperGuard: resilience and governance for SageMaker HyperPod and EKS GPU clusters."""

__version__ = "0.1.0"
