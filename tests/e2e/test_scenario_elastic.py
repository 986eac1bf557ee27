"""`twin scenario elastic-fault`: one node fault under two identical elastic jobs, one
shrinking and growing back, one waiting for the repair."""

from __future__ import annotations

from tests.e2e.scenario_cli import run_cli


def test_the_elastic_fault_scenario_compares_shrinking_with_waiting() -> None:
    result = run_cli("twin", "scenario", "elastic-fault")
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
