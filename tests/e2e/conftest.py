"""The e2e tier runs the twin: the real template on moto, the real handlers, in-process."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
from tests.conftest import ROOT
from tests.e2e.iam import assert_roles_allow_what_functions_did

from hyperguard.twin.runtime import Twin, TwinConfig


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def twin() -> Iterator[Twin]:
    # moto's backends are process-global: one twin at a time; down() resets them.
    running = Twin(TwinConfig(root=ROOT, port=0, api_port=0))
    running.up()
    yield running
    try:
        assert_roles_allow_what_functions_did(running)
    finally:
        running.down()
