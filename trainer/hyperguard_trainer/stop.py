"""A graceful stop: SIGTERM (a drain, a preemption, a proactive move, an elastic resize)
sets a flag; the loop finishes its step, saves, and exits within the pod's grace period
(`HYPERGUARD_GRACE_S`, which HyperGuard sets from the pod's terminationGracePeriodSeconds)."""

from __future__ import annotations

import signal
import time
from types import FrameType

from hyperguard_trainer.context import Context


class GracefulStop:
    """`requested` turns True on SIGTERM (or SIGINT); `left_s()` is what is left of the grace
    period since, or None when the period is unknown. Install it from the main thread."""

    def __init__(self, context: Context | None = None, *, signals: tuple[int, ...] = ()) -> None:
        self.grace_s = (context or Context.from_env()).grace_s
        self.signum: int | None = None
        self.at: float | None = None
        for signum in signals or (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self._handle)

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is None:
            self.signum, self.at = signum, time.monotonic()

    def left_s(self) -> float | None:
        if self.at is None or self.grace_s is None:
            return None
        return self.grace_s - (time.monotonic() - self.at)
