"""Request and response bodies of the HyperGuard API.

Governance resources (compute quotas, the scheduler config) keep SageMaker's PascalCase
shapes field for field; jobs, views and incidents are HyperGuard's own and use snake_case,
like the `Job` model they come from.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StringConstraints,
    ValidationError,
    field_validator,
    model_validator,
)

from hyperguard.catalogue import INSTANCE_TYPE_PATTERN
from hyperguard.cluster.pod_template import MAX_POD_TEMPLATE_BYTES
from hyperguard.models import Checkpoint, Incident, JobStatus
from hyperguard.models.governance import (
    NAME_PATTERN,
    TEAM_NAME_PATTERN,
    AwsShape,
    ComputeQuota,
    ComputeQuotaConfig,
    ComputeQuotaTarget,
    MinRuntimeSeconds,
    PriorityClass,
    SchedulerConfig,
    Toggle,
)
from hyperguard.models.jobs import (
    AUTO_RESUME_RETRIES,
    LOG_MONITORING_RETRIES,
    MAX_LOG_RULES,
    MAX_REPLICAS,
    MAX_RETRIES,
    ClusterObject,
    ElasticPolicy,
    Heartbeat,
    JobRecovery,
    JobSource,
    LogMonitoringRule,
    SlowFlag,
)
from hyperguard.models.records import JobHistoryEntry, JobRecord

S3_URI = r"^s3://[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9](/.*)?$"
MAX_ARGUMENT = 4096
MAX_COMMAND = 16384
MAX_STEP = 10**15
"""Larger than any training's step count; DynamoDB numbers stop at 38 digits."""
MAX_VERSION = 10**15
"""Larger than any count of a resource's updates: a `TargetVersion` of more than 38 digits
failed the conditional write (decimal.Rounded) and answered 500."""
MIN_STEP_SECONDS = 1e-6
"""A node's compute seconds per step, at least: a microsecond is no step's real time, and a
number nearer zero than DynamoDB stores (1e-130) answered 500."""
MAX_STEP_SECONDS = 3600
IDEMPOTENCY_KEY = r"^[\x21-\x7e]{1,128}$"
INSTANCE_ID = r"^i-[a-f0-9]{8}(?:[a-f0-9]{9})?$"


# -- jobs ---------------------------------------------------------------------------------
class JobTemplate(StrEnum):
    PRODUCTION = "production"
    DEVELOPMENT = "development"
    RESEARCH = "research"


class AcceleratorKind(StrEnum):
    """Accelerator names a job may ask for instead of an instance type."""

    H100 = "h100"
    H200 = "h200"
    A100 = "a100"
    A10G = "a10g"
    L40S = "l40s"
    TRAINIUM = "trainium"
    TRAINIUM2 = "trainium2"


ACCELERATOR_INSTANCE: dict[AcceleratorKind, str] = {
    AcceleratorKind.H100: "ml.p5.48xlarge",
    AcceleratorKind.H200: "ml.p5e.48xlarge",
    AcceleratorKind.A100: "ml.p4d.24xlarge",
    AcceleratorKind.A10G: "ml.g5.48xlarge",
    AcceleratorKind.L40S: "ml.g6e.48xlarge",
    AcceleratorKind.TRAINIUM: "ml.trn1.32xlarge",
    AcceleratorKind.TRAINIUM2: "ml.trn2.48xlarge",
}


