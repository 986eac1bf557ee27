"""A slow job on the twin's deployed path (D100): a node of a running job is throttled; the
simulated training reports each node's compute seconds per step with its checkpoints to
the API function, which flags the job slow and names that node. Every call is checked
against the functions' roles when the twin stops."""

from __future__ import annotations

import time
from typing import Any

from tests.deadlines import loaded
from tests.e2e.conftest import running_twin
from tests.e2e.http import Http, member

from hyperguard_twin.service_users import team_role

SPEED = 0.4
"""The throttled node's share of its full speed: the job's steps take 2.5 times as long."""


def test_a_throttled_node_makes_its_job_slow_and_is_named() -> None:
    with running_twin(hyperpod_nodes=2, burst_nodes=0, seed_jobs=False) as twin:
        http = Http(twin.api_endpoint)
        # The submitter, and the role the training job reports its checkpoints with.
        for principal in (member("solo"), team_role("solo")):
            body = {"principal_arn": principal, "team": "solo"}
            assert http("PUT", "/principals", body)[0] in (200, 201)
        assert http.quota("solo", 16) == 201
        config = {"PriorityClasses": [{"Name": "low", "Weight": 10}]}
        assert http("PUT", "/scheduler-config", config)[0] == 200
        job_id = http.submit("solo", 8, replicas=2)
        http.wait({job_id: "Running"})

        def job() -> dict[str, Any]:
            return dict(http("GET", f"/jobs/{job_id}")[1])

        deadline = time.monotonic() + loaded(60)
        while (job()["last_checkpoint"] or {}).get("step", 0) < 50 and time.monotonic() < deadline:
            time.sleep(0.5)  # five checkpoints at full speed: the job's own pace
        assert job()["slow"] is None
        throttled = twin.cluster.job_instances(job_id)[1]
        twin.cluster.slow_node(throttled, SPEED)

        deadline = time.monotonic() + loaded(90)
        view = job()
        while time.monotonic() < deadline and not (view["slow"] or {}).get("lagging_node"):
            time.sleep(0.5)
            view = job()
        slow = view["slow"]
        assert slow is not None and slow["lagging_node"] == throttled, view
        assert f"node {throttled} lags: 75.00 s/step against 30.00" in slow["reason"]
        assert slow["steps_per_hour"] < 0.5 * slow["usual_steps_per_hour"]
        assert view["status"] == "Running"  # flagged, not restarted
        timings = view["last_checkpoint"]["node_step_seconds"]
        assert timings[throttled] == 75.0 and set(timings) == set(
            twin.cluster.job_instances(job_id)
        )
