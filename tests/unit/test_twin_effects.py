"""The twin's cluster effects: a checkpoint lands in S3 as the training writes it, even while
a report of an earlier one is still on its way to the service's API."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import boto3
import pytest
from moto import mock_aws

from hyperguard.store.checkpoints import CheckpointStore
from hyperguard_twin.cloud.core import Effect
from hyperguard_twin.effects import EffectRunner
from hyperguard_twin.plane.kube import wait_for

LOCATION = "s3://ckpts/job-1/"


@pytest.fixture
def s3() -> Iterator[object]:
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket="ckpts")
        yield client


def checkpoint(step: int) -> list[Effect]:
    """What a training process emits at a checkpoint: the write, then the report."""
    uri = f"{LOCATION}step-{step:08d}/"
    return [
        Effect("write_checkpoint", (LOCATION, step)),
        Effect("report_checkpoint", ("job-1", "solo", step, uri, {})),
    ]


def test_a_slow_report_holds_back_no_later_checkpoint_write_and_each_report_follows_its_write(
    s3: object,
) -> None:
    store = CheckpointStore(s3)
    release = threading.Event()
    reported: list[tuple[int, int | None]] = []

    def report(job_id: str, team: str, step: int, uri: str, timings: object) -> None:
        newest = store.latest_complete(LOCATION)
        reported.append((step, newest.step if newest else None))
        release.wait(timeout=30)  # an ApiFunction invocation under load

    runner = EffectRunner(s3=s3, events=None, service_bus="service", report=report)
    runner.start()
    try:
        for effect in [*checkpoint(10), *checkpoint(20)]:
            runner.submit(effect)
        wait_for(lambda: reported, 10, "the first report to start")
        newest = wait_for(
            lambda: (c := store.latest_complete(LOCATION)) and c.step == 20 and c,
            10,
            "step 20 in S3 while the report of step 10 is on its way",
        )
        assert newest.step == 20
        assert [step for step, _ in reported] == [10]  # the second report waits its turn
        release.set()
        runner.wait()
    finally:
        release.set()
        runner.stop()
    assert [step for step, _ in reported] == [10, 20]
    assert all(seen is not None and seen >= step for step, seen in reported)
    assert runner.done == {"write_checkpoint": 2, "report_checkpoint": 2}
    assert not runner.failed


def test_a_failed_effect_is_counted_and_the_others_go_on(s3: object) -> None:
    runner = EffectRunner(s3=s3, events=None, service_bus="service")
    runner.start()
    try:
        runner.submit(Effect("write_checkpoint", ("s3://no-such-bucket/job-2/", 10)))
        runner.submit(Effect("put_event", ({"EventBusName": "service"},)))  # no EventBridge
        runner.submit(Effect("write_checkpoint", (LOCATION, 30)))
        runner.wait()
    finally:
        runner.stop()
    assert runner.failed == {"write_checkpoint": 1, "put_event": 1}
    assert runner.done == {"write_checkpoint": 1}
    newest = CheckpointStore(s3).latest_complete(LOCATION)
    assert newest is not None and newest.step == 30
