"""Training jobs, their checkpoints, placement, elasticity and recovery strategy."""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import datetime
from enum import StrEnum
from typing import Any, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictFloat,
    StrictInt,
    field_validator,
    model_validator,
)

from hyperguard.models.camel import CamelModel
from hyperguard.models.cluster import RunKind


class JobStatus(StrEnum):
    PENDING = "Pending"
    ADMITTED = "Admitted"
    RUNNING = "Running"
    SUSPENDED = "Suspended"
    PREEMPTED = "Preempted"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    CANCELLED = "Cancelled"


HOLDING_STATUSES = frozenset({JobStatus.ADMITTED, JobStatus.RUNNING})
"""The job holds quota and nodes."""
WAITING_STATUSES = frozenset({JobStatus.PENDING, JobStatus.PREEMPTED, JobStatus.SUSPENDED})
"""The job waits for admission."""
TERMINAL_STATUSES = frozenset({JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED})
"""Final: nothing moves a job out of these."""
ACTIVE_STATUSES = HOLDING_STATUSES | WAITING_STATUSES


def held_nodes(jobs: Iterable[Job]) -> set[str]:
    """The instance ids the jobs that hold nodes (admitted or running) are placed on."""
    return {node for job in jobs if job.status in HOLDING_STATUSES for node in job.nodes}


class RecoveryStrategy(StrEnum):
    """What node recovery does with a job whose node fails (`recovery.strategy`)."""

    AUTO = "auto"
    """The strategy with the least expected lost GPU-time (hyperguard.recovery.strategy)."""
    WAIT_FOR_REPAIR = "wait_for_repair"
    """Hold the job's nodes; restart on the repaired node or its replacement."""
    HOT_SPARE = "hot_spare"
    """Restart at once on an idle healthy node of the same pool."""
    ELASTIC_SHRINK = "elastic_shrink"
    """Keep training on the healthy nodes (an elastic job above its minimum); grow back later."""
    MOVE = "move"
    """Back to the queue now, placed on the EKS burst pools its template allows first (then
    wherever else it allows)."""


class AppliedStrategy(StrEnum):
    """What recovery did with a job: a RecoveryStrategy other than auto, or one of the
    two that are not the job's to ask for."""

    WAIT_FOR_REPAIR = "wait_for_repair"
    HOT_SPARE = "hot_spare"
    ELASTIC_SHRINK = "elastic_shrink"
    MOVE = "move"
    HYPERPOD_AUTO_RESUME = "hyperpod_auto_resume"
    """The job opted into HyperPod auto-resume: HyperPod restarts it, HyperGuard watches."""
    REQUEUE = "requeue"
    """The node will not come back as such (drained, EKS capacity): re-placed by the scheduler."""


MAX_REPLICAS = 1024


class ElasticPolicy(CamelModel):
    """HyperPodPyTorchJob's `spec.elasticPolicy`, names as the HyperPod training operator
    spells them. The job runs with minReplicas + N * replicaIncrementStep replicas, or one
    of replicaDiscreteValues (not both), never above maxReplicas."""

    min_replicas: StrictInt = Field(ge=1, le=MAX_REPLICAS)
    max_replicas: StrictInt = Field(ge=1, le=MAX_REPLICAS)
    replica_increment_step: StrictInt | None = Field(default=None, ge=1, le=MAX_REPLICAS)
    replica_discrete_values: list[StrictInt] | None = Field(
        default=None, min_length=1, max_length=64
    )
    graceful_shutdown_timeout_in_seconds: StrictInt | None = Field(default=None, ge=0, le=86_400)
    """Time to checkpoint and exit on a scaling event before a forced stop."""
    scaling_timeout_in_seconds: StrictInt | None = Field(default=None, ge=0, le=86_400)
    """Delay before a scale-up (against flapping)."""
    faulty_scale_down_timeout_in_seconds: StrictInt | None = Field(default=None, ge=0, le=86_400)
    """How long to wait for spare capacity after a fault before shrinking."""

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if self.min_replicas > self.max_replicas:
            raise ValueError("minReplicas must not exceed maxReplicas")
        if self.replica_increment_step is not None and self.replica_discrete_values is not None:
            raise ValueError("give replicaIncrementStep or replicaDiscreteValues, not both")
        values = self.replica_discrete_values
        if values is not None:
            if any(v < 1 or v > self.max_replicas for v in values):
                raise ValueError("replicaDiscreteValues must be positive and ≤ maxReplicas")
            if len(set(values)) != len(values):
                raise ValueError("replicaDiscreteValues must not repeat")
        return self

    def sizes(self) -> list[int]:
        """Every replica count the job may run with, ascending."""
        if self.replica_discrete_values is not None:
            allowed = {v for v in self.replica_discrete_values if v >= self.min_replicas}
            return sorted(allowed | {self.min_replicas})
        step = self.replica_increment_step or 1
        return list(range(self.min_replicas, self.max_replicas + 1, step))

    def at_most(self, replicas: int) -> int | None:
        """The largest allowed size ≤ `replicas` (None: below the minimum)."""
        fitting = [s for s in self.sizes() if s <= replicas]
        return fitting[-1] if fitting else None


