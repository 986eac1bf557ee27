"""The twin's model of a training run's progress (hyperguard_twin.cloud.training_run): its pace
while it is anchored, and what its timeline says an interruption cost."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hyperguard_twin.cloud.training_run import PodState, Progress, Run, interruptions

START = datetime(2026, 11, 29, 9, tzinfo=UTC)
STEP = timedelta(seconds=10)
"""A step's duration at the job's first size (`Run.reference` replicas)."""


def two_replica_run() -> Run:
    run = Run(
        uid="0b8e6a52",
        job_id="nlp-1",
        kind="HyperPodPyTorchJob",
        namespace="hyperpod-ns-nlp",
        name="job-nlp-1-0",
        replicas=2,
        location="s3://checkpoints/nlp-1/",
        auto_resume=False,
        anchor_step=100,
        emitted_step=100,
        reference=2,
    )
    run.pods = {
        "p0": PodState("p0", "node-a", running=True, index=0),
        "p1": PodState("p1", "node-b", running=True, index=1),
    }
    return run


def test_a_pod_that_ends_does_not_slow_the_steps_its_run_already_made() -> None:
    """The training model marks a failed pod ended, then freezes the run: the freeze must
    count the steps made on both nodes, as the checkpoints written meanwhile did. Counted at
    the one node left, the timeline recorded fewer steps than were checkpointed, and an
    interruption's lost steps read too few."""
    run = two_replica_run()
    run.anchor(START, 1.0)
    later = START + timedelta(seconds=500)
    assert run.step_at(later, STEP) == 150  # two nodes, 10 s a step
    run.pods["p1"].ended = True
    run.pods["p1"].running = False
    assert run.step_at(later, STEP) == 150
    # Anchored again on the node left, the run steps at half the pace from there.
    run.anchor_step, run.anchor_at = 150, None
    run.anchor(later, 1.0)
    assert run.step_at(later + timedelta(seconds=200), STEP) == 160


def test_an_interruption_costs_the_steps_beyond_the_checkpoint_it_resumed_from() -> None:
    timeline = [
        Progress(START, 2, 100),
        Progress(START + timedelta(seconds=500), 0, 150),
        Progress(START + timedelta(seconds=560), 1, 140),
    ]
    [stop] = interruptions(timeline)
    assert stop.steps_lost == 10
    assert stop.seconds_down(START) == 60.0
