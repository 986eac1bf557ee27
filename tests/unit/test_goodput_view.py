"""Goodput per job and team (hyperguard.api.views), every figure worked out by hand from a
job's history: wall time, time holding all its resources, work lost at faults since the
last checkpoint, and each protecting incident's badput by recovery phase."""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from tests.conftest import catalogue
from tests.unit.test_cli_views import incident as gpu_incident

from hyperguard.api import views
from hyperguard.api.models import IncidentBadput, JobGoodput
from hyperguard.cli import main as cli
from hyperguard.cli import views as views_cli
from hyperguard.models import Checkpoint, Incident, Job, JobStatus
from hyperguard.models.incidents import PHASES, ProtectedJob, incident_phases
from hyperguard.models.records import JobEvent, JobHistoryEntry, JobRecord

D = datetime(2025, 3, 3, tzinfo=UTC)
H = timedelta(hours=1)
M = timedelta(minutes=1)
RUNNING, ADMITTED, PENDING = JobStatus.RUNNING, JobStatus.ADMITTED, JobStatus.PENDING


def at(hours: float = 0, minutes: float = 0) -> datetime:
    return D + timedelta(hours=hours, minutes=minutes)


def entry(
    when: datetime, event: JobEvent, status: JobStatus | None = None, **details: Any
) -> JobHistoryEntry:
    return JobHistoryEntry(at=when, event=event, status=status, details=details)


def record(
    history: list[JobHistoryEntry],
    *,
    job_id: str = "job-a",
    team: str = "nlp",
    gpus: int = 8,
    replicas: int = 1,
    status: JobStatus = RUNNING,
    ended_at: datetime | None = None,
    last_checkpoint: datetime | None = None,
    **fields: Any,
) -> JobRecord:
    checkpoint = (
        Checkpoint(step=100, uri="s3://ckpt/a/100", completed_at=last_checkpoint)
        if last_checkpoint
        else None
    )
    job = Job(
        job_id=job_id,
        team=team,
        accelerators_per_replica=gpus,
        replicas=replicas,
        status=status,
        submitted_at=history[0].at,
        last_checkpoint=checkpoint,
    )
    return JobRecord(job=job, history=history, ended_at=ended_at, **fields)


def admitted(when: datetime, replicas: int = 1, *, restart: bool = False) -> list[JobHistoryEntry]:
    event = JobEvent.RESTARTED if restart else JobEvent.ADMITTED
    return [
        entry(when, event, ADMITTED, replicas=replicas),
        entry(when, JobEvent.DISPATCHED, RUNNING),
    ]


def incident(incident_id: str, timings: dict[str, float], strategy: str) -> Incident:
    return gpu_incident(
        incident_id,
        opened_at=D,
        first_signal_at=D,
        timings=timings,
        jobs=[ProtectedJob(job_id="job-a", team="nlp", strategy=strategy)],
    )


FULL_TIMINGS = {
    "signal_to_detected_s": 60.0,
    "signal_to_cordoned_s": 90.0,
    "signal_to_repair_requested_s": 300.0,
    "signal_to_healthy_s": 900.0,
    "signal_to_resumed_s": 960.0,
    "signal_to_resolved_s": 1000.0,
}


def goodput(
    rec: JobRecord,
    now: datetime,
    window: timedelta = 24 * H,
    incidents: dict[str, Incident] | None = None,
) -> JobGoodput:
    return views.job_goodput(rec, incidents or {}, catalogue(), now - window, now)


