"""A lightkube client on a fresh twin API server, for tests of the API server itself."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from lightkube import Client, KubeConfig
from lightkube.config.models import Cluster, User

from hyperguard.twin.kube import KubeApiServer, ObjectStore, StaticTokenAuthenticator


@contextmanager
def client_of(store: ObjectStore, user: str) -> Iterator[tuple[KubeApiServer, Client]]:
    """The server over `store`, and a client that verifies its CA and authenticates as
    `user` by a static token."""
    server = KubeApiServer(store, authenticator=StaticTokenAuthenticator({"t": user}))
    server.start()
    config = KubeConfig.from_one(
        cluster=Cluster(server=server.endpoint, certificate_auth_data=server.ca_data),
        user=User(token="t"),
    )
    client = Client(config=config, trust_env=False)
    try:
        yield server, client
    finally:
        client.close()
        server.stop()
