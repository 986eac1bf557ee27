"""The plane's timings: the one setting on the simulated clock (a pod's toleration of a
NotReady node) never falls under what kube-controller-manager needs to lift the node's
not-ready taint once it is Ready again, in wall time (D207)."""

from __future__ import annotations

import pytest

from hyperguard_twin.plane.settings import (
    MIN_NOT_READY_TOLERATION_S,
    PlaneTimings,
)


@pytest.mark.parametrize(
    ("scale", "toleration_s"),
    [(1.0, 300), (30.0, 10), (60.0, 5), (240.0, 5), (3600.0, 5)],
)
def test_the_toleration_is_300_simulated_seconds_but_never_under_the_floor(
    scale: float, toleration_s: int
) -> None:
    assert PlaneTimings.for_scale(scale).not_ready_toleration_s == toleration_s


def test_a_toleration_under_the_floor_is_refused() -> None:
    with pytest.raises(ValueError, match="not-ready taint"):
        PlaneTimings(not_ready_toleration_s=MIN_NOT_READY_TOLERATION_S - 1)
    assert PlaneTimings(not_ready_toleration_s=MIN_NOT_READY_TOLERATION_S)
