"""The repair policy: EKS's NodeRepairConfig shape, plus the waits and ladder HyperGuard adds.

Field names (by alias) are exactly those of the EKS nodeRepairConfig, so a policy written
for EKS auto repair reads here unchanged. Stored in DynamoDB (TeamsTable, pk `POLICY`,
sk `NODE_REPAIR`); these defaults apply until one is stored. What the policy decides about
an incident is `hyperguard.recovery.policy.decide`.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal, Self

from pydantic import (
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StringConstraints,
    field_validator,
    model_validator,
)

from hyperguard import planning
from hyperguard.models.camel import CamelModel

DAY_S = 86_400


class ComponentTimes(CamelModel):
    """Seconds each part of a recovery takes. Defaults: HyperPod's published typical
    figures (replace ≈ 15 min, resume ≈ 23.5 min, root cause ≈ 1.5 min; p5.48xlarge) where
    AWS published one; the rest are stated assumptions."""

    detect_s: float = Field(default=planning.DETECT_S, ge=0, le=DAY_S)
    reboot_s: float = Field(
        default=planning.REBOOT_S,
        ge=0,
        le=DAY_S,
        description="assumed: a warm reboot of a GPU instance",
    )
    replace_s: float = Field(default=planning.REPLACE_S, ge=0, le=DAY_S)
    resume_s: float = Field(default=planning.RESUME_S, ge=0, le=DAY_S)
    rescale_s: float = Field(
        default=planning.RESCALE_S,
        ge=0,
        le=DAY_S,
        description="assumed: an elastic job's checkpoint-and-restart at a new size, its pods kept",
    )
    provision_s: float = Field(
        default=planning.PROVISION_S,
        ge=0,
        le=DAY_S,
        description="assumed: Karpenter launching a GPU node",
    )


class RepairAction(StrEnum):
    REPLACE = "Replace"
    REBOOT = "Reboot"
    NO_ACTION = "NoAction"


class DeepHealthCheck(StrEnum):
    """SageMaker's DeepHealthCheckType values (StartClusterHealthCheck)."""

    INSTANCE_STRESS = "InstanceStress"
    INSTANCE_CONNECTIVITY = "InstanceConnectivity"
    MULTI_NODE_TRAINING_VALIDATION = "MultiNodeTrainingValidation"


WEEK_MINS = 7 * 24 * 60
MAX_SPARES = 64
POOL_NAME = r"^[A-Za-z0-9][-A-Za-z0-9_.]{0,62}$"


class NodeRepairConfigOverride(CamelModel):
    node_monitoring_condition: str = Field(min_length=1, max_length=128)
    node_unhealthy_reason: str = Field(min_length=1, max_length=128)
    min_repair_wait_time_mins: StrictInt = Field(ge=1, le=WEEK_MINS)
    repair_action: RepairAction


