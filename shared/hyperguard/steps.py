"""How a Step Functions task function runs one step of its workflow: the state machine names
the step in the task's input, the function finds it among the steps it has, runs it on the
state and counts it (`<Workflow>Step_<step>`, one metric per step run). The recovery
(`hyperguard.recovery.steps`) and the burst (`hyperguard.scaling.steps`) functions are both
run so."""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

from hyperguard.observability import metrics


class UnknownStepError(ValueError):
    """The state machine asked for a step this function does not have."""


def step_of(owner: object, workflow: str, step: str, steps: Collection[str]) -> Callable[..., Any]:
    """`owner`'s method for `step`, one of `steps`; UnknownStepError for any other name (a
    method that is not a step, say, is never run by name)."""
    action = getattr(owner, step, None) if step in steps else None
    if action is None:
        raise UnknownStepError(f"unknown {workflow.lower()} step {step!r}")
    return action  # type: ignore[no-any-return]


def count_step(workflow: str, step: str) -> None:
    metrics.add_metric(name=f"{workflow}Step_{step}", unit="Count", value=1)
