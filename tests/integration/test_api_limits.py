"""Hostile and oversized input to the API: refused before anything is written, never a 500,
never a job item that could stall a scheduling pass; an admin can always cancel; a team
member sees only their own team's jobs in incidents."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from tests.conftest import Stack
from tests.integration.api_harness import ADMIN, CHECKPOINT_BUCKET, Api, member
from tests.integration.incident_harness import fault_signal

from hyperguard.governance.jobs import Actor, JobLifecycle
from hyperguard.models import Checkpoint, Node, ProtectedJob, Repair
from hyperguard.models.records import MAX_LISTED
from hyperguard.store import IncidentStore, NodeStore
from hyperguard.store.jobs import MAX_HISTORY

BASE = {"instance_type": "ml.p5.48xlarge", "image": "trainer:1"}


def api_for(stack: Stack) -> Api:
    api = Api(stack)
    for team in ("nlp", "cv"):
        api.call("PUT", "/principals", {"principal_arn": member(team), "team": team})
        api.quota(team, 16)
    return api


def test_oversized_and_out_of_range_input_is_refused_and_writes_nothing(stack: Stack) -> None:
    api = api_for(stack)
    huge = BASE | {"command": ["x" * 4096] * 97}  # ~396 KB: the item that stalled passes
    cases = [
        (huge, 413, "body"),
        (BASE | {"command": ["x" * 4097]}, 422, "command[0]"),
        (BASE | {"command": ["x" * 4096] * 5}, 422, "body"),  # 20 KB in all: over 16 KB
        (BASE | {"image": "i" * 1025}, 422, "image"),
        (BASE | {"checkpoint_location": "s3://bucket/" + "p" * 2000}, 422, "checkpoint_location"),
        (BASE | {"team": "NLP!"}, 422, "team"),
        (BASE | {"priority_class": "p" * 64}, 422, "priority_class"),
    ]
    for body, status, field in cases:
        reply = api.call("POST", "/jobs", body, principal=member("nlp"))
        assert (reply.status, reply.body["field"]) == (status, field), body
    not_utf8 = api.call("POST", "/jobs", raw=b'{"image": "\xff\xfe"}', principal=member("nlp"))
    assert (not_utf8.status, not_utf8.body) == (
        400,
        {"error": "the request body is not UTF-8 text", "field": "body"},
    )
    assert api.jobs.records() == []

    job_id = api.call("POST", "/jobs", BASE, principal=member("nlp")).body["job_id"]
    checkpoint = f"/jobs/{job_id}/checkpoints"
    uri = "s3://bucket/run/step-1/"
    for body, field in (
        ({"step": 10**40, "uri": uri}, "step"),
        ({"step": -1, "uri": uri}, "step"),
        ({"step": 1, "uri": "s3://bucket/" + "u" * 2000}, "uri"),
        ({"step": 1, "uri": uri, "completed_at": "0001-01-01T00:00:00Z"}, "completed_at"),
        ({"step": 1, "uri": uri, "completed_at": "2026-01-01T00:00:00"}, "completed_at"),
    ):
        reply = api.call("POST", checkpoint, body, principal=member("nlp"))
        assert (reply.status, reply.body["field"]) == (422, field), body
    big_uri = api.call("POST", checkpoint, {"step": 1, "uri": "s3://b/" + "u" * 70_000})
    assert big_uri.status == 413
    record = api.jobs.record(job_id)
    assert record is not None and record.job.last_checkpoint is None

    quota = api.call(
        "PUT",
        "/teams/cv/compute-quota",
        {
            "Name": "cv",
            "ClusterArn": "arn:aws:sagemaker:us-east-1:123456789012:cluster/abc",
            "ComputeQuotaConfig": {
                "ComputeQuotaResources": [{"InstanceType": "ml.p5.48xlarge", "Count": 10**40}]
            },
            "ComputeQuotaTarget": {"TeamName": "cv"},
            "TargetVersion": 1,
        },
    )
    assert quota.status == 422
    assert quota.body["field"] == "ComputeQuotaConfig.ComputeQuotaResources[0].Count"


def test_a_job_that_changes_all_its_life_keeps_a_bounded_history(stack: Stack) -> None:
    api = api_for(stack)
    job_id = api.call("POST", "/jobs", BASE, principal=member("nlp")).body["job_id"]
    teams = api.teams
    lifecycle = JobLifecycle(api.jobs)
    lease = teams.acquire_lease("c", "pass", 600)
    assert lease is not None
    nodes = [f"i-{n:017x}" for n in range(1, 40)]  # longer than a history entry lists
    for round_ in range(MAX_HISTORY):
        fence = [teams.lease_check(lease)]
        assert lifecycle.admit(
            job_id,
            nodes=nodes,
            pool="p",
            replicas=39,
            restart=round_ > 0,
            reason="x" * 2000,
            fence=fence,
        )
        assert lifecycle.preempt(job_id, reason="for another", fence=fence)
    record = api.jobs.record(job_id)
    assert record is not None and len(record.history) == MAX_HISTORY
    assert record.history_dropped == 2 * MAX_HISTORY + 1 - MAX_HISTORY
    assert record.job.restart_count == MAX_HISTORY - 1  # every move still applied
    admitted = next(h for h in record.history if h.event.value == "admitted")
    assert len(admitted.reason) == 500
    assert admitted.details["nodes"] == {"first": nodes[:MAX_LISTED], "count": 39}
    # an admin can always cancel it
    cancelled = api.call("DELETE", f"/jobs/{job_id}")
    assert cancelled.status == 200 and cancelled.body["status"] == "Cancelled"
    assert not lifecycle.requeue(job_id, by=Actor.RECONCILER, reason="after cancel")


def test_members_see_only_their_teams_jobs_in_incidents(stack: Stack) -> None:
    api = api_for(stack)
    incidents = IncidentStore(stack.tables["IncidentsTable"], stack.tables["NodesTable"])
    node = Node(
        instance_id="i-0123456789abcdef0",
        cluster="c",
        pool="p",
        platform="hyperpod",
        instance_type="ml.p5.48xlarge",
    )
    NodeStore(stack.tables["NodesTable"]).upsert_inventory([node])
    now = datetime.now(UTC)
    incident, _ = incidents.open_or_append(
        node, fault_signal(node, now, repair=Repair.REPLACE), now
    )
    plan = [
        ProtectedJob(
            job_id="nlp-job", team="nlp", strategy="hot_spare", checkpoint_uri="s3://nlp/ckpt/"
        ),
        ProtectedJob(
            job_id="cv-job",
            team="cv",
            strategy="wait_for_repair",
            checkpoint_uri="s3://cv-secret/ckpt/",
        ),
        ProtectedJob(job_id="legacy", strategy="requeue"),  # planned before teams were kept
    ]
    incidents.update(incident.incident_id, jobs=plan, task_token="secret-token")

    def jobs_seen(principal: str) -> list[str]:
        listed = api.call("GET", "/incidents", principal=principal).body["incidents"][0]
        one = api.call("GET", f"/incidents/{incident.incident_id}", principal=principal).body
        assert "task_token" not in listed and "task_token" not in one
        assert [j["job_id"] for j in listed["jobs"]] == [j["job_id"] for j in one["jobs"]]
        return [j["job_id"] for j in one["jobs"]]

    assert jobs_seen(member("nlp")) == ["nlp-job"]
    assert jobs_seen(member("cv")) == ["cv-job"]
    assert jobs_seen("arn:aws:iam::123456789012:role/hyperguard-admin") == [
        "nlp-job",
        "cv-job",
        "legacy",
    ]
    assert "cv-secret" not in str(api.call("GET", "/incidents", principal=member("nlp")).body)


def _quota_body(count: Any) -> dict[str, Any]:
    return {
        "Name": "cv",
        "ClusterArn": "arn:aws:sagemaker:us-east-1:123456789012:cluster/abc",
        "ComputeQuotaConfig": {
            "ComputeQuotaResources": [{"InstanceType": "ml.p5.48xlarge", "Count": count}]
        },
        "ComputeQuotaTarget": {"TeamName": "cv"},
    }


def test_numbers_are_bounded_before_parsing_and_typed_strictly(stack: Stack) -> None:
    api = api_for(stack)
    job_id = api.call("POST", "/jobs", BASE, principal=member("nlp")).body["job_id"]
    before = snapshot_of(api)
    giant = "9" * 5000  # past Python's 4,300-digit int conversion limit
    raw_bodies = [
        (
            "POST",
            "/jobs",
            f'{{"instance_type": "ml.p5.48xlarge", "image": "t:1", "replicas": {giant}}}',
        ),
        ("POST", f"/jobs/{job_id}/checkpoints", f'{{"step": {giant}, "uri": "s3://b/k/"}}'),
        ("POST", f"/jobs/{job_id}/checkpoints", f'{{"step": 1.{giant}, "uri": "s3://b/k/"}}'),
        ("POST", f"/jobs/{job_id}/checkpoints", '{"step": 1e999, "uri": "s3://b/k/"}'),
        ("POST", f"/jobs/{job_id}/checkpoints", '{"step": NaN, "uri": "s3://b/k/"}'),
        ("PUT", "/teams/cv/compute-quota", json.dumps(_quota_body(0)).replace("0}", giant + "}")),
        ("PUT", "/policies/node-repair", f'{{"pollIntervalS": -{giant}}}'),
        ("PUT", "/policies/burst", f'{{"spendCaps": {{"teams": {{"nlp": {giant}}}}}}}'),
        ("POST", "/plan", f'{{"instances": {giant}}}'),
    ]
    for method, path, raw in raw_bodies:
        reply = api.call(method, path, raw=raw)
        assert reply.status == 422, (path, reply.body)
        assert reply.body["field"] == "body" and "number" in reply.body["error"], reply.body
    typed_wrong = [
        ("POST", "/jobs", BASE | {"replicas": True}, "replicas"),
        ("POST", "/jobs", BASE | {"replicas": "2"}, "replicas"),
        ("POST", "/jobs", BASE | {"auto_resume": "true"}, "auto_resume"),
        ("POST", f"/jobs/{job_id}/checkpoints", {"step": "10", "uri": "s3://b/k/"}, "step"),
        ("POST", f"/jobs/{job_id}/checkpoints", {"step": False, "uri": "s3://b/k/"}, "step"),
        (
            "PUT",
            "/teams/cv/compute-quota",
            _quota_body("4"),
            "ComputeQuotaConfig.ComputeQuotaResources[0].Count",
        ),
        ("PUT", "/policies/node-repair", {"pollIntervalS": True}, "pollIntervalS"),
        ("PUT", "/policies/burst", {"spendCaps": {"globalUsdPerDay": "5"}}, "spendCaps"),
    ]
    for method, path, body, field in typed_wrong:
        principal = member("nlp") if path.startswith("/jobs") else ADMIN
        reply = api.call(method, path, body, principal=principal)
        assert reply.status == 422, (body, reply.body)
        assert reply.body["field"].startswith(field), (body, reply.body)
    assert snapshot_of(api) == before


def snapshot_of(api: Api) -> Any:
    return (
        [r.model_dump() for r in api.jobs.records()],
        api.call("GET", "/policies/burst").body,
        api.call("GET", "/policies/node-repair").body,
        api.call("GET", "/teams/cv/compute-quota").body,
    )


def test_members_read_only_their_own_teams_spend_caps(stack: Stack) -> None:
    api = api_for(stack)
    caps = {
        "globalUsdPerDay": 5000,
        "teams": {"nlp": 100, "cv": 900},
        "teamGpuHoursPerDay": {"nlp": 24, "cv": 480},
    }
    assert api.call("PUT", "/policies/burst", {"spendCaps": caps}).status == 200
    seen = api.call("GET", "/policies/burst", principal=member("nlp")).body["spendCaps"]
    assert (seen["teams"], seen["teamGpuHoursPerDay"]) == ({"nlp": 100}, {"nlp": 24})
    assert seen["globalUsdPerDay"] == 5000  # the cluster-wide cap is not a team's secret
    full = api.call("GET", "/policies/burst").body["spendCaps"]
    assert full["teams"] == {"nlp": 100, "cv": 900}


def item_bytes(value: Any) -> int:
    """An attribute value's size as DynamoDB counts it toward the 400 KB item limit
    (strings in UTF-8, numbers at most 21 bytes, 3 bytes per list or map plus 1 per
    element, names counted with their values)."""
    if isinstance(value, str):
        return len(value.encode())
    if isinstance(value, bool) or value is None:
        return 1
    if isinstance(value, int | float | Decimal):
        return 21
    if isinstance(value, list | set):
        return 3 + sum(1 + item_bytes(v) for v in value)
    if isinstance(value, dict):
        return 3 + sum(1 + len(k.encode()) + item_bytes(v) for k, v in value.items())
    raise TypeError(type(value))


ITEM_LIMIT = 400 * 1024


def test_checkpoint_reports_cannot_push_the_largest_job_past_the_item_limit(
    stack: Stack,
) -> None:
    """The largest job the API accepts, then checkpoints with the longest URIs the API
    accepts, more than the history keeps: the item stays under DynamoDB's limit, and
    an admin can still cancel it."""
    api = api_for(stack)
    largest = BASE | {
        "name": "n" * 63,
        "image": "i" * 1024,
        "command": ["c" * 4096] * 4,
        "checkpoint_location": f"s3://{CHECKPOINT_BUCKET}/".ljust(1024, "p"),
    }
    job_id = api.call("POST", "/jobs", largest, principal=member("nlp")).body["job_id"]
    longest_uri = "s3://bucket/" + "u" * 1000
    lifecycle = JobLifecycle(api.jobs)  # what the route calls, without the HTTP round trips
    for step in range(1, MAX_HISTORY + 1):
        uri = f"{longest_uri}{step:09d}/"
        checkpoint = Checkpoint(step=step, uri=uri, completed_at=datetime.now(UTC))
        assert lifecycle.record_checkpoint(job_id, checkpoint, history=True)
    for step in range(MAX_HISTORY + 1, MAX_HISTORY + 6):
        uri = f"{longest_uri}{step:09d}/"
        report = {"step": step, "uri": uri}
        reply = api.call("POST", f"/jobs/{job_id}/checkpoints", report, principal=member("nlp"))
        assert reply.status == 201, reply.body
    item = api.jobs.table.get_item(Key={"job_id": job_id}, ConsistentRead=True)["Item"]
    size = sum(len(name.encode()) + item_bytes(value) for name, value in item.items())
    assert len(item["history"]) == MAX_HISTORY
    assert size < ITEM_LIMIT / 2, size  # half the limit: room for every other field
    cancelled = api.call("DELETE", f"/jobs/{job_id}")
    assert cancelled.status == 200 and cancelled.body["status"] == "Cancelled"
