"""What a twin is started with (`TwinConfig`), and the account it plays: its region and id,
the checkpoint bucket and the HyperPod instance type the account has before HyperGuard."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from hyperguard_twin.api_gateway import DEFAULT_PRINCIPAL
from hyperguard_twin.cloud.hyperpod_nodes import NodeRecovery
from hyperguard_twin.cluster import SimTimings
from hyperguard_twin.ids import hyperpod_cluster_arn

REGION = "us-east-1"
ACCOUNT = "123456789012"
CHECKPOINT_BUCKET = "hyperguard-twin-checkpoints"
INSTANCE_TYPE = "ml.p5.48xlarge"
TWIN_ENV = {
    "AWS_ACCESS_KEY_ID": "twin",
    "AWS_SECRET_ACCESS_KEY": "twin",
    "AWS_DEFAULT_REGION": REGION,
    "AWS_REGION": REGION,
}


class TwinError(RuntimeError):
    pass


@dataclass
class TwinConfig:
    """`port` (the AWS emulator) and `api_port` (the API): 0 means any free port."""

    root: Path
    host: str = "127.0.0.1"
    port: int = 4566
    api_port: int = 3000
    stack_name: str = "hyperguard"
    cluster_name: str = "hyperguard-twin"
    eks_cluster_name: str = "hyperguard-eks"
    hyperpod_nodes: int = 16
    burst_nodes: int = 4
    """Karpenter nodes running at start, spot for half of them (0: the NodePool is empty)."""
    time_scale: float = 60.0
    seed_jobs: bool = True
    max_concurrency: int = 4
    cache_dir: Path | None = None
    timings: SimTimings | None = None
    """The simulated cluster's own durations (None: SimTimings' defaults)."""
    node_recovery: NodeRecovery = "Automatic"
    """The HyperPod cluster's NodeRecovery, AWS's default unless told (D142): Automatic, and
    HyperPod reboots or replaces what its health agent finds faulty; None, and only
    HyperGuard repairs."""
    stack_parameters: dict[str, str] = field(default_factory=dict)
    """More of the template's parameters, as `sam deploy --parameter-overrides` sets them
    (WebhookUrl, for one)."""

    @property
    def cluster_arn(self) -> str:
        return hyperpod_cluster_arn(self.cluster_name, REGION, ACCOUNT)

    @property
    def parameters(self) -> dict[str, str]:
        return {
            "HyperPodClusterName": self.cluster_name,
            "HyperPodClusterArn": self.cluster_arn,
            "EksClusterName": self.eks_cluster_name,
            "CheckpointBucketName": CHECKPOINT_BUCKET,
            "AdminPrincipalArns": DEFAULT_PRINCIPAL,
            **self.stack_parameters,
        }