class NodeRepairConfig(CamelModel):
    enabled: StrictBool = True
    max_unhealthy_node_threshold_count: StrictInt | None = Field(default=None, ge=1, le=100_000)
    max_unhealthy_node_threshold_percentage: StrictInt | None = Field(default=20, ge=1, le=100)
    max_parallel_nodes_repaired_count: StrictInt | None = Field(default=None, ge=1, le=100_000)
    max_parallel_nodes_repaired_percentage: StrictInt | None = Field(default=20, ge=1, le=100)
    node_repair_config_overrides: list[NodeRepairConfigOverride] = Field(
        default_factory=list, max_length=100
    )
    # HyperGuard's additions (not in the EKS shape). Durations are data: a deployment that
    # wants faster or slower recovery stores other values (PUT /policies/node-repair).
    accelerator_fault_wait_mins: StrictFloat = Field(default=10, ge=0, le=WEEK_MINS)
    other_fault_wait_mins: StrictFloat = Field(default=30, ge=0, le=WEEK_MINS)
    repeat_fault_window_mins: StrictFloat = Field(default=1440, ge=0, le=WEEK_MINS)
    scheduled_change_lead_mins: StrictFloat = Field(default=60, ge=0, le=WEEK_MINS)
    health_budget_mins: StrictFloat = Field(default=45, ge=0.001, le=WEEK_MINS)
    drain_deadline_s: StrictFloat = Field(default=120, ge=0, le=3600)
    # A Wait state's SecondsPath must be a whole number of seconds.
    poll_interval_s: StrictInt = Field(default=30, ge=1, le=3600)
    deep_health_checks: list[DeepHealthCheck] = Field(
        default_factory=list,
        max_length=3,
        description="run after a reboot, before the node returns to service; empty: none",
    )
    hot_spares: dict[
        Annotated[str, StringConstraints(pattern=POOL_NAME)],
        Annotated[StrictInt, Field(ge=0, le=MAX_SPARES)],
    ] = Field(
        default_factory=dict,
        max_length=100,
        description="idle healthy nodes the scheduler keeps free per pool (instance group or "
        "EKS pool), for jobs whose node fails to restart on at once",
    )
    strategy_times: ComponentTimes = Field(
        default_factory=ComponentTimes,
        description="component times the automatic recovery strategy weighs "
        "(hyperguard.recovery.strategy)",
    )
    hyperpod_node_recovery: Literal["defer", "own"] = Field(
        default="defer",
        description="on a cluster whose NodeRecovery is Automatic, who repairs a fault "
        "HyperPod's own health checks found: defer (HyperPod reboots or replaces it; "
        "HyperGuard cordons, drains, protects and resumes the jobs, and waits) or own "
        "(HyperGuard orders the repair, for clusters where HyperPod's recovery is known not "
        "to act); with NodeRecovery None, HyperGuard always repairs (D142)",
    )
    karpenter_node_repair: Literal["defer", "own"] = Field(
        default="defer",
        description="where Karpenter's node repair (its NodeRepair feature gate) is on, who "
        "repairs a Karpenter node's fault on a condition Karpenter repairs (Ready and the EKS "
        "node monitoring agent's conditions): defer (Karpenter; HyperGuard cordons, drains, "
        "protects and resumes the jobs, and waits) or own (HyperGuard, which annotates the "
        "node karpenter.sh/do-not-repair while it repairs it) (D148)",
    )
    eks_node_auto_repair: Literal["defer", "own"] = Field(
        default="defer",
        description="who repairs a node EKS node auto-repair acts on (EKS Auto Mode's, or a "
        "managed node group's with nodeRepairConfig enabled): defer (EKS) or own "
        "(HyperGuard; EKS acts too where it cannot be turned off) (D148)",
    )
    node_termination_handler: Literal["defer", "own"] = Field(
        default="defer",
        description="where the AWS Node Termination Handler runs, who drains an EKS node on a "
        "Spot interruption or rebalance recommendation: defer (the handler; HyperGuard evicts "
        "nothing until the drain deadline, protects and requeues the jobs) or own "
        "(HyperGuard; turn the handler's draining off) (D148)",
    )
    failed_run_grace_s: StrictInt = Field(
        default=180,
        ge=0,
        le=3600,
        description="how long a run that failed or vanished is left to node recovery (a "
        "node fault is usually reported within this) before the job is ended as Failed or "
        "requeued as lost",
    )

    lemon_incident_threshold: StrictInt = Field(
        default=3,
        ge=0,
        le=1000,
        description="node faults (incidents other than planned disruptions) of one node, its "
        "HyperPod slot by NodeLogicalId where known, within lemonWindowDays that make it a "
        "lemon: replaced rather than rebooted, and never taken as a hot spare (D87); 0: no "
        "node is ever a lemon; 1 is refused (every failing node would be one)",
    )
    lemon_window_days: StrictInt = Field(
        default=30,
        ge=1,
        le=365,
        description="the window, in days up to now, over which a node's faults are counted",
    )
    stalled_job_mins: StrictFloat = Field(
        default=0,
        ge=0,
        le=WEEK_MINS,
        description="a running job that writes checkpoints (checkpointLocation) but has "
        "completed none for this long, counted from its start or its last new checkpoint, "
        "is stalled: requeued to resume from its latest complete checkpoint; 0: never. "
        "Set it above the longest checkpoint interval of any job (D94)",
    )
    heartbeat_stall_mins: StrictFloat = Field(
        default=10,
        ge=0,
        le=WEEK_MINS,
        description="a running job that writes checkpoints and sends progress heartbeats "
        "(POST /jobs/{jobId}/progress) whose step has not gone up for this long, counted from "
        "its run's start or its last step up, is stalled (in place of stalledJobMins, for the "
        "runs that send heartbeats: D165); 0: never",
    )
    slow_job_ratio: StrictFloat = Field(
        default=0.5,
        ge=0,
        lt=1,
        description="a running job whose newest checkpoint interval ran below this share of "
        "the median rate of its run's earlier intervals (at least 3) is flagged slow, with the "
        "node that lags named where it reports per-node timings; flagged only, never "
        "restarted (D100); 0: never",
    )
    observe_only: StrictBool = Field(
        default=False,
        description="record what HyperGuard would do about each fault (the repair, when, "
        "why) on its incident and close it, doing nothing to the node or its jobs: for a "
        "first deployment beside another repair system (D92)",
    )

    @field_validator("lemon_incident_threshold")
    @classmethod
    def _not_every_fault_a_lemon(cls, value: int) -> int:
        if value == 1:
            raise ValueError("lemonIncidentThreshold must be 0 (off) or 2..1000")
        return value

    @model_validator(mode="after")
    def _one_of_count_or_percentage(self) -> Self:
        for what in ("max_unhealthy_node_threshold", "max_parallel_nodes_repaired"):
            if getattr(self, f"{what}_count") is not None:
                setattr(self, f"{what}_percentage", None)
        return self

    def limit(self, what: str, pool_size: int) -> int:
        """An absolute node count for a count-or-percentage limit of a pool of `pool_size`."""
        count = getattr(self, f"{what}_count")
        if count is not None:
            return int(count)
        percentage = getattr(self, f"{what}_percentage") or 100
        return max(1, pool_size * percentage // 100)
