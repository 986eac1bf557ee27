"""Quotas, scheduler policy and principals through the API handler."""

from __future__ import annotations

from tests.conftest import Stack
from tests.integration.api_harness import Api, member, quota_body

from hyperguard.models.governance import SchedulerConfig
from hyperguard.policies.burst import BurstPolicy
from hyperguard.policies.repair import NodeRepairConfig
from hyperguard.store.codec import wire_client
from hyperguard.store.policy import BurstPolicyStore, RepairPolicyStore, pass_settings


def test_create_then_update_with_target_version_and_reject_a_stale_one(stack: Stack) -> None:
    api = Api(stack)
    created = api.quota("nlp", 16)
    assert created.status == 201 and created.body["ComputeQuotaVersion"] == 1
    updated = api.call("PUT", "/teams/nlp/compute-quota", quota_body("nlp", 24, version=1))
    assert updated.status == 200 and updated.body["ComputeQuotaVersion"] == 2
    assert updated.body["Status"] == "Updated"
    stale = api.call("PUT", "/teams/nlp/compute-quota", quota_body("nlp", 8, version=1))
    assert stale.status == 409
    assert stale.body == {
        "error": "stale TargetVersion: current version is 2, request targets 1",
        "field": "TargetVersion",
    }
    unversioned = api.call("PUT", "/teams/nlp/compute-quota", quota_body("nlp", 8))
    assert unversioned.status == 409
    quota = api.call("GET", "/teams/nlp/compute-quota").body
    assert quota["ComputeQuotaVersion"] == 2
    assert quota["ResolvedResources"][0]["Accelerators"] == 24
    assert api.wakeup.reasons == ["quota changed", "quota changed"]


def test_a_gpu_only_quota_shows_resolved_vcpu_and_memory(stack: Stack) -> None:
    api = Api(stack)
    api.quota("nlp", 2)
    body = api.call("GET", "/teams/nlp/compute-quota").body
    assert body["ResolvedResources"] == [
        {"InstanceType": "ml.p5.48xlarge", "Accelerators": 2, "VCpu": 48.0, "MemoryInGiB": 512.0}
    ]


def test_a_mixed_quota_entry_resolves_as_hyperpod_publishes(stack: Stack) -> None:
    """GPUs and vCPU given: memory follows the vCPU (VCpu's rule), not the GPUs."""
    api = Api(stack)
    body = quota_body("nlp", 2)
    body["ComputeQuotaConfig"]["ComputeQuotaResources"] = [
        {"InstanceType": "ml.p5.48xlarge", "Accelerators": 8, "VCpu": 96}
    ]
    assert api.call("PUT", "/teams/nlp/compute-quota", body).status == 201
    resolved = api.call("GET", "/teams/nlp/compute-quota").body["ResolvedResources"]
    assert resolved == [
        {"InstanceType": "ml.p5.48xlarge", "Accelerators": 8, "VCpu": 96.0, "MemoryInGiB": 1024.0}
    ]


def test_invalid_quotas_name_the_field_and_write_nothing(stack: Stack) -> None:
    api = Api(stack)
    cases = [
        (
            quota_body("nlp", 8) | {"ComputeQuotaTarget": {"TeamName": "cv"}},
            422,
            "ComputeQuotaTarget.TeamName",
        ),
        ({**quota_body("nlp", 8), "Bogus": 1}, 422, "Bogus"),
        (
            {
                **quota_body("nlp", 8),
                "ComputeQuotaConfig": {
                    "ComputeQuotaResources": [{"InstanceType": "ml.nope", "Accelerators": 1}]
                },
            },
            422,
            "ComputeQuotaConfig.ComputeQuotaResources[0].InstanceType",
        ),
        (
            {
                **quota_body("nlp", 8),
                "ComputeQuotaConfig": {
                    "ComputeQuotaResources": [
                        {"InstanceType": "ml.p5.48xlarge", "Accelerators": 8},
                        {
                            "InstanceType": "ml.p5.48xlarge",
                            "AcceleratorPartition": {"Type": "mig-1g.10gb", "Count": 7},
                        },
                    ]
                },
            },
            422,
            "ComputeQuotaConfig.ComputeQuotaResources[1].AcceleratorPartition",
        ),
        (
            {
                **quota_body("nlp", 8),
                "ComputeQuotaConfig": {
                    "ResourceSharingConfig": {
                        "AbsoluteBorrowLimits": [
                            {
                                "InstanceType": "ml.p5.48xlarge",
                                "AcceleratorPartition": {"Type": "mig-3g.40gb", "Count": 2},
                            }
                        ]
                    }
                },
            },
            422,
            "ComputeQuotaConfig.ResourceSharingConfig.AbsoluteBorrowLimits[0].AcceleratorPartition",
        ),
        (
            {
                **quota_body("nlp", 8),
                "ComputeQuotaConfig": {"ResourceSharingConfig": {"BorrowLimit": 10001}},
            },
            422,
            "ComputeQuotaConfig.ResourceSharingConfig.BorrowLimit",
        ),
        (
            {
                **quota_body("nlp", 8),
                "ComputeQuotaTarget": {"TeamName": "nlp", "FairShareWeight": 101},
            },
            422,
            "ComputeQuotaTarget.FairShareWeight",
        ),
    ]
    for body, status, field in cases:
        reply = api.call("PUT", "/teams/nlp/compute-quota", body)
        assert (reply.status, reply.body["field"]) == (status, field), body
    assert api.call("PUT", "/teams/nlp/compute-quota", raw="{").status == 400
    assert api.teams.quotas() == [] and api.wakeup.reasons == []


