"""A run of a job (one batch Job or HyperPodPyTorchJob, by its uid, and the pods made for it)
as its object describes it, how far its training got when (its step at a time, its
checkpoints' URIs), and its training timeline: where it stepped, stopped and resumed, and
what each interruption cost.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

from hyperguard.cluster.workloads import (
    AUTO_RESUME_ANNOTATION,
    CHECKPOINT_ENV,
    JOB_ID_ANNOTATION,
    MAX_STEPS_ENV,
    RESUME_STEP_ENV,
)

RunKind = Literal["Job", "HyperPodPyTorchJob"]


@dataclass(frozen=True)
class Progress:
    """A point of a job's training timeline: from `at`, `replicas` replicas step (0: none),
    starting from `step`."""

    at: datetime
    replicas: int
    step: int


@dataclass(frozen=True)
class Interruption:
    """A stop in a job's training timeline: from `stopped` (the step reached) until
    `resumed` (the step it trained from again; None: it never did)."""

    stopped: Progress
    resumed: Progress | None

    @property
    def steps_lost(self) -> int:
        """Steps trained and then redone: the progress beyond the step it resumed from."""
        return max(0, self.stopped.step - self.resumed.step) if self.resumed else 0

    def seconds_down(self, until: datetime) -> float:
        end = self.resumed.at if self.resumed else until
        return max(0.0, (end - self.stopped.at).total_seconds())


def interruptions(
    timeline: list[Progress], *, final_step: int | None = None, training: bool = False
) -> list[Interruption]:
    """Each time the job stopped training (replicas 0) after having trained, and where it
    trained from again. A stop at `final_step` is its end, not an interruption. `training`:
    the job was training when the timeline begins (a window cut from a longer one)."""
    found: list[Interruption] = []
    stopped: Progress | None = None
    trained = training
    for point in timeline:
        if point.replicas == 0 and trained and stopped is None:
            stopped = point
        elif point.replicas > 0:
            if stopped is not None:
                found.append(Interruption(stopped, point))
                stopped = None
            trained = True
    if stopped is not None and stopped.step != final_step:
        found.append(Interruption(stopped, None))
    return found


@dataclass
class PodState:
    name: str
    node: str | None
    running: bool
    index: int
    ended: bool = False


@dataclass
class Run:
    """One run of a job: the pods of one batch Job or HyperPodPyTorchJob, and the training
    they do."""

    uid: str
    job_id: str
    kind: RunKind
    namespace: str
    name: str
    replicas: int
    location: str | None
    auto_resume: bool
    anchor_step: int
    emitted_step: int
    max_steps: int | None = None
    reference: int = 1
    """Replicas of the job's first run: the size a step's duration is quoted for."""
    elastic: dict[str, Any] | None = None
    state: Literal["starting", "running", "interrupted", "failed", "stopped", "succeeded"] = (
        "starting"
    )
    pods: dict[str, PodState] = field(default_factory=dict)
    anchor_at: datetime | None = None
    ready_at: datetime | None = None
    restarts: int = 0
    hung: bool = False
    """The training hangs (a collective that never returns): pods run, no step is made."""
    slowdown: float = 1.0
    """How many times longer a step takes than at full speed: its slowest node's."""
    anchor_nodes: int = 1
    """Nodes the run stepped on from `anchor_at`: its pace is fixed while it is anchored. A pod
    that ends shrinks `nodes` before the run is frozen, and must not slow the steps already
    made (a freeze would record fewer steps than the checkpoints it wrote)."""

    @property
    def nodes(self) -> list[str]:
        """The node under each live pod, by replica."""
        live = sorted((p for p in self.pods.values() if not p.ended), key=lambda p: p.index)
        return [p.node for p in live if p.node]

    def anchor(self, at: datetime, slowdown: float) -> None:
        """Step from `at` at the pace of its nodes now, `slowdown` times slower."""
        self.anchor_at = at
        self.slowdown = slowdown
        self.anchor_nodes = max(len(self.nodes), 1)

    def step_time(self, step: timedelta) -> timedelta:
        return step * self.reference * self.slowdown / self.anchor_nodes

    def node_step_seconds(self, step: timedelta, speeds: Mapping[str, float]) -> dict[str, float]:
        """Each node's compute seconds per step (`speeds` by node name, 1 at full speed), at
        the pace the run steps at (`anchor_nodes`)."""
        full = (step * self.reference / self.anchor_nodes).total_seconds()
        return {node: round(full / speeds.get(node, 1.0), 3) for node in self.nodes}

    def step_at(self, when: datetime, step: timedelta) -> int:
        if self.anchor_at is None or when < self.anchor_at:
            return self.anchor_step
        reached = self.anchor_step + (when - self.anchor_at) // self.step_time(step)
        return min(reached, self.max_steps) if self.max_steps is not None else reached

    def reached_at(self, target: int, step: timedelta) -> datetime | None:
        """When a running run reaches step `target` (None: it is not stepping)."""
        if self.anchor_at is None:
            return None
        return self.anchor_at + self.step_time(step) * max(target - self.anchor_step, 0)

    def finishes_at(self, step: timedelta) -> datetime | None:
        if self.anchor_at is None or self.max_steps is None or self.state != "running":
            return None
        return self.anchor_at + self.step_time(step) * max(self.max_steps - self.anchor_step, 0)


def checkpoint_uri(location: str, step: int) -> str:
    return f"{location.rstrip('/')}/step-{step:08d}/"


def _env(pod_spec: Mapping[str, Any]) -> dict[str, str]:
    container = (pod_spec.get("containers") or [{}])[0]
    return {e.get("name"): e.get("value") for e in container.get("env") or [] if "value" in e}


def hpj_replicas(obj: Mapping[str, Any]) -> int:
    specs = (obj.get("spec") or {}).get("replicaSpecs") or [{}]
    return int(specs[0].get("replicas") or 1)


def run_of(
    obj: Mapping[str, Any], checkpoints: Mapping[str, int], references: dict[str, int]
) -> Run:
    """A new run of the Job or HyperPodPyTorchJob `obj`: from the step it is told, else from
    its location's newest checkpoint (`checkpoints`); `references`: each job's first size."""
    meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    kind: RunKind = "HyperPodPyTorchJob" if obj.get("kind") == "HyperPodPyTorchJob" else "Job"
    if kind == "HyperPodPyTorchJob":
        template = ((spec.get("replicaSpecs") or [{}])[0].get("template") or {}).get("spec") or {}
        replicas = hpj_replicas(obj)
    else:
        template = (spec.get("template") or {}).get("spec") or {}
        replicas = int(spec.get("parallelism") or 1)
    env = _env(template)
    job_id = str((meta.get("annotations") or {}).get(JOB_ID_ANNOTATION) or meta.get("name"))
    location = env.get(CHECKPOINT_ENV) or None
    told = env.get(RESUME_STEP_ENV)
    start = int(told) if told else checkpoints.get(location or "", 0)
    max_steps = env.get(MAX_STEPS_ENV)
    return Run(
        uid=str(meta.get("uid")),
        job_id=job_id,
        kind=kind,
        namespace=str(meta.get("namespace")),
        name=str(meta.get("name")),
        replicas=replicas,
        location=location,
        auto_resume=(meta.get("annotations") or {}).get(AUTO_RESUME_ANNOTATION) == "true",
        anchor_step=start,
        emitted_step=start,
        max_steps=int(max_steps) if max_steps else None,
        reference=references.setdefault(job_id, max(replicas, 1)),
        elastic=spec.get("elasticPolicy") if kind == "HyperPodPyTorchJob" else None,
    )
