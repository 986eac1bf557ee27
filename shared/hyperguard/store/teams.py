"""TeamsTable (pk `pk`, sk `sk`): compute quotas, the scheduler policy, who is who, and the
scheduler's lease.

| pk                 | sk               | item                                                  |
|--------------------|------------------|-------------------------------------------------------|
| `QUOTA`            | `<team>`         | `quota` (the ComputeQuota as AWS spells it), `version` |
| `SCHEDULER_CONFIG` | `CLUSTER`        | `config` (SchedulerConfig), `version`                 |
| `PRINCIPAL`        | `<IAM ARN>`      | `team` (optional), `admin` (bool)                     |
| `LEASE`            | `<cluster>`      | `holder`, `expires_at` (epoch s), `token`             |

One partition per kind keeps every listing a Query. Quota and scheduler-config writes are
conditional on the version the caller read (TargetVersion): a stale version changes nothing.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from botocore.exceptions import ClientError

from hyperguard.models.governance import ComputeQuota, ComputeQuotaStatus, SchedulerConfig
from hyperguard.store.codec import TableStore, condition_failed, plain, to_item

QUOTA_PK = "QUOTA"
SCHEDULER_PK = "SCHEDULER_CONFIG"
SCHEDULER_SK = "CLUSTER"
SCHEDULER_KEY = {"pk": SCHEDULER_PK, "sk": SCHEDULER_SK}
PRINCIPAL_PK = "PRINCIPAL"
LEASE_PK = "LEASE"
MAX_WOKEN = 500
"""The most jobs a coalesced wake-up names (a few kB of the lease item); past that, the pass
finds them through the `Live` index."""
WAKEUP_STALE_S = 60.0
"""A wake-up pending this long may have been lost (its sender failed after noting it): the
next change sends another."""


class VersionConflictError(Exception):
    """The item changed since the caller read it (or the caller named no version for an
    item that exists, or a version for one that does not)."""

    def __init__(self, current: int | None, target: int | None) -> None:
        super().__init__(f"current version is {current}, request targets {target}")
        self.current = current
        self.target = target


class QuotaNotFoundError(LookupError):
    """The team has no compute quota."""


@dataclass(frozen=True, slots=True)
class PrincipalGrant:
    principal_arn: str
    team: str | None
    admin: bool


@dataclass(frozen=True, slots=True)
class Lease:
    cluster: str
    holder: str
    token: int
    expires_at: float
    woken: tuple[str, ...] = ()
    """Jobs the wake-ups coalesced since the last pass named (`note_wakeup`)."""


class TeamStore(TableStore):
    def _query(self, pk: str, *, limit: int | None = None, start: str | None = None) -> Any:
        kwargs: dict[str, Any] = {
            "KeyConditionExpression": "pk = :pk",
            "ExpressionAttributeValues": {":pk": pk},
            "ConsistentRead": True,
        }
        if limit is not None:
            kwargs["Limit"] = limit
        if start is not None:
            kwargs["ExclusiveStartKey"] = {"pk": pk, "sk": start}
        return self.table.query(**kwargs)

    def _all(self, pk: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        start: str | None = None
        while True:
            page = self._query(pk, start=start)
            items.extend(plain(i) for i in page.get("Items", []))
            last = page.get("LastEvaluatedKey")
            if not last:
                return items
            start = last["sk"]

    # -- compute quotas -------------------------------------------------------------------
    def get_quota(self, team: str) -> ComputeQuota | None:
        item = self.table.get_item(Key={"pk": QUOTA_PK, "sk": team}, ConsistentRead=True).get(
            "Item"
        )
        return _quota(plain(item)) if item else None

    def quotas(self) -> list[ComputeQuota]:
        return [_quota(item) for item in self._all(QUOTA_PK)]

    def quota_page(self, limit: int, after: str | None) -> tuple[list[ComputeQuota], str | None]:
        """Quotas in team-name order; the second value is the last team when more follow."""
        page = self._query(QUOTA_PK, limit=limit, start=after)
        quotas = [_quota(plain(i)) for i in page.get("Items", [])]
        last = page.get("LastEvaluatedKey")
        return quotas, (last["sk"] if last else None)

    def put_quota(self, quota: ComputeQuota, *, target_version: int | None) -> ComputeQuota:
        """Create (target_version None, no quota yet) or update (target_version = the stored
        version). Returns the stored quota with its new version and status."""
        team = quota.compute_quota_target.team_name
        if target_version is None:
            stored = quota.model_copy(update={"version": 1, "status": ComputeQuotaStatus.CREATED})
            condition = "attribute_not_exists(pk)"
            values: dict[str, Any] = {}
        else:
            stored = quota.model_copy(
                update={"version": target_version + 1, "status": ComputeQuotaStatus.UPDATED}
            )
            condition = "version = :target"
            values = {":target": target_version}
        item = {
            "pk": QUOTA_PK,
            "sk": team,
            "version": stored.version,
            "quota": to_item(stored),
        }
        try:
            self.table.put_item(
                Item=item,
                ConditionExpression=condition,
                **({"ExpressionAttributeValues": values} if values else {}),
            )
        except ClientError as exc:
            if not condition_failed(exc):
                raise
            current = self.get_quota(team)
            raise VersionConflictError(
                current.version if current else None, target_version
            ) from exc
        return stored

    def delete_quota(self, team: str, *, target_version: int | None = None) -> ComputeQuota:
        kwargs: dict[str, Any] = {"ConditionExpression": "attribute_exists(pk)"}
        if target_version is not None:
            kwargs = {
                "ConditionExpression": "version = :target",
                "ExpressionAttributeValues": {":target": target_version},
            }
        try:
            old = self.table.delete_item(
                Key={"pk": QUOTA_PK, "sk": team}, ReturnValues="ALL_OLD", **kwargs
            )
        except ClientError as exc:
            if not condition_failed(exc):
                raise
            current = self.get_quota(team)
            if current is None:
                raise QuotaNotFoundError(team) from exc
            raise VersionConflictError(current.version, target_version) from exc
        return _quota(plain(old["Attributes"]))

    # -- scheduler policy -----------------------------------------------------------------
    def scheduler_config(self) -> tuple[SchedulerConfig, int]:
        """The policy and its version (0 and the defaults when none was ever set)."""
        item = self.table.get_item(Key=SCHEDULER_KEY, ConsistentRead=True).get("Item")
        return scheduler_config_of(plain(item) if item else None)

    def put_scheduler_config(self, config: SchedulerConfig, *, target_version: int | None) -> int:
        """Replace the policy; with target_version, only if it is still that version."""
        condition: dict[str, Any] = {}
        if target_version == 0:
            condition = {"ConditionExpression": "attribute_not_exists(pk)"}
        elif target_version is not None:
            condition = {
                "ConditionExpression": "version = :target",
                "ExpressionAttributeValues": {":target": target_version},
            }
        _, current = self.scheduler_config()
        version = (target_version if target_version is not None else current) + 1
        try:
            self.table.put_item(
                Item={
                    **SCHEDULER_KEY,
                    "version": version,
                    "config": to_item(config),
                },
                **condition,
            )
        except ClientError as exc:
            if not condition_failed(exc):
                raise
            raise VersionConflictError(self.scheduler_config()[1], target_version) from exc
        return version

    # -- principals -----------------------------------------------------------------------
    def grant(self, principal_arn: str, *, team: str | None = None, admin: bool = False) -> None:
        item: dict[str, Any] = {"pk": PRINCIPAL_PK, "sk": principal_arn, "admin": admin}
        if team is not None:
            item["team"] = team
        self.table.put_item(Item=item)

    def principal(self, principal_arn: str) -> PrincipalGrant | None:
        item = self.table.get_item(
            Key={"pk": PRINCIPAL_PK, "sk": principal_arn}, ConsistentRead=True
        ).get("Item")
        return _grant(plain(item)) if item else None

    def principals(self) -> list[PrincipalGrant]:
        return [_grant(item) for item in self._all(PRINCIPAL_PK)]

    # -- the scheduler's lease ------------------------------------------------------------
    def acquire_lease(self, cluster: str, holder: str, ttl_s: float) -> Lease | None:
        """Take the cluster's scheduling lease if it is free or expired; None if another
        holder has it. Each acquisition increments the fencing token."""
        now = time.time()
        expires_at = int(now + ttl_s) + 1
        try:
            # The coalesced wake-up is taken with the lease: from here on, a change wakes
            # the scheduler again (D169).
            result = self.table.update_item(
                Key={"pk": LEASE_PK, "sk": cluster},
                UpdateExpression="SET holder = :me, expires_at = :exp ADD #token :one "
                "REMOVE woken_at, woken_jobs",
                # No expires_at: no pass has held it (the item may hold a noted wake-up only).
                ConditionExpression="attribute_not_exists(expires_at) OR expires_at < :now "
                "OR holder = :me",
                ExpressionAttributeNames={"#token": "token"},
                ExpressionAttributeValues={
                    ":me": holder,
                    ":exp": expires_at,
                    ":now": int(now),
                    ":one": 1,
                },
                ReturnValues="ALL_OLD",
            )
        except ClientError as exc:
            if condition_failed(exc):
                return None
            raise
        old = plain(result.get("Attributes") or {})
        woken = tuple(sorted(old.get("woken_jobs") or ()))
        return Lease(cluster, holder, int(old.get("token") or 0) + 1, float(expires_at), woken)

    def note_wakeup(self, cluster: str, job_id: str | None, now: float) -> bool:
        """Note a change the next pass must see, naming `job_id` (up to MAX_WOKEN jobs).
        True when no wake-up was pending, or the pending one is older than WAKEUP_STALE_S
        (its message may be lost): then the caller sends one. Otherwise the pass the pending
        wake-up starts will see this change too, and no message is sent (D169)."""
        values: dict[str, Any] = {":now": Decimal(str(round(now, 3)))}
        update = "SET woken_at = if_not_exists(woken_at, :now)"
        condition = None
        if job_id is not None:
            update += " ADD woken_jobs :job"
            values[":job"] = {job_id}
            values[":cap"] = MAX_WOKEN
            condition = "attribute_not_exists(woken_jobs) OR size(woken_jobs) < :cap"
        kwargs: dict[str, Any] = {
            "Key": {"pk": LEASE_PK, "sk": cluster},
            "UpdateExpression": update,
            "ExpressionAttributeValues": values,
            # The whole old item: UPDATED_OLD need not list woken_at when if_not_exists kept
            # its value.
            "ReturnValues": "ALL_OLD",
        }
        if condition is not None:
            kwargs["ConditionExpression"] = condition
        try:
            result = self.table.update_item(**kwargs)
        except ClientError as exc:
            if not condition_failed(exc):
                raise
            # Too many named already: the job is found through the Live index instead.
            return self.note_wakeup(cluster, None, now)
        pending = (result.get("Attributes") or {}).get("woken_at")
        if pending is None:
            return True
        if now - float(pending) <= WAKEUP_STALE_S:
            return False
        self.table.update_item(  # sent again: stale from now on only after another minute
            Key={"pk": LEASE_PK, "sk": cluster},
            UpdateExpression="SET woken_at = :now",
            ExpressionAttributeValues={":now": values[":now"]},
        )
        return True

    def release_lease(self, lease: Lease) -> None:
        try:
            self.table.update_item(
                Key={"pk": LEASE_PK, "sk": lease.cluster},
                UpdateExpression="SET expires_at = :zero",
                ConditionExpression="holder = :me AND #token = :token",
                ExpressionAttributeNames={"#token": "token"},
                ExpressionAttributeValues={":zero": 0, ":me": lease.holder, ":token": lease.token},
            )
        except ClientError as exc:
            if not condition_failed(exc):
                raise

    def lease_check(self, lease: Lease) -> dict[str, Any]:
        """A TransactWriteItems ConditionCheck that the lease is still `lease`'s: writes
        made with it fail once another pass has taken over."""
        return {
            "ConditionCheck": {
                "TableName": self.table_name,
                "Key": {"pk": LEASE_PK, "sk": lease.cluster},
                "ConditionExpression": "holder = :me AND #token = :token AND expires_at > :now",
                "ExpressionAttributeNames": {"#token": "token"},
                "ExpressionAttributeValues": {
                    ":me": lease.holder,
                    ":token": lease.token,
                    ":now": int(time.time()),
                },
            }
        }

    def quota_version_check(self, team: str, version: int) -> dict[str, Any]:
        """A ConditionCheck that the team's quota is still at `version`."""
        return {
            "ConditionCheck": {
                "TableName": self.table_name,
                "Key": {"pk": QUOTA_PK, "sk": team},
                "ConditionExpression": "version = :v",
                "ExpressionAttributeValues": {":v": version},
            }
        }


def scheduler_config_of(item: dict[str, Any] | None) -> tuple[SchedulerConfig, int]:
    """The scheduler policy of its (plain) item, and its version; 0 and the defaults for none."""
    if not item:
        return SchedulerConfig(), 0
    return SchedulerConfig.model_validate(item["config"]), int(item["version"])


def _quota(item: dict[str, Any]) -> ComputeQuota:
    return ComputeQuota.model_validate(item["quota"])


def _grant(item: dict[str, Any]) -> PrincipalGrant:
    return PrincipalGrant(item["sk"], item.get("team"), bool(item.get("admin", False)))
