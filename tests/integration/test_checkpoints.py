"""The checkpoint convention on S3 (moto): only folders with the _COMPLETE marker count.
Checkpoints are written the way the twin's simulated training jobs write them."""

from __future__ import annotations

from datetime import timedelta

import boto3
import pytest
from tests.conftest import REGION
from tests.integration.cluster_harness import BUCKET
from tests.integration.scheduler_harness import MakeSolo
from tests.unit.trainer.ranks import ranks_save

from hyperguard.models import JobStatus
from hyperguard.store.checkpoints import (
    CheckpointLocationError,
    CheckpointStore,
    Fence,
    checkpoint_folder,
    split_s3_uri,
)
from hyperguard_trainer import Context
from hyperguard_trainer.storage import S3Target
from hyperguard_twin.effects import write_checkpoint

LOCATION = "s3://ckpts/team-a/llama/"


@pytest.fixture
def store(aws_env: None) -> CheckpointStore:
    boto3.client("s3", region_name=REGION).create_bucket(Bucket="ckpts")
    return CheckpointStore()


def test_the_newest_complete_checkpoint_wins_and_a_cut_short_one_is_ignored(
    store: CheckpointStore,
) -> None:
    s3 = boto3.client("s3", region_name=REGION)
    write_checkpoint(s3, LOCATION, 100)
    write_checkpoint(s3, LOCATION, 1200)
    # step 1300 was being written when the node failed: shards, no marker
    s3.put_object(Bucket="ckpts", Key="team-a/llama/step-00001300/model.pt", Body=b"partial")
    # another job's newer checkpoint under a sibling prefix does not leak in
    write_checkpoint(s3, "s3://ckpts/team-a/llama-v2/", 9000)
    latest = store.latest_complete(LOCATION)
    assert latest is not None
    assert (latest.step, latest.uri) == (1200, "s3://ckpts/team-a/llama/step-00001200/")


def test_after_lists_only_newer_step_folders(store: CheckpointStore) -> None:
    s3 = boto3.client("s3", region_name=REGION)
    for step in (10, 20, 30):
        write_checkpoint(s3, LOCATION, step)
    newer = store.latest_complete(LOCATION, after=20)
    assert newer is not None and newer.step == 30
    assert store.latest_complete(LOCATION, after=30) is None
    # step 9 < 10 sorts before it even though "9" > "1": steps are zero-padded
    write_checkpoint(s3, LOCATION, 9)
    latest = store.latest_complete(LOCATION, after=8)
    assert latest is not None and latest.step == 30


def test_no_checkpoint_yet_is_none(store: CheckpointStore) -> None:
    assert store.latest_complete(LOCATION) is None


def test_locations_are_checked() -> None:
    assert split_s3_uri("s3://b/p/q") == ("b", "p/q/")
    assert split_s3_uri("s3://b") == ("b", "")
    assert checkpoint_folder("s3://b/p/", 7) == "s3://b/p/step-00000007/"
    for bad in ("gs://b/p", "s3:///p", "b/p"):
        with pytest.raises(CheckpointLocationError):
            split_s3_uri(bad)


def test_a_location_s3_refuses_is_a_location_error_that_says_why(store: CheckpointStore) -> None:
    with pytest.raises(CheckpointLocationError, match=r"s3://no-such-bucket/x/: NoSuchBucket"):
        store.latest_complete("s3://no-such-bucket/x/")


# -- contract v2 (D164): markers the hyperguard-trainer kit writes, read by the service ------


def _kit_saves(
    step: int,
    *,
    job_id: str = "job-1",
    run: int = 0,
    world_size: int = 1,
    location: str = LOCATION,
) -> None:
    """`world_size` ranks of the kit save `step` under `location` (one thread a rank)."""
    saved = ranks_save(
        lambda: S3Target(location, boto3.client("s3", region_name=REGION)),
        Context(job_id=job_id, run=run, world_size=world_size),
        step,
        lambda: {"w": [step]},
    )
    assert saved == [None] * world_size


def _fence(run: int) -> Fence:
    return Fence("job-1", run, None)


def test_a_v2_checkpoint_with_every_shard_is_taken(store: CheckpointStore) -> None:
    _kit_saves(100, world_size=2)
    lookup = store.lookup(LOCATION, fence=_fence(0))
    assert lookup.checkpoint is not None and lookup.checkpoint.step == 100
    assert lookup.refused == ()


