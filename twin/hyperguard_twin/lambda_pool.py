"""A function's execution environments: each one worker process (lambda_worker.py), at most
a pool's cap of them, reused warm and replaced when they die."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

WORKER = Path(__file__).with_name("lambda_worker.py")


class Worker:
    """One execution environment: a worker process, the file its fd 1 and 2 write to, and
    the pipe its replies come back on."""

    def __init__(self, python: str, args: list[str], env: dict[str, str], cwd: Path) -> None:
        self.started = time.perf_counter()
        self.output = tempfile.TemporaryFile()  # noqa: SIM115 (closed by close())
        self.max_memory_mb = 0
        replies, reply_fd = os.pipe()
        try:
            self.proc = subprocess.Popen(
                [python, "-I", "-S", str(WORKER), str(reply_fd), *args],
                stdin=subprocess.PIPE,
                stdout=self.output,
                stderr=self.output,
                env=env,
                cwd=cwd,
                pass_fds=(reply_fd,),
            )
        except BaseException:
            os.close(replies)
            self.output.close()
            raise
        finally:
            os.close(reply_fd)
        self.replies: BinaryIO = os.fdopen(replies, "rb")

    def call(self, request: dict[str, Any] | None, timeout_s: float) -> tuple[Any, bool]:
        """The worker's next reply (to `request`, if given), or None if the worker died or
        was killed at the deadline (then the flag is set)."""
        expired = threading.Event()

        def expire() -> None:
            expired.set()
            self.proc.kill()

        timer = threading.Timer(timeout_s, expire)
        timer.start()
        try:
            if request is not None and self.proc.stdin is not None:
                self.proc.stdin.write(json.dumps(request).encode() + b"\n")
                self.proc.stdin.flush()
            line = self.replies.readline()
        except BrokenPipeError:
            line = b""
        finally:
            timer.cancel()
        if expired.is_set() or not line:
            return None, expired.is_set()
        reply = json.loads(line)
        self.max_memory_mb = reply["max_memory_mb"]
        return reply, False

    def drain(self) -> str:
        """What the worker wrote since the last drain. The worker's fd 1 and 2 share this
        file's offset, so rewinding here makes the worker write from the start again."""
        fd = self.output.fileno()
        text = os.pread(fd, os.fstat(fd).st_size, 0).decode(errors="replace")
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        return text

    def exit_reason(self) -> str:
        code = self.proc.wait()
        if code == 0:
            return "Runtime exited without providing a reason"
        if code < 0:
            name = signal.strsignal(-code) or f"signal {-code}"
            return f"Runtime exited with error: signal: {name.lower()}"
        return f"Runtime exited with error: exit status {code}"

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()

    def close(self) -> None:
        self.kill()
        if self.proc.stdin is not None:
            with contextlib.suppress(BrokenPipeError):  # a request the worker never read
                self.proc.stdin.close()
        self.replies.close()
        self.output.close()


@dataclass(eq=False)
class Pool:
    """A function's execution environments, at most `cap` of them."""

    cap: int
    throttle_when_full: bool
    idle: list[Worker] = field(default_factory=list)
    busy: set[Worker] = field(default_factory=set)
    size: int = 0  # idle, busy and starting
    closed: bool = False
    cond: threading.Condition = field(default_factory=threading.Condition)
    line: deque[object] = field(default_factory=deque)
    """The callers waiting for a worker, first come first."""

    def acquire(self, start: Callable[[], Worker]) -> tuple[Worker, bool] | None:
        """A warm worker, or a new one (then the flag is set: a cold start); None when the
        pool is full and throttles. A pool that does not throttle serves its callers in the
        order they came: a caller that was woken but found the worker taken by one that came
        later would otherwise wait again, and callers that come back at once (a burst's
        clients, each sending its next request) could keep it waiting without bound. An idle
        worker whose process died (killed from outside) is replaced, as Lambda replaces a dead
        execution environment: no invocation is handed to it."""
        dead: list[Worker] = []
        try:
            with self.cond:
                if self.throttle_when_full and not self._free(dead):
                    return None
                turn = object()
                self.line.append(turn)
                try:
                    while self.line[0] is not turn or not self._free(dead):
                        self.cond.wait()
                finally:
                    self.line.remove(turn)
                    self.cond.notify_all()  # the next in line may go too
                if self.idle:
                    worker = self.idle.pop()  # the most recently used, as Lambda tends to pick
                    self.busy.add(worker)
                    return worker, False
                self.size += 1
        finally:
            for worker in dead:
                worker.close()
        try:
            worker = start()
        except BaseException:
            with self.cond:
                self.size -= 1
                self.cond.notify_all()
            raise
        with self.cond:
            self.busy.add(worker)
        return worker, True

    def _free(self, dead: list[Worker]) -> bool:
        """Whether a worker is idle or may be started. Called with the lock held."""
        return self._warm(dead) or self.size < self.cap

    def _warm(self, dead: list[Worker]) -> bool:
        """Whether a live worker is idle; dead idle ones move to `dead` and leave the count.
        Called with the lock held."""
        while self.idle and not self.idle[-1].alive():
            dead.append(self.idle.pop())
            self.size -= 1
        return bool(self.idle)

    def release(self, worker: Worker, keep: bool) -> None:
        with self.cond:
            self.busy.discard(worker)
            keep = keep and not self.closed
            if keep:
                self.idle.append(worker)
            else:
                self.size -= 1
            self.cond.notify_all()  # only the first in line takes it
        if not keep:
            worker.close()

    def retire(self) -> list[Worker]:
        """Takes no more invocations: closes the idle workers and returns the busy ones,
        which are closed when their invocations end."""
        with self.cond:
            self.closed = True
            idle, self.idle = self.idle, []
            self.size -= len(idle)
            busy = list(self.busy)
        for worker in idle:
            worker.close()
        return busy