class JobSubmission(BaseModel):
    model_config = ConfigDict(extra="forbid")

    team: str | None = Field(
        default=None,
        pattern=TEAM_NAME_PATTERN,
        max_length=63,
        description="defaults to the caller's team; admins must name one",
    )
    name: str | None = Field(
        default=None,
        pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
        max_length=63,
        description="your name for the job (need not be unique); HyperGuard gives it an id",
    )
    priority_class: str | None = Field(
        default=None,
        max_length=63,
        description="a PriorityClasses name; none → the lowest priority",
    )
    template: JobTemplate = JobTemplate.PRODUCTION
    instance_type: str | None = Field(
        default=None,
        min_length=1,
        max_length=64,
        pattern=INSTANCE_TYPE_PATTERN,
        description="e.g. ml.p5.48xlarge",
    )
    accelerator: AcceleratorKind | None = Field(
        default=None, description="instead of instance_type: the accelerator kind"
    )
    accelerators_per_replica: StrictInt = Field(default=8, ge=1, le=64)
    replicas: StrictInt = Field(
        default=1, ge=1, le=MAX_REPLICAS, description="elastic jobs: the size to start with"
    )
    elastic_policy: ElasticPolicy | None = Field(
        default=None,
        description="HyperPodPyTorchJob's elasticPolicy: the job may run with fewer or more "
        "replicas as capacity allows (names as HyperPod spells them)",
    )
    log_monitoring_configuration: list[LogMonitoringRule] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_LOG_RULES,
        description="HyperPodPyTorchJob's runPolicy.logMonitoringConfiguration: rules the "
        "HyperPod training operator applies to the job's logs to find a hung or slow job "
        "and restart it (names as HyperPod spells them); HyperPod runs only",
    )
    recovery: JobRecovery = Field(
        default_factory=JobRecovery, description="what recovery does when a node fails"
    )
    max_steps: StrictInt | None = Field(
        default=None, ge=1, le=10**9, description="the training's length in steps, if known"
    )
    image: str | None = Field(
        default=None,
        min_length=1,
        max_length=1024,
        description="the short form: the training container's image (or give pod_template)",
    )
    command: list[Annotated[str, StringConstraints(max_length=MAX_ARGUMENT)]] = Field(
        default_factory=list,
        max_length=256,
        description=f"the short form: at most 256 arguments of at most {MAX_ARGUMENT} "
        f"characters, {MAX_COMMAND} in all",
    )
    pod_template: dict[str, Any] | None = Field(
        default=None,
        description="instead of image and command: the replicas' pod template, a Kubernetes "
        "core/v1 PodTemplateSpec (containers with env, envFrom, args, resources, "
        "volumeMounts; volumes; serviceAccountName; tolerations; affinity; securityContext; "
        f"...), at most {MAX_POD_TEMPLATE_BYTES} bytes as JSON. The first container is the "
        "training container. HyperGuard adds placement, its labels, Kueue's, the resume "
        "variables, a burst pool's tolerations and, unless the template says otherwise, the "
        "replica's share of the instance's EFA interfaces and of 90 % of its memory as "
        "requests; a template that "
        "sets what HyperGuard owns (nodeName, hostname, subdomain, priority, a restartPolicy "
        "other than Never, required node affinity, hyperguard.io/ or kueue.x-k8s.io/ labels, "
        "HYPERGUARD_* or the rendezvous variables) is refused, naming the field",
    )
    checkpoint_location: str | None = Field(default=None, max_length=1024, pattern=S3_URI)
    auto_resume: StrictBool = False
    max_retries: StrictInt | None = Field(
        default=None,
        ge=0,
        le=MAX_RETRIES,
        description="HyperPodPyTorchJob's runPolicy.jobMaxRetryCount: how many times the "
        "HyperPod training operator restarts a failed or hung run by itself before it fails. "
        f"Default: {AUTO_RESUME_RETRIES} with auto_resume, {LOG_MONITORING_RETRIES} with "
        "log_monitoring_configuration, else 0 (HyperGuard's recovery decides after a node "
        "fault); HyperPod runs only",
    )

    @model_validator(mode="after")
    def _consistent(self) -> JobSubmission:
        if (self.instance_type is None) == (self.accelerator is None):
            raise ValueError("name exactly one of instance_type and accelerator")
        if sum(len(argument) for argument in self.command) > MAX_COMMAND:
            raise ValueError(f"command is longer than {MAX_COMMAND} characters in all")
        policy = self.elastic_policy
        if policy is not None and self.replicas not in policy.sizes():
            raise ValueError(
                f"replicas {self.replicas} is not a size the elasticPolicy allows "
                f"({', '.join(map(str, policy.sizes()))})"
            )
        return self


