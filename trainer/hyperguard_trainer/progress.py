"""Training time, measured where it tells a slow node apart, and reported to HyperGuard.

In synchronous data-parallel training every rank's whole step includes waiting for the
slowest rank in the gradient all-reduce, so whole-step times are the same on every rank and
name no node. `Progress.compute()` times only this rank's own work: wrap the forward and
backward passes (without the gradient all-reduce: with DDP, under `no_sync()` followed by
your all-reduce, or by timing up to the first collective), and the device is synchronised
before the clock stops, so queued kernels are counted. Each checkpoint report carries every
node's mean compute seconds per step since the previous one (its slowest rank's), the form
`POST /jobs/{jobId}/checkpoints` takes as `node_step_seconds` (D100).
"""

from __future__ import annotations

import json
import logging
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from hyperguard_trainer.checkpoint import _default_collective
from hyperguard_trainer.context import Context

logger = logging.getLogger("hyperguard_trainer")
MIN_STEP_S = 1e-6
MAX_STEP_S = 3600.0
"""The range `POST /jobs/{jobId}/checkpoints` accepts for a node's seconds per step."""


class Progress:
    """Per-rank compute timings, gathered to rank 0 at each checkpoint."""

    def __init__(
        self,
        context: Context | None = None,
        *,
        synchronize: Callable[[], None] | None = None,
        collective: Callable[[Any], list[Any]] | None = None,
    ) -> None:
        self.context = context or Context.from_env()
        self.synchronize = synchronize or _device_synchronize
        self.collective = collective or _default_collective
        self._seconds = 0.0
        self._steps = 0

    @contextmanager
    def compute(self) -> Iterator[None]:
        """Time this rank's own work of one step (see the module's note)."""
        self.synchronize()
        start = time.perf_counter()
        try:
            yield
        finally:
            self.synchronize()
            self._seconds += time.perf_counter() - start
            self._steps += 1

    def node_step_seconds(self) -> dict[str, float] | None:
        """Every node's mean compute seconds per step since the last call, on rank 0 (the
        slowest rank of each node); None on the other ranks, or where no rank knows its
        instance. A collective: every rank calls it at the same point."""
        mine = (self.context.instance_id, self._seconds / self._steps if self._steps else None)
        self._seconds, self._steps = 0.0, 0
        gathered = self.collective(mine)
        if self.context.rank != 0:
            return None
        nodes: dict[str, float] = {}
        for instance, seconds in gathered:
            if instance and seconds is not None:
                seconds = min(max(seconds, MIN_STEP_S), MAX_STEP_S)
                nodes[instance] = max(nodes.get(instance, 0.0), seconds)
        return nodes or None


class Reporter:
    """Reports completed checkpoints to `POST {api}/jobs/{jobId}/checkpoints` and heartbeats
    to `POST {api}/jobs/{jobId}/progress`, signed with SigV4 for API Gateway's IAM
    authorization by the pod's own credentials (Pod Identity or IRSA: the role needs
    `execute-api:Invoke` on those routes). A report that fails is logged, counted and
    dropped: HyperGuard also finds the markers in S3 on its own, and the next heartbeat says
    all the last one would have."""

    def __init__(self, context: Context, *, sign: bool = True, timeout_s: float = 10.0) -> None:
        if not context.api_url:
            raise ValueError("HYPERGUARD_API_URL is not set")
        self.url = f"{context.api_url.rstrip('/')}/jobs/{context.job_id}"
        if sign:
            import botocore  # noqa: F401  (fail at start, not at the first checkpoint)
        self.context = context
        self.sign = sign
        self.timeout_s = timeout_s
        self.sent = 0
        self.failed = 0

    def checkpoint(self, step: int, uri: str, node_step_seconds: dict[str, float] | None) -> None:
        body: dict[str, Any] = {
            "step": step,
            "uri": uri,
            "completed_at": datetime.now(UTC).isoformat(),
        }
        if node_step_seconds:
            body["node_step_seconds"] = node_step_seconds
        self._post("checkpoints", body)

    def heartbeat(self, step: int, node_step_seconds: dict[str, float] | None) -> None:
        """The training's step now, with each node's compute seconds per step since the last
        heartbeat: HyperGuard judges the run's pace and stalls by these (D165)."""
        body: dict[str, Any] = {
            "run": self.context.run,
            "step": step,
            "at": datetime.now(UTC).isoformat(),
        }
        if node_step_seconds:
            body["node_step_seconds"] = node_step_seconds
        self._post("progress", body)

    def _post(self, route: str, body: dict[str, Any]) -> None:
        url = f"{self.url}/{route}"
        data = json.dumps(body).encode()
        headers = {"Content-Type": "application/json"}
        try:
            if self.sign:
                headers = _signed(url, data, headers)
            request = urllib.request.Request(url, data=data, headers=headers, method="POST")
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                response.read()
            self.sent += 1
        except (OSError, ValueError) as error:
            self.failed += 1
            logger.warning("%s report for step %d not sent: %s", route, body["step"], error)


def _signed(url: str, data: bytes, headers: dict[str, str]) -> dict[str, str]:
    import boto3
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest

    session = boto3.Session()
    credentials = session.get_credentials()
    if credentials is None:
        raise ValueError("no AWS credentials to sign the checkpoint report with")
    request = AWSRequest(method="POST", url=url, data=data, headers=headers)
    SigV4Auth(
        credentials.get_frozen_credentials(), "execute-api", session.region_name or "us-east-1"
    ).add_auth(request)
    return dict(request.headers.items())


def _device_synchronize() -> None:
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()
