"""Wall deadlines for waits on real processes (the upstream control plane's controllers, the
twin's pollers and forwarder): one scale for every such wait in the test tiers.

A deadline only bounds a failure: a passing test waits for its condition, never for its
deadline. Each wait names what its condition takes at most on an idle host; `loaded` scales
that by what a full `make test` on a 2-core host adds (three twins and a fourth worker on two
cores: a controller that answers in 20 s idle took over 60 s there, BENCHMARKS.md,
2026-11-30). Set HYPERGUARD_DEADLINE_SCALE to change the scale for one run.
"""

from __future__ import annotations

import os

SCALE = float(os.environ.get("HYPERGUARD_DEADLINE_SCALE", "3"))


def loaded(idle_s: float) -> float:
    """The wall deadline of a wait whose condition holds within `idle_s` on an idle host."""
    return idle_s * SCALE
