"""Random bodies to every write route of the API, as an admin and as a team member: never a
5xx, and nothing written when the answer is a refusal."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.integration.api_harness import ADMIN, Api, member

leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**40), max_value=10**40),
    st.floats(allow_nan=False),
    st.text(max_size=30),
    st.sampled_from(["ml.p5.48xlarge", "h100", "nlp", "s3://b/p/", "Enabled", "LendAndBorrow"]),
)
values = st.recursive(
    leaves,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=20), inner, max_size=4)
    ),
    max_leaves=12,
)
KEYS = {
    "/jobs": [
        "instance_type",
        "accelerator",
        "image",
        "replicas",
        "command",
        "elastic_policy",
        "recovery",
        "max_steps",
        "team",
        "priority_class",
        "checkpoint_location",
    ],
    "/teams/nlp/compute-quota": [
        "Name",
        "ClusterArn",
        "ComputeQuotaConfig",
        "ComputeQuotaTarget",
        "TargetVersion",
    ],
    "/scheduler-config": [
        "PriorityClasses",
        "FairShare",
        "IdleResourceSharing",
        "MinRuntimeSeconds",
        "TargetVersion",
    ],
    "/policies/node-repair": [
        "enabled",
        "hotSpares",
        "strategyTimes",
        "pollIntervalS",
        "nodeRepairConfigOverrides",
        "lemonIncidentThreshold",
        "lemonWindowDays",
        "observeOnly",
        "stalledJobMins",
    ],
    "/principals": ["principal_arn", "team", "admin"],
    "/jobs/JOB/checkpoints": ["step", "uri", "completed_at"],
    "/nodes/i-0123456789abcdef0/actions": ["action", "reason", "incident_id"],
}
METHOD = {
    "/teams/nlp/compute-quota": "PUT",
    "/scheduler-config": "PUT",
    "/policies/node-repair": "PUT",
    "/principals": "PUT",
}


@st.composite
def requests(draw: st.DrawFn) -> tuple[str, str, Any]:
    path = draw(st.sampled_from(sorted(KEYS)))
    if draw(st.integers(min_value=0, max_value=9)) == 0:
        body: Any = draw(values)  # not even an object
    else:
        keys = draw(st.lists(st.sampled_from(KEYS[path]), max_size=len(KEYS[path]), unique=True))
        body = {key: draw(values) for key in keys}
    return METHOD.get(path, "POST"), path, body


@settings(
    max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(requests(), st.sampled_from([ADMIN, member("nlp")]))
def test_random_bodies_never_fail_the_api_and_refusals_write_nothing(
    api: Api, request: tuple[str, str, Any], principal: str
) -> None:
    api.call("PUT", "/principals", {"principal_arn": member("nlp"), "team": "nlp"})
    if api.teams.get_quota("nlp") is None:
        api.quota("nlp", 16)
    records = api.jobs.records()
    if records:
        job = records[0].job.job_id
    else:
        body = {"team": "nlp", "instance_type": "ml.p5.48xlarge", "image": "i"}
        job = api.call("POST", "/jobs", body).body["job_id"]
    method, path, body = request
    before = snapshot(api)
    reply = api.call(method, path.replace("JOB", job), raw=json.dumps(body), principal=principal)
    assert reply.status < 500, (method, path, body, reply.body)
    if reply.status >= 400:
        assert set(reply.body) >= {"error", "field"}
        assert snapshot(api) == before, (method, path, body, reply.status)


def snapshot(api: Api) -> Any:
    return (
        sorted((r.job.job_id, r.job.status, r.job.last_checkpoint) for r in api.jobs.records()),
        [q.model_dump() for q in api.teams.quotas()],
        api.teams.scheduler_config(),
        sorted(g.principal_arn for g in api.teams.principals()),
        api.policies.get().model_dump(),
    )
