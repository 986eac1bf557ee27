"""`hyperguard incidents list|show` name what an incident is about: its node, or for a stall
(D117) its job, which has no node."""

from __future__ import annotations

from io import StringIO

from rich.console import Console

from hyperguard.cli.incidents import list_rows, render_incident, subject


def stall() -> dict[str, object]:
    return {
        "incident_id": "nlp-1-run0-stalled-20261122T120000Z",
        "instance_id": "",
        "cluster": "hp",
        "kind": "job_stalled",
        "severity": "degraded",
        "repair": "none",
        "reason": "job nlp-1 of team nlp, run 0: stalled: no new checkpoint for 31 min",
        "status": "resolved",
        "resolution": "requeued",
        "opened_at": "2026-11-22T12:31:00Z",
        "first_signal_at": "2026-11-22T12:00:00Z",
        "signal_count": 0,
        "timings": {"signal_to_detected_s": 1860.0},
        "jobs": [{"job_id": "nlp-1", "strategy": "requeue", "checkpoint_step": 40}],
    }


def test_a_stall_is_about_its_job_and_a_node_fault_about_its_node() -> None:
    assert subject(stall()) == "job nlp-1"
    assert subject(stall() | {"instance_id": "i-0a"}) == "i-0a"
    assert subject({"instance_id": "i-0a", "jobs": []}) == "i-0a"
    (row,) = list_rows([stall()])
    assert (row["instance_id"], row["outcome"]) == ("job nlp-1", "requeued")


def test_a_stall_shows_its_job_not_a_node() -> None:
    console = Console(file=StringIO(), width=200)
    console.print(render_incident(stall()))
    text = console.file.getvalue()  # type: ignore[attr-defined]
    assert "job nlp-1  cluster hp" in text and "node" not in text.split("\n")[0]
    assert "the job" in text and "jobs on the node" not in text


def test_a_repair_left_to_another_system_says_which_and_what_hyperpod_reported() -> None:
    fault = stall() | {
        "instance_id": "i-0a",
        "kind": "hyperpod_node_health",
        "repaired_by": "hyperpod",
        "repair_events": ["2026-11-22T12:02:00+00:00 Warn: Automatic node recovery started"],
    }
    console = Console(file=StringIO(), width=200)
    console.print(render_incident(fault))
    text = console.file.getvalue()  # type: ignore[attr-defined]
    assert "repaired by HyperPod's automatic node recovery (HyperGuard deferred)" in text
    assert "HyperPod: 2026-11-22T12:02:00+00:00 Warn: Automatic node recovery started" in text
    console = Console(file=StringIO(), width=200)
    console.print(render_incident(fault | {"repaired_by": "karpenter", "repair_events": []}))
    assert "repaired by Karpenter's node repair" in console.file.getvalue()  # type: ignore[attr-defined]
    console = Console(file=StringIO(), width=200)
    console.print(render_incident(fault | {"repaired_by": "hyperguard"}))
    assert "deferred" not in console.file.getvalue()  # type: ignore[attr-defined]