def test_quota_and_policy_changes_need_the_admin_role(stack: Stack) -> None:
    api = Api(stack)
    api.call("PUT", "/principals", {"principal_arn": member("nlp"), "team": "nlp"})
    api.quota("nlp", 8)
    forbidden = api.call(
        "PUT",
        "/teams/nlp/compute-quota",
        quota_body("nlp", 80, version=1),
        principal=member("nlp"),
    )
    assert forbidden.status == 403 and forbidden.body["field"] is None
    quota = api.teams.get_quota("nlp")
    assert quota is not None and quota.version == 1
    assert api.call("PUT", "/scheduler-config", {}, principal=member("nlp")).status == 403
    assert api.call("DELETE", "/teams/nlp/compute-quota", principal=member("nlp")).status == 403
    assert api.call("GET", "/teams/nlp/compute-quota", principal=member("nlp")).status == 200
    assert api.call("GET", "/teams/cv/compute-quota", principal=member("nlp")).status == 403
    stranger = "arn:aws:iam::123456789012:user/mallory"
    reply = api.call("GET", "/jobs", principal=stranger)
    assert reply.status == 403 and reply.body["error"] == f"{stranger} is not mapped to a team"


def test_list_teams_is_paginated_and_delete_checks_the_version(stack: Stack) -> None:
    api = Api(stack)
    for team in ("a", "b", "c"):
        api.quota(team, 8)
    first = api.call("GET", "/teams", query={"limit": "2"}).body
    assert [q["ComputeQuotaId"] for q in first["ComputeQuotas"]] == ["a", "b"]
    second = api.call("GET", "/teams", query={"limit": "2", "next_token": first["NextToken"]})
    assert [q["ComputeQuotaId"] for q in second.body["ComputeQuotas"]] == ["c"]
    assert second.body["NextToken"] is None
    bad = api.call("GET", "/teams", query={"next_token": "garbage!"})
    assert bad.status == 400 and bad.body["field"] == "next_token"
    stale = api.call("DELETE", "/teams/a/compute-quota", query={"TargetVersion": "7"})
    assert stale.status == 409 and api.teams.get_quota("a") is not None
    assert api.call("DELETE", "/teams/a/compute-quota").status == 204
    assert api.call("DELETE", "/teams/a/compute-quota").status == 404
    assert api.call("GET", "/teams/a/compute-quota").status == 404


def test_scheduler_config_round_trips_with_its_version(stack: Stack) -> None:
    api = Api(stack)
    assert api.call("GET", "/scheduler-config").body == {
        "SchedulerConfig": {
            "PriorityClasses": [],
            "FairShare": "Enabled",
            "IdleResourceSharing": "Enabled",
            "MinRuntimeSeconds": 0,
        },
        "Version": 0,
    }
    config = {"PriorityClasses": [{"Name": "high", "Weight": 100}], "FairShare": "Disabled"}
    assert api.call("PUT", "/scheduler-config", config | {"TargetVersion": 0}).body["Version"] == 1
    assert api.call("PUT", "/scheduler-config", config | {"TargetVersion": 0}).status == 409
    duplicate = {"PriorityClasses": [{"Name": "a", "Weight": 1}, {"Name": "a", "Weight": 2}]}
    reply = api.call("PUT", "/scheduler-config", duplicate)
    assert reply.status == 422 and "unique" in reply.body["error"]
    got = api.call("GET", "/scheduler-config").body
    assert got["Version"] == 1 and got["SchedulerConfig"]["FairShare"] == "Disabled"
    for bad in (-1, 7 * 24 * 3600 + 1, 1.5, "600"):
        reply = api.call("PUT", "/scheduler-config", {"MinRuntimeSeconds": bad})
        assert reply.status == 422 and reply.body["field"] == "MinRuntimeSeconds", bad
    week = {"MinRuntimeSeconds": 7 * 24 * 3600, "TargetVersion": 1}
    assert api.call("PUT", "/scheduler-config", week).body["Version"] == 2
    got = api.call("GET", "/scheduler-config").body
    assert got["SchedulerConfig"]["MinRuntimeSeconds"] == 7 * 24 * 3600


def test_a_pass_reads_the_three_settings_in_one_call_and_each_default_where_unset(
    stack: Stack,
) -> None:
    """`pass_settings`: the repair, burst and scheduler policies of TeamsTable, as each
    store reads them, with one BatchGetItem; the defaults for those never stored."""
    api = Api(stack)
    teams = api.teams
    calls: list[str] = []
    clients = (wire_client(teams.table), teams.table.meta.client)  # the store's two
    for client in clients:
        client.meta.events.register(
            "before-call.dynamodb", lambda model, **_: calls.append(model.name), unique_id="n"
        )
    try:
        assert pass_settings(teams) == (NodeRepairConfig(), BurstPolicy(), SchedulerConfig())
        assert calls == ["BatchGetItem"]
        RepairPolicyStore(teams.table_name, teams.table).put(NodeRepairConfig(enabled=False))
        config = {"FairShare": "Disabled", "MinRuntimeSeconds": 600}
        assert api.call("PUT", "/scheduler-config", config).status == 200
        repair, burst, scheduler = pass_settings(teams)
    finally:
        for client in clients:
            client.meta.events.unregister("before-call.dynamodb", unique_id="n")
    assert repair == RepairPolicyStore(teams.table_name, teams.table).get()
    assert repair.enabled is False
    assert burst == BurstPolicyStore(teams.table_name, teams.table).get() == BurstPolicy()
    assert scheduler == teams.scheduler_config()[0]
    assert (scheduler.fair_share, scheduler.min_runtime_seconds) == ("Disabled", 600)
