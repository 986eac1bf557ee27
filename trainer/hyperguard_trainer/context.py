"""Who this process is, as HyperGuard and torchrun tell it through the environment.

HyperGuard sets on every training container (hyperguard.cluster.workloads):
`HYPERGUARD_JOB_ID`, `HYPERGUARD_RUN` (the job's dispatch number: a restart, a move or a
resize is a new run), `HYPERGUARD_CHECKPOINT_URI` (where the job checkpoints),
`HYPERGUARD_NODE_NAME` (the pod's node), `HYPERGUARD_GRACE_S` (the pod's termination grace
period) and, on a restart, `HYPERGUARD_RESUME_FROM` / `HYPERGUARD_RESUME_STEP` (the latest
checkpoint HyperGuard judged complete). torchrun sets `RANK`, `WORLD_SIZE`, `LOCAL_RANK` and
`TORCHELASTIC_RESTART_COUNT` (the attempt within a run).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

JOB_ID = "HYPERGUARD_JOB_ID"
RUN = "HYPERGUARD_RUN"
CHECKPOINT_URI = "HYPERGUARD_CHECKPOINT_URI"
RESUME_FROM = "HYPERGUARD_RESUME_FROM"
RESUME_STEP = "HYPERGUARD_RESUME_STEP"
NODE_NAME = "HYPERGUARD_NODE_NAME"
GRACE_S = "HYPERGUARD_GRACE_S"
INSTANCE_ID = "HYPERGUARD_INSTANCE_ID"
API_URL = "HYPERGUARD_API_URL"
ATTEMPT = "TORCHELASTIC_RESTART_COUNT"

_INSTANCE = re.compile(r"(?:^|-)(i-[0-9a-f]{8,17})$")
_MAX_INT = 2**53


class ContextError(ValueError):
    """An environment variable HyperGuard or torchrun sets, with a value they never set."""


@dataclass(frozen=True)
class Context:
    job_id: str = "local"
    run: int = 0
    attempt: int = 0
    rank: int = 0
    world_size: int = 1
    location: str | None = None
    resume_from: str | None = None
    resume_step: int | None = None
    instance_id: str | None = None
    grace_s: float | None = None
    api_url: str | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Context:
        env = os.environ if env is None else env
        world = _int(env, "WORLD_SIZE", 1)
        rank = _int(env, "RANK", 0)
        if world < 1 or not 0 <= rank < world:
            raise ContextError(f"RANK {rank} is not within WORLD_SIZE {world}")
        grace = env.get(GRACE_S)
        return cls(
            job_id=env.get(JOB_ID) or "local",
            run=_int(env, RUN, 0),
            attempt=_int(env, ATTEMPT, 0),
            rank=rank,
            world_size=world,
            location=env.get(CHECKPOINT_URI) or None,
            resume_from=env.get(RESUME_FROM) or None,
            resume_step=_int(env, RESUME_STEP, 0) if env.get(RESUME_STEP) else None,
            instance_id=instance_id(env),
            grace_s=float(_int(env, GRACE_S, 0)) if grace else None,
            api_url=(env.get(API_URL) or "").rstrip("/") or None,
        )


def instance_id(env: Mapping[str, str]) -> str | None:
    """The EC2 instance this process runs on, as HyperGuard names nodes: given outright, or
    read off the node's name (HyperPod names its EKS nodes `hyperpod-i-…`)."""
    given = env.get(INSTANCE_ID)
    if given:
        return given
    match = _INSTANCE.search(env.get(NODE_NAME, ""))
    return match.group(1) if match else None


def _int(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ContextError(f"{name}={raw!r} is not a whole number") from None
    if not 0 <= value < _MAX_INT:
        raise ContextError(f"{name}={raw!r} is out of range")
    return value
