"""The twin's Kubernetes: upstream etcd, kube-apiserver, kube-controller-manager,
kube-scheduler, KWOK (the nodes' kubelets), Kueue and Karpenter (with the twin's AWS cloud
provider), each its own process on 127.0.0.1, started in the order a cluster comes up.

kube-apiserver serves TLS with the RBAC authorizer on. Callers authenticate as on EKS: the
service's functions with EKS bearer tokens, which kube-apiserver sends to the twin's token
authenticator (a TokenReview webhook, `authn.py`) that maps each IAM role to the user and
groups of its EKS access entry; the twin's own components with client certificates (kcm
and the scheduler as the identities kubeadm gives them, the others in system:masters, as
an add-on's operator would run them).

Each component's command line is in the module of its part (`apiserver`, `controllers`,
`addons`); what the controllers' flags set for the twin, and why, is in `PlaneTimings`
(`settings`) and in docs/architecture.md ("Clocks").
"""

from __future__ import annotations

import base64
import time
from collections.abc import Mapping
from functools import partial
from pathlib import Path
from typing import Any

from hyperguard_twin.plane import addons, audit, bootstrap
from hyperguard_twin.plane.apiserver import start_apiserver, start_authenticator, start_etcd
from hyperguard_twin.plane.authn import TokenReviewServer
from hyperguard_twin.plane.components import Built
from hyperguard_twin.plane.controllers import start_controllers, start_kwok
from hyperguard_twin.plane.kube import KubeClient, wait_for
from hyperguard_twin.plane.kubeconfig import Kubeconfigs
from hyperguard_twin.plane.pki import ClusterPki, KeyPair
from hyperguard_twin.plane.processes import (
    HOST,
    PlaneError,
    Processes,
    free_port,
    http_ok,
    new_workdir,
    port_open,
    remove_workdir,
)
from hyperguard_twin.plane.settings import PlaneSettings


