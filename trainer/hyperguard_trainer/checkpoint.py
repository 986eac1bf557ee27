"""Save and resume by checkpoint contract v2 (hyperguard_trainer.marker).

`save(step, state)` snapshots this rank's state into bytes (the only part the training
loop waits for in background mode), writes it as the shard `rank-<5 digits>.pt`, and rank 0
writes the marker last, listing every rank's shard with its size and checksum and naming
the job, run and attempt. Before a folder is written into, rank 0 empties it (marker first),
so a folder cut short before, or one an earlier run completed at the same step, never mixes
with the new shards. Before the marker, rank 0 checks the fence: a marker of a later run or
attempt in the location means this writer was replaced, and it writes nothing more.

`resume(state)` loads the checkpoint HyperGuard named (`HYPERGUARD_RESUME_FROM`), or else the
newest one in the location this run may resume from, after checking its shards' sizes and
this rank's checksum; it returns the step, or 0.
"""

from __future__ import annotations

import hashlib
import logging
import queue
import re
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hyperguard_trainer import sharded
from hyperguard_trainer import state as states
from hyperguard_trainer.context import Context
from hyperguard_trainer.marker import MARKER, Marker, MarkerError, Shard, folder
from hyperguard_trainer.storage import LocalTarget, Target, target_for

logger = logging.getLogger("hyperguard_trainer")
_STEP = re.compile(r"step-(\d{8})/")
WRITERS = "_writers/"
"""Where each run's rank 0 enters itself (`run-<run>-attempt-<attempt>`): the fence."""
_WRITER = re.compile(r"run-(\d+)-attempt-(\d+)")


def _writer(run: int, attempt: int) -> str:
    return f"run-{run}-attempt-{attempt}"


SHARD_WAIT_S = 600.0
"""How long rank 0 waits for the other ranks' shards before it gives the checkpoint up."""


class Fenced(RuntimeError):
    """A later run or attempt of the job writes to this location: this writer is stale."""


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be resumed from, or a save that did not complete."""


@dataclass
class SaveTimes:
    """What the last save cost: seconds the loop waited (snapshot, and back-pressure from
    the save before it), and seconds its write took (in the background, if so)."""

    step: int = -1
    snapshot_s: float = 0.0
    blocked_s: float = 0.0
    write_s: float = 0.0


@dataclass
class _Pending:
    step: int
    uploads: list[tuple[str, bytes | Path]]
    """This rank's objects to write: (name in the folder, the bytes or a local file)."""
    shards: list[Shard]
    done: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None


