"""An elastic job's resize on the twin (hyperguard_twin.cloud.operator and .training): the
operator signals the ranks before it restarts the pods, so the run checkpoints the step it
reached whichever of its watches (the job's, its pods') the training model hears first."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from hyperguard.cluster.workloads import CHECKPOINT_ENV, JOB_ID_ANNOTATION
from hyperguard.models import NodeStatus
from hyperguard_twin.clock import DEFAULT_EPOCH, ManualClock
from hyperguard_twin.cloud.core import Effect, Instance, World
from hyperguard_twin.cloud.operator import TrainingOperator
from hyperguard_twin.cloud.operator_jobs import Tracked
from hyperguard_twin.cloud.training import Training

UID = "5f0c2a1e-hpj"
NAMESPACE = "hyperpod-ns-nlp"
LOCATION = "s3://checkpoints/nlp-7/"


def world(effects: list[Effect]) -> World:
    made = World(
        ManualClock(),
        None,  # type: ignore[arg-type]  # nothing here reaches the API server
        effects=effects.append,
        hyperpod_cluster="ml-cluster",
        eks_cluster="eks",
        region="us-west-2",
        account="123456789012",
    )
    for n in (0, 1):
        made.instances[f"i-0{n}"] = Instance(
            instance_id=f"i-0{n}",
            platform="hyperpod",
            cluster="ml-cluster",
            group="workers",
            instance_type="ml.p5.48xlarge",
            node_name=f"node-{n}",
            launch_time=DEFAULT_EPOCH,
            status=NodeStatus.RUNNING,
            registered=True,
        )
    return made


def job(replicas: int) -> dict[str, Any]:
    container = {"name": "train", "env": [{"name": CHECKPOINT_ENV, "value": LOCATION}]}
    return {
        "kind": "HyperPodPyTorchJob",
        "metadata": {
            "uid": UID,
            "name": "job-nlp-7-0",
            "namespace": NAMESPACE,
            "annotations": {JOB_ID_ANNOTATION: "nlp-7"},
        },
        "spec": {
            "elasticPolicy": {"minReplicas": 1, "maxReplicas": 2},
            "replicaSpecs": [
                {
                    "name": "pods",
                    "replicas": replicas,
                    "template": {"spec": {"containers": [container]}},
                }
            ],
        },
    }


def pod(index: int) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"job-nlp-7-0-pods-{index}",
            "namespace": NAMESPACE,
            "ownerReferences": [{"controller": True, "kind": "HyperPodPyTorchJob", "uid": UID}],
        },
        "spec": {"nodeName": f"node-{index}"},
        "status": {"phase": "Running"},
    }


def checkpoints(effects: list[Effect]) -> list[int]:
    return [e.args[1] for e in effects if e.kind == "write_checkpoint"]


def stepping_run(effects: list[Effect]) -> tuple[World, Training, datetime]:
    """A two-replica elastic run 25 steps in: its last periodic checkpoint at step 20."""
    w = world(effects)
    training = Training(w)
    training.on_owner("ADDED", job(2))
    for index in (0, 1):
        training.on_pod("ADDED", pod(index))
    clock = w.clock
    assert isinstance(clock, ManualClock)
    step_s = w.timings.step_duration_s  # per step at the job's first size (two replicas here)
    now = clock.advance(w.timings.job_restart_s + 25 * step_s + 1)
    with w.settled():
        pass
    assert checkpoints(effects) == [10, 20]
    return w, training, now


def test_pods_deleted_before_the_job_s_new_size_is_seen_still_checkpoint_the_resize() -> None:
    """The order that lost the steps since the last checkpoint: the operator deleted the pods
    and the training model heard of that before it heard of the job's new size, and took the
    pods' ends for a fault. Signalled by the operator first, the run saves step 25."""
    effects: list[Effect] = []
    _, training, now = stepping_run(effects)
    training.resized(UID, 1, now)
    for index in (0, 1):
        training.on_pod("DELETED", pod(index))
    training.on_owner("MODIFIED", job(1))
    assert checkpoints(effects) == [10, 20, 25]
    # Reported by the ranks that made it, each a step's compute at the pace they stepped at.
    (report,) = [e.args for e in effects if e.kind == "report_checkpoint" and e.args[2] == 25]
    assert report[4] == {"i-00": 30.0, "i-01": 30.0}
    run = training.runs[UID]
    assert (run.state, run.replicas, training.checkpoints[LOCATION]) == ("interrupted", 1, 25)


def test_the_job_s_new_size_heard_first_checkpoints_once() -> None:
    effects: list[Effect] = []
    _, training, now = stepping_run(effects)
    training.on_owner("MODIFIED", job(1))
    training.resized(UID, 1, now)
    for index in (0, 1):
        training.on_pod("DELETED", pod(index))
    assert checkpoints(effects) == [10, 20, 25]


def test_the_operator_signals_a_resize_before_it_restarts_the_pods() -> None:
    effects: list[Effect] = []
    w = world(effects)
    operator = TrainingOperator(w)
    operator.jobs[UID] = Tracked("job-nlp-7-0", NAMESPACE, UID, admitted=True, size=2)
    order: list[str] = []

    class Restarts:
        def restart(self, tracked: Tracked, obj: dict[str, Any], now: datetime) -> None:
            order.append(f"restart at {obj['spec']['replicaSpecs'][0]['replicas']}")

    operator.restarts = Restarts()  # type: ignore[assignment]
    operator.on_resize.append(lambda uid, size, now: order.append(f"signal {uid} {size}"))
    operator.on_job("MODIFIED", job(1))
    assert order == [f"signal {UID} 1", "restart at 1"]


def test_a_resize_of_a_run_not_stepping_saves_nothing() -> None:
    effects: list[Effect] = []
    _, training, now = stepping_run(effects)
    training.on_pod("DELETED", pod(1))  # a fault took a rank: the run stopped
    training.resized(UID, 1, now + timedelta(seconds=1))
    assert checkpoints(effects) == [10, 20]
    assert training.runs[UID].replicas == 1
