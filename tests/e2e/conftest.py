"""The e2e tier runs the twin: the real template on moto, the real handlers, in-process."""

from __future__ import annotations

import re
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from tests.conftest import ROOT
from tests.e2e.iam import (
    assert_rbac_allowed_what_functions_did,
    assert_roles_allow_what_functions_did,
)

from hyperguard_twin.config import TwinConfig
from hyperguard_twin.runtime import Twin


def forwarder_counter(twin: Twin, name: str) -> float | None:
    """The twin's in-cluster forwarder's counter `hyperguard_forwarder_<name>_total`, as a
    Prometheus scrape of its pod's /metrics reads it; None while it has none."""
    with urllib.request.urlopen(
        f"http://127.0.0.1:{twin.forwarder_metrics_port}/metrics", timeout=10
    ) as answer:
        metrics = answer.read().decode()
    found = re.search(rf"^hyperguard_forwarder_{name}_total (\S+)$", metrics, re.M)
    return float(found.group(1)) if found else None


@contextmanager
def running_twin(
    *, rbac_refusals_expected: bool = False, iam_refusals_expected: bool = False, **config: Any
) -> Iterator[Twin]:
    """A twin of the repo's template on free ports (`config`: more of TwinConfig). At its
    end no AWS call of a function or the forwarder may have been refused by IAM, nor any
    Kubernetes request by RBAC (tests/e2e/iam.py; unless the tests refuse some on purpose),
    and the twin stops. moto's backends are process-global: one twin at a time; down()
    resets them."""
    # HyperGuard's own repair, unless a test asks for HyperPod's automatic node recovery
    # (AWS's default, which HyperGuard defers to: D142).
    config.setdefault("node_recovery", "None")
    running = Twin(TwinConfig(root=ROOT, port=0, api_port=0, **config))
    try:
        # Inside the try: a start that fails half-way is stopped too. moto's backends and the
        # environment are process-wide, and a twin left half up failed every later twin of
        # the worker (a CI run's cascade of set-up errors).
        running.up()
        yield running
        assert_roles_allow_what_functions_did(running, refusals_expected=iam_refusals_expected)
        if not rbac_refusals_expected:
            assert_rbac_allowed_what_functions_did(running)
    finally:
        running.down()


@pytest.fixture(scope="module")
def twin() -> Iterator[Twin]:
    with running_twin() as running:
        yield running
