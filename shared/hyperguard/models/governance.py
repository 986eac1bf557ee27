"""Task-governance shapes, field for field as SageMaker's CreateComputeQuota and
CreateClusterSchedulerConfig APIs spell them, and how a quota resolves into accelerators,
vCPU and memory (with the instance figures of hyperguard.catalogue).

Python fields are snake_case; their aliases are the AWS PascalCase names (VCpu and MemoryInGiB
spelled out where PascalCase conversion would get them wrong), and models serialise by alias,
so `Model.model_validate(aws_json)` and `model.model_dump(mode="json", exclude_none=True)`
round-trip the API JSON unchanged. Snake_case keeps field names from shadowing the class names
AWS reuses (`ComputeQuotaConfig.ResourceSharingConfig: ResourceSharingConfig`). The two fields
DescribeComputeQuota adds are `version` (ComputeQuotaVersion) and `status` (Status). One field
is HyperGuard's own: SchedulerConfig's `MinRuntimeSeconds` (botocore 1.44's SchedulerConfig
has only PriorityClasses, FairShare and IdleResourceSharing).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, NamedTuple

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictFloat,
    StrictInt,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_pascal

from hyperguard.catalogue import INSTANCE_TYPE_PATTERN, InstanceCatalogue, InstanceSpec, ml_name
from hyperguard.models.camel import DECIMALS

NAME_PATTERN = r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$"
TEAM_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9]){0,39}?$"


class AwsShape(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
        alias_generator=to_pascal,
    )

    @field_validator("*", mode="before")
    @classmethod
    def _rounded(cls, value: Any) -> Any:
        # DynamoDB stores no number below 1e-130; nothing here needs finer than 1e-6.
        return round(value, DECIMALS) if isinstance(value, float) else value


class SharingStrategy(StrEnum):
    LEND = "Lend"
    DONT_LEND = "DontLend"
    LEND_AND_BORROW = "LendAndBorrow"


class PreemptTeamTasks(StrEnum):
    NEVER = "Never"
    LOWER_PRIORITY = "LowerPriority"


class Toggle(StrEnum):
    """SageMaker's Enabled | Disabled switches: a compute quota's ActivationState, and
    SchedulerConfig's FairShare and IdleResourceSharing."""

    ENABLED = "Enabled"
    DISABLED = "Disabled"


class ComputeQuotaStatus(StrEnum):
    CREATING = "Creating"
    CREATE_FAILED = "CreateFailed"
    CREATE_ROLLBACK_FAILED = "CreateRollbackFailed"
    CREATED = "Created"
    UPDATING = "Updating"
    UPDATE_FAILED = "UpdateFailed"
    UPDATE_ROLLBACK_FAILED = "UpdateRollbackFailed"
    UPDATED = "Updated"
    DELETING = "Deleting"
    DELETE_FAILED = "DeleteFailed"
    DELETE_ROLLBACK_FAILED = "DeleteRollbackFailed"
    DELETED = "Deleted"


MAX_INSTANCES = 100_000
"""Upper bound of every per-quota amount (instances, and the accelerators, vCPU and GiB of
that many of the largest instance): keeps numbers inside what DynamoDB stores."""


class AcceleratorPartitionConfig(AwsShape):
    type: str = Field(min_length=1, max_length=64, description="MIG profile, e.g. mig-1g.10gb")
    count: StrictInt = Field(ge=0, le=MAX_INSTANCES * 64)


class ComputeQuotaResourceConfig(AwsShape):
    instance_type: str = Field(min_length=1, max_length=64, pattern=INSTANCE_TYPE_PATTERN)
    count: StrictInt | None = Field(
        default=None, ge=0, le=MAX_INSTANCES, description="whole instances"
    )
    accelerators: StrictInt | None = Field(default=None, ge=0, le=MAX_INSTANCES * 64)
    vcpu: StrictFloat | None = Field(default=None, ge=0, le=MAX_INSTANCES * 1024, alias="VCpu")
    memory_in_gib: StrictFloat | None = Field(
        default=None, ge=0, le=MAX_INSTANCES * 32768, alias="MemoryInGiB"
    )
    accelerator_partition: AcceleratorPartitionConfig | None = None


