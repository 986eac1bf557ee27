"""Clocks for the simulated cluster: virtual time the twin and the tests control.

The simulator never sleeps; it asks its clock what time it is and works out what must
have happened by then. `ScaledClock` makes a 16-minute node replacement take 16 seconds
of wall time in the twin; `ManualClock` lets a test step through it exactly. Durations
inside the cluster are virtual; a time the cluster shows through an API (a node's launch
time, a condition's transition) is `wall(virtual)`, so that the service, which knows only
the real clock, sees consistent timestamps.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Protocol

DEFAULT_EPOCH = datetime(2025, 1, 6, 9, 0, tzinfo=UTC)


class Clock(Protocol):
    def now(self) -> datetime:
        """The current (virtual) time, timezone-aware."""
        ...

    def wall(self, at: datetime) -> datetime:
        """The real time at which the virtual time `at` happens (or happened)."""
        ...

    def virtual(self, wall: datetime) -> datetime:
        """The virtual time at the real time `wall` (`wall`'s inverse)."""
        ...


def _require_aware(when: datetime) -> datetime:
    if when.tzinfo is None:
        raise ValueError("clock times must be timezone-aware")
    return when


class ManualClock:
    """Time stands still until the test moves it."""

    def __init__(self, start: datetime = DEFAULT_EPOCH) -> None:
        self._now = _require_aware(start)
        self._lock = threading.Lock()

    def now(self) -> datetime:
        return self._now

    def wall(self, at: datetime) -> datetime:
        """Tests run the service on this same clock: virtual and real time are one."""
        return at

    def virtual(self, wall: datetime) -> datetime:
        return wall

    def advance(self, by: float | timedelta) -> datetime:
        """Move forward by `by` (seconds or a timedelta) and return the new time."""
        delta = by if isinstance(by, timedelta) else timedelta(seconds=by)
        if delta < timedelta(0):
            raise ValueError("a clock does not run backwards")
        with self._lock:
            self._now += delta
            return self._now


class ScaledClock:
    """Virtual time that runs `scale` times faster than wall time from its creation."""

    def __init__(
        self,
        scale: float = 60.0,
        *,
        start: datetime | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if scale <= 0:
            raise ValueError("scale must be positive")
        self.scale = scale
        self._start = _require_aware(start) if start is not None else datetime.now(UTC)
        self._wall_start = datetime.now(UTC)
        self._monotonic = monotonic
        self._origin = monotonic()

    def now(self) -> datetime:
        elapsed = self._monotonic() - self._origin
        return self._start + timedelta(seconds=elapsed * self.scale)

    def wall(self, at: datetime) -> datetime:
        return self._wall_start + (at - self._start) / self.scale

    def virtual(self, wall: datetime) -> datetime:
        """The virtual time it was (or will be) at the real time `wall`: `wall`'s inverse."""
        return self._start + (_require_aware(wall) - self._wall_start) * self.scale
