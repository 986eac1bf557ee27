"""`jobs list` rows and table."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hyperguard.cli.jobs import job_rows, render
from hyperguard.models import Checkpoint, Job, JobStatus
from hyperguard.models.jobs import ElasticPolicy
from hyperguard.store.jobs import JobRecord

T0 = datetime(2025, 1, 6, tzinfo=UTC)


def test_rows_show_nodes_status_checkpoint_and_restarts_newest_first() -> None:
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
        "nodes": "i-1,i-2",
        "status": "Running",
        "checkpoint_step": 700,
        "progress": "700",
        "replicas": "3",
        "restarts": 2,
        "reason": "",
    }
    table = render(rows).splitlines()
    assert table[0].split() == [
        "JOB_ID",
        "NAME",
        "TEAM",
        "REPLICAS",
        "NODES",
        "STATUS",
        "PROGRESS",
        "RESTARTS",
    ]
    assert table[1].split()[:2] == ["b", "-"]  # no name given
    assert table[2].split() == ["a", "llama", "nlp", "3", "i-1,i-2", "Running", "700", "2"]


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
