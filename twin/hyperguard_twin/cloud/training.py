"""The training the pods do (no open-source original: it stands for the jobs' own code).

A run is one batch Job or HyperPodPyTorchJob (by its uid) and the pods the real Job
controller, or the twin's training operator, made for it. The run steps while every one of
its pods is Running (as KWOK, upstream, reports it) on a node whose instance is up and
healthy; it checkpoints every N steps (S3 shards, then the `_COMPLETE` marker, then a report
to the service's API, as a job's code does); it resumes from the checkpoint it is told of
(HYPERGUARD_RESUME_STEP) or, restarted in place, from the last one it wrote. The global batch
is fixed: a step of a run with fewer replicas than the job's first run takes proportionally
longer.

What the training decides is when its processes exit, and with what code: 0 when it reaches
its last step, 1 when it crashes by itself or its node's GPU fails under it. It says so on
the pod (`twin.hyperguard.io/exit-code`), and KWOK's stage ends the pod Succeeded or Failed;
the Job controller (or the training operator) decides what that means for the run. A node
whose instance goes down takes its pods' processes with it: the run stops stepping, and
Kubernetes evicts the pods as it does a NotReady node's (taint-based eviction).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

from hyperguard.cluster.workloads import (
    AUTO_RESUME_ANNOTATION,
    CHECKPOINT_ENV,
    JOB_ID_ANNOTATION,
    JOB_ID_LABEL,
    MAX_STEPS_ENV,
    RESUME_STEP_ENV,
    replica_index,
)
from hyperguard_twin.cloud.core import Effect, Instance, World
from hyperguard_twin.cloud.logs import ContainerLogs
from hyperguard_twin.plane.kube import HYPERPOD_PYTORCH_JOBS, JOBS, PODS, KubeApiError, KubeClient

EXIT_CODE_ANNOTATION = "twin.hyperguard.io/exit-code"
RunKind = Literal["Job", "HyperPodPyTorchJob"]
CRASHED = 1
"""The exit code of a training process that crashed (a Python exception, an NCCL error)."""


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

    @property
    def nodes(self) -> list[str]:
        """The node under each live pod, by replica."""
        live = sorted((p for p in self.pods.values() if not p.ended), key=lambda p: p.index)
        return [p.node for p in live if p.node]

    def step_time(self, step: timedelta) -> timedelta:
        return step * self.reference * self.slowdown / max(len(self.nodes), 1)

    def node_step_seconds(self, step: timedelta, speeds: Mapping[str, float]) -> dict[str, float]:
        """Each node's compute seconds per step (`speeds` by node name, 1 at full speed)."""
        full = (step * self.reference / max(len(self.nodes), 1)).total_seconds()
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


def _owner_uid(pod: Mapping[str, Any]) -> str | None:
    for owner in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if owner.get("controller") and owner.get("kind") in ("Job", "HyperPodPyTorchJob"):
            return str(owner.get("uid"))
    return None


def _env(pod_spec: Mapping[str, Any]) -> dict[str, str]:
    container = (pod_spec.get("containers") or [{}])[0]
    return {e.get("name"): e.get("value") for e in container.get("env") or [] if "value" in e}


def checkpoint_uri(location: str, step: int) -> str:
    return f"{location.rstrip('/')}/step-{step:08d}/"