class ResourceSharingConfig(AwsShape):
    strategy: SharingStrategy = SharingStrategy.LEND_AND_BORROW
    borrow_limit: StrictInt | None = Field(
        default=None, ge=0, le=10000, description="percent of the team's own quota"
    )
    absolute_borrow_limits: list[ComputeQuotaResourceConfig] | None = Field(
        default=None, max_length=15
    )


class ComputeQuotaConfig(AwsShape):
    compute_quota_resources: list[ComputeQuotaResourceConfig] = Field(
        default_factory=list, max_length=15
    )
    resource_sharing_config: ResourceSharingConfig = Field(default_factory=ResourceSharingConfig)
    preempt_team_tasks: PreemptTeamTasks = PreemptTeamTasks.LOWER_PRIORITY


class ComputeQuotaTarget(AwsShape):
    team_name: str = Field(pattern=TEAM_NAME_PATTERN, min_length=1, max_length=63)
    fair_share_weight: StrictInt = Field(default=0, ge=0, le=100)


class ComputeQuota(AwsShape):
    name: str = Field(pattern=NAME_PATTERN, min_length=1, max_length=63)
    description: str | None = Field(default=None, max_length=1024)
    cluster_arn: str = Field(min_length=1, max_length=256)
    compute_quota_config: ComputeQuotaConfig
    compute_quota_target: ComputeQuotaTarget
    activation_state: Toggle = Toggle.ENABLED
    version: int = Field(default=1, ge=1, alias="ComputeQuotaVersion")
    status: ComputeQuotaStatus = Field(default=ComputeQuotaStatus.CREATED, alias="Status")


class PriorityClass(AwsShape):
    name: str = Field(pattern=TEAM_NAME_PATTERN, min_length=1, max_length=63)
    weight: StrictInt = Field(ge=0, le=100)


MAX_MIN_RUNTIME_SECONDS = 7 * 24 * 3600
"""A week: longer than any preemption protection a shared cluster would want, and short
enough that a typo (seconds meant as minutes) is refused rather than pinning jobs for months."""

MinRuntimeSeconds = Annotated[
    StrictInt,
    Field(
        ge=0,
        le=MAX_MIN_RUNTIME_SECONDS,
        description="HyperGuard's addition (SageMaker's SchedulerConfig has no such field): "
        "a running job younger than this many seconds is never preempted, neither to reclaim "
        "lent quota nor for a higher-priority job (it may still be shrunk); 0: no minimum",
    ),
]


class SchedulerConfig(AwsShape):
    priority_classes: list[PriorityClass] = Field(default_factory=list, max_length=10)
    fair_share: Toggle = Toggle.ENABLED
    idle_resource_sharing: Toggle = Toggle.ENABLED
    min_runtime_seconds: MinRuntimeSeconds = 0

    @model_validator(mode="after")
    def _unique_class_names(self) -> SchedulerConfig:
        names = [pc.name for pc in self.priority_classes]
        if len(names) != len(set(names)):
            raise ValueError("PriorityClasses names must be unique")
        return self


class ResourceAmount(NamedTuple):
    """Exact integer amounts: accelerators, milli-vCPU, MiB. Integers so that sums over
    thousands of jobs never drift the way float sums would."""

    accelerators: int
    vcpu_milli: int
    memory_mib: int

    @property
    def vcpu(self) -> float:
        return self.vcpu_milli / 1000

    @property
    def memory_gib(self) -> float:
        return self.memory_mib / 1024

    def __add__(self, other: object) -> ResourceAmount:
        if not isinstance(other, ResourceAmount):
            return NotImplemented
        return ResourceAmount(
            self.accelerators + other.accelerators,
            self.vcpu_milli + other.vcpu_milli,
            self.memory_mib + other.memory_mib,
        )

    def scaled(self, factor: int) -> ResourceAmount:
        return ResourceAmount(
            self.accelerators * factor, self.vcpu_milli * factor, self.memory_mib * factor
        )