NodeStepSeconds = dict[
    Annotated[str, StringConstraints(pattern=INSTANCE_ID)],
    Annotated[
        float, Field(ge=MIN_STEP_SECONDS, le=MAX_STEP_SECONDS, strict=True, allow_inf_nan=False)
    ],
]
"""Each node's (instance id's) mean compute seconds per step, as a job reports them."""


class CheckpointReport(BaseModel):
    model_config = ConfigDict(extra="forbid")

    step: StrictInt = Field(ge=0, le=MAX_STEP)
    uri: str = Field(max_length=1024, pattern=S3_URI)
    completed_at: AwareDatetime | None = Field(
        default=None, description="defaults to now; between 2000 and a day from now"
    )
    node_step_seconds: NodeStepSeconds | None = Field(
        default=None,
        max_length=MAX_REPLICAS,
        description="each node's (instance id's) mean compute seconds per step since the "
        "previous checkpoint, before collectives wait: names the node a slow job waits for",
    )

    @field_validator("completed_at")
    @classmethod
    def _plausible(cls, value: datetime | None) -> datetime | None:
        return _plausible(value, "completed_at")


class ProgressReport(BaseModel):
    """A heartbeat of the training (D165): `POST /jobs/{jobId}/progress`."""

    model_config = ConfigDict(extra="forbid")

    run: StrictInt = Field(ge=0, le=MAX_STEP, description="HYPERGUARD_RUN of the sender")
    step: StrictInt = Field(ge=0, le=MAX_STEP)
    at: AwareDatetime | None = Field(
        default=None, description="defaults to now; between 2000 and a day from now"
    )
    node_step_seconds: NodeStepSeconds | None = Field(
        default=None,
        max_length=MAX_REPLICAS,
        description="each node's (instance id's) mean compute seconds per step since the "
        "previous heartbeat, before collectives wait: names the node a slow job waits for",
    )

    @field_validator("at")
    @classmethod
    def _plausible(cls, value: datetime | None) -> datetime | None:
        return _plausible(value, "at")


def _plausible(value: datetime | None, name: str) -> datetime | None:
    if value is not None and not (
        datetime(2000, 1, 1, tzinfo=UTC) <= value <= datetime.now(UTC) + timedelta(days=1)
    ):
        raise ValueError(f"{name} must be between 2000 and a day from now")
    return value


class JobView(BaseModel):
    job_id: str
    name: str | None
    team: str
    priority_class: str | None
    template: str
    instance_type: str
    accelerators_per_replica: int
    replicas: int
    elastic_policy: ElasticPolicy | None
    log_monitoring_configuration: list[LogMonitoringRule] | None = None
    recovery: JobRecovery
    max_steps: int | None
    image: str = Field(description="the short form's image (empty with pod_template)")
    command: list[str]
    pod_template: dict[str, Any] | None = Field(
        default=None, description="the pod template as submitted, if one was"
    )
    checkpoint_location: str | None
    auto_resume: bool
    max_retries: int | None = Field(description="as submitted; null: the default")
    operator_retries: int = Field(
        description="the jobMaxRetryCount its HyperPod runs get: max_retries or the default"
    )
    status: JobStatus
    reason: str = Field(description="why the job is in its current status")
    nodes: list[str] = Field(description="one instance id per replica")
    pool: str | None
    last_checkpoint: Checkpoint | None
    restart_count: int
    run: int = Field(description="how many times it was dispatched, less one")
    protected_by: str | None = Field(description="the incident whose recovery has it now")
    submitted_at: datetime | None
    first_admitted_at: datetime | None
    started_at: datetime | None
    scaled_at: datetime | None
    ended_at: datetime | None
    run_time_s: float | None = Field(description="first admission to end, once ended")
    slow: SlowFlag | None = Field(
        default=None,
        description="set while it runs far below its own recent step rate (slowJobRatio, D100)",
    )
    pace_by: Literal["heartbeats", "checkpoints"] | None = Field(
        default=None,
        description="what its pace is judged from while it runs: the training's heartbeats "
        "(POST /jobs/{jobId}/progress, D165) or its checkpoints' completion times",
    )
    heartbeat: Heartbeat | None = Field(
        default=None, description="the current run's last heartbeat, if it sends them"
    )
    history: list[JobHistoryEntry] | None = Field(
        default=None, description="admissions, placements, preemptions, restarts, checkpoints"
    )
    source: JobSource = Field(
        description="api: submitted through this API; cluster: applied to the team's "
        "namespace with kubectl or the HyperPod CLI and held by Kueue for HyperGuard (D170)"
    )
    cluster_object: ClusterObject | None = Field(
        default=None, description="with source cluster: the object applied, and its Workload"
    )

    @classmethod
    def of(cls, record: JobRecord, *, with_history: bool = False) -> JobView:
        job = record.job
        return cls(
            **job.model_dump(exclude={"nodes"}),
            nodes=list(job.nodes),
            operator_retries=job.operator_retries(),
            reason=record.reason,
            protected_by=record.protected_by,
            first_admitted_at=record.first_admitted_at,
            started_at=record.started_at,
            scaled_at=record.scaled_at,
            ended_at=record.ended_at,
            run_time_s=record.run_time_s,
            slow=record.slow if job.status is JobStatus.RUNNING else None,
            pace_by=_pace_by(record),
            heartbeat=record.heartbeats(),
            history=list(record.history) if with_history else None,
        )


