"""GET /views/goodput from what the deployed service keeps: jobs moved through the real
lifecycle on moto tables (history, checkpoints, `Live` day partitions), an incident as
recovery records it (timings, the jobs it protected); every figure worked out by hand
(docs/api.md, Views: goodput)."""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from tests.conftest import Stack, catalogue
from tests.integration.api_harness import Api, member
from tests.integration.incident_harness import fault_signal

from hyperguard.cli import main as cli
from hyperguard.cli import views as views_cli
from hyperguard.governance.jobs import JobLifecycle
from hyperguard.models import JobStatus, Node, Repair
from hyperguard.models.incidents import ProtectedJob
from hyperguard_twin.clock import ManualClock

D = datetime(2025, 3, 3, tzinfo=UTC)
"""The day; the view is read at 12:00."""
NODE = "i-00000000000000001"
SPARE = "i-00000000000000002"


def at(hours: float, minutes: float = 0) -> datetime:
    return D + timedelta(hours=hours, minutes=minutes)


class Day:
    def __init__(self, stack: Stack) -> None:
        self.clock = ManualClock(D)
        self.api = Api(stack, clock=self.clock.now)
        self.life = JobLifecycle(self.api.jobs, clock=self.clock.now)

    def to(self, when: datetime) -> None:
        self.clock.advance(when - self.clock.now())

    def submit(self, team: str, gpus: int) -> str:
        reply = self.api.submit(team, gpus)
        assert reply.status == 201, reply.body
        return str(reply.body["job_id"])

    def run(self, job_id: str) -> None:
        assert self.life.admit(
            job_id, nodes=[NODE], pool="workers", replicas=1, restart=False, reason="a", fence=[]
        )
        assert self.life.start(job_id, nodes=[NODE], pool="workers")

    def record(self, job_id: str) -> Any:
        record = self.api.jobs.record(job_id)
        assert record is not None
        return record


def _incident(day: Day, job_id: str) -> str:
    """The node's fault at 05:29, as recovery records it: the incident, its milestones
    (seconds from the first signal) and the job it protected."""
    node = Node(
        instance_id=NODE,
        cluster="hyperguard-twin",
        pool="workers",
        platform="hyperpod",
        instance_type="ml.p5.48xlarge",
        accelerators=8,
    )
    day.api.nodes.upsert_inventory([node])
    signal = fault_signal(node, at(5, 29), repair=Repair.REPLACE)
    incident, _ = day.api.incidents.open_or_append(node, signal, at(5, 29))
    for milestone, seconds in (
        ("detected", 60),
        ("cordoned", 90),
        ("repair_requested", 300),
        ("healthy", 900),
        ("resumed", 960),
    ):
        day.api.incidents.mark(incident.incident_id, milestone, seconds)
    plan = ProtectedJob(job_id=job_id, team="nlp", strategy="hot_spare", nodes=[NODE])
    day.api.incidents.update(incident.incident_id, jobs=[plan])
    return incident.incident_id


def _build(stack: Stack) -> tuple[Day, dict[str, str], str]:
    """nlp's job a: 8 GPUs, submitted 00:00, runs 01:00-11:00; checkpoint at 05:00; its node
    fails, recovery restarts it on a spare at 05:30 and releases it; it succeeds at 11:00.
    vision's job b: 4 GPUs, submitted 02:00, admitted 04:00, still running at 12:00."""
    day = Day(stack)
    for team in ("nlp", "vision"):
        assert day.api.quota(team, 8).status == 201
        grant = {"principal_arn": member(team), "team": team}
        assert day.api.call("PUT", "/principals", grant).status == 200
    jobs = {"a": day.submit("nlp", 8)}
    day.to(at(1))
    day.run(jobs["a"])
    day.to(at(2))
    jobs["b"] = day.submit("vision", 4)
    day.to(at(4))
    day.run(jobs["b"])
    day.to(at(5))
    checkpoint = {"step": 500, "uri": "s3://ckpt/a/500", "completed_at": at(5).isoformat()}
    reply = day.api.call("POST", f"/jobs/{jobs['a']}/checkpoints", checkpoint)
    assert reply.status == 201, reply.body
    incident_id = _incident(day, jobs["a"])
    day.to(at(5, 30))
    assert day.life.protect(jobs["a"], incident_id=incident_id, node=NODE, strategy="hot_spare")
    run = day.record(jobs["a"]).job.run
    assert day.life.restart(
        jobs["a"], incident_id=incident_id, run=run, nodes=[SPARE], reason="on a spare"
    )
    day.to(at(5, 31))
    assert day.life.release(jobs["a"], incident_id=incident_id, reason="restarted")
    day.to(at(11))
    assert day.life.finish(day.record(jobs["a"]), JobStatus.SUCCEEDED, reason="done")
    day.to(at(12))
    return day, jobs, incident_id


def _get(day: Day, query: dict[str, str] | None = None, principal: str | None = None) -> Any:
    kwargs: dict[str, Any] = {"query": query}
    if principal is not None:
        kwargs["principal"] = principal
    reply = day.api.call("GET", "/views/goodput", **kwargs)
    assert reply.status == 200, reply.body
    return reply.body