def test_ten_hours_run_with_one_fault_thirty_minutes_after_a_checkpoint() -> None:
    """Submitted 00:00, waited an hour, ran 01:00-11:00 (10 h); checkpoint at 05:00, its node
    failed and recovery restarted it on a hot spare at 05:30: the 30 minutes since the
    checkpoint are lost."""
    history = [
        entry(at(0), JobEvent.SUBMITTED, PENDING),
        *admitted(at(1)),
        entry(at(5), JobEvent.CHECKPOINT, step=100),
        entry(at(5, 30), JobEvent.PROTECTED, incident_id="inc-1", strategy="hot_spare"),
        entry(at(5, 30), JobEvent.RESTARTED, RUNNING, incident_id="inc-1"),
        entry(at(5, 31), JobEvent.RELEASED, incident_id="inc-1"),
        entry(at(11), JobEvent.FINISHED, JobStatus.SUCCEEDED),
    ]
    rec = record(history, status=JobStatus.SUCCEEDED, ended_at=at(11))
    inc = incident("inc-1", FULL_TIMINGS, "hot_spare")
    job = goodput(rec, at(12), incidents={"inc-1": inc})
    assert (job.gpus, job.wall_s, job.holding_s) == (8, 11 * 3600, 10 * 3600)
    assert (job.lost_s, job.productive_s, job.faults) == (1800, 34200, 1)
    assert job.scheduling_goodput_pct == 90.9  # 10 / 11
    assert job.runtime_goodput_pct == 95.0  # 9.5 / 10
    assert job.goodput_pct == 86.4  # 9.5 / 11 = 0.909 x 0.95
    # detect 60 s, cordon/drain 240 s, repair 600 s, resume 60 s, each x 8 GPUs / 60
    assert job.badput == [
        IncidentBadput(
            incident_id="inc-1",
            protected_at=at(5, 30),
            strategy="hot_spare",
            detect_gpu_min=8.0,
            cordon_drain_gpu_min=32.0,
            repair_gpu_min=80.0,
            resume_gpu_min=8.0,
            total_gpu_min=128.0,
        )
    ]


def test_waiting_for_a_repair_on_its_nodes_is_lost_too() -> None:
    """Same fault, but the job keeps its nodes and waits 15 minutes for the repair: lost is
    checkpoint 05:00 → restart 05:45, all of it while holding."""
    history = [
        entry(at(0), JobEvent.SUBMITTED, PENDING),
        *admitted(at(1)),
        entry(at(5, 30), JobEvent.PROTECTED, incident_id="inc-1"),
        entry(at(5, 45), JobEvent.RESTARTED, RUNNING, incident_id="inc-1"),
        entry(at(11), JobEvent.FINISHED, JobStatus.SUCCEEDED),
    ]
    # the checkpoint entry overflowed the history: last_checkpoint still says 05:00
    rec = record(history, status=JobStatus.SUCCEEDED, ended_at=at(11), last_checkpoint=at(5))
    job = goodput(rec, at(12))
    assert (job.holding_s, job.lost_s, job.productive_s) == (36000, 2700, 33300)
    assert (job.scheduling_goodput_pct, job.runtime_goodput_pct) == (90.9, 92.5)
    assert job.goodput_pct == 84.1  # 33300 / 39600
    # the incident is not found: listed, phases unknown
    (bad,) = job.badput
    assert (bad.incident_id, bad.strategy, bad.detect_gpu_min, bad.total_gpu_min) == (
        "inc-1",
        None,
        None,
        0.0,
    )


def test_a_lost_run_and_the_requeue_wait() -> None:
    """4 GPUs from 00:00; checkpoint 02:00; the reconciler finds the run gone at 03:00 and
    requeues it; readmitted 04:00; now 06:00. Waiting 03:00-04:00 is scheduling badput,
    02:00-03:00 lost work."""
    history = [
        entry(at(0), JobEvent.SUBMITTED, PENDING),
        *admitted(at(0)),
        entry(at(2), JobEvent.CHECKPOINT, step=100),
        entry(at(3), JobEvent.LOST, PENDING),
        *admitted(at(4), restart=True),
    ]
    job = goodput(record(history, gpus=4), at(6), window=6 * H)
    assert (job.wall_s, job.holding_s, job.lost_s, job.productive_s) == (21600, 18000, 3600, 14400)
    assert (job.scheduling_goodput_pct, job.runtime_goodput_pct, job.goodput_pct) == (
        83.3,
        80.0,
        66.7,
    )
    assert (job.faults, job.badput) == (1, [])


def test_a_preemption_costs_waiting_time_only() -> None:
    history = [
        entry(at(0), JobEvent.SUBMITTED, PENDING),
        *admitted(at(0)),
        entry(at(2), JobEvent.PREEMPTED, JobStatus.PREEMPTED),
        *admitted(at(3), restart=True),
    ]
    job = goodput(record(history), at(6), window=6 * H)
    assert (job.holding_s, job.lost_s) == (5 * 3600, 0)
    assert (job.scheduling_goodput_pct, job.runtime_goodput_pct, job.goodput_pct) == (
        83.3,
        100.0,
        83.3,
    )


