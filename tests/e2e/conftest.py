"""The e2e tier runs the twin: the real template on moto, the real handlers, in-process."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from tests.conftest import ROOT
from tests.e2e.iam import assert_roles_allow_what_functions_did

from hyperguard.twin.runtime import Twin, TwinConfig


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def running_twin(**config: Any) -> Iterator[Twin]:
    """A twin of the repo's template on free ports (`config`: more of TwinConfig). At its
    end every call each function made is checked against the function's role
    (tests/e2e/iam.py), and the twin stops. moto's backends are process-global: one twin
    at a time; down() resets them."""
    running = Twin(TwinConfig(root=ROOT, port=0, api_port=0, **config))
    running.up()
    try:
        yield running
        assert_roles_allow_what_functions_did(running)
    finally:
        running.down()


@pytest.fixture(scope="module")
def twin() -> Iterator[Twin]:
    with running_twin() as running:
        yield running
