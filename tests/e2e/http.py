"""The service's API over HTTP as a team member or the admin sees it, for e2e tests."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
import uuid
from typing import Any

from tests.deadlines import loaded

from hyperguard_twin.ids import hyperpod_cluster_arn

ADMIN = "arn:aws:iam::123456789012:role/hyperguard-admin"
CLUSTER_ARN = hyperpod_cluster_arn("hyperguard-twin", "us-east-1", "123456789012")
THROTTLED_TRIES = 5
ANSWER_S = 30
"""The longest an idle twin takes to answer one request (a burst's last one queued behind the
API function's four workers among them); deadlines are `loaded(ANSWER_S)`."""


def member(team: str) -> str:
    return f"arn:aws:iam::123456789012:role/{team}-engineer"


class Http:
    def __init__(self, base: str) -> None:
        self.base = base

    def __call__(
        self, method: str, path: str, body: Any = None, principal: str = ADMIN
    ) -> tuple[int, Any]:
        """The answer; a 429 (nothing was done: the stage, or the caller's own rate limit,
        D147) is tried again after its Retry-After, as clients do, up to THROTTLED_TRIES."""
        for _ in range(THROTTLED_TRIES):
            status, answer, retry_after = self._once(method, path, body, principal)
            if status != 429:
                break
            time.sleep(float(retry_after or 1))
        return status, answer

    def _once(
        self, method: str, path: str, body: Any, principal: str
    ) -> tuple[int, Any, str | None]:
        request = urllib.request.Request(
            self.base + path,
            data=None if body is None else json.dumps(body).encode(),
            method=method,
            headers={"Content-Type": "application/json", "X-HyperGuard-Principal": principal},
        )
        try:
            with urllib.request.urlopen(request, timeout=loaded(ANSWER_S)) as r:
                return r.status, json.loads(r.read() or b"null"), None
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"null"), exc.headers.get("Retry-After")

    def status_and_headers(self, path: str, principal: str = ADMIN) -> tuple[int, dict[str, str]]:
        """A GET's status and response headers (a 429's Retry-After, for one). A burst's
        requests wait for the twin's four API workers (its cap, not Lambda's), so on a loaded
        host the last ones wait longest: CI's slowest full run waited past 60 s for one."""
        request = urllib.request.Request(
            self.base + path, headers={"X-HyperGuard-Principal": principal}
        )
        try:
            with urllib.request.urlopen(request, timeout=loaded(ANSWER_S)) as r:
                return r.status, dict(r.headers)
        except urllib.error.HTTPError as exc:
            return exc.code, dict(exc.headers)

    def quota(
        self, team: str, gpus: int, strategy: str = "LendAndBorrow", borrow: int | None = 100
    ) -> int:
        sharing: dict[str, Any] = {"Strategy": strategy}
        if borrow is not None:
            sharing["BorrowLimit"] = borrow
        body = {
            "Name": f"{team}-quota",
            "ClusterArn": CLUSTER_ARN,
            "ComputeQuotaConfig": {
                "ComputeQuotaResources": [{"InstanceType": "ml.p5.48xlarge", "Accelerators": gpus}],
                "ResourceSharingConfig": sharing,
                "PreemptTeamTasks": "LowerPriority",
            },
            "ComputeQuotaTarget": {"TeamName": team, "FairShareWeight": 0},
        }
        return self("PUT", f"/teams/{team}/compute-quota", body)[0]

    def submit(
        self,
        team: str,
        gpus: int,
        replicas: int = 1,
        priority_class: str = "low",
        template: str = "production",
    ) -> str:
        status, body = self(
            "POST",
            "/jobs",
            {
                "team": team,
                "instance_type": "ml.p5.48xlarge",
                "accelerators_per_replica": gpus,
                "replicas": replicas,
                "priority_class": priority_class,
                "template": template,
                "image": "trainer:1",
                # One location a job, as a team keeps them: jobs sharing one would resume
                # from each other's checkpoints (a trainer takes the newest it finds).
                "checkpoint_location": f"s3://hyperguard-twin-checkpoints/{team}/"
                f"{uuid.uuid4().hex[:12]}/",
            },
            principal=member(team),
        )
        assert status == 201, body
        return str(body["job_id"])

    def status_of(self, job_id: str) -> str:
        return str(self("GET", f"/jobs/{job_id}")[1]["status"])

    def wait(self, expected: dict[str, str], timeout_s: float = 30) -> None:
        deadline = time.monotonic() + loaded(timeout_s)
        seen: dict[str, str] = {}
        while time.monotonic() < deadline:
            seen = {job: self.status_of(job) for job in expected}
            if seen == expected:
                return
            time.sleep(0.3)
        raise AssertionError(f"expected {expected}, have {seen}")
