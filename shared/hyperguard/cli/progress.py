"""Progress of the long twin commands (scenarios, game days) on stderr: stdout stays the
result alone (JSON with --json). On a terminal, a rich progress bar; otherwise (a log, a
pipe, no rich), a line per step."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from hyperguard.cli.output import say

Step = Callable[[str], None]
"""`step(what)`: the step before is done, `what` runs now."""


@contextmanager
def progress(title: str, total: int) -> Iterator[Step]:
    """`total` steps of `title`; each `step(what)` call starts the next one."""
    bar = _bar()
    if bar is None:
        started = 0

        def line(what: str) -> None:
            nonlocal started
            started += 1
            say(f"{title} [{min(started, total)}/{total}] {what}")

        yield line
        return
    with bar:
        task = bar.add_task(title, total=total)
        first = True

        def advance(what: str) -> None:
            nonlocal first
            bar.update(task, advance=0 if first else 1, description=f"{title}: {what}")
            first = False

        yield advance
        bar.update(task, completed=total, description=f"{title}: done")


def _bar() -> Any:
    """A rich Progress on stderr when stderr is a terminal and rich is there, else None."""
    if not sys.stderr.isatty():
        return None
    try:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            SpinnerColumn,
            TextColumn,
            TimeElapsedColumn,
        )
    except ImportError:
        return None
    return Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
    )
