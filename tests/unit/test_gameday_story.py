"""The pure parts of the demo's story and the gameday: phases, failures drawn, idle GPUs."""

from __future__ import annotations

import json
import statistics
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from tests.unit.test_cli_views import incident as gpu_incident

from hyperguard import planning
from hyperguard_twin.cluster import Progress
from hyperguard_twin.gameday import _idle, failures, nodes_for, spares_for
from hyperguard_twin.story import PHASE_OF_STATE, Phase, phases

ROOT = Path(__file__).resolve().parents[2]
T0 = datetime(2026, 11, 22, 9, 0, tzinfo=UTC)


def test_every_state_that_takes_time_has_a_phase() -> None:
    asl = json.loads((ROOT / "statemachines" / "node_recovery.asl.json").read_text())
    timed = {name for name, s in asl["States"].items() if s["Type"] in ("Task", "Wait")}
    assert set(PHASE_OF_STATE) == timed


def _at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def _state(name: str, at_s: float, took_s: float | None) -> dict[str, object]:
    return {
        "state": name,
        "entered_at": _at(at_s).isoformat(),
        "entered_s": at_s,
        "took_s": took_s,
    }


def test_phases_join_runs_of_states_and_start_detection_at_the_first_signal() -> None:
    incident = gpu_incident("i-0a-x", opened_at=T0, first_signal_at=_at(-30))
    states = [
        _state("Diagnose", 0, 2),
        _state("RouteDiagnosis", 2, 0),  # a Choice: no phase, no time
        _state("Cordon", 2, 1),
        _state("GuardBlastRadius", 3, 1),
        _state("ProtectJobs", 4, 1),
        _state("Drain", 5, 5),
        _state("Repair", 10, 1),
        _state("WaitForRepair", 11, 60),
        _state("CheckHealth", 71, 1),
        _state("ReturnToService", 72, 1),
        _state("ResumeJobs", 73, 2),
        _state("CloseIncident", 75, 1),
        _state("Resolved", 76, None),
    ]
    assert phases(incident, states) == [
        Phase("detect", _at(-30), _at(2)),
        Phase("cordon/drain", _at(2), _at(10)),
        Phase("repair", _at(10), _at(72)),
        Phase("resume", _at(72), _at(75)),
        Phase("close", _at(75), _at(76)),
    ]


def test_failures_are_a_seeded_poisson_process_at_the_planners_rate() -> None:
    drawn = failures(256, 0.0005, 30, seed=7)
    assert drawn == failures(256, 0.0005, 30, seed=7)
    assert all(0 <= f.hour < 30 * 24 and 0 <= f.cycle < 1 for f in drawn)
    assert [f.hour for f in drawn] == sorted(f.hour for f in drawn)
    expected = planning.failures_per_hour(256, 0.0005) * 30 * 24  # 92.16
    counts = [len(failures(256, 0.0005, 30, seed=s)) for s in range(200)]
    # Poisson: mean and variance both λ; 200 draws put the mean within ±2 of it
    assert statistics.fmean(counts) == pytest.approx(expected, abs=2)
    assert statistics.variance(counts) == pytest.approx(expected, rel=0.3)


def test_idle_counts_missing_gpus_over_time() -> None:
    timeline = [
        Progress(T0, 4, 0),
        Progress(T0 + timedelta(seconds=100), 0, 10),  # the fault: all stop
        Progress(T0 + timedelta(seconds=160), 3, 8),  # shrunk to 3 of 4 replicas
        Progress(T0 + timedelta(seconds=400), 4, 20),  # full again
    ]
    start, end = T0 + timedelta(seconds=100), T0 + timedelta(seconds=400)
    # 60 s with 32 GPUs idle, then 240 s with 8 missing
    assert _idle(timeline, start, end, 32) == 60 * 32 + 240 * 8
    # a window inside one stretch takes the size in force at its start
    assert _idle(timeline, T0 + timedelta(seconds=200), T0 + timedelta(seconds=210), 32) == 80


def test_a_spare_for_each_strategy_that_may_take_one() -> None:
    assert spares_for(["auto", "hot_spare", "wait_for_repair"]) == 2
    assert nodes_for(["wait_for_repair", "elastic_shrink"]) == 4 * 2 + 0 + 1


def test_measured_and_formula_goodput_charge_the_same_failures() -> None:
    """Two failures drawn where 3.07 are expected: both goodputs charge the two drawn, so a
    measured downtime per failure worse than the formula's gives a worse measured goodput
    (it came out better while the formula charged the expected count)."""
    from hyperguard_twin.gameday import Ledger, _formula, _summary
    from hyperguard_twin.scenarios import Subject

    instances, rate, days = 256, 0.0005, 1.0
    formula = _formula("wait_for_repair")
    worse = formula * 1.3
    ledger = Ledger(
        Subject("wait_for_repair", "team-w", "job-w"),
        [{"downtime_min": worse, "without_all_resources_min": worse}] * 2,
    )
    summary = _summary(ledger, 2, days * 24 * 60, instances, rate)
    assert summary["goodput_pct"] < summary["formula_goodput_pct"]
    wall_min = days * 24 * 60
    assert summary["formula_goodput_pct"] == round(100 * (1 - 2 * formula / wall_min), 3)
    expected = planning.failures_per_hour(instances, rate) * days * 24
    assert round(expected, 2) == 3.07
    assert summary["formula_goodput_at_expected_failures_pct"] == round(
        100 * (1 - expected * formula / wall_min), 3
    )
