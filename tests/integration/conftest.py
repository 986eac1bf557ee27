"""Fixtures of the integration tier: moto in-process (tests/conftest.py) and the simulated
cluster behind real APIs (cluster_harness)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack

import pytest
from tests.conftest import Stack
from tests.integration.cluster_harness import ClusterApis, cluster_apis

from hyperguard_twin.cloud.hyperpod_nodes import NodeRecovery

MakeCluster = Callable[..., ClusterApis]
"""`make_cluster(hyperpod_nodes=4, burst_nodes=0, node_recovery="None")`."""


@pytest.fixture
def make_cluster(stack: Stack) -> Iterator[MakeCluster]:
    """`make_cluster(hyperpod_nodes=4, burst_nodes=0)`: an idle cluster (no jobs yet)."""
    with ExitStack() as contexts:

        def make(
            *, hyperpod_nodes: int = 4, burst_nodes: int = 0, node_recovery: NodeRecovery = "None"
        ) -> ClusterApis:
            return contexts.enter_context(
                cluster_apis(
                    hyperpod_nodes=hyperpod_nodes,
                    burst_nodes=burst_nodes,
                    node_recovery=node_recovery,
                )
            )

        yield make
