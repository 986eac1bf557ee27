"""The checkpoint convention on S3 (moto): only folders with the _COMPLETE marker count.
Checkpoints are written the way the twin's simulated training jobs write them."""

from __future__ import annotations

import boto3
import pytest
from tests.conftest import REGION

from hyperguard.store.checkpoints import (
    CheckpointLocationError,
    CheckpointStore,
    checkpoint_folder,
    split_s3_uri,
)
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
