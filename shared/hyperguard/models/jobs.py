"""Training jobs, their checkpoints and placement."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, Field


class JobStatus(StrEnum):
    PENDING = "Pending"
    ADMITTED = "Admitted"
    RUNNING = "Running"
    SUSPENDED = "Suspended"
    PREEMPTED = "Preempted"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    CANCELLED = "Cancelled"


class Checkpoint(BaseModel):
    step: int
    uri: str
    completed_at: datetime


class Job(BaseModel):
    job_id: str
    name: str | None = Field(default=None, description="the submitter's name for the job")
    team: str
    priority_class: str | None = None
    template: str = "production"
    instance_type: str = "ml.p5.48xlarge"
    accelerators_per_replica: int = 8
    replicas: int = 1
    min_replicas: int | None = None
    max_replicas: int | None = None
    image: str = ""
    command: list[str] = Field(default_factory=list)
    checkpoint_location: str | None = None
    status: JobStatus = JobStatus.PENDING
    nodes: list[str] = Field(default_factory=list)
    pool: str | None = None
    auto_resume: bool = Field(
        default=False, description="HyperPod auto-resume annotation: HyperPod restarts it"
    )
    last_checkpoint: Checkpoint | None = None
    restart_count: int = 0
    submitted_at: datetime | None = None
