"""The training the pods do (no open-source original: it stands for the jobs' own code).

A run (`training_run`) is one batch Job or HyperPodPyTorchJob (by its uid) and the pods the
real Job controller, or the twin's training operator, made for it. The run steps while every
one of its pods is Running (as KWOK, upstream, reports it) on a node whose instance is up and
healthy; it checkpoints every N steps, and an elastic run also when its size changes (the
ranks checkpoint and exit before the operator restarts them at the new size, D186); it
resumes from the checkpoint it is told of (HYPERGUARD_RESUME_STEP) or, restarted in place,
from the last one it wrote. The global batch is fixed: a step of a run with fewer replicas
than the job's first run takes proportionally longer, at the pace of the nodes it stepped on
since it last started stepping.

What the training decides is when its processes exit, and with what code (its processes,
`training_processes`, say it on their pods); the Job controller (or the training operator)
decides what that means for the run. A node whose instance goes down takes its pods'
processes with it: the run stops stepping, and Kubernetes evicts the pods as it does a
NotReady node's (taint-based eviction).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any, Literal

from hyperguard.cluster.workloads import JOB_ID_LABEL, replica_index
from hyperguard_twin.cloud.core import Effect, Instance, World
from hyperguard_twin.cloud.logs import ContainerLogs
from hyperguard_twin.cloud.training_processes import CRASHED, Processes
from hyperguard_twin.cloud.training_run import PodState, Progress, Run, hpj_replicas, run_of
from hyperguard_twin.plane.kube import (
    HYPERPOD_PYTORCH_JOBS,
    JOBS,
    PODS,
    KubeClient,
    start_watches,
)


def _owner_uid(pod: Mapping[str, Any]) -> str | None:
    for owner in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if owner.get("controller") and owner.get("kind") in ("Job", "HyperPodPyTorchJob"):
            return str(owner.get("uid"))
    return None


class Training:
    def __init__(self, world: World, logs: ContainerLogs | None = None) -> None:
        """`logs`: where the pods' processes print (None: nowhere)."""
        self.world = world
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
        self.processes = Processes(world, logs or ContainerLogs(world.kube, None), self._step)
        world.up_to(self._play)
        world.after_each(self._reconcile)

    # ------------------------------------------------------------------ watches

    def watch(self, kube: KubeClient, stop: threading.Event) -> list[threading.Thread]:
        return start_watches(
            kube,
            "training",
            [
                (JOBS, self.on_owner, JOB_ID_LABEL),
                (HYPERPOD_PYTORCH_JOBS, self.on_owner, JOB_ID_LABEL),
                (PODS, self.on_pod, None),
            ],
            stop,
        )

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
                run = self.runs[uid] = run_of(obj, self.checkpoints, self._reference)
                for pod_event, pod in self._early_pods.pop(uid, {}).values():
                    self._apply_pod(run, pod_event, pod, now)
            elif obj.get("kind") == "HyperPodPyTorchJob":
                run.elastic = (obj.get("spec") or {}).get("elasticPolicy")
                self._resize(run, hpj_replicas(obj), now)
            ended = _ended(obj)
            if ended is not None and run.state not in ("succeeded", "failed", "stopped"):
                self._freeze(run, now)
                run.state = ended

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
            self.processes.logs.open(pod)
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
                    self.processes.print(run, pod, now, f"rank {pod.index} of {len(live)}: {start}")
            stepping = self._stepping(run)
            if stepping and run.anchor_at is None:
                at = max(now, run.ready_at or now)
                run.anchor(at, self._slowdown(run))
                self._record(run, at, len(run.nodes))
            elif not stepping and run.anchor_at is not None:
                self._freeze(run, now)

    def resized(self, uid: str, size: int, now: datetime) -> None:
        """The operator's scaling event, signalled before it restarts the pods. The run's own
        watch of its job may see the new size after the operator's deletions of its pods,
        and would then take their ends for a fault and save nothing."""
        with self.world.settled():
            run = self.runs.get(uid)
            if run is not None:
                self._resize(run, size, now)

    def _resize(self, run: Run, size: int, now: datetime) -> None:
        """The run's replica count is `size` now: an elastic run stepping at another size
        checkpoints and stops (heard first from the operator or from the job's watch, once)."""
        if size != run.replicas and run.elastic:
            self._scaling_event(run, now)
        run.replicas = size

    def _scaling_event(self, run: Run, now: datetime) -> None:
        """The size of an elastic run's replica spec changed (HyperGuard's resize): the
        operator signals the ranks, which checkpoint and exit (within the elasticPolicy's
        gracefulShutdownTimeoutInSeconds), and the job restarts at the new size from that
        checkpoint. A run that had stopped already (a fault took a rank) saves nothing: it
        resumes from its last checkpoint."""
        if run.state != "running" or run.anchor_at is None or run.location is None:
            return
        step = run.step_at(now, self._step)
        if step > run.emitted_step:
            self._write_checkpoint(run, step)  # by the ranks it was made on
        self._interrupt(run, now)
        for pod in run.pods.values():
            pod.ended, pod.running = True, False

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
        self.processes.checkpoint(run, step, self.speeds)

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
                self.processes.print(run, pod, at, f"training finished at step {run.max_steps}")
        self.processes.exit(run, 0)

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
                self.processes.exit(run, CRASHED, only_node=instance.node_name, why=why, at=now)

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
        self.processes.exit(run, exit_code, why="the training crashed", at=now)

    def hang(self, job_id: str, now: datetime) -> None:
        run = self.running_run(job_id)
        run.hung = True
        self._freeze(run, now)

    def slow(self, instance: Instance, speed: float, now: datetime) -> None:
        self.speeds[instance.node_name] = speed
        for run in self.runs.values():
            if run.anchor_at is not None and instance.node_name in run.nodes:
                self._freeze(run, now)
                run.anchor(now, self._slowdown(run))
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
