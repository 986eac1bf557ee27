"""The plane's ports: a port handed out stays reserved to its process, so two planes starting
at once, in one process or in two, never choose the same one before their components bind it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from hyperguard_twin.plane import processes
from hyperguard_twin.plane.processes import PlaneError, free_port


def test_a_port_handed_out_is_not_handed_out_again(monkeypatch: pytest.MonkeyPatch) -> None:
    held = free_port()
    monkeypatch.setattr(processes, "PORTS", range(held, held + 1))
    with pytest.raises(PlaneError):
        free_port()  # nothing is bound on it, yet it is taken


def test_another_process_does_not_get_a_port_this_one_holds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    held = free_port()
    other = (
        "import sys\n"
        "from hyperguard_twin.plane import processes\n"
        f"processes.PORTS = range({held}, {held + 1})\n"
        "try:\n"
        "    processes.free_port()\n"
        "except processes.PlaneError:\n"
        "    sys.exit(3)\n"
    )
    refused = subprocess.run([sys.executable, "-c", other], check=False, timeout=60)
    assert refused.returncode == 3
    # and once the other process has ended, its ports are free again: the kernel dropped them
    mine = (
        "from hyperguard_twin.plane import processes\n"
        "processes.PORTS = range(processes.free_port(), processes.PORTS.stop)\n"
        "print(processes.PORTS.start)\n"
    )
    port = int(
        subprocess.run(
            [sys.executable, "-c", mine], check=True, capture_output=True, text=True, timeout=60
        ).stdout
    )
    monkeypatch.setattr(processes, "PORTS", range(port, port + 1))
    assert free_port() == port
