"""Jobs through the API handler: submit, idempotency, list, get, cancel, checkpoints."""

from __future__ import annotations

import json
from typing import Any

import yaml
from tests.conftest import ROOT, Stack
from tests.integration.api_harness import CHECKPOINT_BUCKET, CHECKPOINT_READERS, Api, member


def _api(stack: Stack) -> Api:
    api = Api(stack)
    for team in ("nlp", "cv"):
        api.call("PUT", "/principals", {"principal_arn": member(team), "team": team})
        api.quota(team, 16)
    api.call("PUT", "/scheduler-config", {"PriorityClasses": [{"Name": "high", "Weight": 90}]})
    api.wakeup.reasons.clear()
    return api


def test_submit_defaults_to_the_callers_team_and_wakes_the_scheduler(stack: Stack) -> None:
    api = _api(stack)
    body = {"accelerator": "h100", "accelerators_per_replica": 4, "image": "trainer:1"}
    reply = api.call("POST", "/jobs", body, principal=member("nlp"))
    assert reply.status == 201
    job = reply.body
    assert (job["team"], job["instance_type"], job["status"]) == (
        "nlp",
        "ml.p5.48xlarge",
        "Pending",
    )
    assert job["priority_class"] is None and job["template"] == "production"
    assert [h["event"] for h in job["history"]] == ["submitted"]
    assert api.wakeup.reasons == ["job submitted"]
    assert api.wakeup.job_ids == [job["job_id"]]  # the pass reads it by key, not the index
    assert api.jobs.record(job["job_id"]) is not None


def test_idempotency_key_replays_the_first_job_and_rejects_a_different_body(stack: Stack) -> None:
    api = _api(stack)
    body = {"instance_type": "p5.48xlarge", "image": "trainer:1"}
    headers = {"Idempotency-Key": "run-42"}
    first = api.call("POST", "/jobs", body, principal=member("nlp"), headers=headers)
    again = api.call("POST", "/jobs", body, principal=member("nlp"), headers=headers)
    assert (first.status, again.status) == (201, 200)
    assert again.body["job_id"] == first.body["job_id"]
    assert again.headers["Idempotent-Replayed"] == ["true"]
    other = api.call(
        "POST", "/jobs", body | {"replicas": 2}, principal=member("nlp"), headers=headers
    )
    assert other.status == 422 and other.body["field"] == "Idempotency-Key"
    assert len(api.jobs.records()) == 1 and api.wakeup.reasons == ["job submitted"]


def test_invalid_submissions_name_the_field_and_write_nothing(stack: Stack) -> None:
    api = _api(stack)
    base = {"instance_type": "ml.p5.48xlarge", "image": "trainer:1"}
    cases = [
        (base | {"replicas": 0}, 422, "replicas"),
        (base | {"accelerators_per_replica": 9}, 422, "accelerators_per_replica"),
        (base | {"instance_type": "ml.c5.large"}, 422, "instance_type"),
        (base | {"priority_class": "urgent"}, 422, "priority_class"),
        (base | {"template": "prod"}, 422, "template"),
        (base | {"team": "cv"}, 403, "team"),
        (base | {"team": "ghost"}, 403, "team"),
        (base | {"checkpoint_location": "/tmp/x"}, 422, "checkpoint_location"),
        ({"image": "x"}, 422, "body"),
        (base | {"min_replicas": 3}, 422, "min_replicas"),
        (base | {"elastic_policy": {"minReplicas": 3, "maxReplicas": 2}}, 422, "elastic_policy"),
        (
            base
            | {
                "replicas": 3,
                "elastic_policy": {"minReplicas": 2, "maxReplicas": 8, "replicaIncrementStep": 2},
            },
            422,
            "body",
        ),
        (
            base
            | {
                "elastic_policy": {
                    "minReplicas": 1,
                    "maxReplicas": 4,
                    "replicaIncrementStep": 1,
                    "replicaDiscreteValues": [1, 2],
                }
            },
            422,
            "elastic_policy",
        ),
        (base | {"recovery": {"strategy": "pray"}}, 422, "recovery.strategy"),
        (base | {"max_steps": 0}, 422, "max_steps"),
        (base | {"max_retries": -1}, 422, "max_retries"),
        (base | {"max_retries": 101}, 422, "max_retries"),
        (base | {"max_retries": "3"}, 422, "max_retries"),
        ({k: v for k, v in base.items() if k != "image"}, 422, "image"),
    ]
    for body, status, field in cases:
        reply = api.call("POST", "/jobs", body, principal=member("nlp"))
        assert (reply.status, reply.body["field"]) == (status, field), body
    bad_key = api.call(
        "POST", "/jobs", base, principal=member("nlp"), headers={"Idempotency-Key": "a b"}
    )
    assert bad_key.status == 422
    assert api.call("POST", "/jobs", base | {"team": "ghost"}).body == {
        "error": "team ghost has no compute quota",
        "field": "team",
    }
    assert api.jobs.records() == [] and api.wakeup.reasons == []


