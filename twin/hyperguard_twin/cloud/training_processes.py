"""What a run's training processes do outside the simulation, as a job's own code would: print
to their pods' logs, write a checkpoint (S3 shards, then the `_COMPLETE` marker, then a report
to the service's API), and exit. A process says its exit code on its pod
(`twin.hyperguard.io/exit-code`): 0 when it reached its last step, 1 when it crashed by itself
or its node's GPU failed under it; KWOK's stage then ends the pod Succeeded or Failed.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta

from hyperguard_twin.cloud.core import Effect, World
from hyperguard_twin.cloud.logs import ContainerLogs
from hyperguard_twin.cloud.training_run import PodState, Run, checkpoint_uri
from hyperguard_twin.plane.kube import PODS, KubeApiError

EXIT_CODE_ANNOTATION = "twin.hyperguard.io/exit-code"
CRASHED = 1
"""The exit code of a training process that crashed (a Python exception, an NCCL error)."""


class Processes:
    def __init__(self, world: World, logs: ContainerLogs, step: timedelta) -> None:
        self.world = world
        self.logs = logs
        self._step = step

    def print(self, run: Run, pod: PodState, at: datetime, line: str) -> None:
        self.logs.write(run.namespace, pod.name, at, line)

    def checkpoint(self, run: Run, step: int, speeds: Mapping[str, float]) -> None:
        assert run.location is not None
        team = run.namespace.removeprefix("hyperpod-ns-")
        uri = checkpoint_uri(run.location, step)
        self.world.effects(Effect("write_checkpoint", (run.location, step)))
        by_node = {i.node_name: i.instance_id for i in self.world.instances.values()}
        timings = {
            by_node[node]: seconds
            for node, seconds in run.node_step_seconds(self._step, speeds).items()
            if node in by_node
        }
        self.world.effects(Effect("report_checkpoint", (run.job_id, team, step, uri, timings)))
        at = run.reached_at(step, self._step) or self.world.clock.now()
        for pod in run.pods.values():
            if not pod.ended:
                saved = f": checkpoint saved to {uri}" if pod.index == 0 else ""
                self.print(run, pod, at, f"step {step}{saved}")

    def exit(
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
                self.print(
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
