"""Task-governance models: AWS JSON round-trips, validation, quota resolution."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError
from tests.conftest import catalogue

from hyperguard.catalogue import UnknownInstanceTypeError
from hyperguard.models.governance import (
    ComputeQuota,
    ComputeQuotaResourceConfig,
    ResourceAmount,
    SchedulerConfig,
    resolve_quota_resource,
    resolve_quota_resources,
)

CATALOGUE = catalogue()

AWS_QUOTA = {
    "Name": "ml-a-quota",
    "Description": "team a",
    "ClusterArn": "arn:aws:sagemaker:us-east-1:123456789012:cluster/abcdefabcdef",
    "ComputeQuotaConfig": {
        "ComputeQuotaResources": [
            {"InstanceType": "ml.p5.48xlarge", "Accelerators": 2},
            {"InstanceType": "ml.g5.12xlarge", "Count": 1, "VCpu": 4.0, "MemoryInGiB": 16.0},
            {
                "InstanceType": "ml.p4d.24xlarge",
                "AcceleratorPartition": {"Type": "mig-1g.5gb", "Count": 7},
            },
        ],
        "ResourceSharingConfig": {
            "Strategy": "LendAndBorrow",
            "BorrowLimit": 150,
            "AbsoluteBorrowLimits": [{"InstanceType": "ml.p5.48xlarge", "Accelerators": 8}],
        },
        "PreemptTeamTasks": "Never",
    },
    "ComputeQuotaTarget": {"TeamName": "ml-a", "FairShareWeight": 10},
    "ActivationState": "Enabled",
    "ComputeQuotaVersion": 4,
    "Status": "Updated",
}


def test_compute_quota_round_trips_aws_json() -> None:
    quota = ComputeQuota.model_validate(AWS_QUOTA)
    assert quota.version == 4
    assert quota.compute_quota_config.resource_sharing_config.borrow_limit == 150
    assert quota.model_dump(mode="json", exclude_none=True) == AWS_QUOTA


def test_defaults_match_the_api() -> None:
    quota = ComputeQuota.model_validate(
        {
            "Name": "q",
            "ClusterArn": "arn",
            "ComputeQuotaConfig": {},
            "ComputeQuotaTarget": {"TeamName": "t"},
        }
    )
    assert quota.compute_quota_config.preempt_team_tasks == "LowerPriority"
    assert quota.compute_quota_target.fair_share_weight == 0
    config = SchedulerConfig.model_validate({})
    assert (config.fair_share, config.idle_resource_sharing) == ("Enabled", "Enabled")


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("Name",), "-bad"),
        (("Name",), "a" * 64),
        (("Description",), "x" * 1025),
        (("ComputeQuotaTarget", "TeamName"), "Upper"),
        (("ComputeQuotaTarget", "TeamName"), "ends-"),
        (("ComputeQuotaTarget", "FairShareWeight"), 101),
        (("ComputeQuotaConfig", "ResourceSharingConfig", "BorrowLimit"), 10001),
        (("ComputeQuotaConfig", "ResourceSharingConfig", "Strategy"), "Borrow"),
        (("ComputeQuotaConfig", "PreemptTeamTasks"), "Always"),
        (("ComputeQuotaConfig", "ComputeQuotaResources"), [{"InstanceType": "x"}] * 16),
        (("ActivationState",), "On"),
    ],
)
def test_invalid_quota_fields_are_rejected(path: tuple[str, ...], value: object) -> None:
    import copy

    body = copy.deepcopy(AWS_QUOTA)
    target: dict[str, Any] = body
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    with pytest.raises(ValidationError):
        ComputeQuota.model_validate(body)


def test_scheduler_config_limits() -> None:
    too_many = [{"Name": f"c{i}", "Weight": i} for i in range(11)]
    with pytest.raises(ValidationError):
        SchedulerConfig.model_validate({"PriorityClasses": too_many})
    with pytest.raises(ValidationError):
        SchedulerConfig.model_validate({"PriorityClasses": [{"Name": "a", "Weight": 101}]})
    with pytest.raises(ValidationError):
        SchedulerConfig.model_validate(
            {"PriorityClasses": [{"Name": "a", "Weight": 1}, {"Name": "a", "Weight": 2}]}
        )


@pytest.mark.parametrize(
    ("resource", "expected"),
    [
        ({"InstanceType": "ml.p5.48xlarge", "Accelerators": 2}, (2, 48, 512)),
        ({"InstanceType": "ml.p4d.24xlarge", "Accelerators": 4}, (4, 48, 576)),
        ({"InstanceType": "ml.g5.12xlarge", "Accelerators": 1}, (1, 12, 48)),
        ({"InstanceType": "ml.trn1.32xlarge", "Accelerators": 4}, (4, 32, 128)),
        ({"InstanceType": "p5.48xlarge", "Count": 2}, (16, 384, 4096)),
        ({"InstanceType": "ml.g5.48xlarge", "Count": 1}, (8, 192, 768)),
        # Types the hand-written catalogue did not know (published task-governance examples).
        ({"InstanceType": "ml.g5.2xlarge", "Accelerators": 1}, (1, 8, 32)),
        ({"InstanceType": "ml.g6.12xlarge", "Accelerators": 2}, (2, 24, 96)),
        ({"InstanceType": "ml.trn2.48xlarge", "Accelerators": 4}, (4, 48, 512)),
    ],
)
def test_resolve_quota_resource(
    resource: dict[str, Any], expected: tuple[int, float, float]
) -> None:
    amount = resolve_quota_resource(ComputeQuotaResourceConfig.model_validate(resource), CATALOGUE)
    assert (amount.accelerators, amount.vcpu, amount.memory_gib) == expected


P5 = "ml.p5.48xlarge"
"""8 GPUs, 192 vCPUs, 2048 GiB (the catalogue's figures)."""

PUBLISHED_RULES = [
    # ComputeQuotaResourceConfig.Accelerators (botocore sagemaker model): "If you don't
    # specify a value for vCPU and MemoryInGiB, SageMaker AI automatically allocates
    # ratio-based values for those parameters based on the number of accelerators you
    # provide. For example, if you allocate 16 out of 32 total accelerators, SageMaker AI
    # uses the ratio of 0.5 and allocates values to vCPU and MemoryInGiB."
    ("16 of 32 accelerators (4 instances)", {"Accelerators": 16}, (16, 384, 4096)),
    ("2 of one instance's 8 accelerators", {"Accelerators": 2}, (2, 48, 512)),
    # .VCpu: "If you specify a value only for vCPU, SageMaker AI automatically allocates
    # ratio-based values for MemoryInGiB based on this vCPU parameter. For example, if you
    # allocate 20 out of 40 total vCPU, SageMaker AI uses the ratio of 0.5 and allocates
    # values to MemoryInGiB. Accelerators are set to 0."
    ("vCPU only: half the vCPUs, half the memory", {"VCpu": 96}, (0, 96, 1024)),
    # .MemoryInGiB: "If you specify a value only for this parameter, SageMaker AI
    # automatically allocates a ratio-based value for vCPU based on this memory that you
    # provide. For example, if you allocate 200 out of 400 total memory in GiB, SageMaker AI
    # uses the ratio of 0.5 and allocates values to vCPU. Accelerators are set to 0."
    ("memory only: half the memory, half the vCPUs", {"MemoryInGiB": 1024}, (0, 96, 1024)),
    # Mixed entries: the accelerators' ratio is for "vCPU and MemoryInGiB" both left out;
    # once one of them is given, the other follows it (its own rule), not the accelerators.
    ("accelerators and vCPU: memory follows vCPU", {"Accelerators": 8, "VCpu": 96}, (8, 96, 1024)),
    (
        "accelerators and memory: vCPU follows memory",
        {"Accelerators": 2, "MemoryInGiB": 100},
        (2, 9.375, 100),
    ),
    ("vCPU and memory: both kept, no accelerators", {"VCpu": 4, "MemoryInGiB": 8}, (0, 4, 8)),
    ("all three kept", {"Accelerators": 1, "VCpu": 4, "MemoryInGiB": 8}, (1, 4, 8)),
    # .Count: "The number of instances": whole instances, whatever else the entry says.
    ("count: whole instances", {"Count": 2}, (16, 384, 4096)),
    ("nothing given: nothing granted", {}, (0, 0, 0)),
]


@pytest.mark.parametrize(
    ("given", "expected"),
    [pytest.param(given, expected, id=name) for name, given, expected in PUBLISHED_RULES],
)
def test_resolution_follows_the_published_rules(
    given: dict[str, Any], expected: tuple[int, float, float]
) -> None:
    resource = ComputeQuotaResourceConfig.model_validate({"InstanceType": P5, **given})
    amount = resolve_quota_resource(resource, CATALOGUE)
    assert (amount.accelerators, amount.vcpu, amount.memory_gib) == expected


def test_entries_for_the_same_instance_type_add_up() -> None:
    resources = [
        ComputeQuotaResourceConfig.model_validate({"InstanceType": "ml.p5.48xlarge", "Count": 1}),
        ComputeQuotaResourceConfig.model_validate(
            {"InstanceType": "ml.p5.48xlarge", "Accelerators": 4}
        ),
    ]
    totals = resolve_quota_resources(resources, CATALOGUE)
    assert totals == {"ml.p5.48xlarge": ResourceAmount(12, 288_000, 3072 * 1024)}


def test_unknown_instance_type_is_a_typed_error() -> None:
    with pytest.raises(UnknownInstanceTypeError):
        resolve_quota_resource(
            ComputeQuotaResourceConfig.model_validate({"InstanceType": "ml.x9", "Count": 1}),
            CATALOGUE,
        )
