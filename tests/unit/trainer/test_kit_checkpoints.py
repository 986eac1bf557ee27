"""The trainer kit's checkpoints, without torch: a round trip of state and random
generators, the folder emptied before reuse, background saves with back-pressure, and each
refusal of contract v2 (a cut shard, another job, a later run, a checksum, a stale writer)."""

from __future__ import annotations

import hashlib
import json
import random
import threading
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws
from tests.unit.trainer.ranks import ranks_save

from hyperguard_trainer import Checkpointer, CheckpointError, Context, Fenced, Marker
from hyperguard_trainer.marker import MARKER
from hyperguard_trainer.storage import LocalTarget


class Counter:
    """A stand-in for a model: any object with state_dict() / load_state_dict()."""

    def __init__(self) -> None:
        self.value = 0

    def state_dict(self) -> dict[str, int]:
        return {"value": self.value}

    def load_state_dict(self, saved: dict[str, int]) -> None:
        self.value = saved["value"]


def context(**given: Any) -> Context:
    return Context(**({"job_id": "job-1"} | given))


def marker_of(root: Path, step: int) -> dict[str, Any]:
    body: dict[str, Any] = json.loads((root / f"step-{step:08d}" / MARKER).read_bytes())
    return body


def test_a_save_resumes_the_objects_the_values_and_every_random_generator(tmp_path: Path) -> None:
    model, saved = Counter(), Counter()
    saved.value = 7
    state: dict[str, Any] = {"model": saved, "data": {"epoch": 1, "offset": 4096}}
    random.seed(1)
    Checkpointer(str(tmp_path), context=context(run=2)).save(100, state)
    expected = [random.random() for _ in range(3)]

    random.seed(99)
    resumed: dict[str, Any] = {"model": model, "data": None}
    step = Checkpointer(str(tmp_path), context=context(run=3)).resume(resumed)

    assert step == 100
    assert model.value == 7 and resumed["data"] == {"epoch": 1, "offset": 4096}
    assert [random.random() for _ in range(3)] == expected
    body = marker_of(tmp_path, 100)
    shard = (tmp_path / "step-00000100" / "rank-00000.pt").read_bytes()
    assert body["format"] == "hyperguard-checkpoint/2"
    assert (body["job_id"], body["run"], body["attempt"], body["world_size"]) == ("job-1", 2, 0, 1)
    assert body["shards"] == [
        {"name": "rank-00000.pt", "size": len(shard), "sha256": hashlib.sha256(shard).hexdigest()}
    ]


def test_nothing_to_resume_is_step_zero_and_a_forgotten_name_is_an_error(tmp_path: Path) -> None:
    assert Checkpointer(str(tmp_path), context=context()).resume({"model": Counter()}) == 0
    Checkpointer(str(tmp_path), context=context()).save(5, {"model": Counter()})
    with pytest.raises(KeyError, match="optimizer"):
        Checkpointer(str(tmp_path), context=context()).resume(
            {"model": Counter(), "optimizer": Counter()}
        )


def test_a_folder_cut_short_or_completed_before_is_emptied_before_it_is_written(
    tmp_path: Path,
) -> None:
    cut = tmp_path / "step-00000200"
    cut.mkdir()
    (cut / "rank-00007.pt").write_bytes(b"stale shard of an 8-rank run")
    checkpointer = Checkpointer(str(tmp_path), context=context())
    checkpointer.save(200, {"model": Counter()})
    assert sorted(p.name for p in cut.iterdir()) == [MARKER, "rank-00000.pt"]

    again = Checkpointer(str(tmp_path), context=context(run=1))
    again.save(200, {"model": Counter()})
    assert marker_of(tmp_path, 200)["run"] == 1


def test_resume_skips_a_checkpoint_with_a_missing_shard_and_refuses_it_when_named(
    tmp_path: Path,
) -> None:
    for step in (100, 200):
        Checkpointer(str(tmp_path), context=context()).save(step, {"model": Counter()})
    (tmp_path / "step-00000200" / "rank-00000.pt").write_bytes(b"cut")

    assert Checkpointer(str(tmp_path), context=context()).resume({"model": Counter()}) == 100
    named = context(resume_from=f"{tmp_path}/step-00000200/")
    with pytest.raises(CheckpointError, match=r"rank-00000\.pt"):
        Checkpointer(str(tmp_path), context=named).resume({"model": Counter()})


def test_a_checksum_mismatch_is_refused(tmp_path: Path) -> None:
    Checkpointer(str(tmp_path), context=context()).save(100, {"model": Counter()})
    shard = tmp_path / "step-00000100" / "rank-00000.pt"
    data = bytearray(shard.read_bytes())
    data[-2] ^= 0xFF  # same size, other bytes
    shard.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="checksum"):
        Checkpointer(str(tmp_path), context=context(resume_step=100)).resume({"model": Counter()})


def test_another_jobs_or_a_later_runs_checkpoint_is_not_resumed_from(tmp_path: Path) -> None:
    Checkpointer(str(tmp_path), context=context()).save(100, {"model": Counter()})
    Checkpointer(str(tmp_path), context=context(job_id="job-2")).save(200, {"model": Counter()})
    Checkpointer(str(tmp_path), context=context(run=5)).save(300, {"model": Counter()})
    assert Checkpointer(str(tmp_path), context=context(run=4)).resume({"model": Counter()}) == 100


