"""Ranks of a training job as threads of the test: each saves through the trainer kit, with
an all-gather between them in place of torch.distributed's."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from typing import Any

from hyperguard_trainer import Checkpointer, Context
from hyperguard_trainer.storage import Target


def all_gather(world: int) -> Callable[[int], Callable[[Any], list[Any]]]:
    """For `world` ranks as threads: each rank's all-gather, as torch.distributed's
    all_gather_object would give it (`gather_of(rank)(item)` → every rank's item)."""
    barrier = threading.Barrier(world)
    gathered: list[Any] = [None] * world

    def gather_of(rank: int) -> Callable[[Any], list[Any]]:
        def gather(item: Any) -> list[Any]:
            gathered[rank] = item
            barrier.wait(10)
            result = list(gathered)
            barrier.wait(10)
            return result

        return gather

    return gather_of


def ranks_save(
    target: Callable[[], str | Target], context: Context, step: int, state: Callable[[], Any]
) -> list[BaseException | None]:
    """`context.world_size` ranks of `context` (each its own rank) save `step` of `state()`
    to `target()`, one thread a rank; what each rank raised (None: saved). A rank still
    waiting after 20 s fails the test: a collective some rank never reached."""
    world = context.world_size
    gather_of = all_gather(world)
    raised: list[BaseException | None] = [None] * world

    def rank(r: int) -> None:
        mine = dataclasses.replace(context, rank=r)
        try:
            Checkpointer(target(), context=mine, collective=gather_of(r)).save(step, state())
        except Exception as error:  # returned to the test
            raised[r] = error

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(world)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
        assert not thread.is_alive(), "a rank is still waiting in a collective"
    return raised
