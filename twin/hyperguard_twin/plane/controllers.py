"""The cluster's own controllers: kube-controller-manager and kube-scheduler with the
identities kubeadm gives them, and KWOK, which plays the nodes' kubelets."""

from __future__ import annotations

from pathlib import Path

from hyperguard_twin.plane import bootstrap
from hyperguard_twin.plane.components import Built
from hyperguard_twin.plane.kubeconfig import Kubeconfigs
from hyperguard_twin.plane.processes import HOST, Processes
from hyperguard_twin.plane.settings import NODE_MONITOR_PERIOD_S

STAGES = Path(__file__).with_name("stages.yaml")
UNLIMITED_CLIENT = ("--kube-api-qps=5000", "--kube-api-burst=10000")
"""kube-controller-manager's and kube-scheduler's own client, unthrottled as kwokctl's
`disableQPSLimits` sets them for a simulated cluster (sigs.k8s.io/kwok v0.8.0,
pkg/kwokctl/components, its `DefaultUnlimitedQPS`/`Burst`). Their defaults (20/30 and 50/100
requests a second) pace a controller in wall seconds, while the twin's cluster lives 60 of
its seconds in each: kube-controller-manager's node controller lifted the `not-ready` taint of
a test's 16 new nodes over 0.6-2.1 s, and a plane took 13 s to settle instead of 7. Kueue
(300/500) and Karpenter (200/300) keep their defaults."""


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
            f"--node-monitor-period={NODE_MONITOR_PERIOD_S}s",
            *UNLIMITED_CLIENT,
        ],
    )
    scheduler = kubeconfigs.signed("kube-scheduler", "system:kube-scheduler")
    processes.spawn(
        "kube-scheduler",
        kube.binary,
        [
            "kube-scheduler",
            f"--kubeconfig={scheduler}",
            "--leader-elect=false",
            "--secure-port=0",
            *UNLIMITED_CLIENT,
        ],
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
