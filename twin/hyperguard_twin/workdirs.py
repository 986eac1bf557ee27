"""Folders a twin process owns: each records its owner's pid, so that the next twin removes
the folders of a process killed before it could remove its own (its `atexit` never ran)."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

OWNER_FILE = "owner.pid"


def owned_workdir(prefix: str, parent: Path | None = None) -> Path:
    """A new folder in `parent` (the temporary folder by default) owned by this process; the
    abandoned ones of the same prefix go first."""
    remove_abandoned(prefix, parent)
    workdir = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    (workdir / OWNER_FILE).write_text(str(os.getpid()))
    return workdir


def remove_abandoned(prefix: str, parent: Path | None = None) -> list[Path]:
    """Delete the folders of `prefix` whose owner was killed; those of live processes, and any
    without an owner file yet (one being made this moment), stay."""
    removed = []
    for folder in Path(parent or tempfile.gettempdir()).glob(f"{prefix}*"):
        try:
            owner = int((folder / OWNER_FILE).read_text())
        except (OSError, ValueError):
            continue
        if owner == os.getpid() or alive(owner):
            continue
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
    return removed


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True
