"""The scheduler Lambda handler on SQS batches of wake-ups: one pass per batch, and the jobs
the API's wake-ups name are read by key, so a job the `Live` index does not list yet is
still admitted by that pass (moto tables, the simulated cluster behind real APIs)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from tests.conftest import SCHEDULER_TICK, Stack
from tests.integration.api_harness import Api
from tests.integration.conftest import MakeCluster
from tests.integration.handler_harness import context, load_handler, sqs_record
from tests.integration.scheduler_harness import running_jobs

from hyperguard.messaging import WakeupMessage


def wake_up(body: str) -> dict[str, object]:
    return sqs_record(body, "test-scheduler.fifo")


def test_a_batch_is_one_pass_that_admits_the_jobs_its_wake_ups_name(
    stack: Stack, make_cluster: MakeCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    apis = make_cluster()
    api = Api(stack)
    api.quota("solo", 16)
    submitted = [api.submit("solo", 8).body["job_id"] for _ in range(2)]
    for job_id in submitted:  # as while their writes propagate to the `Live` index
        api.jobs.table.update_item(Key={"job_id": job_id}, UpdateExpression="REMOVE live")
    app = load_handler("scheduler", stack.env(), monkeypatch)
    passes = []
    run_pass = app.service.run_pass

    def counted(job_ids: list[str], held: list[Any]) -> object:
        passes.append(job_ids)
        assert held == []  # no forwarder event among the wake-ups
        return run_pass(job_ids, held)

    monkeypatch.setattr(app.service, "run_pass", counted)

    ticked = app.handler({"Records": [wake_up(json.dumps(SCHEDULER_TICK))]}, context("scheduler"))
    assert ticked["admitted"] == 0  # the index alone does not list them yet

    bodies = [
        WakeupMessage(reason="job submitted", job_id=job_id).model_dump_json(exclude_none=True)
        for job_id in submitted
    ]
    batch = [wake_up(bodies[0]), wake_up(json.dumps(SCHEDULER_TICK)), wake_up(bodies[1])]
    assert app.handler({"Records": batch}, context("scheduler"))["admitted"] == 2
    assert passes == [[], submitted]
    assert running_jobs(apis) == set(submitted)
    assert [r.job.job_id for r in api.jobs.active()] == sorted(submitted)  # listed once moved
