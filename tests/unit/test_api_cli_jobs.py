"""`jobs list` rows and table, `jobs show`."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from hyperguard.cli.jobs import COLUMNS, job_rows, render_job
from hyperguard.cli.output import print_renderable, print_table
from hyperguard.models import Checkpoint, ClusterObject, Job, JobSource, JobStatus
from hyperguard.models.jobs import ElasticPolicy
from hyperguard.models.records import JobRecord

T0 = datetime(2025, 1, 6, tzinfo=UTC)


def test_rows_show_nodes_status_checkpoint_and_restarts_newest_first(
    capsys: pytest.CaptureFixture[str],
) -> None:
    older = Job(
        job_id="a",
        name="llama",
        team="nlp",
        status=JobStatus.RUNNING,
        nodes=["i-1", "i-1", "i-2"],
        restart_count=2,
        last_checkpoint=Checkpoint(step=700, uri="s3://b/a/700", completed_at=T0),
        submitted_at=T0,
    )
    newer = Job(job_id="b", team="cv", submitted_at=T0 + timedelta(seconds=1))
    rows = job_rows([JobRecord(job=older), JobRecord(job=newer, reason="pending: x")])
    assert [r["job_id"] for r in rows] == ["b", "a"]
    assert rows[1] == {
        "job_id": "a",
        "name": "llama",
        "team": "nlp",
        "source": "api",
        "nodes": ["i-1", "i-2"],
        "status": "Running",
        "checkpoint_step": 700,
        "progress": "700",
        "replicas": "3",
        "restarts": 2,
        "reason": "",
    }
    print_table(rows, COLUMNS)
    table = capsys.readouterr().out.splitlines()
    assert table[0].split() == [
        "JOB_ID",
        "NAME",
        "TEAM",
        "SOURCE",
        "REPLICAS",
        "NODES",
        "STATUS",
        "PROGRESS",
        "RESTARTS",
        "REASON",
    ]
    assert table[2].split()[:2] == ["b", "-"]  # no name given (row 1 is the rule)
    assert table[2].split()[-2:] == ["pending:", "x"]  # why it waits
    assert table[3].split() == [
        "a",
        "llama",
        "nlp",
        "api",
        "3",
        "i-1,i-2",
        "Running",
        "700",
        "2",
        "-",
    ]


def test_a_job_a_team_applied_says_so_with_its_object() -> None:
    held = Job(
        job_id="nlp-20261127093000-4f1c2a",
        name="pretrain-7b",
        team="nlp",
        source=JobSource.CLUSTER,
        cluster_object=ClusterObject(
            kind="Job",
            namespace="hyperpod-ns-nlp",
            name="pretrain-7b",
            uid="u",
            workload="job-pretrain-7b-3c9d1",
            pod_set="main",
        ),
    )
    (row,) = job_rows([JobRecord(job=held)])
    assert row["source"] == "cluster:Job/pretrain-7b"


def test_a_finite_elastic_job_shows_its_size_range_and_progress_of_its_length() -> None:
    done = Job(
        job_id="c",
        team="nlp",
        status=JobStatus.SUCCEEDED,
        replicas=4,
        max_steps=2000,
        elastic_policy=ElasticPolicy(min_replicas=2, max_replicas=4),
        last_checkpoint=Checkpoint(step=2000, uri="s3://b/c/2000", completed_at=T0),
        submitted_at=T0,
    )
    (row,) = job_rows([JobRecord(job=done)])
    assert (row["status"], row["progress"], row["replicas"]) == (
        "Succeeded",
        "2000/2000",
        "- (2-4)",
    )


def test_show_tells_where_a_job_runs_why_it_waits_and_its_history(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from hyperguard.models.records import JobEvent, JobHistoryEntry

    job = Job(job_id="d", name="vit", team="cv", status=JobStatus.PREEMPTED, submitted_at=T0)
    record = JobRecord(
        job=job,
        reason="preempted by nlp/llama (priority training-high)",
        history=[
            JobHistoryEntry(at=T0, event=JobEvent.PREEMPTED, status=JobStatus.PREEMPTED),
        ],
    )
    print_renderable(render_job(record))
    out = capsys.readouterr().out
    assert "job d (vit), team cv: Preempted" in out
    assert "reason: preempted by nlp/llama (priority training-high)" in out
    assert "preempted" in out.split("history", 1)[1]


def test_show_says_what_the_job_runs_its_image_or_its_pod_template(
    capsys: pytest.CaptureFixture[str],
) -> None:
    short = Job(job_id="s", team="cv", image="trainer:1", command=["torchrun", "train.py"])
    print_renderable(render_job(JobRecord(job=short)))
    assert "runs trainer:1 torchrun train.py" in capsys.readouterr().out
    template = {
        "spec": {
            "serviceAccountName": "trainer",
            "containers": [{"name": "pytorch", "image": "llama:1"}, {"name": "log", "image": "fb"}],
            "volumes": [{"name": "fsx"}, {"name": "shm"}],
        }
    }
    print_renderable(render_job(JobRecord(job=Job(job_id="t", team="cv", pod_template=template))))
    out = capsys.readouterr().out
    assert "its pod template: containers pytorch (llama:1), log (fb)" in out
    assert "service account trainer; volumes fsx, shm" in out


def test_show_says_a_running_job_is_slow_and_which_node_lags(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from hyperguard.models.jobs import SlowFlag

    reason = "slow: 240 steps/h against its usual 600 (40%); node i-2 lags: 2.60 s/step"
    flag = SlowFlag(
        since=T0, steps_per_hour=240, usual_steps_per_hour=600, lagging_node="i-2", reason=reason
    )
    running = Job(job_id="e", team="nlp", status=JobStatus.RUNNING, nodes=["i-1", "i-2"])
    print_renderable(render_job(JobRecord(job=running, slow=flag)))
    assert f"{reason} (since {T0.isoformat()})" in capsys.readouterr().out
    done = running.model_copy(update={"status": JobStatus.SUCCEEDED})
    print_renderable(render_job(JobRecord(job=done, slow=flag)))  # a flag only while running
    assert "slow:" not in capsys.readouterr().out


def test_a_jobs_checkpoints_are_one_history_row_per_run_of_them() -> None:
    from hyperguard.cli.jobs import fold_checkpoints

    def entry(event: str, reason: str) -> dict[str, Any]:
        return {"at": "2026-11-26T00:00:00+00:00", "event": event, "reason": reason}

    history = [entry("admitted", "fits"), entry("checkpoint", "checkpoint at step 100")]
    history += [entry("checkpoint", f"checkpoint at step {s}") for s in (200, 300, 400)]
    history += [entry("requeued", "node failed"), entry("checkpoint", "checkpoint at step 500")]
    rows = fold_checkpoints(history)
    assert [r["event"] for r in rows] == ["admitted", "checkpoint (x4)", "requeued", "checkpoint"]
    assert rows[1]["reason"] == "checkpoint at step 100 ... checkpoint at step 400"
