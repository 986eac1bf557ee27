"""Settings: one validated model, read once per Lambda sandbox from its environment."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict


class SettingsError(RuntimeError):
    """The function's environment is missing or has an invalid variable."""


class Settings(BaseSettings):
    """Every name a HyperGuard function needs, as template.yaml's Globals set them."""

    model_config = SettingsConfigDict(case_sensitive=False, extra="ignore", frozen=True)

    incidents_table: str = Field(min_length=1)
    nodes_table: str = Field(min_length=1)
    jobs_table: str = Field(min_length=1)
    teams_table: str = Field(min_length=1)
    idempotency_table: str = Field(min_length=1)
    event_bus_name: str = Field(min_length=1)
    escalation_topic_arn: str = Field(min_length=1)
    recovery_state_machine_arn: str = Field(
        default="", description="only the ingest function starts recoveries"
    )
    burst_state_machine_arn: str = Field(
        default="", description="BurstCapacity; empty: the scheduler never bursts"
    )
    hyperpod_cluster_name: str = Field(min_length=1)
    eks_cluster_name: str = Field(
        min_length=1, description="the EKS cluster that orchestrates HyperPod (and bursts)"
    )
    rebalance_action: Literal["ignore", "drain", "notify"] = "ignore"
    idempotency_ttl_s: int = Field(default=86_400, ge=60)
    reopen_window_s: int = Field(
        default=600,
        ge=0,
        le=86_400,
        description="after a node's incident closes, fault reports for it while the cluster "
        "says it is healthy are dropped (counted as suppressed) for this long",
    )
    scheduler_queue_url: str = Field(
        default="", description="the scheduler's FIFO wake-up queue; empty: the tick only"
    )
    admin_principal_arns: str = Field(
        default="", description="comma-separated IAM ARNs that are API admins from the start"
    )
    scheduler_lease_s: int = Field(default=120, ge=10, description="a pass's lease")
    checkpoint_bucket: str = Field(
        default="",
        description="the bucket the functions may read checkpoints in (the API refuses a job "
        "that checkpoints elsewhere); empty: not checked",
    )
    checkpoint_reader_roles: str = Field(
        default="", description="comma-separated ARNs of the roles that read checkpoints"
    )
    rate_limit_table: str = Field(
        default="", description="the API's per-caller request counters; empty: no limits"
    )
    api_principal_rate_limit: int = Field(
        default=10, ge=1, le=10_000, description="requests a second one principal may make"
    )
    api_team_rate_limit: int = Field(
        default=40, ge=1, le=10_000, description="requests a second one team may make"
    )


def load_settings(*required: str) -> Settings:
    """The settings, failing at init with every bad or missing name listed.

    `required` names optional fields this function cannot run without.
    """
    try:
        settings = Settings()
    except ValidationError as exc:
        names = ", ".join(str(e["loc"][0]).upper() for e in exc.errors())
        raise SettingsError(f"invalid or missing environment variables: {names}") from exc
    missing = [name.upper() for name in required if not getattr(settings, name)]
    if missing:
        raise SettingsError(f"missing environment variables: {', '.join(missing)}")
    return settings