TEMPLATE: dict[str, Any] = {
    "spec": {
        "serviceAccountName": "trainer",
        "containers": [
            {
                "name": "pytorch",
                "image": "llama:1",
                "env": [{"name": "NCCL_DEBUG", "value": "INFO"}],
                "resources": {"requests": {"memory": "32000Mi", "vpc.amazonaws.com/efa": 32}},
                "volumeMounts": [{"name": "shm", "mountPath": "/dev/shm"}],
            }
        ],
        "volumes": [{"name": "shm", "emptyDir": {"medium": "Memory"}}],
    }
}


def test_a_pod_template_is_kept_as_given_and_a_bad_one_is_a_422_naming_its_field(
    stack: Stack,
) -> None:
    api = _api(stack)
    base = {"instance_type": "ml.p5.48xlarge", "pod_template": TEMPLATE}
    reply = api.call("POST", "/jobs", base, principal=member("nlp"))
    assert reply.status == 201
    assert reply.body["pod_template"] == TEMPLATE and reply.body["image"] == ""
    stored = api.call("GET", f"/jobs/{reply.body['job_id']}", principal=member("nlp"))
    assert stored.body["pod_template"] == TEMPLATE
    container = TEMPLATE["spec"]["containers"][0]
    cases = [
        (
            {"spec": {"containers": [container | {"imagePullPolicyy": "Always"}]}},
            "pod_template.spec.containers[0].imagePullPolicyy",
        ),
        (
            {"spec": {"nodeName": "ip-10-0-0-1", "containers": [container]}},
            "pod_template.spec.nodeName",
        ),
        (
            {"metadata": {"annotations": {"a": "x" * 40_000}}, "spec": {"containers": [container]}},
            "pod_template",
        ),
    ]
    for template, field in cases:
        refused = api.call(
            "POST", "/jobs", base | {"pod_template": template}, principal=member("nlp")
        )
        assert (refused.status, refused.body["field"]) == (422, field), template
        assert refused.body["error"].startswith(field)
    both = api.call("POST", "/jobs", base | {"image": "llama:1"}, principal=member("nlp"))
    assert (both.status, both.body["field"]) == (422, "pod_template")
    assert len(api.jobs.records()) == 1


def test_the_documented_pod_template_example_is_accepted_as_written(stack: Stack) -> None:
    text = (ROOT / "docs" / "api.md").read_text()
    section = text[text.index("**A job with its own pod template.**") :]
    start = section.index("```json") + len("```json")
    example = json.loads(section[start : section.index("```", start)])
    api = _api(stack)
    reply = api.call("POST", "/jobs", example, principal=member("nlp"))
    assert reply.status == 201, reply.body
    assert reply.body["pod_template"] == example["pod_template"]


def test_the_example_job_and_pod_template_files_are_accepted_as_written(stack: Stack) -> None:
    """docs/examples/, as `hyperguard jobs submit job.json --pod-template pod-template.yaml`
    sends them."""
    job = json.loads((ROOT / "docs" / "examples" / "job.json").read_text())
    template = yaml.safe_load((ROOT / "docs" / "examples" / "pod-template.yaml").read_text())
    api = _api(stack)
    api.call("PUT", "/scheduler-config", {"PriorityClasses": [{"Name": "training", "Weight": 50}]})
    reply = api.call("POST", "/jobs", job | {"pod_template": template}, principal=member("nlp"))
    assert reply.status == 201, reply.body
    assert reply.body["pod_template"] == template


def test_a_checkpoint_bucket_the_roles_cannot_read_is_refused_naming_bucket_and_roles(
    stack: Stack,
) -> None:
    """A mistyped bucket (or one the deployment's roles are not granted) is a 422 at
    submission, naming the bucket and the roles, instead of a job whose progress the scheduler
    can never read (D139); the deployment's own bucket is accepted."""
    api = _api(stack)
    base = {"instance_type": "ml.p5.48xlarge", "image": "trainer:1"}
    mistyped = base | {"checkpoint_location": "s3://buckett/run/"}
    typo = api.call("POST", "/jobs", mistyped, principal=member("nlp"))
    assert (typo.status, typo.body["field"]) == (422, "checkpoint_location")
    message = typo.body["error"]
    assert "'buckett'" in message and f"'{CHECKPOINT_BUCKET}'" in message
    assert all(role in message for role in CHECKPOINT_READERS)
    assert api.jobs.records() == [] and api.wakeup.reasons == []
    ok = api.call(
        "POST",
        "/jobs",
        base | {"checkpoint_location": f"s3://{CHECKPOINT_BUCKET}/run/"},
        principal=member("nlp"),
    )
    assert ok.status == 201 and ok.body["checkpoint_location"] == f"s3://{CHECKPOINT_BUCKET}/run/"