class Checkpointer:
    """One per process. `collective` gathers a small object from every rank (defaults to
    torch.distributed's all_gather_object when a process group is up, else to this rank
    alone); `on_complete(step, uri)` runs on rank 0 after each marker is written."""

    def __init__(
        self,
        location: str | Target,
        *,
        context: Context | None = None,
        background: bool = False,
        collective: Callable[[Any], list[Any]] | None = None,
        on_complete: Callable[[int, str], None] | None = None,
        shard_wait_s: float = SHARD_WAIT_S,
        sharded: bool = False,
    ) -> None:
        """`sharded`: the objects with a state dict (a model, an optimizer) are saved and
        loaded through torch.distributed.checkpoint, each rank writing its part, so that a
        sharded (FSDP) model is saved without gathering it and resumed by another number of
        ranks; the rest (random generators, plain values) stays in each rank's shard."""
        self.context = context or Context.from_env()
        self.target = target_for(location) if isinstance(location, str) else location
        self.background = background
        self.collective = collective or _default_collective
        self.on_complete = on_complete
        self.shard_wait_s = shard_wait_s
        self.sharded = sharded
        self._entered = False
        self.times = SaveTimes()
        self._queue: queue.Queue[_Pending | None] = queue.Queue(maxsize=1)
        self._last: _Pending | None = None
        self._worker: threading.Thread | None = None

    @classmethod
    def from_env(cls, **kwargs: Any) -> Checkpointer:
        context = kwargs.pop("context", None) or Context.from_env()
        if not context.location:
            raise CheckpointError("HYPERGUARD_CHECKPOINT_URI is not set: the job has no location")
        return cls(context.location, context=context, **kwargs)

    @property
    def shard_name(self) -> str:
        return f"rank-{self.context.rank:05d}.pt"

    # -- save ------------------------------------------------------------------------------

    def save(self, step: int, state: MutableMapping[str, Any]) -> None:
        """Checkpoint `state` at `step` on every rank (a collective: every rank calls it)."""
        start = time.perf_counter()
        self._agree(step)
        objects = {n: o for n, o in state.items() if self.sharded and hasattr(o, "state_dict")}
        plain = {n: o for n, o in state.items() if n not in objects}
        data = states.dumps(states.capture(plain, step))
        uploads: list[tuple[str, bytes | Path]] = [(self.shard_name, data)]
        mine = [Shard(self.shard_name, len(data), hashlib.sha256(data).hexdigest())]
        if objects:
            files = sharded.save(objects, self._staging(step), self.context.rank)
            uploads += [(name, path) for name, path, _ in files]
            mine += [shard for _, _, shard in files]
        snapshot_s = time.perf_counter() - start
        gathered = self.collective(mine)
        shards = sorted((s for part in gathered for s in part), key=lambda s: s.name)
        pending = _Pending(step, uploads, shards)
        waited = time.perf_counter()
        if self.background:
            self._start_worker()
            self._queue.put(pending)  # blocks while the previous save is still writing
        else:
            self._write(pending)
            self._raise(pending)
        self._last = pending
        self.times = SaveTimes(step, snapshot_s, time.perf_counter() - waited, self.times.write_s)

    def _agree(self, step: int) -> None:
        """The first collective of a save: rank 0 checks the fence and empties the folder,
        and every rank says whether its last write failed. If any rank has a problem, every
        rank raises (the one that had it, its own error), so that none is left waiting in a
        collective the others never reach."""
        problem: BaseException | None = None
        if self._last is not None and self._last.done.is_set() and self._last.error:
            problem, self._last.error = self._last.error, None
        if self.context.rank == 0 and problem is None:
            try:
                self.fence()  # a stale writer must not empty a later run's folder either
                self._empty(step)
            except Fenced as error:
                problem = error
        said = self.collective(None if problem is None else f"{type(problem).__name__}: {problem}")
        if problem is not None:
            raise problem
        others = [f"rank {rank}: {text}" for rank, text in enumerate(said) if text is not None]
        if others:
            raise (Fenced if "Fenced" in others[0] else CheckpointError)(
                f"step {step} not saved: {'; '.join(others)}"
            )

    def wait(self) -> None:
        """Until the last save is written (or raise what failed it)."""
        if self._last is not None:
            self._last.done.wait()
            self._raise(self._last)

    def close(self) -> None:
        self.wait()
        if self._worker is not None:
            self._queue.put(None)
            self._worker.join()
            self._worker = None

    def _start_worker(self) -> None:
        if self._worker is None:
            self._worker = threading.Thread(target=self._run, name="checkpoint", daemon=True)
            self._worker.start()

    def _run(self) -> None:
        while (pending := self._queue.get()) is not None:
            self._write(pending)

    def _write(self, pending: _Pending) -> None:
        start = time.perf_counter()
        try:
            for name, data in pending.uploads:
                key = folder(pending.step) + name
                if isinstance(data, Path):
                    if not isinstance(self.target, LocalTarget):  # written in place otherwise
                        self.target.put(key, data.read_bytes())
                else:
                    self.target.put(key, data)
            if not isinstance(self.target, LocalTarget):
                scratch = {d.parent.parent for _, d in pending.uploads if isinstance(d, Path)}
                for staged in scratch:  # uploaded: the scratch copy goes
                    shutil.rmtree(staged, ignore_errors=True)
            if self.context.rank == 0:
                self._complete(pending)
        except BaseException as error:  # kept for the loop's next save or wait
            pending.error = error
        finally:
            pending.uploads = []
            self.times.write_s = time.perf_counter() - start
            pending.done.set()

    def _complete(self, pending: _Pending) -> None:
        where = folder(pending.step)
        deadline = time.monotonic() + self.shard_wait_s
        delay = 0.05
        marker = _marker(self, pending)
        while missing := marker.missing(self.target.listing(where)):
            if time.monotonic() > deadline:
                raise CheckpointError(f"step {pending.step}: shards not written: {missing}")
            time.sleep(delay)  # the other ranks are still writing theirs
            delay = min(delay * 2, 2.0)
        self.fence()
        self.target.put(where + MARKER, marker.dumps())
        if self.on_complete is not None:
            self.on_complete(pending.step, f"{self.target.uri.rstrip('/')}/{where}")

    def _staging(self, step: int) -> Path:
        """Where torch.distributed.checkpoint writes: the folder itself on a file system,
        a local scratch folder to upload from otherwise."""
        if isinstance(self.target, LocalTarget):
            return self.target.root / folder(step) / sharded.FOLDER
        rank = self.context.rank  # ranks on one node must not share the files they fetch
        scratch = Path(tempfile.gettempdir()) / f"hyperguard-{self.context.job_id}-{step}-{rank}"
        return scratch / sharded.FOLDER

    def _empty(self, step: int) -> None:
        where = folder(step)
        found = self.target.listing(where)
        if not found:
            return
        logger.info("emptying %s before writing it (%d objects)", where, len(found))
        if MARKER in found:  # the marker goes first: no reader may see a mixed folder
            self.target.delete([where + MARKER])
        self.target.delete([where + name for name in found if name != MARKER])

    def fence(self) -> None:
        """Raise Fenced if a later run or attempt of this job has saved here. Each run's
        rank 0 enters itself in `_writers/` at its first save (one small object), so the check
        is one listing however many checkpoints there are, and however far ahead in steps a
        stale writer has got."""
        me = (self.context.run, self.context.attempt)
        later = [w for w in self._writers() if w > me]
        if later:
            run, attempt = max(later)
            raise Fenced(
                f"run {run} attempt {attempt} of job {self.context.job_id} saves here: this "
                f"writer (run {me[0]} attempt {me[1]}) is stale"
            )
        if not self._entered:
            self.target.put(f"{WRITERS}{_writer(*me)}", b"")
            self._entered = True

    def _writers(self) -> list[tuple[int, int]]:
        found = []
        for name in self.target.listing(WRITERS):
            match = _WRITER.fullmatch(name)
            if match:
                found.append((int(match.group(1)), int(match.group(2))))
        return found

    # -- resume ----------------------------------------------------------------------------

    def resume(self, state: MutableMapping[str, Any], *, map_location: Any = None) -> int:
        """Restore `state` from the checkpoint to resume from; its step, or 0 when there is
        none. HyperGuard's pick (`HYPERGUARD_RESUME_FROM`) wins; without one (a first run, or
        a run started outside HyperGuard) the newest complete checkpoint of this job and of
        no later run is used."""
        step = self._resume_step()
        if step is None:
            return 0
        where = folder(step)
        data = self.target.get(where + MARKER)
        try:
            marker = Marker.loads(data)
        except MarkerError:
            marker = None  # contract v1: the shard is this rank's by name, unchecked
        if marker is None:
            blob = self.target.get(where + self.shard_name)
            return states.restore(state, states.loads(blob, map_location=map_location))
        self._check(marker)
        listed = {s.name: s for s in marker.shards}
        parts = [s for s in marker.shards if s.name.startswith(sharded.FOLDER + "/")]
        objects = {n: o for n, o in state.items() if parts and hasattr(o, "state_dict")}
        # A rank the writing run did not have (the job grew) takes rank 0's plain state.
        shard = listed.get(self.shard_name) or (listed.get("rank-00000.pt") if parts else None)
        if shard is None:
            raise CheckpointError(
                f"step {step} was written by {marker.world_size} ranks and lists no "
                f"{self.shard_name}: to resume with more ranks, save with sharded=True"
            )
        saved = states.loads(self._verified(where, shard), map_location=map_location)
        if objects:
            scratch = self._staging(step)
            if not isinstance(self.target, LocalTarget):
                for part in parts:
                    path = scratch.parent / part.name
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_bytes(self._verified(where, part))
            try:
                sharded.load(objects, scratch)
            finally:
                if not isinstance(self.target, LocalTarget):
                    shutil.rmtree(scratch.parent, ignore_errors=True)
        plain = {n: o for n, o in state.items() if n not in objects}
        step_saved = states.restore(plain, saved)
        state.update(plain)
        return step_saved

    def _verified(self, where: str, shard: Shard) -> bytes:
        blob = self.target.get(where + shard.name)
        if hashlib.sha256(blob).hexdigest() != shard.sha256:
            raise CheckpointError(f"{where}{shard.name} does not match its checksum")
        return blob

    def _resume_step(self) -> int | None:
        context = self.context
        if context.resume_step is not None:
            return context.resume_step
        if context.resume_from:
            match = _STEP.search(context.resume_from.rstrip("/") + "/")
            if match is None:
                raise CheckpointError(
                    f"HYPERGUARD_RESUME_FROM={context.resume_from!r} names no step"
                )
            return int(match.group(1))
        return self._newest_resumable()

    def _newest_resumable(self) -> int | None:
        """The newest step whose marker this run may resume from: read newest first, each
        folder listed once, stopping at the first."""
        steps = (int(m.group(1)) for f in self.target.folders() if (m := _STEP.fullmatch(f)))
        for step in sorted(steps, reverse=True):
            listing = self.target.listing(folder(step))
            if MARKER not in listing:
                continue
            try:
                marker = Marker.loads(self.target.get(folder(step) + MARKER))
                self._check(marker, listing)
            except (MarkerError, CheckpointError) as refused:
                logger.warning("not resuming from step %d: %s", step, refused)
                continue
            return step
        return None

    def _check(self, marker: Marker, listing: dict[str, int] | None = None) -> None:
        """Raise CheckpointError unless this run may resume from `marker`: its job, no later
        run, and every shard there at its size (`listing`: the folder's, if read already)."""
        context = self.context
        if marker.job_id != context.job_id:
            raise CheckpointError(f"written by job {marker.job_id}, not {context.job_id}")
        if marker.run > context.run:
            raise CheckpointError(f"written by run {marker.run}, later than this run {context.run}")
        if listing is None:
            listing = self.target.listing(folder(marker.step))
        missing = marker.missing(listing)
        if missing:
            raise CheckpointError(f"shards missing or cut: {', '.join(missing[:5])}")

    def _raise(self, pending: _Pending) -> None:
        if pending.error is not None:
            error, pending.error = pending.error, None
            raise error


def _marker(checkpointer: Checkpointer, pending: _Pending) -> Marker:
    context = checkpointer.context
    return Marker(
        job_id=context.job_id,
        run=context.run,
        attempt=context.attempt,
        step=pending.step,
        world_size=len(pending.shards),
        shards=tuple(pending.shards),
    )


def _default_collective(item: Any) -> list[Any]:
    torch = sys.modules.get("torch")
    if (
        torch is not None
        and torch.distributed.is_available()
        and torch.distributed.is_initialized()
    ):
        gathered: list[Any] = [None] * torch.distributed.get_world_size()
        torch.distributed.all_gather_object(gathered, item)
        return gathered
    return [item]
