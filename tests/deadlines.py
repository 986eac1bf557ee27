"""Wall deadlines for waits on real processes (the upstream control plane's controllers, the
twin's pollers and forwarder): one scale for every such wait in the test tiers.

A deadline only bounds a failure: a passing test waits for its condition, never for its
deadline. Each wait names what its condition takes at most on an idle host; `loaded` scales
that by what a full `make test` on a slow 2-core host adds (three twins and a fourth worker
on two cores: there an elastic grow-back waiting for kube-scheduler went past its 60 s,
BENCHMARKS.md, 2026-11-30). Set HYPERGUARD_DEADLINE_SCALE to change the scale for one run.
"""

from __future__ import annotations

import os


def _scale(raw: str) -> float:
    try:
        scale = float(raw)
    except ValueError:
        scale = 0.0
    if not 0 < scale <= 100:
        raise ValueError(f"HYPERGUARD_DEADLINE_SCALE must be a number in (0, 100], not {raw!r}")
    return scale


SCALE = _scale(os.environ.get("HYPERGUARD_DEADLINE_SCALE", "3"))


def loaded(idle_s: float) -> float:
    """The wall deadline of a wait whose condition holds within `idle_s` on an idle host."""
    return idle_s * SCALE
