"""The Lambda sandbox's life: what a function's init makes lives as long as the sandbox."""

from __future__ import annotations

import gc


def init_done() -> None:
    """The end of a function's init (its handler module's top level). What the init made
    (modules, botocore's service models, the clients, the settings: 160,000 tracked objects
    for the scheduler) lives as long as the sandbox, yet every full collection of Python's
    garbage collector walked it all again: 54-77 ms each across the functions, on this
    development machine. `gc.freeze` leaves it out of every later collection (BENCHMARKS.md,
    "Cold starts"); what the invocations make is collected as before."""
    gc.freeze()
