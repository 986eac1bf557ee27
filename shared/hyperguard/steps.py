"""How a Step Functions task function finds the step its state machine names in the task's
input: among the steps it has, never any other method. The recovery
(`hyperguard.recovery.steps`) and the burst (`hyperguard.scaling.steps`) functions both find
theirs so; each counts the step it ran under its own metric name (`RecoveryStep_<step>`,
`BurstStep_<step>`), written out where it is emitted so that the names can be read from the
code (tests/unit/test_template.py checks every alarm's and the dashboard's against them)."""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any


class UnknownStepError(ValueError):
    """The state machine asked for a step this function does not have."""


def step_of(owner: object, workflow: str, step: str, steps: Collection[str]) -> Callable[..., Any]:
    """`owner`'s method for `step`, one of `steps`; UnknownStepError for any other name (a
    method that is not a step, say, is never run by name)."""
    action = getattr(owner, step, None) if step in steps else None
    if action is None:
        raise UnknownStepError(f"unknown {workflow.lower()} step {step!r}")
    return action  # type: ignore[no-any-return]
