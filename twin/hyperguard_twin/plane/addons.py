"""The add-ons an EKS cluster with HyperPod task governance and Karpenter runs: Kueue (its
webhooks served on 127.0.0.1) and Karpenter's core with the twin's AWS cloud provider, each
in system:masters as an add-on's operator would run it."""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping

import yaml

from hyperguard_twin.plane import bootstrap
from hyperguard_twin.plane.components import Built
from hyperguard_twin.plane.kubeconfig import Kubeconfigs
from hyperguard_twin.plane.processes import HOST, Processes, free_port
from hyperguard_twin.plane.settings import PlaneSettings


def start_kueue(
    processes: Processes, kueue: Built, kubeconfigs: Kubeconfigs, gates: Mapping[str, bool]
) -> tuple[int, str]:
    """Start Kueue with `gates` over its defaults here; its webhook port and readiness URL."""
    port, probe = free_port(), free_port()
    serving = kubeconfigs.pki.serving("kueue-webhook", HOST, "localhost")
    certs = processes.workdir / "kueue-certs"
    certs.mkdir()
    shutil.copyfile(serving.cert, certs / "tls.crt")
    shutil.copyfile(serving.key, certs / "tls.key")
    config = processes.workdir / "kueue.yaml"
    config.write_text(yaml.safe_dump(bootstrap.kueue_configuration(port, probe, certs)))
    kubeconfig = kubeconfigs.signed("kueue", "kueue", "system:masters")
    processes.spawn(
        "kueue",
        kueue.binary,
        [
            f"--config={config}",
            f"--feature-gates={_gates_flag({'VisibilityOnDemand': False, **gates})}",
            "--zap-log-level=info",
        ],
        env={"KUBECONFIG": str(kubeconfig), "KUEUE_METRICS_CERT_DIR": str(certs)},
    )
    return port, f"http://{HOST}:{probe}/readyz"


def karpenter_gates(settings: PlaneSettings) -> str:
    """The feature gates Karpenter runs with, as its flag takes them."""
    return _gates_flag({"NodeRepair": False, **settings.feature_gates.get("karpenter", {})})


def start_karpenter(
    processes: Processes, karpenter: Built, kubeconfigs: Kubeconfigs, settings: PlaneSettings
) -> str:
    """Start Karpenter; its readiness URL."""
    types = processes.workdir / "instance-types.json"
    types.write_text(json.dumps(settings.instance_types))
    kubeconfig = kubeconfigs.signed("karpenter", "karpenter", "system:masters")
    probe, metrics = free_port(), free_port()
    processes.spawn(
        "karpenter",
        karpenter.binary,
        [
            "--disable-leader-election",
            f"--health-probe-port={probe}",
            f"--metrics-port={metrics}",
            f"--batch-idle-duration={settings.timings.karpenter_batch_idle_s}s",
            f"--batch-max-duration={settings.timings.karpenter_batch_max_s}s",
            f"--feature-gates={karpenter_gates(settings)}",
            "--log-level=info",
        ],
        env={
            "KUBECONFIG": str(kubeconfig),
            "CLUSTER_NAME": settings.cluster_name,
            "TWIN_INSTANCE_TYPES_FILE": str(types),
            "SYSTEM_NAMESPACE": "kube-system",
            **settings.aws_env,
        },
    )
    return f"http://{HOST}:{probe}/readyz"


def _gates_flag(gates: Mapping[str, bool]) -> str:
    return ",".join(f"{k}={'true' if v else 'false'}" for k, v in sorted(gates.items()))