class Training:
    def __init__(self, world: World, logs: ContainerLogs | None = None) -> None:
        """`logs`: where the pods' processes print (None: nowhere)."""
        self.world = world
        self.logs = logs or ContainerLogs(world.kube, None)
        self.runs: dict[str, Run] = {}
        self._early_pods: dict[str, dict[str, tuple[str, dict[str, Any]]]] = {}
        """Pods seen before their owner's event, by the owner's uid: their latest event."""
        self.checkpoints: dict[str, int] = {}
        """The newest checkpoint written, by checkpoint location."""
        self.timelines: dict[str, list[Progress]] = {}
        self.speeds: dict[str, float] = {}
        """Nodes running below full speed (slow_node), by node name."""
        self._reference: dict[str, int] = {}
        self._step = timedelta(seconds=world.timings.step_duration_s)
        self.on_run_end: list[Callable[[Run, str, str, datetime], None]] = []
        world.up_to(self._play)
        world.after_each(self._reconcile)

    # ------------------------------------------------------------------ watches

    def watch(self, kube: KubeClient, stop: threading.Event) -> list[threading.Thread]:
        threads = []
        for rt, handler in (
            (JOBS, self.on_owner),
            (HYPERPOD_PYTORCH_JOBS, self.on_owner),
            (PODS, self.on_pod),
        ):
            thread = threading.Thread(
                target=kube.watch,
                args=(rt, handler, stop),
                kwargs={"label_selector": JOB_ID_LABEL} if rt is not PODS else {},
                name=f"training-{rt.plural}",
                daemon=True,
            )
            thread.start()
            threads.append(thread)
        return threads

    def on_owner(self, event: str, obj: dict[str, Any]) -> None:
        """A Job or HyperPodPyTorchJob of HyperGuard's: a run to follow, or one deleted."""
        self.world.touch()
        meta = obj.get("metadata") or {}
        uid = str(meta.get("uid"))
        with self.world.settled() as now:
            run = self.runs.get(uid)
            if event == "DELETED" or meta.get("deletionTimestamp"):
                if run is not None and run.state not in ("succeeded", "failed"):
                    self._freeze(run, now)
                    run.state = "stopped"
                return
            if run is None:
                run = self.runs[uid] = self._new_run(obj)
                for pod_event, pod in self._early_pods.pop(uid, {}).values():
                    self._apply_pod(run, pod_event, pod, now)
            elif obj.get("kind") == "HyperPodPyTorchJob":
                run.elastic = (obj.get("spec") or {}).get("elasticPolicy")
                run.replicas = _hpj_replicas(obj)
            ended = _ended(obj)
            if ended is not None and run.state not in ("succeeded", "failed", "stopped"):
                self._freeze(run, now)
                run.state = ended

    def _new_run(self, obj: Mapping[str, Any]) -> Run:
        meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
        kind: RunKind = "HyperPodPyTorchJob" if obj.get("kind") == "HyperPodPyTorchJob" else "Job"
        if kind == "HyperPodPyTorchJob":
            template = ((spec.get("replicaSpecs") or [{}])[0].get("template") or {}).get(
                "spec"
            ) or {}
            replicas = _hpj_replicas(obj)
        else:
            template = (spec.get("template") or {}).get("spec") or {}
            replicas = int(spec.get("parallelism") or 1)
        env = _env(template)
        job_id = str((meta.get("annotations") or {}).get(JOB_ID_ANNOTATION) or meta.get("name"))
        location = env.get(CHECKPOINT_ENV) or None
        told = env.get(RESUME_STEP_ENV)
        start = int(told) if told else self.checkpoints.get(location or "", 0)
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
            reference=self._reference.setdefault(job_id, max(replicas, 1)),
            elastic=spec.get("elasticPolicy") if kind == "HyperPodPyTorchJob" else None,
        )

    def on_pod(self, event: str, pod: dict[str, Any]) -> None:
        self.world.touch()
        uid = _owner_uid(pod)
        if uid is None:
            return
        with self.world.settled() as now:
            run = self.runs.get(uid)
            if run is None:
                # Its owner's event is still on the way (the watches are apart): kept for
                # when it comes, or a pod Running before it would never be seen again.
                meta = pod.get("metadata") or {}
                early = self._early_pods.setdefault(uid, {})
                if event == "DELETED":
                    early.pop(str(meta.get("name")), None)
                    if not early:
                        del self._early_pods[uid]
                else:
                    early[str(meta.get("name"))] = (event, pod)
                return
            self._apply_pod(run, event, pod, now)

    def _apply_pod(self, run: Run, event: str, pod: dict[str, Any], now: datetime) -> None:
        meta, spec, status = (
            pod.get("metadata") or {},
            pod.get("spec") or {},
            pod.get("status") or {},
        )
        name = str(meta.get("name"))
        gone = event == "DELETED" or bool(meta.get("deletionTimestamp"))
        phase = status.get("phase")
        if gone or phase in ("Succeeded", "Failed"):
            state = run.pods.get(name)
            if state is not None and not state.ended:
                state.ended = True
                state.running = False
                if run.state == "running":
                    self._interrupt(run, now)
            if gone:
                run.pods.pop(name, None)
            return
        index = replica_index(meta)
        index = len(run.pods) if index is None else index
        if name not in run.pods:
            self.logs.open(pod)
        run.pods[name] = PodState(name, spec.get("nodeName"), phase == "Running", index)
        self._reconcile(now)

    # ------------------------------------------------------------------ stepping

    def _play(self, until: datetime) -> None:
        """Checkpoints and completions up to `until`."""
        every = self.world.timings.checkpoint_interval_steps
        for run in list(self.runs.values()):
            if run.anchor_at is None or run.state != "running":
                continue
            if run.location is not None:
                first = (run.emitted_step // every + 1) * every
                last = run.step_at(until, self._step)
                for step in range(first, last + 1, every):
                    self._write_checkpoint(run, step)
            finish = run.finishes_at(self._step)
            if finish is not None and finish <= until:
                self._complete(run, finish)

    def _stepping(self, run: Run) -> bool:
        live = [p for p in run.pods.values() if not p.ended]
        return (
            run.state == "running"
            and not run.hung
            and len(live) >= run.replicas
            and all(p.running and p.node and self.world.node_ready(p.node) for p in live)
        )

    def _reconcile(self, now: datetime) -> None:
        """Every run steps only while all its pods run on up and healthy nodes."""
        for run in self.runs.values():
            live = [p for p in run.pods.values() if not p.ended]
            if (
                run.state in ("starting", "interrupted")
                and live
                and len(live) >= run.replicas
                and all(p.running for p in live)
            ):
                if run.state == "interrupted":
                    run.restarts += 1
                    run.hung = False  # its processes start afresh
                    run.anchor_step = run.emitted_step = self.checkpoints.get(run.location or "", 0)
                run.state = "running"
                run.ready_at = now + timedelta(seconds=self.world.timings.job_restart_s)
                start = (
                    f"resuming from the checkpoint of step {run.anchor_step}"
                    if run.anchor_step
                    else "starting at step 0"
                )
                for pod in live:
                    self._print(run, pod, now, f"rank {pod.index} of {len(live)}: {start}")
            stepping = self._stepping(run)
            if stepping and run.anchor_at is None:
                run.slowdown = self._slowdown(run)
                run.anchor_at = max(now, run.ready_at or now)
                self._record(run, run.anchor_at, len(run.nodes))
            elif not stepping and run.anchor_at is not None:
                self._freeze(run, now)

    def _interrupt(self, run: Run, now: datetime) -> None:
        self._freeze(run, now)
        run.state = "interrupted"

    def _freeze(self, run: Run, now: datetime) -> None:
        if run.anchor_at is not None:
            run.anchor_step = run.step_at(now, self._step)
            run.anchor_at = None
            self._record(run, now, 0)

    def _record(self, run: Run, at: datetime, replicas: int) -> None:
        self.timelines.setdefault(run.job_id, []).append(
            Progress(at=at, replicas=replicas, step=run.step_at(at, self._step))
        )

    def _slowdown(self, run: Run) -> float:
        return 1 / min((self.speeds.get(n, 1.0) for n in run.nodes), default=1.0)

    def _write_checkpoint(self, run: Run, step: int) -> None:
        assert run.location is not None
        run.emitted_step = step
        self.checkpoints[run.location] = step
        team = run.namespace.removeprefix("hyperpod-ns-")
        uri = checkpoint_uri(run.location, step)
        self.world.effects(Effect("write_checkpoint", (run.location, step)))
        by_node = {i.node_name: i.instance_id for i in self.world.instances.values()}
        timings = {
            by_node[node]: seconds
            for node, seconds in run.node_step_seconds(self._step, self.speeds).items()
            if node in by_node
        }
        self.world.effects(Effect("report_checkpoint", (run.job_id, team, step, uri, timings)))
        at = run.reached_at(step, self._step) or self.world.clock.now()
        for pod in run.pods.values():
            if not pod.ended:
                saved = f": checkpoint saved to {uri}" if pod.index == 0 else ""
                self._print(run, pod, at, f"step {step}{saved}")

    def _complete(self, run: Run, at: datetime) -> None:
        """The training reached its last step: a final checkpoint, then its processes exit 0."""
        assert run.max_steps is not None
        if run.location is not None and run.emitted_step < run.max_steps:
            self._write_checkpoint(run, run.max_steps)
        run.anchor_step, run.anchor_at = run.max_steps, None
        self._record(run, at, 0)
        run.state = "succeeded"
        for pod in run.pods.values():
            if not pod.ended:
                self._print(run, pod, at, f"training finished at step {run.max_steps}")
        self._exit(run, 0)

    def _print(self, run: Run, pod: PodState, at: datetime, line: str) -> None:
        self.logs.write(run.namespace, pod.name, at, line)

    def _exit(
        self,
        run: Run,
        code: int,
        only_node: str | None = None,
        why: str = "",
        at: datetime | None = None,
    ) -> None:
        """The run's processes (those on `only_node`) exit with `code`: said on each pod,
        and, for a crash, `why` in its log."""
        for pod in list(run.pods.values()):
            if pod.ended or (only_node is not None and pod.node != only_node):
                continue
            if code:
                self._print(
                    run, pod, at or self.world.clock.now(), f"{why}; exiting with code {code}"
                )
            try:
                self.world.kube.patch(
                    PODS,
                    pod.name,
                    {"metadata": {"annotations": {EXIT_CODE_ANNOTATION: str(code)}}},
                    run.namespace,
                )
            except KubeApiError as error:
                if error.code != 404:
                    raise  # 404: the operator deleted the pod (a fault of another node)

    # ------------------------------------------------------------------ what happens to it

    def node_down(self, instance: Instance, now: datetime) -> None:
        """The instance under some pods is down: their processes are gone with it."""
        for run in self.runs.values():
            if run.state == "running" and instance.node_name in run.nodes:
                self._freeze(run, now)

    def gpu_failed(self, instance: Instance, now: datetime) -> None:
        """A GPU fault under running processes crashes them: the pods on the node fail."""
        for run in self.runs.values():
            if run.state == "running" and instance.node_name in run.nodes:
                self._freeze(run, now)
                why = f"NCCL error: unhandled cuda error (the GPU of {instance.node_name} failed)"
                self._exit(run, CRASHED, only_node=instance.node_name, why=why, at=now)

    def running_run(self, job_id: str) -> Run:
        run = next(
            (r for r in self.runs.values() if r.job_id == job_id and r.state == "running"), None
        )
        if run is None:
            raise LookupError(f"no running run of job {job_id}")
        return run

    def fail(self, job_id: str, exit_code: int, now: datetime) -> None:
        """The training of the job's running run crashes by itself (not its node)."""
        run = self.running_run(job_id)
        self._freeze(run, now)
        self._exit(run, exit_code, why="the training crashed", at=now)

    def hang(self, job_id: str, now: datetime) -> None:
        run = self.running_run(job_id)
        run.hung = True
        self._freeze(run, now)

    def slow(self, instance: Instance, speed: float, now: datetime) -> None:
        self.speeds[instance.node_name] = speed
        for run in self.runs.values():
            if run.anchor_at is not None and instance.node_name in run.nodes:
                self._freeze(run, now)
                run.slowdown = self._slowdown(run)
                run.anchor_at = now
                self._record(run, now, len(run.nodes))

    def seed_checkpoint(self, location: str, step: int) -> None:
        self.checkpoints[location] = step
        self.world.effects(Effect("write_checkpoint", (location, step)))


def _ended(obj: Mapping[str, Any]) -> Literal["succeeded", "failed"] | None:
    """How the run object says it ended (the Job controller's or the training operator's
    terminal condition), or None."""
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition.get("status") != "True":
            continue
        if condition.get("type") in ("Complete", "Completed"):
            return "succeeded"
        if condition.get("type") == "Failed":
            return "failed"
    return None


def _hpj_replicas(obj: Mapping[str, Any]) -> int:
    specs = (obj.get("spec") or {}).get("replicaSpecs") or [{}]
    return int(specs[0].get("replicas") or 1)
