"""The cluster's own controllers: kube-controller-manager and kube-scheduler with the
identities kubeadm gives them, and KWOK, which plays the nodes' kubelets."""

from __future__ import annotations

from pathlib import Path

from hyperguard_twin.plane import bootstrap
from hyperguard_twin.plane.components import Built
from hyperguard_twin.plane.kubeconfig import Kubeconfigs
from hyperguard_twin.plane.processes import HOST, Processes

STAGES = Path(__file__).with_name("stages.yaml")


def start_controllers(
    processes: Processes,
    kube: Built,
    kubeconfigs: Kubeconfigs,
    *,
    service_account_key: Path,
    node_monitor_grace_s: int,
) -> None:
    """Start kube-controller-manager and kube-scheduler."""
    kcm = kubeconfigs.signed("kube-controller-manager", "system:kube-controller-manager")
    processes.spawn(
        "kube-controller-manager",
        kube.binary,
        [
            "kube-controller-manager",
            f"--kubeconfig={kcm}",
            "--leader-elect=false",
            "--use-service-account-credentials=true",
            f"--service-account-private-key-file={service_account_key}",
            f"--root-ca-file={kubeconfigs.pki.ca}",
            "--secure-port=0",
            "--controllers=*",
            f"--node-monitor-grace-period={node_monitor_grace_s}s",
        ],
    )
    scheduler = kubeconfigs.signed("kube-scheduler", "system:kube-scheduler")
    processes.spawn(
        "kube-scheduler",
        kube.binary,
        ["kube-scheduler", f"--kubeconfig={scheduler}", "--leader-elect=false", "--secure-port=0"],
    )


def start_kwok(
    processes: Processes, kwok: Built, kubeconfigs: Kubeconfigs, kubelet_port: int
) -> None:
    """Start KWOK: the heartbeats and pods of the nodes annotated for it, and their kubelet
    API on `kubelet_port`."""
    config = processes.workdir / "kwok.yaml"
    config.write_text(STAGES.read_text())
    kubeconfig = kubeconfigs.signed("kwok", "kwok", "system:masters")
    # The nodes' kubelet API (containerLogs: `kubectl logs`, the pods/log subresource) is
    # KWOK's server, over TLS with a certificate kube-apiserver checks; every node's
    # InternalIP and kubelet port point at it.
    kubelet = kubeconfigs.pki.serving("kwok-kubelet", HOST)
    processes.spawn(
        "kwok",
        kwok.binary,
        [
            f"--kubeconfig={kubeconfig}",
            f"--config={config}",
            "--manage-all-nodes=false",
            f"--manage-nodes-with-annotation-selector={bootstrap.KWOK_ANNOTATION}=fake",
            "--node-lease-duration-seconds=40",
            "--cidr=10.0.0.0/16",
            f"--node-ip={HOST}",
            f"--node-port={kubelet_port}",
            f"--server-address={HOST}:{kubelet_port}",
            f"--tls-cert-file={kubelet.cert}",
            f"--tls-private-key-file={kubelet.key}",
            "--enable-crds=Logs",
        ],
    )