def test_a_job_that_never_ran() -> None:
    rec = record([entry(at(1), JobEvent.SUBMITTED, PENDING)], status=PENDING)
    job = goodput(rec, at(3))
    assert (job.wall_s, job.holding_s) == (7200, 0)
    assert (job.scheduling_goodput_pct, job.runtime_goodput_pct, job.goodput_pct) == (
        0.0,
        None,
        0.0,
    )


def test_the_window_clips_wall_holding_and_lost_time() -> None:
    """Running since yesterday; a 1-hour window 11:00-12:00; checkpoint 10:30 (before it),
    fault 11:15, restarted 11:20: 11:00-11:20 of the lost span is in the window."""
    history = [
        entry(at(-20), JobEvent.SUBMITTED, PENDING),
        *admitted(at(-20)),
        entry(at(10, 30), JobEvent.CHECKPOINT, step=100),
        entry(at(11, 15), JobEvent.PROTECTED, incident_id="inc-1"),
        entry(at(11, 20), JobEvent.RESTARTED, RUNNING, incident_id="inc-1"),
    ]
    job = goodput(record(history), at(12), window=H)
    assert (job.wall_s, job.holding_s, job.lost_s) == (3600, 3600, 1200)
    assert (job.runtime_goodput_pct, job.goodput_pct) == (66.7, 66.7)
    # a fault before the window is not this window's: no badput, not counted
    earlier = goodput(record(history), at(13), window=H)
    assert (earlier.faults, earlier.badput, earlier.lost_s) == (0, [], 0)


def test_shrunk_below_its_admitted_size_it_does_not_hold_all_its_resources() -> None:
    """2 replicas x 4 GPUs from 00:00; checkpoint 00:50; fault 01:00; recovery shrinks it to
    1 at 01:10; the scheduler grows it back at 02:10; now 03:00."""
    history = [
        entry(at(0), JobEvent.SUBMITTED, PENDING),
        *admitted(at(0), replicas=2),
        entry(at(0, 50), JobEvent.CHECKPOINT, step=100),
        entry(at(1), JobEvent.PROTECTED, incident_id="inc-1"),
        entry(at(1, 10), JobEvent.SHRUNK, replicas=1, incident_id="inc-1"),
        entry(at(2, 10), JobEvent.GROWN, replicas=2),
    ]
    job = goodput(record(history, gpus=4, replicas=2), at(3), window=3 * H)
    assert job.gpus == 8
    assert (job.holding_s, job.lost_s) == (7200, 1200)  # 70 + 50 min; 00:50-01:10
    assert (job.scheduling_goodput_pct, job.runtime_goodput_pct, job.goodput_pct) == (
        66.7,
        83.3,
        55.6,
    )


def test_overlapping_faults_count_their_lost_work_once() -> None:
    """No checkpoint at all: each fault loses everything since submission; 00:00-01:10 and
    00:00-02:10 overlap, 130 minutes in all."""
    history = [
        entry(at(0), JobEvent.SUBMITTED, PENDING),
        *admitted(at(0)),
        entry(at(1), JobEvent.PROTECTED, incident_id="inc-1"),
        entry(at(1, 10), JobEvent.RESTARTED, RUNNING, incident_id="inc-1"),
        entry(at(2), JobEvent.PROTECTED, incident_id="inc-2"),
        entry(at(2, 10), JobEvent.RESTARTED, RUNNING, incident_id="inc-2"),
    ]
    job = goodput(record(history), at(3), window=3 * H)
    assert (job.holding_s, job.lost_s, job.productive_s, job.faults) == (10800, 7800, 3000, 2)
    assert [b.incident_id for b in job.badput] == ["inc-1", "inc-2"]


def test_a_fault_still_being_recovered_loses_until_now() -> None:
    history = [
        entry(at(0), JobEvent.SUBMITTED, PENDING),
        *admitted(at(0)),
        entry(at(1), JobEvent.CHECKPOINT, step=100),
        entry(at(1, 30), JobEvent.PROTECTED, incident_id="inc-1"),
    ]
    job = goodput(record(history), at(2), window=2 * H)
    assert (job.holding_s, job.lost_s) == (7200, 3600)


