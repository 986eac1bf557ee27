"""etcd and kube-apiserver: TLS from the twin's CA, the RBAC and Node authorizers, bearer
tokens checked by the twin's token authenticator as EKS checks them, and an audit log of
every request from outside the control plane."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from hyperguard_twin.plane import audit
from hyperguard_twin.plane.authn import Identity, TokenReviewServer
from hyperguard_twin.plane.components import Built
from hyperguard_twin.plane.kubeconfig import write_webhook_config
from hyperguard_twin.plane.pki import APISERVER_NAMES, SERVICE_IP, ClusterPki, KeyPair
from hyperguard_twin.plane.processes import HOST, Processes, free_port

SERVICE_RANGE = "10.96.0.0/16"


def start_etcd(processes: Processes, etcd: Built) -> int:
    """Start etcd; the port it serves its clients on."""
    port, peer = free_port(), free_port()
    processes.spawn(
        "etcd",
        etcd.binary,
        [
            "--name=twin",
            f"--data-dir={processes.workdir / 'etcd'}",
            f"--listen-client-urls=http://{HOST}:{port}",
            f"--advertise-client-urls=http://{HOST}:{port}",
            f"--listen-peer-urls=http://{HOST}:{peer}",
            f"--initial-advertise-peer-urls=http://{HOST}:{peer}",
            f"--initial-cluster=twin=http://{HOST}:{peer}",
            "--log-level=warn",
            "--quota-backend-bytes=2147483648",
            "--unsafe-no-fsync",  # a throwaway store: nothing to keep after a crash
        ],
    )
    return port


def start_authenticator(
    authenticate: Callable[[str], Identity | None], pki: ClusterPki, workdir: Path
) -> tuple[TokenReviewServer, Path]:
    """Start the token authenticator; it and the kubeconfig kube-apiserver reaches it with."""
    server = TokenReviewServer(
        HOST, pki.serving("token-authenticator", HOST, "localhost"), authenticate
    )
    server.start()
    webhook = write_webhook_config(workdir / "authn-webhook.kubeconfig", server.url, pki.ca)
    return server, webhook


def start_apiserver(
    processes: Processes,
    kube: Built,
    pki: ClusterPki,
    *,
    port: int,
    etcd_port: int,
    webhook: Path | None,
    audit_log: Path,
    not_ready_toleration_s: int,
) -> KeyPair:
    """Start kube-apiserver on `port`; the service accounts' keys it checks tokens with.
    `webhook`: the token authenticator's kubeconfig (None: no bearer tokens)."""
    serving = pki.serving("kube-apiserver", HOST, SERVICE_IP, *APISERVER_NAMES)
    accounts = pki.service_account_keys()
    policy = audit.write_policy(processes.workdir / "audit-policy.yaml")
    args = [
        f"--etcd-servers=http://{HOST}:{etcd_port}",
        f"--bind-address={HOST}",
        f"--advertise-address={HOST}",
        f"--secure-port={port}",
        # The address is loopback: the `kubernetes` Service keeps no endpoints (nothing
        # runs inside the twin's cluster that would need them).
        "--endpoint-reconciler-type=none",
        f"--tls-cert-file={serving.cert}",
        f"--tls-private-key-file={serving.key}",
        f"--client-ca-file={pki.ca}",
        "--authorization-mode=Node,RBAC",
        "--anonymous-auth=false",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        f"--service-account-key-file={accounts.cert}",
        f"--service-account-signing-key-file={accounts.key}",
        f"--service-cluster-ip-range={SERVICE_RANGE}",
        "--allow-privileged=true",
        "--profiling=false",
        f"--default-not-ready-toleration-seconds={not_ready_toleration_s}",
        f"--default-unreachable-toleration-seconds={not_ready_toleration_s}",
        "--event-ttl=1h",
        # The kubelets are KWOK's one server (every node's InternalIP and kubelet port), whose
        # certificate the twin's CA signed.
        "--kubelet-preferred-address-types=InternalIP",
        f"--kubelet-certificate-authority={pki.ca}",
        # Who called what: every request of an identity from outside the cluster's own
        # components (HyperGuard's functions, its forwarder, a kubeconfig from `twin
        # kubeconfig`), one JSON line each (`audit.requests`).
        f"--audit-policy-file={policy}",
        f"--audit-log-path={audit_log}",
        "--audit-log-format=json",
        "--audit-log-maxsize=0",
    ]
    if webhook is not None:
        args += [
            f"--authentication-token-webhook-config-file={webhook}",
            "--authentication-token-webhook-version=v1",
            # EKS caches a token's answer; the twin's authenticator caches it too.
            "--authentication-token-webhook-cache-ttl=1m",
        ]
    processes.spawn("kube-apiserver", kube.binary, ["kube-apiserver", *args])
    return accounts
