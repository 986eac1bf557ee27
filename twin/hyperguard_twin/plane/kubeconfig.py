"""Kubeconfig files: one per identity that reaches the plane's API server, and the one
kube-apiserver reaches the token authenticator with."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from hyperguard_twin.plane.pki import ClusterPki, KeyPair


class Kubeconfigs:
    """The kubeconfigs of the plane's identities, written in `folder`."""

    def __init__(self, folder: Path, server: str, pki: ClusterPki) -> None:
        self.folder = folder
        self.server = server
        self.pki = pki

    def write(
        self, name: str, *, identity: KeyPair | None = None, token: str | None = None
    ) -> Path:
        """A kubeconfig file for one identity (a client certificate or a bearer token)."""
        user: dict[str, str] = {}
        if identity is not None:
            user = {"client-certificate": str(identity.cert), "client-key": str(identity.key)}
        elif token is not None:
            user = {"token": token}
        path = self.folder / f"{name}.kubeconfig"
        cluster = {"server": self.server, "certificate-authority": str(self.pki.ca)}
        path.write_text(yaml.safe_dump(kubeconfig_document("twin", cluster, name, user, name)))
        path.chmod(0o600)
        return path

    def signed(self, name: str, user: str, *groups: str) -> Path:
        """A kubeconfig with a new client certificate for `user` in `groups`."""
        return self.write(name, identity=self.pki.client(name, user, *groups))


def write_webhook_config(path: Path, server: str, ca: Path) -> Path:
    """kube-apiserver's kubeconfig for the token authenticator at `server`."""
    cluster = {"server": server, "certificate-authority": str(ca)}
    config = kubeconfig_document(
        "eks-token-authenticator", cluster, "kube-apiserver", {}, "webhook"
    )
    path.write_text(yaml.safe_dump(config))
    return path


def kubeconfig_document(
    cluster: str,
    server: dict[str, str],
    user: str,
    credentials: dict[str, str],
    context: str,
) -> dict[str, Any]:
    """A kubeconfig with one cluster (`server`: its server and CA entries), one user and the
    context joining them."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": cluster, "cluster": server}],
        "users": [{"name": user, "user": credentials}],
        "contexts": [{"name": context, "context": {"cluster": cluster, "user": user}}],
        "current-context": context,
    }