def test_incident_phases_missing_and_drain_without_repair() -> None:
    assert incident_phases(FULL_TIMINGS) == {
        "detect": 60.0,
        "cordon_drain": 240.0,
        "repair": 600.0,
        "resume": 60.0,
    }
    drain = {"signal_to_detected_s": 30.0, "signal_to_resumed_s": 600.0}
    assert incident_phases(drain) == {
        "detect": 30.0,
        "cordon_drain": 570.0,
        "repair": None,
        "resume": None,
    }
    repairing = {"signal_to_detected_s": 30.0, "signal_to_repair_requested_s": 100.0}
    assert incident_phases(repairing) == {
        "detect": 30.0,
        "cordon_drain": 70.0,
        "repair": None,
        "resume": None,
    }
    assert incident_phases({}) == dict.fromkeys(PHASES)
    backwards = {"signal_to_repair_requested_s": 100.0, "signal_to_healthy_s": 50.0}
    assert incident_phases(backwards)["repair"] == 0.0


def _job(job_id: str, team: str, gpus: int, wall: float, holding: float, productive: float) -> Any:
    return JobGoodput(
        job_id=job_id,
        name=None,
        team=team,
        status=RUNNING,
        gpus=gpus,
        wall_s=wall,
        holding_s=holding,
        lost_s=holding - productive,
        productive_s=productive,
        faults=0,
        scheduling_goodput_pct=None,
        runtime_goodput_pct=None,
        goodput_pct=None,
        badput=[],
    )


def test_a_team_weights_each_job_by_its_gpus() -> None:
    """8 GPUs for 10 h, all held, half productive; 4 GPUs for 10 h, half held, all of that
    productive: wall 120, holding 80 + 20 = 100, productive 40 + 20 = 60 GPU-hours."""
    big = _job("a", "nlp", 8, 36000, 36000, 18000)
    small = _job("b", "nlp", 4, 36000, 18000, 18000)
    bad = IncidentBadput(
        incident_id="inc-1",
        protected_at=D,
        strategy="wait_for_repair",
        detect_gpu_min=8.0,
        cordon_drain_gpu_min=None,
        repair_gpu_min=80.0,
        resume_gpu_min=8.0,
        total_gpu_min=96.0,
    )
    big.badput = [bad, bad.model_copy(update={"incident_id": "inc-2"})]
    other = _job("c", "vision", 8, 3600, 0, 0)
    nlp, vision = views.team_goodput([big, small, other])
    assert (nlp.team, nlp.jobs) == ("nlp", 2)
    assert (nlp.wall_gpu_hours, nlp.holding_gpu_hours, nlp.productive_gpu_hours) == (
        120.0,
        100.0,
        60.0,
    )
    assert (nlp.scheduling_goodput_pct, nlp.runtime_goodput_pct, nlp.goodput_pct) == (
        83.3,
        60.0,
        50.0,
    )
    assert (nlp.detect_gpu_min, nlp.cordon_drain_gpu_min, nlp.repair_gpu_min) == (16.0, 0, 160.0)
    assert (vision.scheduling_goodput_pct, vision.runtime_goodput_pct) == (0.0, None)


def test_the_view_leaves_out_jobs_that_ended_before_the_window() -> None:
    old = record(
        [entry(at(0), JobEvent.SUBMITTED, PENDING), *admitted(at(0))],
        job_id="old",
        status=JobStatus.CANCELLED,
        ended_at=at(1),
        stop_pending=True,
    )
    recent = record(
        [
            entry(at(0), JobEvent.SUBMITTED, PENDING),
            *admitted(at(0)),
            entry(at(3), JobEvent.FINISHED, JobStatus.SUCCEEDED),
        ],
        job_id="recent",
        status=JobStatus.SUCCEEDED,
        ended_at=at(3),
    )
    view = views.goodput_view([old, recent], [], catalogue(), at(2), at(4))
    assert [j.job_id for j in view.jobs] == ["recent"]
    (job,) = view.jobs
    assert (job.wall_s, job.holding_s, job.goodput_pct) == (3600, 3600, 100.0)
    assert view.window_start == at(2)


def test_an_overflowed_history_counts_the_current_holding_from_the_last_start() -> None:
    rec = record(
        [entry(at(0), JobEvent.SUBMITTED, PENDING)],
        history_dropped=4,
        started_at=at(1),
        scaled_at=at(1),
    )
    job = goodput(rec, at(3))
    assert (job.wall_s, job.holding_s) == (3 * 3600, 2 * 3600)


