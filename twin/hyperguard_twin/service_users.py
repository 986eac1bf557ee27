"""The people around the service, as the twin plays them through its API: the operator's
policies on the simulated cluster's clock, the seeded teams' principals, quotas and training
jobs, and the checkpoints those jobs report. None of it is written into the service's
tables."""

from __future__ import annotations

from typing import Any

from hyperguard.policies.burst import BurstCapacity, BurstPolicy
from hyperguard.policies.repair import DeepHealthCheck, NodeRepairConfig
from hyperguard_twin.api_stage import ApiStage
from hyperguard_twin.cluster import SimulatedCluster
from hyperguard_twin.config import ACCOUNT, CHECKPOINT_BUCKET, INSTANCE_TYPE, TwinConfig

# The seeded teams (nominal quota in ml.p5.48xlarge instances) and their training jobs:
# (job id, team, nodes, HyperPod auto-resume, step of the checkpoint it starts from).
SEED_QUOTAS = {"nlp": 8, "vision": 4}
SEED_JOBS: tuple[tuple[str, str, int, bool, int], ...] = (
    ("llama3-70b-pretrain", "nlp", 4, False, 1200),
    ("mistral-7b-sft", "nlp", 2, True, 300),
    ("vit-h14-pretrain", "vision", 3, False, 640),
)
SEED_POLICY = {
    "PriorityClasses": [
        {"Name": "inference", "Weight": 100},
        {"Name": "training", "Weight": 50},
        {"Name": "experiment", "Weight": 10},
    ],
    "FairShare": "Enabled",
    "IdleResourceSharing": "Enabled",
}


def team_role(team: str) -> str:
    """The IAM role a team's members and training jobs call the API with."""
    return f"arn:aws:iam::{ACCOUNT}:role/{team}-training"


def fast_policy(time_scale: float) -> NodeRepairConfig:
    """The repair policy an operator of the twin stores: the published defaults on the
    simulated cluster's clock (every wait divided by its speed), and a deep health check
    after each reboot so that the whole path shows."""
    defaults = NodeRepairConfig()
    return defaults.model_copy(
        update={
            name: getattr(defaults, name) / time_scale
            for name in (
                "accelerator_fault_wait_mins",
                "other_fault_wait_mins",
                "repeat_fault_window_mins",
                "scheduled_change_lead_mins",
                "health_budget_mins",
                "drain_deadline_s",
            )
        }
        | {
            "poll_interval_s": max(1, round(defaults.poll_interval_s / time_scale)),
            "failed_run_grace_s": max(1, round(defaults.failed_run_grace_s / time_scale)),
            "deep_health_checks": [DeepHealthCheck.INSTANCE_STRESS],
        }
    )


def fast_burst_policy(time_scale: float, max_nodes: int = 8) -> BurstPolicy:
    """The burst policy an operator of the twin stores: bursting on (up to `max_nodes`
    NodeClaims), its waits the published defaults on the simulated cluster's clock."""
    defaults = BurstCapacity()
    return BurstPolicy(
        capacity=defaults.model_copy(
            update={
                "max_nodes": max_nodes,
                "poll_interval_s": 1,
                "launch_timeout_s": max(5, round(defaults.launch_timeout_s / time_scale)),
                "scale_in_after_s": round(defaults.scale_in_after_s / time_scale),
                "retry_after_s": max(5, round(defaults.retry_after_s / time_scale)),
            }
        )
    )


def configure_service(
    api: ApiStage, config: TwinConfig, cluster: SimulatedCluster
) -> dict[str, str]:
    """What an operator does after `sam deploy`, and what the seeded teams submit: the
    seeded jobs' names (llama3-70b-pretrain, ...) → the job ids the API gave them."""
    policy = fast_policy(config.time_scale)
    api.ok("PUT", "/policies/node-repair", policy.model_dump(mode="json", exclude_none=True))
    burst = fast_burst_policy(config.time_scale)
    api.ok("PUT", "/policies/burst", burst.model_dump(mode="json", by_alias=True))
    if not config.seed_jobs:
        return {}
    api.ok("PUT", "/scheduler-config", SEED_POLICY)
    for team, instances in SEED_QUOTAS.items():
        api.ok("PUT", "/principals", {"principal_arn": team_role(team), "team": team})
        api.ok(
            "PUT",
            f"/teams/{team}/compute-quota",
            {
                "Name": f"{team}-quota",
                "ClusterArn": config.cluster_arn,
                "ComputeQuotaConfig": {
                    "ComputeQuotaResources": [{"InstanceType": INSTANCE_TYPE, "Count": instances}],
                    "ResourceSharingConfig": {"Strategy": "LendAndBorrow", "BorrowLimit": 50},
                    "PreemptTeamTasks": "LowerPriority",
                },
                "ComputeQuotaTarget": {"TeamName": team, "FairShareWeight": 10},
                "ActivationState": "Enabled",
            },
        )
    seeded: dict[str, str] = {}
    for job_id, team, nodes, auto_resume, start_step in SEED_JOBS:
        if nodes > config.hyperpod_nodes:
            continue
        location = f"s3://{CHECKPOINT_BUCKET}/{job_id}/"
        cluster.seed_checkpoint(location, start_step)
        submitted = api.ok(
            "POST",
            "/jobs",
            {
                "name": job_id,
                "priority_class": "training",
                "instance_type": INSTANCE_TYPE,
                "replicas": nodes,
                "image": "hyperguard/trainer:twin",
                "command": ["torchrun", "--nnodes", str(nodes), "train.py", "--name", job_id],
                "checkpoint_location": location,
                "auto_resume": auto_resume,
            },
            principal=team_role(team),
        )
        seeded[job_id] = submitted["job_id"]
    return seeded


def report_checkpoint(
    api: ApiStage, job_id: str, team: str, step: int, uri: str, timings: dict[str, float]
) -> None:
    """A training job reporting a completed checkpoint (POST /jobs/{jobId}/checkpoints)
    with each node's compute seconds per step; `job_id` is the job's HyperGuard id, which
    the job finds in its environment."""
    body: dict[str, Any] = {"step": step, "uri": uri}
    if timings:
        body["node_step_seconds"] = timings
    api.call("POST", f"/jobs/{job_id}/checkpoints", body, principal=team_role(team))
