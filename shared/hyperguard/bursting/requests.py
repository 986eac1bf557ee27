"""The scheduler's side of burst capacity, pure: how many nodes a waiting job needs, the
name of the burst that serves a group of jobs, the request the scheduler hands a
BurstCapacity execution, the note a rolled-back burst leaves on its jobs (and how a pass
reads it back), and which idle burst nodes scale-in gives back.

How a burst then buys capacity (which options, in which order, whether the nodes came) is
`hyperguard.bursting.plan`'s, which builds on these.

The burst id is deterministic — the cluster, the template, the instance type, the jobs and
the `retryAfterS` window — so that the scheduler's passes, each of which sees the same
jobs waiting, start one execution (Step Functions refuses a second of the same name), and a
burst that failed is tried again in the next window.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable
from datetime import datetime

from pydantic import Field

from hyperguard.models.camel import CamelModel
from hyperguard.models.cluster import BurstClaim
from hyperguard.models.governance import TEAM_NAME_PATTERN

MAX_BURST_JOBS = 100
NO_CAPACITY = "raised no capacity: "
"""What a rolled-back burst writes on its jobs: `waiting: burst <id> raised no capacity: …`."""
MAX_NODES_PER_JOB = 1000


class BurstJob(CamelModel):
    job_id: str = Field(min_length=1, max_length=128)
    team: str = Field(pattern=TEAM_NAME_PATTERN, max_length=63)
    nodes: int = Field(ge=1, le=MAX_NODES_PER_JOB, description="burst nodes the job needs")


class BurstRequest(CamelModel):
    """What the scheduler asks a BurstCapacity execution for (its input)."""

    burst_id: str = Field(pattern=r"^burst-[0-9a-f]{16}$")
    template: str = Field(max_length=32)
    instance_type: str = Field(max_length=50, description="the EC2 name")
    accelerators_per_node: int = Field(ge=1, le=64)
    jobs: list[BurstJob] = Field(min_length=1, max_length=MAX_BURST_JOBS)
    spend_usd_per_hour: dict[str, float] = Field(
        default_factory=dict,
        max_length=500,
        description="every team's burst spend when the scheduler asked (the caps' baseline)",
    )
    burst_gpus: dict[str, float] = Field(
        default_factory=dict,
        max_length=500,
        description="every team's GPUs on burst capacity when the scheduler asked",
    )


def burst_id(
    cluster: str,
    template: str,
    instance_type: str,
    job_ids: Iterable[str],
    now: datetime,
    retry_after_s: float,
) -> str:
    window = int(now.timestamp() // max(retry_after_s, 1))
    key = "\n".join([cluster, template, instance_type, str(window), *sorted(job_ids)])
    return "burst-" + hashlib.sha256(key.encode()).hexdigest()[:16]


def next_window(now: datetime, retry_after_s: float) -> datetime:
    """When the burst window after the one `now` falls in begins: the earliest next try for
    jobs whose burst of this window has already ended."""
    length = max(retry_after_s, 1)
    return datetime.fromtimestamp((now.timestamp() // length + 1) * length, now.tzinfo)


def rollback_note(burst_id: str, why: str) -> str:
    """The reason a rolled-back burst leaves on its jobs."""
    return f"waiting: burst {burst_id} {NO_CAPACITY}{why}"[:1000]


def last_rollback(reason: str) -> str | None:
    """The note of the last burst that raised no capacity, kept in a job's reason (None:
    there is none), so that the next pass can carry it forward."""
    end = reason.find(NO_CAPACITY)
    start = reason.rfind("burst burst-", 0, end)
    return reason[start:] if end >= 0 and start >= 0 else None


def rolled_back(reason: str, burst_id: str) -> bool:
    """Whether the last rollback note a job's reason keeps is burst `burst_id`'s."""
    last = last_rollback(reason)
    return last is not None and last.startswith(f"burst {burst_id} ")


def nodes_for(replicas: int, accelerators_per_replica: int, accelerators_per_node: int) -> int:
    """Nodes `replicas` replicas need, each replica whole on one node."""
    per_node = max(accelerators_per_node // max(accelerators_per_replica, 1), 1)
    return math.ceil(replicas / per_node)


def scale_in(
    claims: Iterable[BurstClaim],
    busy: set[str],
    now: datetime,
    cooldown_s: float,
) -> tuple[list[BurstClaim], list[tuple[BurstClaim, datetime | None]]]:
    """The burst nodes to release (idle for `cooldown_s`), and the idle marks to set (first
    seen idle now) or clear (busy again). `busy`: instance ids some job holds."""
    release: list[BurstClaim] = []
    marks: list[tuple[BurstClaim, datetime | None]] = []
    for claim in claims:
        if claim.deleting or not claim.ready:
            continue
        if claim.instance_id in busy:
            if claim.idle_since is not None:
                marks.append((claim, None))
            continue
        if claim.idle_since is None:
            marks.append((claim, now))
        elif (now - claim.idle_since).total_seconds() >= cooldown_s:
            release.append(claim)
    return release, marks
