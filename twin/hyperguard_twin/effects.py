"""What the simulated cluster does to the outside world, done outside its lock.

Its training jobs write checkpoints to S3 the way the service expects a training job to
(shards, then the `_COMPLETE` marker: hyperguard.store.checkpoints) and report them to the
service's API, as a job's own code would; its health agent and in-cluster forwarder put
events on EventBridge. All of it goes through the emulator's real APIs, in the order the
cluster produced it; checkpoint writes never wait behind a call (`EffectRunner`).
"""

from __future__ import annotations

import json
import queue
import threading
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from hyperguard.store.checkpoints import MARKER, checkpoint_folder, split_s3_uri
from hyperguard_twin.cluster import Effect

ReportCheckpoint = Callable[[str, str, int, str, dict[str, float]], None]
"""report(job_id, team, step, uri, node_step_seconds): what a job's code does after a
checkpoint completes."""


def write_checkpoint(s3: Any, location: str, step: int, payload: bytes = b"") -> str:
    """A checkpoint written the way a training job should: data first, marker last."""
    bucket, _ = split_s3_uri(location)
    folder = checkpoint_folder(location, step)
    key = folder[len(f"s3://{bucket}/") :]
    s3.put_object(Bucket=bucket, Key=key + "model.pt", Body=payload)
    marker = {"step": step, "completed_at": datetime.now(UTC).isoformat()}
    s3.put_object(Bucket=bucket, Key=key + MARKER, Body=json.dumps(marker).encode())
    return folder


class EffectRunner:
    """Two workers, in the order the cluster produced the effects. The first writes
    checkpoints to S3 and hands every other effect on to the second, which puts events and
    reports checkpoints (each a call of the service's API, a Lambda invocation that may take
    a while under load). So a checkpoint lands in S3 as the training writes it, never behind
    a slow report, as on a real cluster, where a pod's S3 writes wait for no other pod's
    calls; and each report still follows its checkpoint's write."""

    def __init__(
        self,
        *,
        s3: Any,
        events: Any,
        service_bus: str,
        report: ReportCheckpoint | None = None,
    ) -> None:
        self.s3 = s3
        self.events = events
        self.service_bus = service_bus
        self.report = report
        self.done: Counter[str] = Counter()
        self.failed: Counter[str] = Counter()
        self._writes: queue.Queue[Effect | None] = queue.Queue()
        self._calls: queue.Queue[Effect | None] = queue.Queue()
        self._threads: list[threading.Thread] = []

    def submit(self, effect: Effect) -> None:
        self._writes.put(effect)

    def start(self) -> None:
        self._threads = [
            threading.Thread(target=self._write, name="cluster-writes", daemon=True),
            threading.Thread(target=self._call, name="cluster-effects", daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        """The first worker ends after what was submitted, and hands the end on."""
        if self._threads:
            self._writes.put(None)
            for thread in self._threads:
                thread.join(timeout=5)
            self._threads = []

    def wait(self) -> None:
        """Until everything submitted so far is done (tests and the demo's report)."""
        self._writes.join()
        self._calls.join()

    def _write(self) -> None:
        while True:
            effect = self._writes.get()
            try:
                if effect is not None and effect.kind == "write_checkpoint":
                    self._run(effect)
                    continue
                self._calls.put(effect)  # before task_done: `wait` then sees it queued
                if effect is None:
                    return
            finally:
                self._writes.task_done()

    def _call(self) -> None:
        while True:
            effect = self._calls.get()
            try:
                if effect is None:
                    return
                self._run(effect)
            finally:
                self._calls.task_done()

    def _run(self, effect: Effect) -> None:
        try:
            self.apply(effect)
            self.done[effect.kind] += 1
        except Exception:  # one failed effect must not stop the cluster's others
            self.failed[effect.kind] += 1

    def apply(self, effect: Effect) -> None:
        match effect.kind:
            case "put_event":
                (entry,) = effect.args
                bus = self.service_bus if entry["EventBusName"] == "service" else "default"
                result = self.events.put_events(Entries=[{**entry, "EventBusName": bus}])
                if result.get("FailedEntryCount"):
                    raise RuntimeError(f"PutEvents failed: {result['Entries']}")
            case "write_checkpoint":
                location, step = effect.args
                write_checkpoint(self.s3, location, step)
            case "report_checkpoint" if self.report is not None:
                job_id, team, step, uri, timings = effect.args
                self.report(job_id, team, step, uri, timings)
