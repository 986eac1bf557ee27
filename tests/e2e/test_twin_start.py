"""A twin's start: the stack deploys while the control plane starts (runtime.Twin.up), and a
start that fails half-way leaves nothing running for the next twin of the process."""

from __future__ import annotations

import os

import pytest
from tests.e2e.conftest import running_twin

from hyperguard_twin.plane import plane as plane_module
from hyperguard_twin.plane.plane import ControlPlane
from hyperguard_twin.runtime import Twin


class Injected(RuntimeError):
    pass


def test_a_plane_that_fails_to_start_stops_every_component_and_the_stack_was_deployed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """KWOK's start fails after etcd, kube-apiserver and the controllers are up, while the
    stack deploys on another thread: the error reaches the caller once the deployment has
    finished, every component the plane started is stopped, and the process's environment
    is as it was."""
    deployed: list[ControlPlane] = []
    original_deploy = Twin._deploy

    def deploy(self: Twin, plane: ControlPlane) -> object:
        made = original_deploy(self, plane)
        deployed.append(plane)  # the plane that was starting beside it
        return made

    def refused(*_: object, **__: object) -> None:
        raise Injected("kwok did not start")

    monkeypatch.setattr(Twin, "_deploy", deploy)
    monkeypatch.setattr(plane_module, "start_kwok", refused)
    endpoint_before = os.environ.get("AWS_ENDPOINT_URL")

    with pytest.raises(Injected), running_twin() as twin:
        pytest.fail(f"the twin came up: {twin}")
    (plane,) = deployed  # the deployment finished before the plane's error went on
    started = plane.processes.by_name
    assert {"etcd", "kube-apiserver", "kube-controller-manager"} <= set(started)
    assert [name for name, process in started.items() if process.alive()] == []
    assert not plane.workdir.exists()
    assert os.environ.get("AWS_ENDPOINT_URL") == endpoint_before