def test_goodput_per_job_and_team_over_24_hours(stack: Stack) -> None:
    day, jobs, incident_id = _build(stack)
    body = _get(day)
    assert body["window_start"].startswith("2025-03-02T12:00:00")
    a, b = body["jobs"]
    assert (a["job_id"], a["team"], a["status"], a["gpus"]) == (jobs["a"], "nlp", "Succeeded", 8)
    # wall 00:00-11:00, holding 01:00-11:00, lost checkpoint 05:00 -> restart 05:30
    assert (a["wall_s"], a["holding_s"], a["lost_s"], a["productive_s"]) == (
        39600.0,
        36000.0,
        1800.0,
        34200.0,
    )
    assert (a["scheduling_goodput_pct"], a["runtime_goodput_pct"], a["goodput_pct"]) == (
        90.9,
        95.0,
        86.4,
    )
    assert a["faults"] == 1
    # detect 60 s, cordon/drain 240 s, repair 600 s, resume 60 s, each x 8 GPUs
    assert a["badput"] == [
        {
            "incident_id": incident_id,
            "protected_at": "2025-03-03T05:30:00Z",
            "strategy": "hot_spare",
            "detect_gpu_min": 8.0,
            "cordon_drain_gpu_min": 32.0,
            "repair_gpu_min": 80.0,
            "resume_gpu_min": 8.0,
            "total_gpu_min": 128.0,
        }
    ]
    # b: waited 02:00-04:00, then held its 4 GPUs until now
    assert (b["job_id"], b["gpus"], b["wall_s"], b["holding_s"]) == (jobs["b"], 4, 36000.0, 28800.0)
    assert (b["scheduling_goodput_pct"], b["runtime_goodput_pct"], b["goodput_pct"]) == (
        80.0,
        100.0,
        80.0,
    )
    nlp, vision = body["teams"]
    assert nlp == {
        "team": "nlp",
        "jobs": 1,
        "wall_gpu_hours": 88.0,
        "holding_gpu_hours": 80.0,
        "productive_gpu_hours": 76.0,
        "scheduling_goodput_pct": 90.9,
        "runtime_goodput_pct": 95.0,
        "goodput_pct": 86.4,
        "detect_gpu_min": 8.0,
        "cordon_drain_gpu_min": 32.0,
        "repair_gpu_min": 80.0,
        "resume_gpu_min": 8.0,
    }
    assert (vision["wall_gpu_hours"], vision["holding_gpu_hours"]) == (40.0, 32.0)


def test_a_shorter_window_starts_the_clocks_later(stack: Stack) -> None:
    day, jobs, _ = _build(stack)
    body = _get(day, {"window_hours": "6"})
    assert body["window_start"].startswith("2025-03-03T06:00:00")
    a, b = body["jobs"]
    # the fault (05:30) is before the window: nothing lost in it, no badput
    assert (a["wall_s"], a["holding_s"], a["lost_s"], a["faults"], a["badput"]) == (
        18000.0,
        18000.0,
        0.0,
        0,
        [],
    )
    assert (b["wall_s"], b["holding_s"], b["goodput_pct"]) == (21600.0, 21600.0, 100.0)
    # an hour from 11:00, when job a ended: it is in the window, with no time in it
    a, b = _get(day, {"window_hours": "1"})["jobs"]
    assert (a["job_id"], a["wall_s"], a["scheduling_goodput_pct"], a["goodput_pct"]) == (
        jobs["a"],
        0.0,
        None,
        None,
    )
    assert (b["wall_s"], b["goodput_pct"]) == (3600.0, 100.0)


def test_a_team_member_sees_only_its_team(stack: Stack) -> None:
    day, jobs, _ = _build(stack)
    body = _get(day, principal=member("vision"))
    assert [j["job_id"] for j in body["jobs"]] == [jobs["b"]]
    assert [t["team"] for t in body["teams"]] == ["vision"]


@pytest.mark.parametrize("window", ["0", "721", "-3", "1.5", "day"])
def test_the_window_is_bounded(stack: Stack, window: str) -> None:
    day = Day(stack)
    reply = day.api.call("GET", "/views/goodput", query={"window_hours": window})
    assert (reply.status, reply.body["field"]) == (422, "window_hours"), reply.body


def test_the_cli_shows_what_the_api_does(stack: Stack, capsys: pytest.CaptureFixture[str]) -> None:
    day, _, _ = _build(stack)
    deps = views_cli.Deps(
        lambda _args: (day.api.teams, day.api.jobs, day.api.nodes, catalogue()),
        clock=day.clock.now,
        incidents=lambda _args: day.api.incidents,
    )
    parser = argparse.ArgumentParser()
    views_cli.add_parsers(parser.add_subparsers(), cli.service_options, deps)
    args = parser.parse_args(["views", "goodput", "--window-hours", "24", "--json"])
    assert args.func(args) == 0
    assert json.loads(capsys.readouterr().out) == _get(day)
    args = parser.parse_args(["views", "goodput"])
    assert args.func(args) == 0
    table = capsys.readouterr().out
    assert "goodput per team" in table and "86.4" in table and "128.0" in table
