"""The views from what the deployed service keeps: jobs moved through the real lifecycle on
moto tables (history, `Live` day partitions), nodes as the inventory and recovery write
them; every figure checked against a timeline worked out by hand (docs/api.md, Views)."""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from tests.conftest import Stack, catalogue
from tests.integration.api_harness import Api

from hyperguard.cli import main as cli
from hyperguard.cli import views as views_cli
from hyperguard.governance.jobs import Actor, JobLifecycle
from hyperguard.models import JobStatus, Node
from hyperguard.store.jobs import ended_partition
from hyperguard_twin.clock import ManualClock

D = datetime(2025, 1, 6, tzinfo=UTC)
"""Today (UTC); the views are read at 10:00."""
P5 = "ml.p5.48xlarge"


def _node(n: int, launched: datetime, *, schedulable: bool = True) -> Node:
    return Node(
        instance_id=f"i-{n:017x}",
        cluster="hyperguard-twin",
        pool="workers",
        platform="hyperpod",
        instance_type=P5,
        accelerators=8,
        schedulable=schedulable,
        launch_time=launched,
    )


class Day:
    """The API and the lifecycle on one manual clock."""

    def __init__(self, stack: Stack) -> None:
        self.clock = ManualClock(D - timedelta(days=2))
        self.api = Api(stack, clock=self.clock.now)
        self.life = JobLifecycle(self.api.jobs, clock=self.clock.now)

    def at(self, when: datetime) -> None:
        self.clock.advance(when - self.clock.now())

    def submit(self, cls: str, gpus: int, replicas: int = 1) -> str:
        reply = self.api.submit("nlp", gpus, replicas=replicas, priority_class=cls)
        assert reply.status == 201, reply.body
        return str(reply.body["job_id"])

    def run(self, job_id: str, replicas: int = 1, *, restart: bool = False) -> None:
        nodes = ["i-00000000000000001"] * replicas
        admitted = self.life.admit(
            job_id,
            nodes=nodes,
            pool="workers",
            replicas=replicas,
            restart=restart,
            reason="admitted",
            fence=[],
        )
        assert admitted and self.life.start(job_id, nodes=nodes, pool="workers")

    def finish(self, job_id: str) -> None:
        record = self.api.jobs.record(job_id)
        assert record is not None
        assert self.life.finish(record, JobStatus.SUCCEEDED, reason="done")


def _build(stack: Stack) -> tuple[Day, dict[str, str]]:
    day = Day(stack)
    assert day.api.quota("nlp", 4, borrow=100).status == 201
    config = {"PriorityClasses": [{"Name": "low", "Weight": 10}, {"Name": "high", "Weight": 100}]}
    assert day.api.call("PUT", "/scheduler-config", config).status == 200
    jobs: dict[str, str] = {}
    # Yesterday: job4 waited 32 h and ended before the 24-hour window; job5 inside it.
    jobs["job4"] = day.submit("low", 8)
    day.at(D - timedelta(hours=16))
    day.run(jobs["job4"])
    day.at(D - timedelta(hours=15))
    day.finish(jobs["job4"])
    day.at(D - timedelta(hours=13))
    jobs["job5"] = day.submit("low", 8)
    day.at(D - timedelta(hours=12, minutes=30))
    day.run(jobs["job5"])
    day.at(D - timedelta(hours=12))
    day.finish(jobs["job5"])
    # job2: 2 replicas of 4 GPUs from 23:00 yesterday, shrunk to 1 at 07:00, done at 09:00.
    day.at(D - timedelta(minutes=90))
    jobs["job2"] = day.submit("low", 4, replicas=2)
    day.at(D - timedelta(hours=1))
    day.run(jobs["job2"], replicas=2)
    # job1: 8 GPUs 02:00-04:00, preempted, again from 05:00, running at 10:00.
    day.at(D + timedelta(hours=1))
    jobs["job1"] = day.submit("high", 8)
    day.at(D + timedelta(hours=2))
    day.run(jobs["job1"])
    # job3: submitted at 03:00, still pending at 10:00.
    day.at(D + timedelta(hours=3))
    jobs["job3"] = day.submit("low", 8)
    day.at(D + timedelta(hours=4))
    assert day.life.preempt(jobs["job1"], reason="for higher-priority job", fence=[])
    day.at(D + timedelta(hours=5))
    day.run(jobs["job1"], restart=True)
    day.at(D + timedelta(hours=7))
    assert day.life.resize(
        jobs["job2"], nodes=["i-00000000000000001"], by=Actor.SCHEDULER, reason="s", grown=False
    )
    day.at(D + timedelta(hours=9))
    day.finish(jobs["job2"])
    # Nodes: n1 all day; n2 from 06:00 until replaced at 08:00; n3 (cordoned) from 09:00.
    day.api.nodes.upsert_inventory(
        [
            _node(1, D - timedelta(days=2)),
            _node(2, D + timedelta(hours=6)),
            _node(3, D + timedelta(hours=9), schedulable=False),
        ]
    )
    day.api.nodes.retire("i-00000000000000002", at=D + timedelta(hours=8))
    day.at(D + timedelta(hours=10))
    return day, jobs