def _pace_by(record: JobRecord) -> Literal["heartbeats", "checkpoints"] | None:
    if record.job.status is not JobStatus.RUNNING:
        return None
    return "heartbeats" if record.heartbeats() is not None else "checkpoints"


class JobPage(BaseModel):
    jobs: list[JobView]
    next_token: str | None = Field(description="pass as next_token for the next page")


class DryRunObjectView(BaseModel):
    path: Literal["hyperpod", "burst"] = Field(
        description="hyperpod: the HyperPodPyTorchJob for HyperPod nodes; burst: the batch "
        "Job for EKS burst nodes"
    )
    object: dict[str, Any] = Field(
        description="the run object as it would be created, without its placement (node "
        "pins, a NodePool's tolerations), which the scheduler adds at admission"
    )
    accepted: bool = Field(description="the cluster's API server would create it")
    refused: str | None = Field(description="the API server's refusal, if it refused")


class JobDryRun(BaseModel):
    """A submission checked as POST /jobs checks it, and its run objects as the cluster's
    API server answered their dry run: nothing is stored or created."""

    job: JobView = Field(description="the job as it would be stored (its id is not kept)")
    objects: list[DryRunObjectView]
    accepted: bool = Field(description="every object was accepted")


class JobLog(BaseModel):
    """The tail of one replica's log, read through the cluster's API server (pods/log)."""

    job_id: str
    replica: int
    pod: str = Field(description="the newest pod of that replica (of the job's latest run)")
    node: str = Field(description="the node it runs on (Kubernetes name)")
    phase: str = Field(description="the pod's phase: Pending, Running, Succeeded, Failed")
    lines: list[str] = Field(description="oldest first, at most `tail` lines and 256 KiB")
    truncated: bool = Field(description="cut at 256 KiB: the oldest lines of the tail kept")
    unavailable: str | None = Field(
        description="why the API server gave no log (e.g. the container has not started)"
    )


# -- compute quotas -----------------------------------------------------------------------
class ComputeQuotaRequest(AwsShape):
    """CreateComputeQuota's request (without ClusterArn being optional), plus TargetVersion
    for updates (UpdateComputeQuota): omit it to create, give the version you read to
    update."""

    name: str = Field(pattern=NAME_PATTERN, min_length=1, max_length=63)
    description: str | None = Field(default=None, max_length=1024)
    cluster_arn: str = Field(min_length=1, max_length=256)
    compute_quota_config: ComputeQuotaConfig
    compute_quota_target: ComputeQuotaTarget
    activation_state: Toggle = Toggle.ENABLED
    target_version: StrictInt | None = Field(default=None, ge=1, le=MAX_VERSION)

    def quota(self) -> ComputeQuota:
        return ComputeQuota.model_validate(
            self.model_dump(exclude={"target_version"}, exclude_none=True)
        )


