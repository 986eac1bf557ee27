"""`hyperguard twin scenario elastic-fault --json`: one node fault under two identical
elastic jobs (min 2, max 4), one shrinking and growing back, one waiting for the repair,
measured on the simulated cluster's timeline, run the way a user runs it."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import ROOT


def test_the_elastic_fault_scenario_compares_shrinking_with_waiting() -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "hyperguard.cli.main",
            "twin",
            "scenario",
            "elastic-fault",
            "--json",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout[proc.stdout.index("{") :])
    strategies = result["strategies"]
    assert set(strategies) == {"elastic_shrink", "wait_for_repair"}
    keys = {"lost_gpu_minutes", "replicas_min_seen", "replicas_end", "checkpoint_step_kept"}
    for measured in strategies.values():
        assert keys <= set(measured)
        assert measured["replicas_end"] == 4 and measured["checkpoint_step_kept"] is True
        assert measured["job_status"] == "Running"
    shrink, wait = strategies["elastic_shrink"], strategies["wait_for_repair"]
    assert shrink["replicas_min_seen"] == 3  # kept training on the three healthy nodes
    # it trained through the repair, so it lost less; both lost GPU-time
    assert 0 < shrink["lost_gpu_minutes"] < wait["lost_gpu_minutes"]
    assert result["modelled"]["reboot_s"] == 300.0  # what the simulation was given
