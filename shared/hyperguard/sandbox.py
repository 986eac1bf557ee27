"""The Lambda sandbox's life: what a function's init makes lives as long as the sandbox, and
what one invocation makes dies with it."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_pause = threading.Lock()
_paused = 0
_resume = False


def init_done() -> None:
    """The end of a function's init (its handler module's top level). What the init made
    (modules, botocore's service models, the clients, the settings: 160,000 tracked objects
    for the scheduler) lives as long as the sandbox, yet every full collection of Python's
    garbage collector walked it all again: 54-77 ms each across the functions, on this
    development machine. `gc.freeze` leaves it out of every later collection (BENCHMARKS.md,
    "Cold starts"); what the invocations make is collected as before."""
    gc.freeze()


@contextmanager
def collector_paused() -> Iterator[None]:
    """No automatic collection while the block runs; one young collection as it ends (D190).
    For work whose objects are acyclic and die with it, which reference counting frees at
    once: the collector has nothing to find in them, yet walked them again and again as they
    grew (a third of a large scheduling pass's CPU). Cycles the block makes wait until it
    ends. Nested or on several threads at once, the collector resumes (and collects) when the
    last block ends, and only if it ran before the first began."""
    global _paused, _resume
    with _pause:
        if _paused == 0:
            _resume = gc.isenabled()
            gc.disable()
        _paused += 1
    try:
        yield
    finally:
        with _pause:
            _paused -= 1
            resume = _paused == 0 and _resume
            if resume:
                gc.enable()
        if resume:
            gc.collect(0)