def _get(day: Day, path: str) -> Any:
    reply = day.api.call("GET", path)
    assert reply.status == 200, reply.body
    return reply.body


def test_an_ended_job_is_filed_under_the_day_it_ended(stack: Stack) -> None:
    day, jobs = _build(stack)
    item = day.api.jobs.table.get_item(Key={"job_id": jobs["job2"]})["Item"]
    assert item["live"] == ended_partition(D.date())
    assert {r.job.job_id for r in day.api.jobs.active()} == {jobs["job1"], jobs["job3"]}
    today = day.api.jobs.ended_since(D, day.clock.now())
    assert [r.job.job_id for r in today] == [jobs["job2"]]
    window = day.api.jobs.ended_since(D - timedelta(hours=14), day.clock.now())
    assert {r.job.job_id for r in window} == {jobs["job2"], jobs["job5"]}


def test_team_view_allocated_in_use_borrowed_utilisation(stack: Stack) -> None:
    day, _ = _build(stack)
    (nlp,) = _get(day, "/views/teams")["teams"]
    assert (nlp["allocated_gpus"], nlp["limit_gpus"]) == (4, 8)
    assert (nlp["gpus_in_use"], nlp["borrowed_gpus"], nlp["utilisation_pct"]) == (8, 4, 200.0)
    assert (nlp["running_jobs"], nlp["pending_jobs"]) == (1, 1)


def test_priority_class_view_counts_now_and_times_over_24_hours(stack: Stack) -> None:
    day, _ = _build(stack)
    body = _get(day, "/views/priority-classes")
    assert body["since"].startswith("2025-01-05T10:00:00")
    classes = {c["priority_class"]: c for c in body["priority_classes"]}
    high, low = classes["high"], classes["low"]
    assert (high["running"], high["pending"], high["preempted"]) == (1, 0, 0)
    # job1's current run started at 05:00; it waited 01:00 -> 02:00 for its first admission
    assert (high["average_run_s"], high["longest_run_s"]) == (18000.0, 18000.0)
    assert (high["average_wait_s"], high["longest_wait_s"]) == (3600.0, 3600.0)
    assert (low["running"], low["pending"], low["preempted"]) == (0, 1, 0)
    # job2 ran 23:00 -> 09:00, job5 30 min; job4 (ended before the window) is not counted
    assert (low["average_run_s"], low["longest_run_s"]) == (18900.0, 36000.0)
    # job2 and job5 waited 30 min each, job3 has waited 7 h
    assert (low["average_wait_s"], low["longest_wait_s"]) == (9600.0, 25200.0)
    assert None not in classes


def test_cluster_view_health_gpus_and_idle_gpu_hours_today(stack: Stack) -> None:
    day, _ = _build(stack)
    view = _get(day, "/views/cluster")
    assert view["instances"] == 2 and view["instances_by_status"] == {"Running": 2}
    assert view["instances_by_health"] == {
        "schedulable": 1,
        "pending_recovery": 0,
        "unschedulable": 1,
    }
    assert (view["gpus"], view["gpus_in_use"], view["idle_gpus"]) == (16, 8, 8)
    assert (view["running_jobs"], view["pending_jobs"]) == (1, 1)
    assert view["day_start"].startswith("2025-01-06T00:00:00")
    # installed: n1 8 x 10 h + n2 8 x 2 h + n3 8 x 1 h; in use: job2 8 x 7 h + 4 x 2 h,
    # job1 8 x 2 h + 8 x 5 h; idle only 07-08 (16 - 12) and 09-10 (16 - 8)
    assert view["gpu_hours_installed_today"] == 104.0
    assert view["gpu_hours_in_use_today"] == 120.0
    assert view["idle_gpu_hours_today"] == 12.0


def test_the_cli_shows_what_the_api_does(stack: Stack, capsys: pytest.CaptureFixture[str]) -> None:
    day, _ = _build(stack)
    stores = views_cli.Deps(
        lambda _args: (day.api.teams, day.api.jobs, day.api.nodes, catalogue()),
        clock=day.clock.now,
    )
    parser = argparse.ArgumentParser()
    groups = parser.add_subparsers()
    views_cli.add_parsers(groups, cli.service_options, stores)
    for command, path in (
        ("teams", "/views/teams"),
        ("classes", "/views/priority-classes"),
        ("cluster", "/views/cluster"),
    ):
        args = parser.parse_args(["views", command, "--json"])
        assert args.func(args) == 0
        assert json.loads(capsys.readouterr().out) == _get(day, path), command
    args = parser.parse_args(["views", "cluster"])
    assert args.func(args) == 0
    table = capsys.readouterr().out
    assert "idle GPU-hours today" in table and "12.0" in table
    assert "workers" in table  # the per-pool table
    args = parser.parse_args(["views", "teams"])
    assert args.func(args) == 0
    assert "200.0" in capsys.readouterr().out
