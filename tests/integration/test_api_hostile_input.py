"""Input a hostile tester sent the API that answered 500 or reached the wrong route (issue
34): every one is a 4xx before anything is done, and nothing is written."""

from __future__ import annotations

import json
import re
from typing import Any

from tests.conftest import Stack
from tests.integration.api_harness import ADMIN, Api, member, quota_body

from hyperguard.api.app import MAX_DEPTH

STRANGER = "arn:aws:iam::123456789012:role/stranger"
NODE = "i-0123456789abcdef0"
BASE = {"instance_type": "ml.p5.48xlarge", "image": "trainer:1"}


def api_with_a_job(stack: Stack) -> tuple[Api, str]:
    api = Api(stack)
    api.call("PUT", "/principals", {"principal_arn": member("nlp"), "team": "nlp"})
    api.quota("nlp", 16)
    job_id = api.call("POST", "/jobs", BASE, principal=member("nlp")).body["job_id"]
    return api, job_id


def routes(api: Api) -> list[tuple[str, str, bool]]:
    """(method, path template, has a body) of every route in the API's own document."""
    paths = json.loads(api.app.get_openapi_json_schema())["paths"]
    return [
        (method.upper(), path, "requestBody" in operation)
        for path, operations in paths.items()
        for method, operation in operations.items()
    ]


def filled(path: str, job_id: str) -> str:
    values = {"jobId": job_id, "team": "nlp", "nodeId": NODE, "incidentId": "inc-1"}
    return re.sub(r"\{(\w+)\}", lambda m: values[m.group(1)], path)


def snapshot(api: Api) -> Any:
    return (
        [r.model_dump() for r in api.jobs.records()],
        [q.model_dump() for q in api.teams.quotas()],
        api.teams.scheduler_config(),
        sorted(g.principal_arn for g in api.teams.principals()),
        api.policies.get().model_dump(),
        api.call("GET", "/policies/burst").body,
    )


def test_deep_nesting_is_refused_on_every_body_route_before_authentication(
    stack: Stack,
) -> None:
    api, job_id = api_with_a_job(stack)
    before = snapshot(api)
    body_routes = [(m, p) for m, p, has_body in routes(api) if has_body]
    assert len(body_routes) >= 9
    recursion = "[" * 20_000 + "]" * 20_000  # past the parser's recursion: answered 500
    over = '{"a": ' * (MAX_DEPTH + 1) + "1" + "}" * (MAX_DEPTH + 1)
    for method, path in body_routes:
        for raw in (recursion, over):
            # a caller the API does not know: the body is refused before anyone is asked
            reply = api.call(method, filled(path, job_id), raw=raw, principal=STRANGER)
            assert (reply.status, reply.body["field"]) == (422, "body"), (method, path)
            assert f"more than {MAX_DEPTH} levels" in reply.body["error"]
    at_limit = '{"a": ' * (MAX_DEPTH - 1) + "[1]" + "}" * (MAX_DEPTH - 1)
    reply = api.call("POST", "/jobs", raw=at_limit, principal=member("nlp"))
    assert reply.status == 422 and reply.body["field"] != "body"  # parsed, then validated
    assert snapshot(api) == before


def test_numbers_nearer_zero_than_dynamodb_stores_are_refused(stack: Stack) -> None:
    api, job_id = api_with_a_job(stack)
    report = f"/jobs/{job_id}/checkpoints"
    before = snapshot(api)

    def checkpoint(seconds: float) -> dict[str, Any]:
        uri = "s3://bucket/run/step-5/"
        return {"step": 5, "uri": uri, "node_step_seconds": {NODE: seconds}}

    tiny = [
        ("POST", report, checkpoint(1e-200)),  # decimal.Underflow: answered 500
        ("POST", report, checkpoint(-5e-324)),
        ("PUT", "/policies/node-repair", {"drainDeadlineS": 1e-131}),
        (
            "PUT",
            "/policies/burst",
            {
                "prices": [
                    {"poolKind": "hyperpod", "instanceType": "p5.48xlarge", "hourlyUsd": 1e-200}
                ]
            },
        ),
        ("PUT", "/policies/burst", {"spendCaps": {"teams": {"nlp": 1e-300}}}),
    ]
    for method, path, body in tiny:
        reply = api.call(method, path, body, principal=ADMIN)
        assert (reply.status, reply.body["field"]) == (422, "body"), (path, reply.body)
        assert "nearer zero than 1e-130" in reply.body["error"]
    fast = api.call("POST", report, checkpoint(1e-7), principal=member("nlp"))
    assert (fast.status, fast.body["field"]) == (422, f"node_step_seconds.{NODE}"), fast.body
    assert snapshot(api) == before
    fastest = api.call("POST", report, checkpoint(1e-6), principal=member("nlp"))
    assert fastest.status == 201, fastest.body
    assert fastest.body["last_checkpoint"]["node_step_seconds"] == {NODE: 1e-6}