def test_a_v2_checkpoint_missing_a_shard_is_refused_for_the_one_before(
    store: CheckpointStore,
) -> None:
    _kit_saves(100, world_size=2)
    _kit_saves(200, world_size=2)
    s3 = boto3.client("s3", region_name=REGION)
    s3.delete_object(Bucket="ckpts", Key="team-a/llama/step-00000200/rank-00001.pt")
    lookup = store.lookup(LOCATION, fence=_fence(0))
    assert lookup.checkpoint is not None and lookup.checkpoint.step == 100
    assert [r.step for r in lookup.refused] == [200]
    assert "rank-00001.pt (absent" in lookup.refused[0].reason
    assert store.latest_complete(LOCATION) == lookup.checkpoint  # no fence: still refused


def test_a_stale_shard_beside_a_valid_marker_is_not_listed_and_does_no_harm(
    store: CheckpointStore,
) -> None:
    _kit_saves(100, world_size=1)
    s3 = boto3.client("s3", region_name=REGION)
    s3.put_object(Bucket="ckpts", Key="team-a/llama/step-00000100/rank-00007.pt", Body=b"old")
    lookup = store.lookup(LOCATION, fence=_fence(0))
    assert lookup.checkpoint is not None and lookup.checkpoint.step == 100


def test_another_jobs_and_a_later_runs_checkpoints_are_refused(store: CheckpointStore) -> None:
    _kit_saves(100, run=1)
    _kit_saves(200, job_id="job-2", run=1)
    _kit_saves(300, run=2)
    lookup = store.lookup(LOCATION, fence=_fence(1))
    assert lookup.checkpoint is not None and lookup.checkpoint.step == 100
    reasons = {r.step: r.reason for r in lookup.refused}
    assert "job 'job-2'" in reasons[200]
    assert "run 2, which HyperGuard has not started" in reasons[300]


def test_an_earlier_runs_checkpoint_is_fenced_off_once_the_current_run_began(
    store: CheckpointStore,
) -> None:
    _kit_saves(100, run=0)
    _kit_saves(200, run=0)  # run 0, still writing
    s3 = boto3.client("s3", region_name=REGION)
    first, at = (
        s3.head_object(Bucket="ckpts", Key=f"team-a/llama/step-{step:08d}/_COMPLETE")[
            "LastModified"
        ]
        for step in (100, 200)
    )
    # run 1 began before both were written (S3 keeps whole seconds, and on a loaded host
    # the two writes can fall in different ones: before the first of them): whoever wrote
    # them was a stale writer
    fenced = store.lookup(LOCATION, fence=Fence("job-1", 1, first - timedelta(seconds=1)))
    assert fenced.checkpoint is None
    assert [r.step for r in fenced.refused] == [200, 100]
    assert "a stale writer, fenced off" in fenced.refused[0].reason
    # run 1 began after run 0 wrote them: run 0's last checkpoint is the one to resume from
    began_after = store.lookup(LOCATION, fence=Fence("job-1", 1, at + timedelta(seconds=1)))
    assert began_after.checkpoint is not None and began_after.checkpoint.step == 200


def test_a_marker_that_says_v2_but_is_broken_is_refused(store: CheckpointStore) -> None:
    s3 = boto3.client("s3", region_name=REGION)
    write_checkpoint(s3, LOCATION, 100)
    s3.put_object(
        Bucket="ckpts",
        Key="team-a/llama/step-00000200/_COMPLETE",
        Body=b'{"format": "hyperguard-checkpoint/2", "job_id": "job-1", "run": 0}',
    )
    lookup = store.lookup(LOCATION, fence=_fence(0))
    assert lookup.checkpoint is not None and lookup.checkpoint.step == 100
    assert "lacks or mistypes" in lookup.refused[0].reason


def test_a_pass_notes_a_refused_checkpoint_once_in_the_jobs_history(solo: MakeSolo) -> None:
    team = solo(8, hyperpod_nodes=1, strategy="DontLend", borrow=None)
    location = f"s3://{BUCKET}/fenced/"
    job_id = team.submit(8, checkpoint_location=location)
    service = team.scheduler()
    service.run_pass()
    assert team.job(job_id).status is JobStatus.RUNNING and team.job(job_id).run == 0
    _kit_saves(100, job_id=job_id, run=0, location=location)
    _kit_saves(200, job_id=job_id, run=3, location=location)  # a writer of no run of ours
    service.run_pass()
    service.run_pass()
    view = team.api.call("GET", f"/jobs/{job_id}").body
    assert view["last_checkpoint"]["step"] == 100
    (refusal,) = [h for h in view["history"] if h["event"] == "checkpoint_refused"]
    assert refusal["reason"] == (
        "checkpoint at step 200 not resumed from: written by run 3, which HyperGuard has not "
        "started (the job is at run 0)"
    )