MAX_LOG_RULES = 20
MAX_RETRIES = 100
"""The most restarts a job may ask of the HyperPod training operator (jobMaxRetryCount)."""
AUTO_RESUME_RETRIES = 10
"""jobMaxRetryCount of a job that opted into HyperPod auto-resume and named none."""
LOG_MONITORING_RETRIES = 3
"""jobMaxRetryCount of a job with log monitoring rules that named none (D168)."""
MAX_LOG_PATTERN = 1024


class LogRuleOperator(StrEnum):
    GT = "gt"
    GTEQ = "gteq"
    LT = "lt"
    LTEQ = "lteq"
    EQ = "eq"


class LogMonitoringRule(CamelModel):
    """One rule of HyperPodPyTorchJob's `spec.runPolicy.logMonitoringConfiguration`, names
    as the HyperPod training operator spells them ("Using the training operator to run
    jobs", Amazon SageMaker AI Developer Guide). The operator watches the job's logs: no
    `logPattern` match within `expectedStartCutOffInSeconds` of the start, or none for
    `expectedRecurringFrequencyInSeconds` after the last, is a hang; a value captured by
    `logPattern` that compares to `metricThreshold` by `operator` for
    `metricEvaluationDataPoints` evaluations running is a slow job; `stopPattern` ends the
    rule. The operator restarts a hung or slow job under its runPolicy."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=63, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    log_pattern: str = Field(min_length=1, max_length=MAX_LOG_PATTERN)
    expected_start_cut_off_in_seconds: StrictInt | None = Field(default=None, ge=1, le=604_800)
    expected_recurring_frequency_in_seconds: StrictInt | None = Field(
        default=None, ge=1, le=604_800
    )
    metric_threshold: StrictFloat | StrictInt | None = Field(
        default=None, ge=-1e12, le=1e12, allow_inf_nan=False
    )
    operator: LogRuleOperator | None = None
    metric_evaluation_data_points: StrictInt | None = Field(default=None, ge=1, le=10_000)
    stop_pattern: str | None = Field(default=None, min_length=1, max_length=MAX_LOG_PATTERN)

    @field_validator("log_pattern", "stop_pattern")
    @classmethod
    def _a_regular_expression(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as error:
                raise ValueError(f"not a regular expression: {error}") from None
        return value

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if (self.metric_threshold is None) != (self.operator is None):
            raise ValueError("give metricThreshold and operator together")
        if self.metric_evaluation_data_points is not None and self.metric_threshold is None:
            raise ValueError("metricEvaluationDataPoints needs metricThreshold")
        if (
            self.expected_start_cut_off_in_seconds is None
            and self.expected_recurring_frequency_in_seconds is None
            and self.metric_threshold is None
        ):
            raise ValueError(
                "a rule needs expectedStartCutOffInSeconds, "
                "expectedRecurringFrequencyInSeconds or metricThreshold"
            )
        return self


class JobRecovery(BaseModel):
    model_config = ConfigDict(extra="forbid")

    strategy: RecoveryStrategy = RecoveryStrategy.AUTO


class Checkpoint(BaseModel):
    step: int
    uri: str
    completed_at: datetime
    node_step_seconds: dict[str, float] | None = Field(
        default=None,
        description="as the job reported it: each node's mean compute seconds per step since "
        "its previous checkpoint",
    )


class PacePoint(BaseModel):
    """A checkpoint of the job's recent pace: its run, step and completion time."""

    run: int
    step: int
    at: datetime


class ProgressTrouble(BaseModel):
    """A running job whose checkpoint location S3 refused (D138, D139): the scheduler reads it
    again only from `retry_at`, backing off while the refusals go on."""

    since: datetime
    failures: int = Field(ge=1)
    retry_at: datetime
    error: str = Field(max_length=1024)


class OperatorRestarts(BaseModel):
    """The cluster's own restarts of a job's run, as last recorded: the HyperPod training
    operator's restartCount of run `run` (D155), or the failed pods of a team's own Job
    (D179)."""

    run: int = Field(ge=0)
    count: int = Field(ge=0)


