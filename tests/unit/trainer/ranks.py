"""Ranks of a training job as threads of the test: each saves through the trainer kit, with
an all-gather between them in place of torch.distributed's."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from typing import Any

from hyperguard_trainer import Checkpointer, Context
from hyperguard_trainer.storage import Target


def ranks_save(
    target: Callable[[], str | Target], context: Context, step: int, state: Callable[[], Any]
) -> None:
    """`context.world_size` ranks of `context` (each its own rank) save `step` of `state()`
    to `target()`, one thread a rank."""
    world = context.world_size
    barrier = threading.Barrier(world)
    gathered: list[Any] = [None] * world

    def rank(r: int) -> None:
        def gather(item: Any) -> list[Any]:
            gathered[r] = item
            barrier.wait(10)
            result = list(gathered)
            barrier.wait(10)
            return result

        mine = dataclasses.replace(context, rank=r)
        Checkpointer(target(), context=mine, collective=gather).save(step, state())

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(world)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
