"""The plane's components as processes: each spawned into the plane's folder with a log of its
own, killed with the twin however the twin dies, and stopped together; the ports and checks
they are started with; and the folders of planes whose process was killed."""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from hyperguard_twin.workdirs import OWNER_FILE, owned_workdir

HOST = "127.0.0.1"
STOP_GRACE_S = 1.0
"""How long the components have to exit on SIGTERM when the plane stops."""
WORKDIR_PREFIX = "hyperguard-plane-"
GO_GC_PERCENT = 400
"""The components' GOGC (Go's default 100): each collects once its heap has grown by four
times what the last collection left, not once it has doubled. A twin's start then costs its
Go processes about 2 CPU-seconds less (8.1-9.3 -> 6.2-6.6) and an idle plane a tenth less
CPU, for about 0.7 GiB more resident memory, most of it kube-apiserver's (1.0 -> 1.7 GiB a
plane; BENCHMARKS.md, "CI wall time", D194). A deployment's control plane is EKS's, not
these processes: this sets only what the twin spends on its own."""


class PlaneError(RuntimeError):
    pass


@dataclass
class Process:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def alive(self) -> bool:
        return self.popen.poll() is None

    def tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def rss_bytes(self) -> int | None:
        try:
            for line in Path(f"/proc/{self.popen.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        except OSError:
            return None
        return None


class Processes:
    """The components running in `workdir`, by name, in the order they started."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.by_name: dict[str, Process] = {}

    def spawn(
        self, name: str, binary: Path, args: list[str], env: Mapping[str, str] | None = None
    ) -> None:
        log = self.workdir / "logs" / f"{name}.log"
        log.parent.mkdir(exist_ok=True)
        with log.open("ab") as out:
            popen = subprocess.Popen(
                [str(binary), *args],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**_base_env(), **(env or {})},
                cwd=self.workdir,
                preexec_fn=_die_with_parent,
            )
        self.by_name[name] = Process(name, popen, log)

    def check_alive(self) -> None:
        for process in self.by_name.values():
            if not process.alive():
                raise PlaneError(
                    f"{process.name} exited with {process.popen.returncode}:\n{process.tail()}"
                )

    def stop(self) -> None:
        # A throwaway cluster: each component gets STOP_GRACE_S to exit on SIGTERM (and
        # flush its log), then is killed. Their graceful shutdowns (kube-apiserver draining
        # its watches, the controllers releasing their work queues) took 12 s a twin, for
        # state that is deleted right after.
        for process in reversed(list(self.by_name.values())):
            if process.alive():
                process.popen.terminate()
        deadline = time.monotonic() + STOP_GRACE_S
        for process in reversed(list(self.by_name.values())):
            try:
                process.popen.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.popen.kill()
                process.popen.wait(timeout=5)


PORTS = range(26_000, 32_700)
"""Where a plane's components listen, and the servers tests start on a port of their own:
below Linux's ephemeral range (32768-60999), so no outgoing connection takes a port before
its process binds it. Every port is handed out by `free_port`, reserved to the process that
asked: a port chosen seconds before its process binds it and handed out twice once made KWOK
exit with "address already in use", when the tests chose theirs by probing alone. A twin
a test starts in another process (`hyperguard twin up`) reserves its plane's ports there."""

PORT_LOCKS = Path(tempfile.gettempdir()) / "hyperguard-ports"
"""One lock file per port handed out (`free_port`)."""
_reserved: list[int] = []
_reserving = threading.Lock()


def free_port() -> int:
    """A port of PORTS free now, and reserved to this process for as long as it lives: an
    exclusive lock on its file under PORT_LOCKS, which the kernel drops when the process
    ends, however it ends. Two planes starting at once (two test workers, or a worker and a
    `hyperguard twin up`) each choose a dozen ports seconds before their components bind
    them; without the reservation both could choose the same one, and the later
    component to bind it exits with "address already in use"."""
    PORT_LOCKS.mkdir(exist_ok=True)
    with _reserving:
        for _ in range(200):
            candidate = random.randrange(PORTS.start, PORTS.stop)
            try:  # a lock file another user made is theirs: that port is taken too
                lock = os.open(PORT_LOCKS / str(candidate), os.O_CREAT | os.O_RDWR, 0o600)
            except OSError:
                continue
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # per open file: also in-process
                with socket.socket() as s:
                    s.bind((HOST, candidate))
            except OSError:
                os.close(lock)  # and with it the lock
                continue
            _reserved.append(lock)
            return candidate
    raise PlaneError(
        f"no free port in {PORTS.start}-{PORTS.stop - 1} that could be reserved under {PORT_LOCKS}"
    )


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex((HOST, port)) == 0


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def new_workdir() -> Path:
    """A folder for a new plane, owned by this process; those of killed planes (etcd's data
    and the logs: about 100 MB each) go first."""
    return owned_workdir(WORKDIR_PREFIX)


def remove_workdir(workdir: Path) -> None:
    if os.environ.get("HYPERGUARD_TWIN_KEEP_PLANE"):
        (workdir / OWNER_FILE).unlink(missing_ok=True)  # kept: no later plane takes it
    else:
        shutil.rmtree(workdir, ignore_errors=True)


def _die_with_parent() -> None:
    """In the child: get SIGTERM when the twin's process dies, however it dies, so no
    component outlives it (Linux prctl PR_SET_PDEATHSIG)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)


def _base_env() -> dict[str, str]:
    """What the components inherit: the path and locale, not the twin's AWS settings (each
    component is given what it needs), and the twin's collector setting."""
    keep = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR")
    return {k: v for k, v in os.environ.items() if k in keep} | {"GOGC": str(GO_GC_PERCENT)}