class ResolvedResource(AwsShape):
    instance_type: str
    accelerators: int
    vcpu: float = Field(alias="VCpu")
    memory_in_gib: float = Field(alias="MemoryInGiB")


class ComputeQuotaView(AwsShape):
    """DescribeComputeQuota's shape plus what the quota resolves to."""

    compute_quota_id: str
    name: str
    description: str | None = None
    cluster_arn: str
    compute_quota_config: ComputeQuotaConfig
    compute_quota_target: ComputeQuotaTarget
    activation_state: Toggle
    compute_quota_version: int
    status: str
    resolved_resources: list[ResolvedResource] = Field(
        description="the team's nominal quota; an entry without VCpu and MemoryInGiB gets both "
        "in proportion to the instance's accelerators, one with only one of the two gets the "
        "other in proportion to that one (HyperPod's published rules)"
    )
    resolved_limits: list[ResolvedResource] = Field(
        description="nominal plus what the team may borrow"
    )


class ComputeQuotaList(AwsShape):
    compute_quotas: list[ComputeQuotaView]
    next_token: str | None = None


# -- scheduler config ---------------------------------------------------------------------
class SchedulerConfigRequest(AwsShape):
    priority_classes: list[PriorityClass] = Field(default_factory=list, max_length=10)
    fair_share: Toggle = Toggle.ENABLED
    idle_resource_sharing: Toggle = Toggle.ENABLED
    min_runtime_seconds: MinRuntimeSeconds = 0
    target_version: StrictInt | None = Field(
        default=None,
        ge=0,
        le=MAX_VERSION,
        description="the version you read (0: none was set yet)",
    )

    @model_validator(mode="after")
    def _valid_config(self) -> SchedulerConfigRequest:
        try:
            self.config()
        except ValidationError as exc:
            raise ValueError(exc.errors()[0]["msg"].removeprefix("Value error, ")) from None
        return self

    def config(self) -> SchedulerConfig:
        return SchedulerConfig.model_validate(self.model_dump(exclude={"target_version"}))


class SchedulerConfigView(AwsShape):
    scheduler_config: SchedulerConfig
    version: int


# -- principals ---------------------------------------------------------------------------
class PrincipalGrantBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    principal_arn: str = Field(max_length=1000, pattern=r"^arn:aws[a-z-]*:(iam|sts)::\d{12}:.+$")
    team: str | None = Field(default=None, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9]){0,39}?$")
    admin: StrictBool = False


class PrincipalList(BaseModel):
    principals: list[PrincipalGrantBody]


# -- views --------------------------------------------------------------------------------
class TeamView(BaseModel):
    """One team as HyperPod task governance's team dashboard shows it (docs/api.md)."""

    team: str
    activation_state: Toggle | None
    fair_share_weight: int | None
    allocated_gpus: int = Field(description="accelerators of the team's quota (its nominal share)")
    limit_gpus: int = Field(description="nominal plus borrow allowance")
    gpus_in_use: int = Field(
        description="GPUs allocated to tasks: accelerators held by the team's admitted and "
        "running jobs"
    )
    borrowed_gpus: int = Field(
        description="accelerators in use above the nominal quota, per instance type, summed"
    )
    utilisation_pct: float | None = Field(
        description="100 * gpus_in_use / allocated_gpus, one decimal (above 100 when "
        "borrowing); null without a quota"
    )
    running_jobs: int = Field(description="admitted or running")
    pending_jobs: int = Field(description="pending, suspended or preempted (waiting again)")
    burst_usd_per_hour: float = Field(
        description="what the team's admitted and running jobs on burst capacity (EKS pools, "
        "and HyperPod nodes a burst added) cost per hour at the burst policy's prices (their "
        "share of the instances; 0 on committed pools), two decimals: the rate its spend cap "
        "limits"
    )
    burst_gpus: int = Field(
        default=0,
        description="GPUs the team's admitted and running jobs hold on burst capacity (EKS "
        "pools, and HyperPod nodes a burst added): x 24, the rate its GPU-hour cap limits",
    )
    gpu_hours_today: float = Field(
        default=0.0,
        description="GPU-hours the team's jobs held today (UTC), on any pool, from their "
        "histories (jobs that ended today included), two decimals",
    )


