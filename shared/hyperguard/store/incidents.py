"""IncidentsTable: an incident and the signals that reported it.

Key design (pk `incident_id`, sk `sk`):
- `META`                 the incident itself; carries `entity = "incident"` so that the
                         sparse GSI `ByOpenedAt` (pk `entity`, sk `opened_at`) lists incidents.
- `SIGNAL#<source>#<dedupe key>`  one item per distinct report; its conditional put is what makes a
                         redelivered event a no-op.
The node's `open_incident_id` (NodesTable) is the lock that gives one open incident per
node: opening writes incident, first signal and lock in one transaction.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from botocore.exceptions import ClientError
from pydantic import BaseModel

from hyperguard.aws import client, dynamodb_table
from hyperguard.models import HealthSignal, Incident, IncidentStatus, Node
from hyperguard.store.codec import (
    batch_get,
    condition_failed,
    from_wire,
    plain,
    to_item,
    to_wire,
)

META = "META"
SIGNAL_PREFIX = "SIGNAL#"


class SignalOutcome(StrEnum):
    OPENED = "opened"
    APPENDED = "appended"
    DUPLICATE = "duplicate"


class IncidentNotFoundError(LookupError):
    """No such incident, or it is no longer open."""


def incident_id_for(signal: HealthSignal) -> str:
    """Readable and deterministic: node, first-signal time, short hash of the report.

    Usable as a Step Functions execution name (≤ 80 chars of [A-Za-z0-9-_]).
    """
    digest = hashlib.sha256(signal.dedupe_key.encode()).hexdigest()[:6]
    return f"{signal.instance_id}-{signal.observed_at:%Y%m%dT%H%M%SZ}-{digest}"


def _reasons(exc: ClientError) -> list[str]:
    return [r.get("Code", "None") for r in exc.response.get("CancellationReasons", [])]


class IncidentStore:
    def __init__(self, table_name: str, nodes_table_name: str, ddb: Any | None = None) -> None:
        self.table_name = table_name
        self.nodes_table_name = nodes_table_name
        self._ddb = ddb

    @property
    def ddb(self) -> Any:
        if self._ddb is None:
            self._ddb = client("dynamodb")
        return self._ddb

    # -- writes ---------------------------------------------------------------------------
    def open_or_append(
        self, node: Node, signal: HealthSignal, now: datetime
    ) -> tuple[Incident, SignalOutcome]:
        """Open an incident for the node, or attach the signal to the one already open."""
        if node.open_incident_id:
            # The common merge path: no doomed transaction, two calls fewer.
            try:
                outcome = self.append_signal(node.open_incident_id, signal)
            except IncidentNotFoundError:
                pass  # closed since the node was read: open a new one below
            else:
                current = self.get(node.open_incident_id)
                assert current is not None
                return current, outcome
        incident = Incident(
            incident_id=incident_id_for(signal),
            instance_id=node.instance_id,
            cluster=node.cluster,
            kind=signal.kind,
            severity=signal.severity.value,
            repair=signal.repair,
            reason=signal.reason,
            opened_at=now,
            first_signal_at=signal.observed_at,
            not_before=signal.not_before,
            deadline=signal.deadline,
            sources=[signal.source.value],
            facts=signal.facts,
        )
        meta = to_item(incident, sk=META, entity="incident")
        meta["sources"] = set(incident.sources)
        try:
            self.ddb.transact_write_items(
                TransactItems=[
                    {
                        "Put": {
                            "TableName": self.table_name,
                            "Item": to_wire(meta),
                            "ConditionExpression": "attribute_not_exists(incident_id)",
                        }
                    },
                    {"Put": self._signal_put(incident.incident_id, signal)},
                    {
                        "Update": {
                            "TableName": self.nodes_table_name,
                            "Key": to_wire({"instance_id": node.instance_id}),
                            "UpdateExpression": "SET open_incident_id = :id, open_pool = :pool",
                            "ConditionExpression": "attribute_exists(instance_id) AND "
                            "attribute_not_exists(open_incident_id)",
                            "ExpressionAttributeValues": to_wire(
                                {":id": incident.incident_id, ":pool": node.pool}
                            ),
                        }
                    },
                ]
            )
            return incident, SignalOutcome.OPENED
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "TransactionCanceledException":
                raise
        open_id = self._open_incident_of(node.instance_id)
        if open_id is None:
            # The incident id exists but is closed: this report already had its incident.
            existing = self.get(incident.incident_id)
            if existing is None:
                raise RuntimeError(f"could not open an incident for {node.instance_id}")
            return existing, SignalOutcome.DUPLICATE
        outcome = self.append_signal(open_id, signal)
        current = self.get(open_id)
        assert current is not None
        return current, outcome

    def record_job_incident(self, incident: Incident) -> bool:
        """An incident about a job (`job_stalled`), written whole as it is and only once:
        False when its id is there already (a pass that runs again). No node's lock is taken:
        no node is at fault, and its nodes may have incidents of their own."""
        if not incident.about_job:
            raise ValueError(f"{incident.incident_id} is about a node: open_or_append opens it")
        return _written_if(
            self.ddb.put_item,
            TableName=self.table_name,
            Item=to_wire(to_item(incident, sk=META, entity="incident")),
            ConditionExpression="attribute_not_exists(incident_id)",
        )

    def append_signal(self, incident_id: str, signal: HealthSignal) -> SignalOutcome:
        try:
            self.ddb.transact_write_items(
                TransactItems=[
                    {"Put": self._signal_put(incident_id, signal)},
                    {
                        "Update": {
                            "TableName": self.table_name,
                            "Key": to_wire({"incident_id": incident_id, "sk": META}),
                            "UpdateExpression": "ADD signal_count :one, sources :src",
                            "ConditionExpression": "attribute_exists(incident_id) AND "
                            "#status <> :resolved",
                            "ExpressionAttributeNames": {"#status": "status"},
                            "ExpressionAttributeValues": to_wire(
                                {
                                    ":one": 1,
                                    ":src": {signal.source.value},
                                    ":resolved": IncidentStatus.RESOLVED.value,
                                }
                            ),
                        }
                    },
                ]
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "TransactionCanceledException":
                raise
            reasons = _reasons(exc)
            if reasons and reasons[0] == "ConditionalCheckFailed":
                return SignalOutcome.DUPLICATE
            raise IncidentNotFoundError(incident_id) from exc
        return SignalOutcome.APPENDED

    def _signal_put(self, incident_id: str, signal: HealthSignal) -> dict[str, Any]:
        # The source is part of the key: AWS's published samples reuse event ids across sources.
        sk = f"{SIGNAL_PREFIX}{signal.source.value}#{signal.dedupe_key}"
        item = to_item(signal, incident_id=incident_id, sk=sk)
        return {
            "TableName": self.table_name,
            "Item": to_wire(item),
            "ConditionExpression": "attribute_not_exists(sk)",
        }

    def set_execution(self, incident_id: str, execution_arn: str) -> None:
        self.ddb.update_item(
            TableName=self.table_name,
            Key=to_wire({"incident_id": incident_id, "sk": META}),
            UpdateExpression="SET execution_arn = :arn",
            # never a stub item holding only the key and the ARN
            ConditionExpression="attribute_exists(incident_id)",
            ExpressionAttributeValues=to_wire({":arn": execution_arn}),
        )

    def set_status(
        self,
        incident_id: str,
        status: IncidentStatus,
        *,
        timings: dict[str, float] | None = None,
        note: str | None = None,
    ) -> None:
        sets = ["#status = :status"]
        values: dict[str, Any] = {":status": status.value}
        names = {"#status": "status"}
        for i, (name, seconds) in enumerate((timings or {}).items()):
            sets.append(f"timings.#t{i} = :t{i}")
            values[f":t{i}"] = seconds
            names[f"#t{i}"] = name
        if note:
            sets.append("notes = list_append(if_not_exists(notes, :empty), :note)")
            values |= {":note": [note], ":empty": []}
        self.ddb.update_item(
            TableName=self.table_name,
            Key=to_wire({"incident_id": incident_id, "sk": META}),
            UpdateExpression="SET " + ", ".join(sets),
            ConditionExpression="attribute_exists(incident_id)",
            ExpressionAttributeNames=names,
            ExpressionAttributeValues=to_wire(values),
        )

    def hand_to_operator(self, incident_id: str, execution_arn: str, note: str) -> bool:
        """NEEDS_OPERATOR, if `execution_arn` is still the incident's recovery and nothing
        closed or escalated the incident first (False otherwise). The node keeps its lock,
        so it stays cordoned and no second recovery starts."""
        return _written_if(
            self.ddb.update_item,
            TableName=self.table_name,
            Key=to_wire({"incident_id": incident_id, "sk": META}),
            UpdateExpression="SET #status = :needs, "
            "notes = list_append(if_not_exists(notes, :empty), :note)",
            ConditionExpression="execution_arn = :arn AND NOT (#status IN (:needs, :done))",
            ExpressionAttributeNames={"#status": "status"},
            ExpressionAttributeValues=to_wire(
                {
                    ":needs": IncidentStatus.NEEDS_OPERATOR.value,
                    ":done": IncidentStatus.RESOLVED.value,
                    ":arn": execution_arn,
                    ":note": [note[:1000]],
                    ":empty": [],
                }
            ),
        )

    def update(self, incident_id: str, **fields: Any) -> None:
        """SET the given incident fields (models are stored as their JSON form)."""
        values = {f":{k}": _jsonable(v) for k, v in fields.items()}
        self.ddb.update_item(
            TableName=self.table_name,
            Key=to_wire({"incident_id": incident_id, "sk": META}),
            UpdateExpression="SET " + ", ".join(f"#{k} = :{k}" for k in fields),
            ConditionExpression="attribute_exists(incident_id)",
            ExpressionAttributeNames={f"#{k}": k for k in fields},
            ExpressionAttributeValues=to_wire(values),
        )

    def mark(self, incident_id: str, milestone: str, seconds: float) -> None:
        """Record `signal_to_<milestone>_s` once: a retried step keeps the first time."""
        self.ddb.update_item(
            TableName=self.table_name,
            Key=to_wire({"incident_id": incident_id, "sk": META}),
            UpdateExpression="SET timings.#m = if_not_exists(timings.#m, :s)",
            ConditionExpression="attribute_exists(incident_id)",
            ExpressionAttributeNames={"#m": f"signal_to_{milestone}_s"},
            ExpressionAttributeValues=to_wire({":s": round(max(seconds, 0.0), 3)}),
        )

    def close(
        self, incident: Incident, resolution: str, *, signal_count: int, at: datetime
    ) -> bool:
        """Resolve the incident and release its node, in one transaction, if no signal
        joined since it was read with `signal_count` signals. False if it is already closed
        (a retried Close step) or a signal joined (the caller reads it again)."""
        try:
            self.ddb.transact_write_items(
                TransactItems=[
                    {
                        "Update": {
                            "TableName": self.table_name,
                            "Key": to_wire({"incident_id": incident.incident_id, "sk": META}),
                            "UpdateExpression": "SET #s = :resolved, resolution = :why "
                            "REMOVE task_token, wait_token",
                            "ConditionExpression": "#s <> :resolved AND signal_count = :n",
                            "ExpressionAttributeNames": {"#s": "status"},
                            "ExpressionAttributeValues": to_wire(
                                {
                                    ":resolved": IncidentStatus.RESOLVED.value,
                                    ":why": resolution,
                                    ":n": signal_count,
                                }
                            ),
                        }
                    },
                    {
                        "Update": {
                            "TableName": self.nodes_table_name,
                            "Key": to_wire({"instance_id": incident.instance_id}),
                            "UpdateExpression": "SET last_closed_at = :at "
                            "REMOVE open_incident_id, open_pool",
                            "ConditionExpression": "open_incident_id = :id",
                            "ExpressionAttributeValues": to_wire(
                                {":id": incident.incident_id, ":at": at.isoformat()}
                            ),
                        }
                    },
                ]
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "TransactionCanceledException":
                raise
            return False
        return True

    def park(self, incident_id: str, token: str, *, urgency: int) -> bool:
        """Keep the waiting repair's task token, unless the incident became more urgent
        than `urgency` meanwhile (False: the caller re-diagnoses instead of waiting)."""
        return _written_if(
            self.ddb.update_item,
            TableName=self.table_name,
            Key=to_wire({"incident_id": incident_id, "sk": META}),
            UpdateExpression="SET wait_token = :t",
            ConditionExpression="attribute_exists(incident_id) AND "
            "(urgency = :u OR (attribute_not_exists(urgency) AND :u = :zero))",
            ExpressionAttributeValues=to_wire({":t": token, ":u": urgency, ":zero": 0}),
        )

    def escalate_urgency(
        self, incident: Incident, signal: HealthSignal, *, note: str | None = None
    ) -> Incident | None:
        """Make the signal's fault the incident's (kind, severity, repair, times, facts) if
        the incident still has the urgency it was read with, noting why if given; the
        updated incident, or None when it changed or closed meanwhile."""
        values = {
            ":kind": signal.kind,
            ":sev": signal.severity.value,
            ":repair": signal.repair.value,
            ":reason": signal.reason,
            ":facts": _jsonable(signal.facts),
            ":u": incident.urgency,
            ":next": incident.urgency + 1,
            ":resolved": IncidentStatus.RESOLVED.value,
            ":zero": 0,
        }
        sets = [
            "kind = :kind",
            "severity = :sev",
            "#repair = :repair",
            "reason = :reason",
            "facts = :facts",
            "urgency = :next",
        ]
        if note:
            sets.append("notes = list_append(if_not_exists(notes, :empty), :note)")
            values |= {":note": [note[:1000]], ":empty": []}
        removes = []
        for name, value in (("not_before", signal.not_before), ("deadline", signal.deadline)):
            if value is None:
                removes.append(name)
            else:
                sets.append(f"{name} = :{name}")
                values[f":{name}"] = value.isoformat()
        expression = "SET " + ", ".join(sets)
        if removes:
            expression += " REMOVE " + ", ".join(removes)
        try:
            result = self.ddb.update_item(
                TableName=self.table_name,
                Key=to_wire({"incident_id": incident.incident_id, "sk": META}),
                UpdateExpression=expression,
                ConditionExpression="#s <> :resolved AND "
                "(urgency = :u OR (attribute_not_exists(urgency) AND :u = :zero))",
                ExpressionAttributeNames={"#s": "status", "#repair": "repair"},
                ExpressionAttributeValues=to_wire(values),
                ReturnValues="ALL_NEW",
            )
        except ClientError as exc:
            if condition_failed(exc):
                return None
            raise
        return _incident(from_wire(result["Attributes"]))

    # -- reads ----------------------------------------------------------------------------
    def _open_incident_of(self, instance_id: str) -> str | None:
        item = self.ddb.get_item(
            TableName=self.nodes_table_name,
            Key=to_wire({"instance_id": instance_id}),
            ConsistentRead=True,
        ).get("Item")
        return from_wire(item).get("open_incident_id") if item else None

    def open_incident_for(self, instance_id: str) -> Incident | None:
        incident_id = self._open_incident_of(instance_id)
        return self.get(incident_id) if incident_id else None

    def get(self, incident_id: str) -> Incident | None:
        item = self.ddb.get_item(
            TableName=self.table_name,
            Key=to_wire({"incident_id": incident_id, "sk": META}),
            ConsistentRead=True,
        ).get("Item")
        return _incident(from_wire(item)) if item else None

    def signals(self, incident_id: str) -> list[dict[str, Any]]:
        pages = self.ddb.get_paginator("query").paginate(
            TableName=self.table_name,
            KeyConditionExpression="incident_id = :id AND begins_with(sk, :p)",
            ExpressionAttributeValues=to_wire({":id": incident_id, ":p": SIGNAL_PREFIX}),
        )
        return [plain(from_wire(i)) for page in pages for i in page["Items"]]

    def many(self, incident_ids: list[str]) -> list[Incident]:
        """These incidents (those that exist), read strongly consistent in batches."""
        keys = [{"incident_id": i, "sk": META} for i in dict.fromkeys(incident_ids)]
        return [_incident(i) for i in batch_get(dynamodb_table(self.table_name), keys)]

    def recent(self, limit: int = 100) -> list[Incident]:
        """Newest first, through the sparse ByOpenedAt index."""
        pages = self.ddb.get_paginator("query").paginate(
            TableName=self.table_name,
            IndexName="ByOpenedAt",
            KeyConditionExpression="entity = :e",
            ExpressionAttributeValues=to_wire({":e": "incident"}),
            ScanIndexForward=False,
            PaginationConfig={"MaxItems": limit},
        )
        return [_incident(from_wire(i)) for page in pages for i in page["Items"]]

    def opened_since(self, since: datetime, limit: int) -> tuple[list[Incident], bool]:
        """Incidents opened at or after `since`, newest first, at most `limit` of them,
        through the ByOpenedAt index (eventually consistent); and whether more were left."""
        # Stored times are pydantic's ISO form ending in Z; a key cut at the whole second
        # sorts before every time in that second, so nothing at `since` is missed.
        key = since.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S")
        pages = self.ddb.get_paginator("query").paginate(
            TableName=self.table_name,
            IndexName="ByOpenedAt",
            KeyConditionExpression="entity = :e AND opened_at >= :since",
            ExpressionAttributeValues=to_wire({":e": "incident", ":since": key}),
            ScanIndexForward=False,
            PaginationConfig={"MaxItems": limit + 1},
        )
        found = [_incident(from_wire(i)) for page in pages for i in page["Items"]]
        return found[:limit], len(found) > limit


def _jsonable(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", exclude_none=True)
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    return value


def _incident(item: dict[str, Any]) -> Incident:
    data = plain(item)
    data["sources"] = sorted(data.get("sources", []))
    return Incident.model_validate(data)


def _written_if(write: Callable[..., Any], **request: Any) -> bool:
    """Send one conditional PutItem or UpdateItem (`write`, the client's method); False when
    its ConditionExpression did not hold. Here, not in the codec: the incident store sends
    every write to its table itself (tests/one_writer.py)."""
    try:
        write(**request)
    except ClientError as exc:
        if condition_failed(exc):
            return False
        raise
    return True