def restarts_recorded(was: OperatorRestarts | None, run: int, kind: RunKind) -> int:
    """The count already recorded (`was`) that run `run`'s count of `kind` is measured
    against: a HyperPodPyTorchJob is made afresh for each run, so a new run counts from 0; a
    team's own Job is one object over all its runs, so its count goes on (D179)."""
    if was is None or (was.run != run and kind is RunKind.HYPERPOD):
        return 0
    return was.count


class Heartbeat(BaseModel):
    """The training's own progress report between checkpoints (POST /jobs/{jobId}/progress:
    D165): its run, its step at `at`, and when the step last went up."""

    run: int = Field(ge=0)
    step: int = Field(ge=0)
    at: datetime
    advanced_at: datetime
    node_step_seconds: dict[str, float] | None = None


class RefusedCheckpoint(BaseModel):
    """The newest checkpoint of the job that HyperGuard would not resume from: its contract
    v2 marker names another job, a run HyperGuard fenced off, or shards that are not there
    (hyperguard.store.checkpoints)."""

    step: int = Field(ge=0)
    reason: str = Field(max_length=1024)


class SlowFlag(BaseModel):
    """A job running far below its own recent step rate (D100)."""

    since: datetime
    steps_per_hour: float
    usual_steps_per_hour: float
    lagging_node: str | None = None
    reason: str


class JobSource(StrEnum):
    """Where a job came from."""

    API = "api"
    """Submitted through HyperGuard's API (or its CLI): HyperGuard creates its runs."""
    CLUSTER = "cluster"
    """Applied to a team's namespace with kubectl or the HyperPod CLI and held by Kueue on
    HyperGuard's admission check: the object is its only run (D170)."""


class ClusterObject(BaseModel):
    """The object a cluster job was applied as, and the Kueue Workload that holds it."""

    kind: str = Field(description="Job (batch/v1) or HyperPodPyTorchJob")
    namespace: str
    name: str
    uid: str
    workload: str = Field(description="the Kueue Workload's name in the same namespace")
    pod_set: str = Field(description="the Workload's pod set")


class Job(BaseModel):
    job_id: str
    name: str | None = Field(default=None, description="the submitter's name for the job")
    team: str
    priority_class: str | None = None
    template: str = "production"
    instance_type: str = "ml.p5.48xlarge"
    accelerators_per_replica: int = 8
    replicas: int = Field(default=1, description="replicas asked for (elastic: to start with)")
    elastic_policy: ElasticPolicy | None = None
    log_monitoring_configuration: list[LogMonitoringRule] | None = Field(
        default=None, description="HyperPod's logMonitoringConfiguration rules"
    )
    recovery: JobRecovery = Field(default_factory=JobRecovery)
    max_steps: int | None = Field(
        default=None, description="the training's length in steps, if the submitter said"
    )
    image: str = Field(default="", description="the short form's image (empty with pod_template)")
    command: list[str] = Field(default_factory=list)
    pod_template: dict[str, Any] | None = Field(
        default=None,
        description="the job's own core/v1 PodTemplateSpec, as submitted "
        "(hyperguard.cluster.pod_template)",
    )
    checkpoint_location: str | None = None
    status: JobStatus = JobStatus.PENDING
    nodes: list[str] = Field(default_factory=list, description="one instance id per replica")
    pool: str | None = None
    auto_resume: bool = Field(
        default=False, description="HyperPod auto-resume annotation: HyperPod restarts it"
    )
    max_retries: int | None = Field(
        default=None, description="jobMaxRetryCount as submitted (None: the default, D168)"
    )
    last_checkpoint: Checkpoint | None = None
    restart_count: int = Field(default=0, description="restarts after faults or preemptions")
    run: int = Field(default=0, description="how many times it was dispatched, less one")
    submitted_at: datetime | None = None
    source: JobSource = JobSource.API
    cluster_object: ClusterObject | None = Field(
        default=None, description="with source cluster: the object applied, and its Workload"
    )

    def operator_retries(self) -> int:
        """runPolicy.jobMaxRetryCount of its HyperPod runs: what it asked for, else 10 with
        auto-resume (HyperPod restarts it after a node fault), 3 with log monitoring rules
        (the operator acts on a hang it finds only by restarting the run), else 0: a failed
        run ends, and HyperGuard's recovery decides what a node fault costs (D168)."""
        if self.max_retries is not None:
            return self.max_retries
        if self.auto_resume:
            return AUTO_RESUME_RETRIES
        return LOG_MONITORING_RETRIES if self.log_monitoring_configuration else 0