class Jobs:
    def __init__(self, records: list[JobRecord]) -> None:
        self.records = records
        self.windows: list[tuple[datetime, datetime]] = []

    def active_or_ended_since(self, since: datetime, now: datetime) -> list[JobRecord]:
        self.windows.append((since, now))
        return self.records


class Incidents:
    def __init__(self, incidents: list[Incident]) -> None:
        self.incidents = incidents
        self.asked: list[list[str]] = []

    def many(self, ids: list[str]) -> list[Incident]:
        self.asked.append(ids)
        return [i for i in self.incidents if i.incident_id in ids]


def _faulted() -> JobRecord:
    return record(
        [
            entry(at(0), JobEvent.SUBMITTED, PENDING),
            *admitted(at(0)),
            entry(at(1), JobEvent.CHECKPOINT, step=1),
            entry(at(1, 30), JobEvent.PROTECTED, incident_id="inc-1"),
            entry(at(1, 30), JobEvent.RESTARTED, RUNNING, incident_id="inc-1"),
        ]
    )


def test_read_goodput_view_reads_the_window_and_only_the_protecting_incidents() -> None:
    jobs = Jobs([_faulted(), record([entry(at(0), JobEvent.SUBMITTED, PENDING)], job_id="b")])
    incidents = Incidents([incident("inc-1", FULL_TIMINGS, "hot_spare")])
    view = views.read_goodput_view(jobs, incidents, catalogue(), at(2), 2)  # type: ignore[arg-type]
    assert jobs.windows == [(at(0), at(2))] and incidents.asked == [["inc-1"]]
    assert [j.job_id for j in view.jobs] == ["b", "job-a"]
    assert view.jobs[1].badput[0].strategy == "hot_spare"
    hidden = views.read_goodput_view(
        jobs,  # type: ignore[arg-type]
        incidents,  # type: ignore[arg-type]
        catalogue(),
        at(2),
        visible=lambda team: team == "vision",
    )
    assert (hidden.jobs, hidden.teams) == ([], [])
    for bad in (0, 721):
        with pytest.raises(ValueError, match="window_hours"):
            views.read_goodput_view(jobs, incidents, catalogue(), at(2), bad)  # type: ignore[arg-type]


def test_the_cli_bounds_match_the_api() -> None:
    assert views_cli.GOODPUT_WINDOW_HOURS == views.GOODPUT_WINDOW_HOURS
    assert views_cli.DEFAULT_GOODPUT_WINDOW_HOURS == views.DEFAULT_GOODPUT_WINDOW_HOURS


def _parser(jobs: Jobs, incidents: Incidents) -> argparse.ArgumentParser:
    deps = views_cli.Deps(
        lambda _args: (None, jobs, None, catalogue()),
        clock=lambda: at(2),
        incidents=lambda _args: incidents,
    )
    parser = argparse.ArgumentParser()
    views_cli.add_parsers(parser.add_subparsers(), cli.service_options, deps)
    return parser


def test_cli_goodput_json_table_and_usage_errors(
    capsys: pytest.CaptureFixture[str],
) -> None:
    jobs = Jobs([_faulted()])
    incidents = Incidents([incident("inc-1", FULL_TIMINGS, "hot_spare")])
    parser = _parser(jobs, incidents)
    args = parser.parse_args(["views", "goodput", "--window-hours", "2", "--json"])
    assert args.func(args) == 0
    body = json.loads(capsys.readouterr().out)
    assert body["window_start"].startswith("2025-03-03T00:00:00")
    (job,) = body["jobs"]
    assert (job["lost_s"], job["runtime_goodput_pct"]) == (1800.0, 75.0)
    args = parser.parse_args(["views", "goodput"])
    assert args.window_hours == 24 and args.func(args) == 0
    table = capsys.readouterr().out
    assert "GOODPUT %" in table and "75.0" in table and "128.0" in table
    for bad in ("0", "721", "1.5", "day"):
        with pytest.raises(SystemExit) as exit_:
            parser.parse_args(["views", "goodput", "--window-hours", bad])
        assert exit_.value.code == 2
        assert "--window-hours" in capsys.readouterr().err
