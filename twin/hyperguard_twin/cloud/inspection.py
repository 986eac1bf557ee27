"""What tests, scenarios and `hyperguard twin nodes` read back from the simulated cloud: its
instances, the training runs on them and their progress, as copies taken with everything due
up to the clock's time settled."""

from __future__ import annotations

from typing import Any

from hyperguard.models import NodeStatus
from hyperguard_twin.cloud.core import Instance, World, order
from hyperguard_twin.cloud.hyperpod import HyperPod
from hyperguard_twin.cloud.training import Training
from hyperguard_twin.cloud.training_run import Progress, Run
from hyperguard_twin.plane.kube import NODES


class Inspection:
    def __init__(self, world: World, hyperpod: HyperPod, training: Training) -> None:
        self.world = world
        self.hyperpod = hyperpod
        self.training = training

    def instances(self) -> list[Instance]:
        with self.world.settled():
            return [Instance(**vars(i)) for i in sorted(self.world.instances.values(), key=order)]

    def instance(self, instance_id: str) -> Instance | None:
        with self.world.settled():
            found = self.world.instances.get(instance_id)
            return Instance(**vars(found)) if found else None

    def node_status(self, instance_id: str) -> NodeStatus | None:
        instance = self.instance(instance_id)
        return instance.status if instance else None

    def replacement_of(self, instance_id: str) -> str | None:
        with self.world.settled():
            return self.hyperpod.replaced_by.get(instance_id)

    def runs(self) -> dict[str, Run]:
        """The latest run of each job, by job id."""
        with self.world.settled():
            latest: dict[str, Run] = {}
            for run in self.training.runs.values():
                if run.state != "stopped" or run.job_id not in latest:
                    latest[run.job_id] = run
            return {job_id: Run(**vars(run)) for job_id, run in latest.items()}

    def job_instances(self, job_id: str) -> list[str]:
        """The instances under the pods of the job's latest run, by replica."""
        with self.world.settled():
            run = self.runs()[job_id]
            by_node = {i.node_name: i.instance_id for i in self.world.instances.values()}
            return [by_node[name] for name in run.nodes if name in by_node]

    def schedulable(self, instance_id: str) -> bool:
        """Whether the node's Kubernetes object takes new pods (cordoned: False)."""
        instance = self.instance(instance_id)
        if instance is None:
            raise LookupError(f"no such node {instance_id} in the simulated cluster")
        node = self.world.kube.get(NODES, instance.node_name)
        return node is not None and not (node.get("spec") or {}).get("unschedulable")

    def step_of(self, job_id: str) -> int:
        with self.world.settled() as now:
            step = self.training._step
            runs = [r for r in self.training.runs.values() if r.job_id == job_id]
            return max((r.step_at(now, step) for r in runs), default=0)

    def checkpoint_step(self, job_id: str) -> int | None:
        with self.world.settled():
            locations = {r.location for r in self.training.runs.values() if r.job_id == job_id}
            steps = [
                self.training.checkpoints[loc]
                for loc in locations
                if loc in self.training.checkpoints
            ]
            return max(steps, default=None)

    def timeline(self, job_id: str) -> list[Progress]:
        with self.world.settled():
            return list(self.training.timelines.get(job_id, []))

    def snapshot(self) -> dict[str, Any]:
        """JSON-able state for `hyperguard twin nodes`."""
        with self.world.settled() as now:
            nodes = [
                {
                    "instance_id": i.instance_id,
                    "platform": i.platform,
                    "pool": i.group,
                    "instance_type": i.instance_type,
                    "capacity_type": i.capacity_type,
                    "status": i.status.value,
                    "healthy": self.world.healthy(i),
                    "node_name": i.node_name,
                    "logical_id": i.logical_id,
                    "fault": f.kind if (f := self.world.faults.get(i.instance_id)) else None,
                }
                for i in sorted(self.world.instances.values(), key=order)
            ]
            step = self.training._step
            jobs = [
                {
                    "job_id": run.job_id,
                    "run": run.name,
                    "state": run.state,
                    "step": run.step_at(now, step),
                    "progressing": run.anchor_at is not None and now >= run.anchor_at,
                    "nodes": run.nodes,
                    "restarts": run.restarts,
                }
                for run in self.training.runs.values()
                if run.state != "stopped"
            ]
        cordoned = {
            n["metadata"]["name"]
            for n in self.world.kube.list_objects(NODES)
            if (n.get("spec") or {}).get("unschedulable")
        }
        for node in nodes:
            node["schedulable"] = node["node_name"] not in cordoned
        return {"now": now.isoformat(), "nodes": nodes, "jobs": jobs}
