"""Slow jobs (D100): a running job's checkpoint reports, with each node's compute seconds per
step, keep its pace; one whose newest interval falls below the repair policy's
`slowJobRatio` of its usual rate is flagged slow (the view, the history, the pass's count),
with the node that lags named, and the flag clears once it is back at its pace. The API on
moto tables, the pass against the simulated cluster, a manual clock."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from tests.integration.cluster_harness import BUCKET
from tests.integration.scheduler_harness import MakeSolo

STEADY = {"i-0aaaaaaaaaaaaaaa1": 1.0, "i-0bbbbbbbbbbbbbbb2": 1.02}
THROTTLED = {"i-0aaaaaaaaaaaaaaa1": 1.0, "i-0bbbbbbbbbbbbbbb2": 2.6}


def test_a_job_far_below_its_own_pace_is_flagged_with_its_lagging_node(solo: MakeSolo) -> None:
    team = solo(8, hyperpod_nodes=1, strategy="DontLend", borrow=None)
    api, apis = team.api, team.apis
    location = f"s3://{BUCKET}/paced/"
    job_id = team.submit(8, checkpoint_location=location)
    service = team.scheduler()
    service.run_pass()
    start = apis.clock.now()

    def report(step: int, minutes: float, timings: dict[str, float]) -> dict[str, Any]:
        at = (start + timedelta(minutes=minutes)).isoformat()
        body = {"step": step, "uri": f"{location}{step}/", "completed_at": at}
        reply = api.call(
            "POST", f"/jobs/{job_id}/checkpoints", body | {"node_step_seconds": timings}
        )
        assert reply.status == 201, reply.body
        return dict(reply.body)

    for i in range(5):  # 100 steps every 10 minutes: 600 steps/h
        assert report(100 * (i + 1), 10 * i, STEADY)["slow"] is None
    view = report(600, 65, THROTTLED)  # 100 steps in 25 minutes: 240 steps/h
    assert view["slow"]["reason"] == (
        "slow: 240 steps/h against its usual 600 (40%); node i-0bbbbbbbbbbbbbbb2 lags: "
        "2.60 s/step against 1.00"
    )
    assert view["slow"]["lagging_node"] == "i-0bbbbbbbbbbbbbbb2"
    assert view["status"] == "Running"  # flagged, never restarted
    assert [h["event"] for h in view["history"]].count("slow") == 1
    assert service.run_pass().slow == 1
    # The same checkpoint reported again (as when the pass found its marker in S3 before
    # the job's report came): a repeat, whose timings are news.
    repeat = report(600, 65, {"i-0aaaaaaaaaaaaaaa1": 3.1, "i-0bbbbbbbbbbbbbbb2": 1.0})
    assert repeat["slow"]["lagging_node"] == "i-0aaaaaaaaaaaaaaa1"
    assert repeat["slow"]["since"] == view["slow"]["since"]
    assert [h["event"] for h in repeat["history"]].count("checkpoint") == 6
    still = report(700, 90, THROTTLED)
    assert still["slow"]["since"] == view["slow"]["since"]  # one flag while it lasts
    back = report(800, 100, STEADY)
    assert back["slow"] is None
    (entry,) = [h for h in back["history"] if h["event"] == "back_to_pace"]
    assert entry["reason"].startswith("back to its pace at step 800 (was slow: ")
    assert service.run_pass().slow == 0
    record = api.call("GET", f"/jobs/{job_id}").body
    assert record["last_checkpoint"]["node_step_seconds"] == STEADY


def test_per_node_timings_are_bounded_and_refused_with_the_field_named(solo: MakeSolo) -> None:
    team = solo(8, hyperpod_nodes=1, strategy="DontLend", borrow=None)
    api = team.api
    job_id = team.submit(8, checkpoint_location=f"s3://{BUCKET}/bad/")
    team.scheduler().run_pass()
    base = {"step": 10, "uri": f"s3://{BUCKET}/bad/10/"}
    for timings in (
        {"node-1": 1.0},  # not an instance id
        {"i-0aaaaaaaaaaaaaaa1": 0},  # not above 0
        {"i-0aaaaaaaaaaaaaaa1": 3601},  # above an hour
        {"i-0aaaaaaaaaaaaaaa1": "1.0"},  # not a number
    ):
        reply = api.call(
            "POST", f"/jobs/{job_id}/checkpoints", base | {"node_step_seconds": timings}
        )
        assert reply.status == 422, timings
        assert "node_step_seconds" in str(reply.body)
    assert api.call("GET", f"/jobs/{job_id}").body["last_checkpoint"] is None  # nothing written


def test_heartbeats_keep_the_pace_in_minutes_and_name_the_lagging_node(solo: MakeSolo) -> None:
    """A job that sends heartbeats (D165) is judged by them: a slowdown shows one minute
    after it starts, not a checkpoint interval later; a stale run's heartbeat, one out of
    order or a malformed one is refused, and a checkpoint no longer moves its pace."""
    team = solo(8, hyperpod_nodes=1, strategy="DontLend", borrow=None)
    api, apis = team.api, team.apis
    location = f"s3://{BUCKET}/beating/"
    job_id = team.submit(8, checkpoint_location=location)
    team.scheduler().run_pass()
    start = apis.clock.now()
    assert api.call("GET", f"/jobs/{job_id}").body["pace_by"] == "checkpoints"

    def beat(step: int, minutes: float, timings: dict[str, float], run: int = 0) -> Any:
        at = (start + timedelta(minutes=minutes)).isoformat()
        body = {"run": run, "step": step, "at": at, "node_step_seconds": timings}
        return api.call("POST", f"/jobs/{job_id}/progress", body)

    for i in range(5):  # 60 steps a minute
        reply = beat(60 * (i + 1), i, STEADY)
        assert reply.status == 201, reply.body
        assert reply.body["slow"] is None
    view = beat(360, 5, STEADY).body
    assert (view["pace_by"], view["heartbeat"]["step"]) == ("heartbeats", 360)
    slow = beat(384, 6, THROTTLED).body["slow"]  # 24 steps in the sixth minute
    assert slow["lagging_node"] == "i-0bbbbbbbbbbbbbbb2"
    assert slow["reason"].startswith("slow: 1,440 steps/h against its usual 3,600 (40%)")

    stale = beat(400, 7, STEADY, run=1)
    assert stale.status == 409 and "run 1 is not the job's current run 0" in stale.body["error"]
    late = beat(390, 5.5, STEADY)
    assert late.status == 409 and "not after the last heartbeat" in late.body["error"]
    for bad in ({"run": 0, "step": -1}, {"run": 0, "step": 1, "rank": 0}):
        assert api.call("POST", f"/jobs/{job_id}/progress", bad).status == 422
    # A checkpoint completed now is kept, and the pace stays the heartbeats'.
    checkpoint = {"step": 384, "uri": f"{location}step-00000384/"}
    reply = api.call("POST", f"/jobs/{job_id}/checkpoints", checkpoint)
    assert reply.status == 201 and reply.body["slow"]["since"] == slow["since"]
    assert reply.body["pace_by"] == "heartbeats"