class PriorityClassView(BaseModel):
    priority_class: str | None = Field(description="null: jobs that name no class")
    weight: int | None
    running: int = Field(description="jobs admitted or running now")
    pending: int = Field(description="jobs pending or suspended now")
    preempted: int = Field(description="jobs preempted and waiting to run again now")
    average_run_s: float | None = Field(
        description="over the window's runs: from the start of a job's current (last) run to "
        "its end, or to now while it runs"
    )
    longest_run_s: float | None
    average_wait_s: float | None = Field(
        description="over the window's jobs: from submission to first admission, or to now "
        "for a job never admitted that still waits"
    )
    longest_wait_s: float | None


class InstanceHealth(BaseModel):
    schedulable: int = Field(description="Running, healthy and not cordoned")
    pending_recovery: int = Field(description="with an open incident (HyperGuard repairs it)")
    unschedulable: int = Field(description="the others: cordoned, unhealthy or not Running")


class PoolView(BaseModel):
    pool: str = Field(description="HyperPod instance group, or `<NodePool>-on-demand|-spot`")
    kind: str = Field(description="hyperpod, eks-on-demand or eks-spot")
    instance_type: str
    committed: bool = Field(description="named in the burst policy's committedPools")
    instances: int = Field(description="instances present (not NotFound)")
    gpus: int
    gpus_in_use: int = Field(description="GPUs allocated to admitted and running jobs")
    usd_per_hour: float | None = Field(
        description="the pool's present instances x the burst policy's price per "
        "instance-hour (0 when committed; null when the policy has no price for it)"
    )
    gpu_hours_installed_today: float
    gpu_hours_in_use_today: float = Field(
        description="of the jobs whose current pool this is (a job that moved counts in "
        "its current pool)"
    )


class ClusterView(BaseModel):
    instances: int = Field(description="instances present (not NotFound)")
    instances_by_status: dict[str, int] = Field(description="by HyperPod instance status")
    instances_by_health: InstanceHealth
    running_jobs: int
    pending_jobs: int
    gpus: int = Field(description="GPUs installed: accelerators of the present instances")
    gpus_in_use: int = Field(description="GPUs allocated to admitted and running jobs")
    idle_gpus: int = Field(description="max(0, gpus - gpus_in_use)")
    vcpus: int
    memory_gib: int
    day_start: datetime = Field(description="00:00 UTC today: the start of the *_today figures")
    gpu_hours_installed_today: float = Field(
        description="∫ GPUs installed dt since day_start: instances from their launch (or "
        "day_start) to their retirement (or now)"
    )
    gpu_hours_in_use_today: float = Field(
        description="∫ GPUs allocated to jobs dt since day_start, from the jobs' histories"
    )
    idle_gpu_hours_today: float = Field(
        description="∫ max(0, installed - in use) dt since day_start, two decimals"
    )
    pools: list[PoolView] = Field(
        default_factory=list, description="per pool: GPUs, cost per hour, GPU-hours today"
    )


class TeamViews(BaseModel):
    teams: list[TeamView]


class PriorityClassViews(BaseModel):
    since: datetime = Field(
        description="run and wait times cover jobs active now and jobs that ended since then "
        "(the last 24 hours); the counts are of now"
    )
    priority_classes: list[PriorityClassView]


class IncidentBadput(BaseModel):
    """What one incident that protected the job cost, by recovery phase: the incident's
    phase durations (its `timings`) * the job's GPUs. A phase whose milestones the
    incident did not record is null."""

    incident_id: str
    protected_at: datetime = Field(description="when recovery took the job (its `protected` entry)")
    strategy: str | None = Field(
        description="what recovery did with the job (the incident's plan); null when the "
        "incident is not found"
    )
    detect_gpu_min: float | None = Field(description="first signal → detected, * the job's GPUs")
    cordon_drain_gpu_min: float | None = Field(
        description="detected → repair requested (a drain without repair: → resumed)"
    )
    repair_gpu_min: float | None = Field(description="repair requested → healthy")
    resume_gpu_min: float | None = Field(description="healthy → resumed")
    total_gpu_min: float = Field(description="the phases present, summed")