def test_a_stale_writer_is_fenced_off_once_a_later_run_has_completed_a_checkpoint(
    tmp_path: Path,
) -> None:
    zombie = Checkpointer(str(tmp_path), context=context(run=0))
    zombie.save(100, {"model": Counter()})
    Checkpointer(str(tmp_path), context=context(run=1)).save(150, {"model": Counter()})
    with pytest.raises(Fenced, match="run 1 attempt 0"):
        zombie.save(200, {"model": Counter()})
    assert not (tmp_path / "step-00000200" / MARKER).exists()
    restarted = Checkpointer(str(tmp_path), context=context(run=1, attempt=1))
    restarted.save(200, {"model": Counter()})  # a later attempt of the same run is not stale
    with pytest.raises(Fenced, match="attempt 1"):
        Checkpointer(str(tmp_path), context=context(run=1)).save(300, {"model": Counter()})


class Gated(LocalTarget):
    """A local target whose shard writes wait for the test to open the gate."""

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self.gate = threading.Event()
        self.writing = threading.Event()

    def put(self, key: str, data: bytes) -> None:
        if key.endswith(".pt"):
            self.writing.set()
            assert self.gate.wait(10)
        super().put(key, data)


def test_a_background_save_returns_at_once_and_the_next_waits_for_it(tmp_path: Path) -> None:
    target = Gated(str(tmp_path))
    checkpointer = Checkpointer(target, context=context(), background=True)
    state = {"model": Counter()}
    checkpointer.save(100, state)  # returns while its shard waits at the gate
    assert target.writing.wait(10)
    state["model"].value = 1  # the snapshot was taken: later changes are not in it
    checkpointer.save(200, state)  # the worker holds 100; 200 waits in the queue
    third = threading.Thread(target=checkpointer.save, args=(300, state))
    third.start()
    third.join(0.2)
    assert third.is_alive()  # back-pressure: a third save waits while two are in flight
    target.gate.set()
    third.join(10)
    checkpointer.close()
    assert [marker_of(tmp_path, s)["step"] for s in (100, 200, 300)] == [100, 200, 300]
    resumed = {"model": Counter()}
    Checkpointer(str(tmp_path), context=context(resume_step=100)).resume(resumed)
    assert resumed["model"].value == 0


def test_a_failed_background_write_is_raised_by_the_next_save(tmp_path: Path) -> None:
    class Failing(LocalTarget):
        def put(self, key: str, data: bytes) -> None:
            if key.endswith(".pt"):  # the shard, written in the background
                raise OSError("disk full")
            super().put(key, data)

    checkpointer = Checkpointer(Failing(str(tmp_path)), context=context(), background=True)
    checkpointer.save(100, {"model": Counter()})
    with pytest.raises(OSError, match="disk full"):
        checkpointer.wait()


def test_ranks_write_their_own_shards_and_rank_0_lists_them_all(tmp_path: Path) -> None:
    world = 3
    saved = ranks_save(
        lambda: str(tmp_path), context(world_size=world), 100, lambda: {"model": Counter()}
    )
    assert saved == [None] * world
    body = marker_of(tmp_path, 100)
    assert [s["name"] for s in body["shards"]] == [f"rank-{r:05d}.pt" for r in range(world)]
    assert body["world_size"] == world
    fewer = context(rank=0, world_size=2, resume_step=100)
    assert Checkpointer(str(tmp_path), context=fewer).resume({"model": Counter()}) == 100
    with pytest.raises(CheckpointError, match="to resume with more ranks, save with sharded=True"):
        Checkpointer(str(tmp_path), context=context(rank=3, world_size=4, resume_step=100)).resume(
            {"model": Counter()}
        )


def test_an_s3_location_round_trips() -> None:
    with mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket="ckpt")
        from hyperguard_trainer.storage import S3Target

        state = {"model": Counter()}
        state["model"].value = 3
        Checkpointer(S3Target("s3://ckpt/job-1/", s3), context=context()).save(100, state)
        marker = Marker.loads(
            s3.get_object(Bucket="ckpt", Key="job-1/step-00000100/_COMPLETE")["Body"].read()
        )
        assert marker.step == 100 and [s.name for s in marker.shards] == ["rank-00000.pt"]
        resumed = {"model": Counter()}
        target = S3Target("s3://ckpt/job-1", s3)
        assert Checkpointer(target, context=context()).resume(resumed) == 100
        assert resumed["model"].value == 3


def test_when_rank_0_is_fenced_every_rank_stops_instead_of_waiting(tmp_path: Path) -> None:
    """A stale run of two ranks: rank 0 finds a later run's marker, and rank 1, which cannot
    see it, stops too rather than wait in a collective rank 0 never reaches."""
    Checkpointer(str(tmp_path), context=context(run=1)).save(150, {"model": Counter()})
    raised = ranks_save(
        lambda: str(tmp_path), context(run=0, world_size=2), 200, lambda: {"model": Counter()}
    )
    assert [type(error) for error in raised] == [Fenced, Fenced]
    assert "rank 0: Fenced: run 1 attempt 0 of job job-1 saves here" in str(raised[1])
    assert not (tmp_path / "step-00000200").exists()


def test_a_stale_writer_ahead_in_steps_is_fenced_too(tmp_path: Path) -> None:
    """The old run kept training while the new one resumed from an earlier checkpoint: the
    stale writer's steps are ahead of the new run's, and it is fenced all the same."""
    zombie = Checkpointer(str(tmp_path), context=context(run=0))
    for step in (300, 400, 500, 600):
        zombie.save(step, {"model": Counter()})
    Checkpointer(str(tmp_path), context=context(run=1)).save(150, {"model": Counter()})
    with pytest.raises(Fenced, match="run 1 attempt 0"):
        zombie.save(700, {"model": Counter()})
    assert not (tmp_path / "step-00000700").exists()