class ControlPlane:
    """Start with `start()`, stop with `stop()`. `client()` reaches the API server as the
    twin's own controllers do (a client certificate in system:masters)."""

    def __init__(self, built: Mapping[str, Built], settings: PlaneSettings) -> None:
        # Kueue's and Karpenter's CRDs come from their modules even when they do not run.
        needed = {"kube", "etcd", "kueue", "karpenter"}
        if not settings.api_only:
            needed.add("kwok")
        missing = needed - set(built)
        if missing:
            raise PlaneError(f"components not built: {', '.join(sorted(missing))}")
        self.built = dict(built)
        self.settings = settings
        self.workdir = new_workdir()
        self.pki = ClusterPki(self.workdir / "pki")
        self.port = free_port()
        self.kubelet_port = free_port()
        """KWOK's kubelet API, every node's (kubeletEndpoint)."""
        self.logs_dir = self.workdir / "pod-logs"
        """The simulated containers' log files, in the CRI log format KWOK reads."""
        self.endpoint = f"https://{HOST}:{self.port}"
        self.audit_log = self.workdir / "audit.log"
        self.processes = Processes(self.workdir)
        self.kubeconfigs = Kubeconfigs(self.workdir, self.endpoint, self.pki)
        self._authn: TokenReviewServer | None = None
        self._clients: list[KubeClient] = []
        self._admin_pair: KeyPair | None = None

    # ------------------------------------------------------------------ identity

    @property
    def ca_data(self) -> str:
        """The CA as EKS's DescribeCluster gives it: base64 of the PEM."""
        return base64.b64encode(self.pki.ca_pem).decode()

    def client(self) -> KubeClient:
        assert self._admin_pair is not None, "the plane is not started"
        client = KubeClient(self.endpoint, self.pki.ca, identity=self._admin_pair)
        self._clients.append(client)
        return client

    def token_client(self, token: str) -> KubeClient:
        client = KubeClient(self.endpoint, self.pki.ca, token=token)
        self._clients.append(client)
        return client

    def kubeconfig(
        self, name: str, *, identity: KeyPair | None = None, token: str | None = None
    ) -> Path:
        """A kubeconfig file for one identity (a client certificate or a bearer token)."""
        return self.kubeconfigs.write(name, identity=identity, token=token)

    def requests(self) -> list[dict[str, Any]]:
        """The requests the API server answered for callers outside the control plane, in
        order (`audit.requests`)."""
        return audit.requests(self.audit_log)

    # ------------------------------------------------------------------ start, stop

    def start(self, timeout_s: float = 180.0, *, settle: bool = True) -> None:
        """Start every component and wait until each answers. `settle=False` returns before
        kube-controller-manager has made its first service accounts (about 5 s on this
        machine): the caller does what needs no controller meanwhile, then `settle()`."""
        deadline = time.monotonic() + timeout_s
        try:
            self._start(deadline)
            if settle:
                self.settle(max(1.0, deadline - time.monotonic()))
        except BaseException:
            self.stop()
            raise

    def settle(self, timeout_s: float = 180.0) -> None:
        """Until kube-controller-manager runs its controllers (the service-account controller
        has made `default` in `default`): before any pod is created, which a namespace
        without its service account refuses. An API-only plane runs no controller. A plane
        that does not settle is left running: its owner stops it."""
        if self.settings.api_only:
            return
        admin = self.client()
        wait_for(
            lambda: admin.get(bootstrap.SERVICE_ACCOUNTS, "default", "default"),
            timeout_s,
            "kube-controller-manager made no service accounts",
        )
        self.processes.check_alive()

    def _start(self, deadline: float) -> None:
        def remaining() -> float:
            return max(1.0, deadline - time.monotonic())

        self._admin_pair = self.pki.client("admin", "hyperguard-twin", "system:masters")
        etcd_port = start_etcd(self.processes, self.built["etcd"])
        wait_for(partial(port_open, etcd_port), remaining(), "etcd did not listen")
        webhook = None
        if self.settings.authenticate is not None:
            self._authn, webhook = start_authenticator(
                self.settings.authenticate, self.pki, self.workdir
            )
        accounts = start_apiserver(
            self.processes,
            self.built["kube"],
            self.pki,
            port=self.port,
            etcd_port=etcd_port,
            webhook=webhook,
            audit_log=self.audit_log,
            not_ready_toleration_s=self.settings.timings.not_ready_toleration_s,
        )
        admin = self.client()
        wait_for(admin.ready, remaining(), "kube-apiserver was not ready", interval_s=0.2)
        self.processes.check_alive()
        # The CRDs before the controllers: kube-controller-manager's garbage collector
        # discovers the resources it watches at its start and again only every 30 s, and
        # until then the pods of a deleted HyperPodPyTorchJob (or of any custom owner) stay,
        # as they never would on a cluster whose CRDs were installed long before.
        bootstrap.install_crds(admin, self.built, remaining())
        if self.settings.api_only:
            return
        start_controllers(
            self.processes,
            self.built["kube"],
            self.kubeconfigs,
            service_account_key=accounts.key,
            node_monitor_grace_s=self.settings.timings.node_monitor_grace_s,
        )
        start_kwok(self.processes, self.built["kwok"], self.kubeconfigs, self.kubelet_port)
        kueue_port, kueue_probe = addons.start_kueue(
            self.processes,
            self.built["kueue"],
            self.kubeconfigs,
            self.settings.feature_gates.get("kueue", {}),
        )
        bootstrap.install_kueue_webhooks(admin, self.built["kueue"], kueue_port, self.pki.ca_pem)
        karpenter_probe = addons.start_karpenter(
            self.processes, self.built["karpenter"], self.kubeconfigs, self.settings
        )
        for name, probe in (("kueue", kueue_probe), ("karpenter", karpenter_probe)):
            wait_for(partial(http_ok, probe), remaining(), f"{name} was not ready")
        gates = addons.karpenter_gates(self.settings)
        admin.apply(bootstrap.karpenter_deployment(gates), bootstrap.FIELD_MANAGER)
        self.processes.check_alive()

    def stop(self) -> None:
        for client in self._clients:
            client.close()
        self._clients.clear()
        self.processes.stop()
        if self._authn is not None:
            self._authn.stop()
            self._authn = None  # a second stop (the owner's, after a failed start) is a no-op
        remove_workdir(self.workdir)

    # ------------------------------------------------------------------ status

    def components(self) -> list[dict[str, Any]]:
        """Each upstream component as `hyperguard twin status` shows it."""
        out = []
        for name, process in self.processes.by_name.items():
            built = next(b for b in self.built.values() if name in b.component.runs_as)
            out.append(
                {
                    "name": name,
                    "version": built.version,
                    "module": built.component.module,
                    "emulated": False,
                    "running": process.alive(),
                    "rss_bytes": process.rss_bytes(),
                }
            )
        return out