def test_versions_are_bounded_below_dynamodbs_precision(stack: Stack) -> None:
    """A TargetVersion of 45 digits (within the 64 characters a number may have) failed the
    conditional write, which keeps 38 digits: a 500."""
    api, _ = api_with_a_job(stack)
    before = snapshot(api)
    huge = 10**45
    for method, path, body, query in (
        ("PUT", "/teams/nlp/compute-quota", quota_body("nlp", 8, version=huge), None),
        ("PUT", "/scheduler-config", {"PriorityClasses": [], "TargetVersion": huge}, None),
        ("DELETE", "/teams/nlp/compute-quota", None, {"TargetVersion": str(huge)}),
    ):
        reply = api.call(method, path, body, query=query)
        assert (reply.status, reply.body["field"]) == (422, "TargetVersion"), (path, reply.body)
    assert snapshot(api) == before


def test_instance_types_are_names_not_arbitrary_text(stack: Stack) -> None:
    """Control characters and markup in an instance type reached EC2 (the emulator answered
    with XML it could not parse): the field's pattern refuses them before any lookup."""
    api, _ = api_with_a_job(stack)
    before = snapshot(api)
    for name in ("ml.p5.48xlarge\n", "p5.48xlarge\x00", "ml.p5.48xlarge\x01\x7f", "<a>.b", " "):
        reply = api.call("POST", "/jobs", BASE | {"instance_type": name}, principal=member("nlp"))
        assert (reply.status, reply.body["field"]) == (422, "instance_type"), name
        assert "pattern" in reply.body["error"], reply.body  # the field's, not the catalogue's
        quota = {
            "Name": "nlp",
            "ClusterArn": "arn:aws:sagemaker:us-east-1:123456789012:cluster/abc",
            "ComputeQuotaConfig": {"ComputeQuotaResources": [{"InstanceType": name, "Count": 1}]},
            "ComputeQuotaTarget": {"TeamName": "nlp"},
        }
        reply = api.call("PUT", "/teams/nlp/compute-quota", quota)
        field = "ComputeQuotaConfig.ComputeQuotaResources[0].InstanceType"
        assert (reply.status, reply.body["field"]) == (422, field), name
    for name in ("ml.p5.48xlarge", "p5.48xlarge"):
        reply = api.call("POST", "/jobs", BASE | {"instance_type": name}, principal=member("nlp"))
        assert reply.status == 201, reply.body
    assert len(api.jobs.records()) == len(before[0]) + 2


def test_a_blank_or_control_path_parameter_is_refused_on_every_route(stack: Stack) -> None:
    """`GET /jobs/%0A` was served as the job list (the resolver's `$` matches before a
    trailing newline), `GET /incidents/%0A` as the incident list."""
    api, job_id = api_with_a_job(stack)
    before = snapshot(api)
    parameterised = [(m, p) for m, p, _ in routes(api) if "{" in p]
    assert len(parameterised) >= 7
    for method, path in parameterised:
        for name in re.findall(r"\{(\w+)\}", path):
            for value in ("\n", " ", "\t", "\r\n", "\x00", job_id + "\n"):
                template = path.replace("{" + name + "}", "\0")
                reply = api.call(method, filled(template, job_id).replace("\0", value))
                assert (reply.status, reply.body["field"]) == (422, name), (method, path, value)
    assert snapshot(api) == before
