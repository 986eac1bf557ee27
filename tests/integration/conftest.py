"""Fixtures of the integration tier: moto in-process (tests/conftest.py) and the simulated
cluster behind real APIs (cluster_harness)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import Any

import pytest
from tests.conftest import Stack
from tests.integration.api_harness import Api
from tests.integration.cluster_harness import ClusterApis, cluster_apis, until_schedulable
from tests.integration.scheduler_harness import MakeSolo, Solo

from hyperguard_twin.cloud.hyperpod_nodes import NodeRecovery

MakeCluster = Callable[..., ClusterApis]
"""`make_cluster(hyperpod_nodes=4, burst_nodes=0, node_recovery="None")`."""


@pytest.fixture
def api(stack: Stack) -> Api:
    """One API for a test, however many examples or cases it runs, as a warm Lambda container
    keeps its resolver between invocations: a resolver made for each of schemathesis's cases
    compiled each route's request models again (pydantic), and took half of
    test_api_schema_coverage.py's CPU (BENCHMARKS.md, 2026-12-03)."""
    return Api(stack)


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


@pytest.fixture
def solo(stack: Stack, make_cluster: MakeCluster) -> MakeSolo:
    """The scheduler tests' one set-up (scheduler_harness.MakeSolo)."""

    def make(
        gpus: int | None,
        *,
        hyperpod_nodes: int = 4,
        burst_nodes: int = 0,
        api_on_cluster_clock: bool = False,
        **sharing: Any,
    ) -> Solo:
        apis = make_cluster(hyperpod_nodes=hyperpod_nodes, burst_nodes=burst_nodes)
        # A pass dispatching onto a node not yet Ready left the job's pods refused and
        # Pending (a full run of 2026-12-03: a lone job not running after its pass).
        until_schedulable(apis, apis.hyperpod)
        api = Api(stack, clock=apis.clock.now if api_on_cluster_clock else None)
        if gpus is not None:
            reply = api.quota("solo", gpus, **sharing)
            assert reply.status == 201, reply.body
        return Solo(stack, apis, api)

    return make