def test_list_filters_and_paginates_within_a_team(stack: Stack) -> None:
    api = _api(stack)
    ids = [api.submit("nlp", 1, principal=member("nlp")).body["job_id"] for _ in range(5)]
    high = api.submit("nlp", 1, principal=member("nlp"), priority_class="high").body["job_id"]
    api.submit("cv", 1, principal=member("cv"))
    seen: list[str] = []
    token = None
    pages = 0
    while True:
        query = {"limit": "2"} | ({"next_token": token} if token else {})
        page = api.call("GET", "/jobs", principal=member("nlp"), query=query).body
        seen += [j["job_id"] for j in page["jobs"]]
        pages += 1
        token = page["next_token"]
        if token is None:
            break
    assert pages == 3 and sorted(seen) == sorted([*ids, high])
    filtered = api.call("GET", "/jobs", principal=member("nlp"), query={"priority_class": "high"})
    assert [j["job_id"] for j in filtered.body["jobs"]] == [high]
    by_status = api.call("GET", "/jobs", query={"team": "cv", "status": "Pending"}).body
    assert len(by_status["jobs"]) == 1
    assert api.call("GET", "/jobs", principal=member("nlp"), query={"team": "cv"}).status == 403
    assert api.call("GET", "/jobs", query={"status": "Sleeping"}).status == 422
    assert len(api.call("GET", "/jobs", query={"limit": "100"}).body["jobs"]) == 7


def test_cancel_and_checkpoints(stack: Stack) -> None:
    api = _api(stack)
    job_id = api.submit("nlp", 8, principal=member("nlp")).body["job_id"]
    ckpt = {"step": 100, "uri": "s3://ckpt-bucket/nlp/100"}
    assert (
        api.call("POST", f"/jobs/{job_id}/checkpoints", ckpt, principal=member("cv")).status == 404
    )
    reply = api.call("POST", f"/jobs/{job_id}/checkpoints", ckpt, principal=member("nlp"))
    assert reply.status == 201 and reply.body["last_checkpoint"]["step"] == 100
    older = api.call("POST", f"/jobs/{job_id}/checkpoints", ckpt | {"step": 50})
    assert older.status == 409 and older.body["field"] == "step"
    assert api.call("DELETE", f"/jobs/{job_id}", principal=member("cv")).status == 404
    cancelled = api.call("DELETE", f"/jobs/{job_id}", principal=member("nlp"))
    assert cancelled.status == 200 and cancelled.body["status"] == "Cancelled"
    assert [h["event"] for h in cancelled.body["history"]] == [
        "submitted",
        "checkpoint",
        "cancelled",
    ]
    again = api.call("DELETE", f"/jobs/{job_id}")
    assert again.status == 409 and again.body == {
        "error": f"job {job_id} is already Cancelled",
        "field": "jobId",
    }
    assert api.call("GET", "/jobs/nope").status == 404


def test_incidents_and_node_actions(stack: Stack) -> None:
    api = _api(stack)
    assert api.call("GET", "/incidents").body == {"incidents": []}
    assert api.call("GET", "/incidents/nope").status == 404
    node = "i-0123456789abcdef0"
    ok = api.call("POST", f"/nodes/{node}/actions", {"action": "veto", "reason": "firmware"})
    assert ok.status == 202 and ok.body["result"]["call"] == ["veto", node, "firmware"]
    assert api.call("POST", f"/nodes/{node}/actions", {"action": "veto"}).status == 422
    assert api.call("POST", "/nodes/not-a-node/actions", {"action": "reboot"}).status == 422
    no_incident = api.call("POST", f"/nodes/{node}/actions", {"action": "approve"})
    assert no_incident.status == 409 and no_incident.body["field"] == "incident_id"
    denied = api.call(
        "POST", f"/nodes/{node}/actions", {"action": "reboot"}, principal=member("nlp")
    )
    assert denied.status == 403
    assert api.node_actions.calls == [("veto", node, "firmware")]
    assert api.proxy.match("/nowhere") is None