ZERO = ResourceAmount(0, 0, 0)


def instance_amount(spec: InstanceSpec, count: int = 1) -> ResourceAmount:
    return ResourceAmount(spec.accelerators, spec.vcpu * 1000, spec.memory_mib).scaled(count)


def accelerator_share(spec: InstanceSpec, accelerators: int) -> ResourceAmount:
    """`accelerators` GPUs/Neuron devices plus the same fraction of the instance's vCPUs and
    memory (2 of 8 GPUs → 2/8 of them), rounded down to milli-vCPU and MiB."""
    if spec.accelerators == 0:
        raise ValueError("the instance type has no accelerators")
    return ResourceAmount(
        accelerators,
        spec.vcpu * 1000 * accelerators // spec.accelerators,
        spec.memory_mib * accelerators // spec.accelerators,
    )


PARTITIONS_REFUSED = (
    "AcceleratorPartition (MIG) quotas are not supported: HyperGuard's jobs request whole "
    "accelerators and the engine counts quota in them, so a partition quota could admit no "
    "job; give Accelerators (or Count) instead"
)
"""Why the API refuses an entry with AcceleratorPartition (D88)."""


def resolve_quota_resource(
    resource: ComputeQuotaResourceConfig, catalogue: InstanceCatalogue
) -> ResourceAmount:
    """What one ComputeQuotaResources entry grants, by the rules ComputeQuotaResourceConfig
    publishes (botocore's sagemaker model, its fields' documentation):

    * Count → that many whole instances.
    * Accelerators without VCpu and MemoryInGiB → vCPU and memory in proportion to the
      instance's accelerators ("16 out of 32 total accelerators … the ratio of 0.5").
    * VCpu without MemoryInGiB → memory in proportion to the instance's vCPUs ("20 out of
      40 total vCPU … allocates values to MemoryInGiB"); MemoryInGiB without VCpu → vCPU in
      proportion to its memory ("200 out of 400 total memory in GiB"). That holds whether or
      not Accelerators is given: with vCPU or memory given, the accelerators' proportion no
      longer applies (its rule is for neither being given).
    * Accelerators are never derived ("Accelerators are set to 0").

    Every value given is kept as given. Derived amounts round down to milli-vCPU and MiB.
    AcceleratorPartition grants nothing here: the API refuses it (PARTITIONS_REFUSED), and an
    entry stored before the API did resolves by its other fields.
    """
    spec = catalogue.spec(resource.instance_type)
    if resource.count is not None:
        return instance_amount(spec, resource.count)
    whole = instance_amount(spec)
    accelerators = resource.accelerators or 0
    match resource.vcpu, resource.memory_in_gib:
        case None, None:
            if whole.accelerators == 0:
                return ResourceAmount(accelerators, 0, 0)
            return accelerator_share(spec, accelerators)
        case float() as vcpu, None:
            vcpu_milli = round(vcpu * 1000)
            memory_mib = whole.memory_mib * vcpu_milli // whole.vcpu_milli
        case None, float() as memory:
            memory_mib = round(memory * 1024)
            vcpu_milli = whole.vcpu_milli * memory_mib // whole.memory_mib
        case float() as vcpu, float() as memory:
            vcpu_milli, memory_mib = round(vcpu * 1000), round(memory * 1024)
    return ResourceAmount(accelerators, vcpu_milli, memory_mib)


def resolve_quota_resources(
    resources: list[ComputeQuotaResourceConfig], catalogue: InstanceCatalogue
) -> dict[str, ResourceAmount]:
    """Sum the entries per instance type (an instance type may appear more than once), keyed
    by HyperPod's `ml.` name."""
    totals: dict[str, ResourceAmount] = {}
    for resource in resources:
        name = ml_name(resource.instance_type)
        totals[name] = totals.get(name, ZERO) + resolve_quota_resource(resource, catalogue)
    return totals
