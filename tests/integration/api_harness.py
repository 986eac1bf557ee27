"""Drive the real API handler with API Gateway proxy events, on moto tables."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from tests.conftest import Stack, catalogue

from hyperguard.api import ApiDependencies, create_app
from hyperguard.api.rate_limits import RateLimits
from hyperguard.store import IncidentStore, JobStore, NodeStore, TeamStore
from hyperguard.store.policy import BurstPolicyStore, RepairPolicyStore
from hyperguard.store.rate_limits import RateCounterStore
from hyperguard_twin.api_gateway import DEFAULT_PRINCIPAL, ApiGatewayProxy

ADMIN = DEFAULT_PRINCIPAL
# The deployment's checkpoint bucket and the roles that read it (template.yaml's ApiFunction).
CHECKPOINT_BUCKET = "hyperguard-twin-checkpoints"
CHECKPOINT_READERS = (
    "arn:aws:iam::123456789012:role/hyperguard-SchedulerFunctionRole-X",
    "arn:aws:iam::123456789012:role/hyperguard-RecoveryFunctionRole-Y",
)
CLUSTER_ARN = "arn:aws:sagemaker:us-east-1:123456789012:cluster/abcdefabcdef"


def member(team: str) -> str:
    return f"arn:aws:iam::123456789012:role/{team}-engineer"


@dataclass
class RecordingWakeup:
    reasons: list[str] = field(default_factory=list)
    job_ids: list[str] = field(default_factory=list)

    def wake(self, reason: str, job_id: str | None = None) -> None:
        self.reasons.append(reason)
        if job_id is not None:
            self.job_ids.append(job_id)


@dataclass
class RecordingNodeActions:
    calls: list[tuple[str, ...]] = field(default_factory=list)

    def _call(self, *args: str) -> dict[str, Any]:
        self.calls.append(args)
        return {"changed": True, "call": list(args)}

    def cordon(self, instance_id: str) -> dict[str, Any]:
        return self._call("cordon", instance_id)

    def uncordon(self, instance_id: str) -> dict[str, Any]:
        return self._call("uncordon", instance_id)

    def reboot(self, instance_id: str) -> dict[str, Any]:
        return self._call("reboot", instance_id)

    def replace(self, instance_id: str) -> dict[str, Any]:
        return self._call("replace", instance_id)

    def veto(self, instance_id: str, reason: str) -> dict[str, Any]:
        return self._call("veto", instance_id, reason)

    def approve(self, incident_id: str) -> dict[str, Any]:
        return self._call("approve", incident_id)


@dataclass
class Reply:
    status: int
    body: Any
    headers: dict[str, list[str]]


_paths: dict[str, Any] | None = None


class Api:
    """The API as a client sees it through API Gateway: HTTP-ish calls → proxy events →
    the resolver → proxy responses."""

    def __init__(
        self,
        stack: Stack,
        *,
        clock: Callable[[], datetime] | None = None,
        checkpoint_bucket: str = CHECKPOINT_BUCKET,
        rate_limits: tuple[int, int] | None = None,
    ) -> None:
        """`checkpoint_bucket`: the stack's CheckpointBucketName (a deployment may name one
        that does not exist, or that its roles are refused). `rate_limits`: requests a second
        per principal and per team, counted in the stack's RateLimitTable (None: the
        callers are not limited, as the tests that are not about the limits want)."""
        self.jobs = JobStore(
            stack.tables["JobsTable"], idempotency_table_name=stack.tables["IdempotencyTable"]
        )
        self.teams = TeamStore(stack.tables["TeamsTable"])
        self.nodes = NodeStore(stack.tables["NodesTable"])
        self.incidents = IncidentStore(stack.tables["IncidentsTable"], stack.tables["NodesTable"])
        self.policies = RepairPolicyStore(stack.tables["TeamsTable"])
        self.burst_policies = BurstPolicyStore(stack.tables["TeamsTable"])
        self.wakeup = RecordingWakeup()
        self.node_actions = RecordingNodeActions()
        self.deps = ApiDependencies(
            jobs=self.jobs,
            teams=self.teams,
            incidents=self.incidents,
            nodes=self.nodes,
            node_actions=self.node_actions,
            wakeup=self.wakeup,
            catalogue=catalogue(),
            policies=self.policies,
            burst_policies=self.burst_policies,
            admin_principals=frozenset({ADMIN}),
            checkpoint_bucket=checkpoint_bucket,
            checkpoint_readers=CHECKPOINT_READERS,
            clock=clock or (lambda: datetime.now(UTC)),
            rate_limits=None
            if rate_limits is None
            else RateLimits(*rate_limits, RateCounterStore(stack.tables["RateLimitTable"])),
        )
        self._apps = threading.local()
        global _paths
        if _paths is None:  # the routes' document is the same for every Api: built once
            _paths = json.loads(self.app.get_openapi_json_schema())["paths"]
        self.proxy = ApiGatewayProxy(lambda e: self.app.resolve(e, None), _paths)

    @property
    def app(self) -> Any:
        """One resolver per thread, as each concurrent Lambda invocation has its own
        container (powertools' resolver keeps the current request on itself)."""
        app = getattr(self._apps, "app", None)
        if app is None:
            app = self._apps.app = create_app(self.deps)
        return app

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        principal: str = ADMIN,
        headers: dict[str, str] | None = None,
        query: dict[str, str] | None = None,
        raw: str | bytes | None = None,
    ) -> Reply:
        payload = raw if raw is not None else (json.dumps(body) if body is not None else "")
        event = self.proxy.event(
            method,
            path,
            headers=[("X-HyperGuard-Principal", principal), *(headers or {}).items()],
            query=list((query or {}).items()),
            body=payload.encode() if isinstance(payload, str) else payload,
        )
        assert event is not None, f"no route for {path}"
        result = self.app.resolve(event, None)
        text = result.get("body") or ""
        return Reply(
            result["statusCode"],
            json.loads(text) if text else None,
            dict(result.get("multiValueHeaders") or {}),
        )

    # -- shortcuts ----------------------------------------------------------------------
    def quota(self, team: str, gpus: int, **sharing: Any) -> Reply:
        return self.call("PUT", f"/teams/{team}/compute-quota", quota_body(team, gpus, **sharing))

    def submit(self, team: str, gpus: int, *, principal: str = ADMIN, **fields: Any) -> Reply:
        body = {
            "team": team,
            "instance_type": "ml.p5.48xlarge",
            "accelerators_per_replica": gpus,
            "image": "trainer:1",
            **fields,
        }
        return self.call("POST", "/jobs", body, principal=principal)


def quota_body(
    team: str,
    gpus: int,
    *,
    strategy: str = "LendAndBorrow",
    borrow: int | None = 50,
    weight: int = 0,
    preempt: str = "LowerPriority",
    version: int | None = None,
) -> dict[str, Any]:
    sharing: dict[str, Any] = {"Strategy": strategy}
    if borrow is not None:
        sharing["BorrowLimit"] = borrow
    body: dict[str, Any] = {
        "Name": f"{team}-quota",
        "ClusterArn": CLUSTER_ARN,
        "ComputeQuotaConfig": {
            "ComputeQuotaResources": [{"InstanceType": "ml.p5.48xlarge", "Accelerators": gpus}],
            "ResourceSharingConfig": sharing,
            "PreemptTeamTasks": preempt,
        },
        "ComputeQuotaTarget": {"TeamName": team, "FairShareWeight": weight},
    }
    if version is not None:
        body["TargetVersion"] = version
    return body