class JobGoodput(BaseModel):
    """One job's goodput over the window (docs/api.md, Views: goodput)."""

    job_id: str
    name: str | None
    team: str
    status: JobStatus
    gpus: int = Field(description="GPUs the job asked for: replicas * GPUs per replica")
    wall_s: float = Field(
        description="from submission (or window_start, if later) to the job's end (or now)"
    )
    holding_s: float = Field(
        description="of wall_s, time admitted or running at its admitted size (not shrunk below it)"
    )
    lost_s: float = Field(
        description="of holding_s, work lost at faults: from the last checkpoint before each "
        "fault until the job ran again"
    )
    productive_s: float = Field(description="holding_s - lost_s")
    faults: int = Field(
        description="node faults (`protected`) and lost runs (`lost`) in the window"
    )
    scheduling_goodput_pct: float | None = Field(
        description="100 * holding_s / wall_s, one decimal; null when wall_s is 0"
    )
    runtime_goodput_pct: float | None = Field(
        description="100 * productive_s / holding_s; null when the job held nothing"
    )
    goodput_pct: float | None = Field(
        description="scheduling * runtime = 100 * productive_s / wall_s; null when wall_s is 0"
    )
    badput: list[IncidentBadput] = Field(
        description="each incident that protected the job in the window, by phase"
    )


class TeamGoodput(BaseModel):
    """A team's jobs, each weighted by its GPUs."""

    team: str
    jobs: int
    wall_gpu_hours: float = Field(description="Σ wall_s * gpus, in GPU-hours")
    holding_gpu_hours: float = Field(description="Σ holding_s * gpus")
    productive_gpu_hours: float = Field(description="Σ productive_s * gpus")
    scheduling_goodput_pct: float | None = Field(description="100 * holding / wall")
    runtime_goodput_pct: float | None = Field(description="100 * productive / holding")
    goodput_pct: float | None = Field(description="100 * productive / wall")
    detect_gpu_min: float = Field(description="the jobs' incident badput, by phase, summed")
    cordon_drain_gpu_min: float
    repair_gpu_min: float
    resume_gpu_min: float


class GoodputView(BaseModel):
    window_start: datetime = Field(
        description="now - window_hours: the jobs active now and those that ended since, "
        "their times counted from here"
    )
    jobs: list[JobGoodput]
    teams: list[TeamGoodput]


# -- incidents and nodes ------------------------------------------------------------------
class IncidentView(Incident):
    """An incident as the API shows it: task tokens are never shown, and a team member sees
    only their teams' jobs in `jobs`."""

    task_token: str | None = Field(default=None, exclude=True)
    wait_token: str | None = Field(default=None, exclude=True)
    signals: list[dict[str, Any]] | None = Field(
        default=None, description="the reports that joined it (in GET /incidents/{id})"
    )


class IncidentList(BaseModel):
    incidents: list[IncidentView]


class NodeActionRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    action: Literal["cordon", "uncordon", "reboot", "replace", "veto", "approve"]
    reason: str | None = Field(default=None, min_length=1, max_length=1024)
    incident_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=128,
        description="approve: defaults to the node's open incident",
    )

    @model_validator(mode="after")
    def _veto_needs_reason(self) -> NodeActionRequest:
        if self.action == "veto" and not self.reason:
            raise ValueError("a veto needs a reason")
        return self


class NodeActionResult(BaseModel):
    node_id: str
    action: str
    result: dict[str, Any]


class ErrorBody(BaseModel):
    error: str
    field: str | None


def resolved(resources: dict[str, Any]) -> list[ResolvedResource]:
    return [
        ResolvedResource(
            instance_type=name,
            accelerators=amount.accelerators,
            vcpu=amount.vcpu,
            memory_in_gib=amount.memory_gib,
        )
        for name, amount in sorted(resources.items())
    ]
