"""JobsTable: one item per job (pk `job_id`), GSI `ByTeam` (pk `team`, sk `submitted_at`),
sparse GSI `Live` (pk `live`, sk `job_id`, keys only).

Besides the `Job` fields an item carries what the governance API shows about it:
- `reason`   why the job is in its current status (the engine's own words);
- `history`  a list of `JobHistoryEntry` maps, appended in the same conditional update that
             changes the status, so history and status never disagree. Status changes are
             few per job; checkpoint entries stop being appended once the list holds
             `MAX_HISTORY` entries (the newest checkpoint is always `last_checkpoint`), which
             keeps an item far below DynamoDB's 400 KB;
- `first_admitted_at`, `started_at` (this run), `ended_at`, `admitted_replicas`,
  `progress_at` (when a newer checkpoint was last recorded);
- `stop_pending`  set when a job with pods is cancelled: the scheduler stops it on the
             cluster and clears the flag (the API never talks to the cluster);
- `prefer_burst` set by recovery's `move` requeue and by a hand-back's move (D121), cleared
             by the next admission: place the job on EKS burst capacity first;
- `rev`      the item's revision, 1 more at every write (D122);
- `live`     LIVE while the job is active or has pods to stop, then `ended#<UTC day>` (the
             day it ended, or its pods were stopped): written with every status change, so
             the `Live` index's LIVE partition holds the jobs a scheduling pass reads, and a
             day's partition the jobs that ended that day (what the views' time windows
             read) — both cost the same however many jobs the table has ever held.
Status changes are conditional on the status the writer saw (`transition`).
"""

from __future__ import annotations

import base64
import binascii
import json
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from enum import StrEnum
from typing import Any, NamedTuple

from botocore.exceptions import ClientError

from hyperguard.aws import dynamodb_table
from hyperguard.models import Checkpoint, Job, JobStatus
from hyperguard.models.jobs import (
    ACTIVE_STATUSES,
    Heartbeat,
    OperatorRestarts,
    PacePoint,
    ProgressTrouble,
    RefusedCheckpoint,
    SlowFlag,
)
from hyperguard.models.records import JobHistoryEntry, JobRecord, short
from hyperguard.store.codec import (
    BATCH_GET_MAX,
    TableStore,
    batch_get,
    condition_failed,
    decimals,
    plain,
    query_all,
    scan_all,
    to_item,
    wire_actions,
    wire_client,
)

MAX_HISTORY = 150
"""History entries a job keeps (status changes and checkpoints alike); later ones are
counted in `history_dropped`. With entries of at most ~1 KB (MAX_REASON, MAX_LISTED) and
a bounded job spec, an item stays far below DynamoDB's 400 KB."""
TRANSACT_LIMIT = 100
"""Actions in one TransactWriteItems (botocore's dynamodb model: TransactItems max 100)."""
REV = "rev"
"""The item's revision: every write to a job's item adds 1 to it in the same request (this
module is JobsTable's only writer), so a strongly consistent read of it alone says whether
a record read before is still the item as stored (D122)."""
BUMP = "ADD #rev :one"
"""The UpdateExpression clause that counts a write in `rev` (names `#rev`, values `:one`)."""
REMEMBERED_MAX = 50_000
"""Active jobs whose records `JobStore.active` keeps between calls (D122); beyond that it
reads every one whole, as below BATCH_GET_MAX."""
NO_FAULT = frozenset({"None", None})
"""A CancellationReasons code of an action that did not cancel the transaction."""


class _Remembered(NamedTuple):
    """A record `JobStore.active` read, at the revision it read it at, and whether it is
    live (`JobRecord.is_live`: worked out once, when the record is read)."""

    rev: int
    record: JobRecord
    live: bool


@dataclass(frozen=True, slots=True)
class BatchedMove:
    """One job's transition in `JobStore.transition_all`."""

    job_id: str
    expect: Collection[JobStatus]
    status: JobStatus | None
    entry: JobHistoryEntry
    sets: dict[str, Any] | None = None
    remove: Collection[str] = ()
    condition: str | None = None
    """A further ConditionExpression (see `JobStore.transition`), over the two maps below."""
    condition_values: dict[str, Any] | None = None
    condition_names: dict[str, str] | None = None
    add: dict[str, int] | None = None
    checks: tuple[dict[str, Any], ...] = ()
    """TransactWriteItems ConditionChecks the move needs to hold (the pass's lease, its
    team's quota version): a transaction sends each once, however many of its moves name
    it."""


class BatchStoppedError(Exception):
    """`JobStore.transition_all` stopped: a transaction's condition check failed
    (`checks_failed`), or DynamoDB refused it otherwise (throttled past the SDK's retries:
    the cause). That transaction wrote nothing and none after it was sent; `written`: the
    jobs earlier ones moved."""

    def __init__(self, written: set[str], *, checks_failed: bool) -> None:
        what = "a condition check failed" if checks_failed else "a transaction was refused"
        super().__init__(f"{what} after {len(written)} jobs were moved")
        self.written = written
        self.checks_failed = checks_failed


class TransitionOutcome(StrEnum):
    APPLIED = "applied"
    STALE = "stale"
    """The job was not in an expected status (or is gone)."""
    CHECK_FAILED = "check_failed"
    """One of the caller's extra condition checks failed."""


class IdempotencyKeyReusedError(Exception):
    """The Idempotency-Key was used before with a different request."""

    def __init__(self, key: str, job_id: str) -> None:
        super().__init__(f"Idempotency-Key {key!r} was used for another request (job {job_id})")
        self.key = key
        self.job_id = job_id


class InvalidCursorError(ValueError):
    """A pagination token that this store did not issue."""


_RECORD_FIELDS = frozenset(JobRecord.model_fields) - {"job"}


def record_from_item(item: dict[str, Any]) -> JobRecord:
    data = plain(item)
    return JobRecord.model_validate(
        {"job": data, **{k: v for k, v in data.items() if k in _RECORD_FIELDS}}
    )


LIVE_INDEX = "Live"
LIVE = "1"
ENDED = "ended#"


def ended_partition(day: date) -> str:
    """The `Live` partition of the jobs that ended on this UTC day."""
    return f"{ENDED}{day.isoformat()}"


def _live_after(
    status: JobStatus | None, sets: dict[str, Any], remove: list[str], at: datetime
) -> str | None:
    """The job's `live` key after a transition at `at` (None: as it was). Only a terminal
    job carries `stop_pending` (set by the cancel that ends it, cleared once its pods are
    stopped), so the outcome follows from the transition alone. An ended job is filed
    under the day it ended (`ended_at` where the transition sets it, else `at`): a job
    whose pods are stopped after midnight lands a day late, which a reader of a window
    corrects by its `ended_at`."""
    if status is not None:
        if status in ACTIVE_STATUSES or sets.get("stop_pending") is True:
            return LIVE
        ended = sets.get("ended_at")
        return ended_partition(_utc_day(datetime.fromisoformat(ended) if ended else at))
    if "stop_pending" in remove:
        return ended_partition(_utc_day(at))
    return None


def _utc_day(at: datetime) -> date:
    return (at.astimezone(UTC) if at.tzinfo else at).date()


def _entry(entry: JobHistoryEntry) -> list[dict[str, Any]]:
    return [to_item(entry)]


def encode_cursor(key: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(plain(key), sort_keys=True).encode()).decode()


def decode_cursor(token: str, fields: Collection[str]) -> dict[str, Any]:
    try:
        key = json.loads(base64.urlsafe_b64decode(token.encode()))
    except (binascii.Error, ValueError) as exc:
        raise InvalidCursorError(token) from exc
    if not isinstance(key, dict) or set(key) != set(fields):
        raise InvalidCursorError(token)
    if not all(isinstance(v, str) for v in key.values()):
        raise InvalidCursorError(token)
    return key


_Update = tuple[str, dict[str, Any], tuple[dict[str, Any], ...]]
"""One job's conditional UpdateItem in a transaction, with the checks it needs."""


def _check_key(check: dict[str, Any]) -> str:
    """A ConditionCheck's item: a transaction may name an item once."""
    body = check["ConditionCheck"]
    return json.dumps([body["TableName"], body["Key"]], sort_keys=True, default=str)


def _fill_transaction(pending: list[_Update]) -> tuple[list[_Update], list[_Update]]:
    """The updates that fit one transaction, their checks counted once, and the rest."""
    batch: list[_Update] = []
    keys: set[str] = set()
    for index, update in enumerate(pending):
        needed = keys | {_check_key(c) for c in update[2]}
        if batch and len(batch) + 1 + len(needed) > TRANSACT_LIMIT:
            return batch, pending[index:]
        batch.append(update)
        keys = needed
    return batch, []


class JobStore(TableStore):
    def __init__(
        self,
        table_name: str,
        table: Any | None = None,
        *,
        idempotency_table_name: str = "",
        idempotency_ttl_s: int = 86_400,
    ) -> None:
        super().__init__(table_name, table)
        self.idempotency_table_name = idempotency_table_name
        self.idempotency_ttl_s = idempotency_ttl_s
        self._remembered: dict[str, _Remembered] = {}
        """The active jobs `active` read last, each with the revision it was read at."""

    def _transact_write(self, items: list[dict[str, Any]]) -> None:
        """TransactWriteItems of these actions (plain values) through the wire client, in its
        form (D180): every transaction of the jobs table is sent from here."""
        wire_client(self.table).transact_write_items(TransactItems=wire_actions(items))

    def get(self, job_id: str) -> Job | None:
        item = self.table.get_item(Key={"job_id": job_id}, ConsistentRead=True).get("Item")
        return Job.model_validate(plain(item)) if item else None

    def all(self) -> list[Job]:
        return sorted((Job.model_validate(i) for i in scan_all(self.table)), key=lambda j: j.job_id)

    # -- governance: records, submission, transitions --------------------------------------
    def record(self, job_id: str) -> JobRecord | None:
        item = self.table.get_item(Key={"job_id": job_id}, ConsistentRead=True).get("Item")
        return record_from_item(item) if item else None

    def records(self) -> list[JobRecord]:
        return [record_from_item(i) for i in scan_all(self.table)]

    def records_of(self, job_ids: Collection[str]) -> list[JobRecord]:
        """These jobs, read strongly consistent (BatchGetItem); ids of no job left out."""
        return [record for _, record in self._read_whole(job_ids)]

    def _read_whole(self, job_ids: Collection[str]) -> list[tuple[int | None, JobRecord]]:
        """These jobs' items, strongly consistent, as records with their revisions (None:
        an item written before revisions were counted)."""
        items = batch_get(self.table, [{"job_id": job_id} for job_id in job_ids])
        return [(item.get(REV), record_from_item(item)) for item in items]

    def _current(self, job_ids: list[str]) -> list[JobRecord]:
        """Those of these jobs that are active or have pods to stop, as stored, read
        strongly consistent, in the order of `job_ids`. Past one BatchGetItem's worth of jobs
        only their revisions are read (a projection), and a job is read whole only when its
        revision is not the one of the record this store read last: between two scheduling
        passes few of many waiting jobs change (D122). What is asked of every record is
        asked once, as it is read (a large pass's thousands of records are far apart in
        memory: a walk over them costs it as much as the work done with them)."""
        found: dict[str, _Remembered] = {}
        if len(job_ids) <= BATCH_GET_MAX or len(job_ids) > REMEMBERED_MAX:
            stale: Collection[str] = job_ids
        else:
            revisions = batch_get(
                self.table, [{"job_id": job_id} for job_id in job_ids], attributes=("job_id", REV)
            )
            remembered, stale = self._remembered, []
            for item in revisions:
                job_id = item["job_id"]
                known = remembered.get(job_id)
                if known is not None and item.get(REV) == known.rev:
                    found[job_id] = known
                else:
                    stale.append(job_id)
        unversioned: dict[str, JobRecord] = {}
        for rev, record in self._read_whole(stale):
            if rev is None:
                unversioned[record.job.job_id] = record
            else:
                found[record.job.job_id] = _Remembered(rev, record, record.is_live())
        self._remembered = found if len(job_ids) <= REMEMBERED_MAX else {}
        records = []
        for job_id in job_ids:
            entry = found.get(job_id)
            if entry is not None:
                if entry.live:
                    records.append(entry.record)
            elif (old := unversioned.get(job_id)) is not None and old.is_live():
                records.append(old)
        return records

    def active(self, also: Collection[str] = ()) -> list[JobRecord]:
        """Every job that holds or waits for quota, or still has pods to stop, by id. The
        `Live` index names them (keys only); the items themselves are read strongly
        consistent, so a scheduling pass never works from a stale copy of a status. A job
        submitted a moment ago may be missing until the index has it (typically well under
        a second): `also` names jobs to read by key whether the index has them yet or not
        (the ones a scheduler wake-up names), in the same BatchGetItem."""
        keys = query_all(
            self.table,
            IndexName=LIVE_INDEX,
            KeyConditionExpression="#live = :l",
            ExpressionAttributeNames={"#live": "live"},
            ExpressionAttributeValues={":l": LIVE},
        )
        return self._current(sorted({*(k["job_id"] for k in keys), *also}))

    def ended_since(self, since: datetime, now: datetime) -> list[JobRecord]:
        """The jobs that ended at or after `since` (by `ended_at`): one `Live` partition per
        UTC day from `since` to `now`, then the items by key. The cost follows the jobs of
        the window, not every job the table has held. Jobs that ended before this version
        filed them are not found (they left the index)."""
        keys: list[dict[str, Any]] = []
        day = _utc_day(since)
        while day <= _utc_day(now):
            keys += query_all(
                self.table,
                IndexName=LIVE_INDEX,
                KeyConditionExpression="#live = :l",
                ExpressionAttributeNames={"#live": "live"},
                ExpressionAttributeValues={":l": ended_partition(day)},
            )
            day += timedelta(days=1)
        records = self.records_of(dict.fromkeys(k["job_id"] for k in keys))
        return sorted(
            (r for r in records if r.ended_at is not None and r.ended_at >= since),
            key=lambda r: r.job.job_id,
        )

    def active_or_ended_since(self, since: datetime, now: datetime) -> list[JobRecord]:
        """The jobs active now and those that ended since `since` (views of a time window):
        the `Live` index's LIVE partition and its day partitions, never a table scan."""
        active = self.active()
        seen = {r.job.job_id for r in active}
        return active + [r for r in self.ended_since(since, now) if r.job.job_id not in seen]

    def submit(
        self,
        record: JobRecord,
        *,
        idempotency_key: str | None = None,
        request_hash: str = "",
    ) -> tuple[JobRecord, bool]:
        """Store a new job. With an idempotency key the job and the key are written in one
        transaction; a repeat of the same request returns the job of the first one (and
        False), a different request with the same key raises IdempotencyKeyReusedError."""
        item = {**to_item(record.job), **to_item(record, exclude={"job"}), REV: 0}
        if record.is_live():
            item["live"] = LIVE
        put = {
            "Put": {
                "TableName": self.table_name,
                "Item": item,
                "ConditionExpression": "attribute_not_exists(job_id)",
            }
        }
        if idempotency_key is None:
            self.table.put_item(Item=item, ConditionExpression="attribute_not_exists(job_id)")
            return record, True
        now = int(time.time())
        claim = {
            "Put": {
                "TableName": self.idempotency_table_name,
                "Item": {
                    "id": idempotency_key,
                    "job_id": record.job.job_id,
                    "request_hash": request_hash,
                    "expiration": now + self.idempotency_ttl_s,
                },
                "ConditionExpression": "attribute_not_exists(id) OR expiration < :now",
                "ExpressionAttributeValues": {":now": now},
            }
        }
        try:
            self._transact_write([claim, put])
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "TransactionCanceledException":
                raise
            existing = (
                dynamodb_table(self.idempotency_table_name)
                .get_item(Key={"id": idempotency_key}, ConsistentRead=True)
                .get("Item")
            )
            if existing is None:
                raise
            if existing.get("request_hash") != request_hash:
                raise IdempotencyKeyReusedError(idempotency_key, str(existing["job_id"])) from exc
            first = self.record(str(existing["job_id"]))
            if first is None:
                raise
            return first, False
        return record, True

    def transition(
        self,
        job_id: str,
        *,
        expect: Collection[JobStatus],
        status: JobStatus | None,
        entry: JobHistoryEntry,
        sets: dict[str, Any] | None = None,
        remove: Collection[str] = (),
        add: dict[str, int] | None = None,
        checks: list[dict[str, Any]] | None = None,
        condition: str | None = None,
        condition_values: dict[str, Any] | None = None,
        condition_names: dict[str, str] | None = None,
    ) -> TransitionOutcome:
        """Move the job to `status` (None: keep it) if it is in one of `expect` (and
        `condition`, a ConditionExpression over `condition_values`, holds), append `entry`
        to its history, set/remove/add the given attributes, all in one write. With `checks`
        (TransactWriteItems ConditionChecks) the write is a transaction that also fails
        when any check does. Only hyperguard.governance.jobs calls this."""

        def attempt(history: bool) -> TransitionOutcome:
            update = self._transition_update(
                job_id,
                expect,
                status,
                entry,
                sets,
                remove,
                add,
                condition,
                condition_values,
                condition_names,
                history=history,
            )
            return self._apply_transition(update, checks)

        full = attempt(history=True)
        if full is not TransitionOutcome.STALE:
            return full
        # The condition failed: the job moved on, or its history is full. Once more without
        # the history entry (counted as dropped): still refused if the job moved on.
        return attempt(history=False)

    def _apply_transition(
        self, update: dict[str, Any], checks: list[dict[str, Any]] | None
    ) -> TransitionOutcome:
        """Send a transition's UpdateItem, in a transaction with `checks` if any."""
        try:
            if checks:
                self._transact_write(
                    [*checks, {"Update": {"TableName": self.table_name, **update}}]
                )
            else:
                self.table.update_item(**update)
        except ClientError as exc:
            if condition_failed(exc):
                return TransitionOutcome.STALE
            if exc.response["Error"]["Code"] != "TransactionCanceledException":
                raise
            reasons = [r.get("Code") for r in exc.response.get("CancellationReasons", [])]
            if any(r == "ConditionalCheckFailed" for r in reasons[: len(checks or [])]):
                return TransitionOutcome.CHECK_FAILED
            if reasons and reasons[-1] == "ConditionalCheckFailed":
                return TransitionOutcome.STALE
            raise
        return TransitionOutcome.APPLIED

    def transition_all(self, moves: Sequence[BatchedMove]) -> set[str]:
        """`transition` for many jobs at once, each with its history entry, in
        TransactWriteItems of up to TRANSACT_LIMIT actions (the moves' checks among them).
        Returns the jobs moved; a job whose condition failed (it moved on, or its history
        is full) is left for the caller to move alone, where `transition` tells which. A
        failed check, or a transaction DynamoDB refuses otherwise, raises BatchStoppedError
        and sends nothing more."""
        return self._transact(
            [
                (
                    move.job_id,
                    self._transition_update(
                        move.job_id,
                        move.expect,
                        move.status,
                        move.entry,
                        move.sets,
                        move.remove,
                        move.add,
                        condition=move.condition,
                        condition_values=move.condition_values,
                        condition_names=move.condition_names,
                        history=True,
                    ),
                    move.checks,
                )
                for move in moves
            ]
        )

    def _transition_update(
        self,
        job_id: str,
        expect: Collection[JobStatus],
        status: JobStatus | None,
        entry: JobHistoryEntry,
        sets: dict[str, Any] | None,
        remove: Collection[str],
        add: dict[str, int] | None = None,
        condition: str | None = None,
        condition_values: dict[str, Any] | None = None,
        condition_names: dict[str, str] | None = None,
        *,
        history: bool,
    ) -> dict[str, Any]:
        """The UpdateItem request of a transition (see `transition`)."""
        names = {"#status": "status", "#reason": "reason"}
        values: dict[str, Any] = {":reason": entry.reason}
        clauses = ["#reason = :reason"]
        increments = {**(add or {}), REV: 1}
        if history:
            clauses.append("history = list_append(if_not_exists(history, :empty), :entry)")
            values |= {":entry": _entry(entry), ":empty": [], ":max": MAX_HISTORY}
        else:
            increments["history_dropped"] = increments.get("history_dropped", 0) + 1
        remove = list(remove)
        if status is not None:
            clauses.append("#status = :status")
            values[":status"] = status.value
        live = _live_after(status, sets or {}, remove, entry.at)
        if live is not None:
            names["#live"] = "live"
            clauses.append("#live = :live")
            values[":live"] = live
        for index, (name, value) in enumerate((sets or {}).items()):
            names[f"#a{index}"] = name
            values[f":a{index}"] = value
            clauses.append(f"#a{index} = :a{index}")
        expression = "SET " + ", ".join(clauses)
        if remove:
            for index, name in enumerate(remove):
                names[f"#r{index}"] = name
            expression += " REMOVE " + ", ".join(f"#r{i}" for i in range(len(remove)))
        for index, (name, amount) in enumerate(increments.items()):
            names[f"#n{index}"] = name
            values[f":n{index}"] = amount
        expression += " ADD " + ", ".join(f"#n{i} :n{i}" for i in range(len(increments)))
        expected = sorted(s.value for s in expect)
        for index, value in enumerate(expected):
            values[f":e{index}"] = value
        expression_condition = (
            "#status IN (" + ", ".join(f":e{i}" for i in range(len(expected))) + ")"
        )
        if history:
            expression_condition += " AND (attribute_not_exists(history) OR size(history) < :max)"
        if condition:
            expression_condition += f" AND ({condition})"
            values.update(condition_values or {})
            names.update(condition_names or {})
        return {
            "Key": {"job_id": job_id},
            "UpdateExpression": expression,
            "ConditionExpression": expression_condition,
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": decimals(values),
        }

    def _update_if(self, **request: Any) -> bool:
        """An UpdateItem with a ConditionExpression: False when the condition failed."""
        try:
            self.table.update_item(**request)
        except ClientError as exc:
            if condition_failed(exc):
                return False
            raise
        return True

    def set_reason(
        self,
        job_id: str,
        reason: str,
        *,
        expect: Collection[JobStatus],
        replacing: str | None = None,
    ) -> bool:
        """Why a waiting job still waits; no history entry (it changes every pass). With
        `replacing`, only while the stored reason is still that one (False otherwise)."""
        return self._update_if(**self._reason_update((job_id, reason, replacing), expect))

    def set_reasons(
        self, writes: Sequence[tuple[str, str, str]], *, expect: Collection[JobStatus]
    ) -> set[str]:
        """`set_reason` for many jobs, as `(job_id, reason, replacing)`, in transactions (one
        call for up to TRANSACT_LIMIT jobs, not one a job). Returns the jobs written; the
        others' reasons changed since they were read."""
        written = self._transact(
            [(write[0], self._reason_update(write, expect), ()) for write in writes]
        )
        self._remember_reasons(writes, written)
        return written

    def _remember_reasons(self, writes: Sequence[tuple[str, str, str]], written: set[str]) -> None:
        """The records `active` keeps, with the reasons this store just wrote (D181). A reason
        write sets only the reason and adds 1 to the revision, so a job remembered at revision
        r is, once its write succeeded, that record with the new reason at r + 1, unless
        another writer came between the read and the write: then the item's revision is past
        r + 1 and the next `active` reads it whole, as before. Without this, every job given a
        reason in a pass was read whole again by the next."""
        remembered = self._remembered
        for job_id, reason, _ in writes:
            known = remembered.get(job_id)
            if known is not None and job_id in written:
                record = known.record.model_copy(update={"reason": short(reason)})
                remembered[job_id] = known._replace(rev=known.rev + 1, record=record)

    def _transact(self, updates: Sequence[_Update]) -> set[str]:
        """Conditional UpdateItems, `(job_id, request, checks)`, in TransactWriteItems of up
        to TRANSACT_LIMIT actions, the checks of a transaction's updates sent once each. A
        transaction a condition cancels is sent again without the jobs whose condition
        failed, as its CancellationReasons name them. A failed check, or a transaction that
        carries checks refused otherwise, raises BatchStoppedError; without checks any
        other refusal raises as it is. Returns the jobs written."""
        pending = list(updates)
        written: set[str] = set()
        while pending:
            batch, pending = _fill_transaction(pending)
            while batch:
                checks = list({_check_key(c): c for _, _, cs in batch for c in cs}.values())
                items = [
                    *checks,
                    *({"Update": {"TableName": self.table_name, **u}} for _, u, _ in batch),
                ]
                try:
                    self._transact_write(items)
                except ClientError as exc:
                    codes = [r.get("Code") for r in exc.response.get("CancellationReasons", [])]
                    if checks and "ConditionalCheckFailed" in codes[: len(checks)]:
                        raise BatchStoppedError(written, checks_failed=True) from exc
                    cancelled = exc.response["Error"]["Code"] == "TransactionCanceledException"
                    kept = batch
                    if cancelled and len(codes) == len(items):
                        outcome = codes[len(checks) :]
                        kept = [u for u, c in zip(batch, outcome, strict=True) if c in NO_FAULT]
                    if len(kept) == len(batch):  # refused for no job's condition: none to drop
                        if checks:
                            raise BatchStoppedError(written, checks_failed=False) from exc
                        raise
                    batch = kept
                    continue
                written.update(job_id for job_id, _, _ in batch)
                break
        return written

    @staticmethod
    def _reason_update(
        write: tuple[str, str, str | None], expect: Collection[JobStatus]
    ) -> dict[str, Any]:
        job_id, reason, replacing = write
        expected = sorted(s.value for s in expect)
        condition = "#status IN (" + ", ".join(f":e{i}" for i in range(len(expected))) + ")"
        values: dict[str, Any] = {":r": short(reason), ":one": 1}
        values.update({f":e{i}": v for i, v in enumerate(expected)})
        if replacing is not None:
            # (a record without a reason reads as "", and reasons are never removed)
            condition += " AND (#reason = :was OR attribute_not_exists(#reason))"
            values[":was"] = replacing
        return {
            "Key": {"job_id": job_id},
            "UpdateExpression": f"SET #reason = :r {BUMP}",
            "ConditionExpression": condition,
            "ExpressionAttributeNames": {"#reason": "reason", "#status": "status", "#rev": REV},
            "ExpressionAttributeValues": values,
        }

    def record_checkpoint(
        self,
        job_id: str,
        checkpoint: Checkpoint,
        entry: JobHistoryEntry | None = None,
        *,
        seen_at: datetime | None = None,
        pace: list[PacePoint] | None = None,
        slow: SlowFlag | None = None,
    ) -> bool:
        """Keep the newest complete checkpoint (an older or equal step never overwrites),
        with `seen_at` as the job's `progress_at`, `pace` and `slow` (None: not slow) when a
        pace is given, and append `entry` to the history while it has room. False: not
        newer."""
        values: dict[str, Any] = {":c": to_item(checkpoint), ":s": checkpoint.step, ":one": 1}
        sets = "SET last_checkpoint = :c"
        if seen_at is not None:
            sets += ", progress_at = :t"
            values[":t"] = seen_at.isoformat()
        expression = sets if pace is None else sets + _paced(pace, slow, values)
        return self._update_noting(
            entry,
            Key={"job_id": job_id},
            UpdateExpression=f"{expression} {BUMP}",
            ConditionExpression="attribute_exists(job_id) AND "
            "(attribute_not_exists(last_checkpoint) OR last_checkpoint.step < :s)",
            ExpressionAttributeNames={"#rev": REV},
            ExpressionAttributeValues=values,
        )

    def record_heartbeat(
        self, job_id: str, beat: Heartbeat, pace: list[PacePoint], slow: SlowFlag | None
    ) -> bool:
        """The training's heartbeat, with the pace and slow flag it gives, while the job runs
        the heartbeat's run and has no later heartbeat of it (D165); False otherwise."""
        values: dict[str, Any] = {
            ":h": to_item(beat),
            ":running": JobStatus.RUNNING.value,
            ":run": beat.run,
            ":at": beat.at.isoformat(),
            ":one": 1,
        }
        expression = "SET heartbeat = :h" + _paced(pace, slow, values)
        return self._update_if(
            Key={"job_id": job_id},
            UpdateExpression=f"{expression} {BUMP}",
            ConditionExpression="#status = :running AND #run = :run AND "
            "(attribute_not_exists(heartbeat) OR heartbeat.#run < :run OR heartbeat.#at < :at)",
            ExpressionAttributeNames={"#rev": REV, "#status": "status", "#run": "run", "#at": "at"},
            ExpressionAttributeValues=values,
        )

    def record_timings(
        self, job_id: str, step: int, timings: dict[str, float], slow: SlowFlag | None
    ) -> bool:
        """Per-node timings for the last checkpoint while it is still `step`; with `slow`
        (a flag, judged again with them) set, else the flag left as it is."""
        values: dict[str, Any] = {":n": decimals(timings), ":s": step, ":one": 1}
        expression = "SET last_checkpoint.node_step_seconds = :n"
        if slow is not None:
            expression += ", slow = :f"
            values[":f"] = to_item(slow)
        return self._update_if(
            Key={"job_id": job_id},
            UpdateExpression=f"{expression} {BUMP}",
            ConditionExpression="last_checkpoint.step = :s",
            ExpressionAttributeNames={"#rev": REV},
            ExpressionAttributeValues=values,
        )

    def set_progress_trouble(
        self,
        job_id: str,
        trouble: ProgressTrouble | None,
        *,
        was: ProgressTrouble | None,
        entry: JobHistoryEntry | None = None,
    ) -> bool:
        """The job's progress trouble set (None: cleared), while it is still the one the
        caller read as `was`, and `entry` appended; False when it changed since."""
        values: dict[str, Any] = {":one": 1}
        if was is None:
            condition = "attribute_exists(job_id) AND attribute_not_exists(progress_trouble)"
        else:
            condition = "progress_trouble.failures = :was"
            values[":was"] = was.failures
        if trouble is None:
            expression = f"REMOVE progress_trouble {BUMP}"
        else:
            expression = f"SET progress_trouble = :t {BUMP}"
            values[":t"] = to_item(trouble)
        return self._update_noting(
            entry,
            Key={"job_id": job_id},
            UpdateExpression=expression,
            ConditionExpression=condition,
            ExpressionAttributeNames={"#rev": REV},
            ExpressionAttributeValues=values,
        )

    def set_operator_restarts(
        self,
        job_id: str,
        restarts: OperatorRestarts,
        *,
        was: OperatorRestarts | None,
        entry: JobHistoryEntry,
    ) -> bool:
        """The run's restart count recorded, while the record still holds `was`, and `entry`
        appended; False when it changed since."""
        values: dict[str, Any] = {":one": 1, ":r": to_item(restarts)}
        names = {"#rev": REV}
        if was is None:
            condition = "attribute_exists(job_id) AND attribute_not_exists(operator_restarts)"
        else:
            condition = "operator_restarts.#run = :was_run AND operator_restarts.#count = :was"
            values |= {":was_run": was.run, ":was": was.count}
            names |= {"#run": "run", "#count": "count"}
        return self._update_noting(
            entry,
            Key={"job_id": job_id},
            UpdateExpression=f"SET operator_restarts = :r {BUMP}",
            ConditionExpression=condition,
            ExpressionAttributeNames=names,
            ExpressionAttributeValues=values,
        )

    def set_checkpoint_refused(
        self, job_id: str, refused: RefusedCheckpoint, *, entry: JobHistoryEntry
    ) -> bool:
        """The newest refused checkpoint recorded, unless one as new or newer already is,
        and `entry` appended; False when one was."""
        return self._update_noting(
            entry,
            Key={"job_id": job_id},
            UpdateExpression=f"SET checkpoint_refused = :c {BUMP}",
            ConditionExpression="attribute_exists(job_id) AND "
            "(attribute_not_exists(checkpoint_refused) OR checkpoint_refused.#step < :step)",
            ExpressionAttributeNames={"#rev": REV, "#step": "step"},
            ExpressionAttributeValues={":one": 1, ":c": to_item(refused), ":step": refused.step},
        )

    def _update_noting(self, entry: JobHistoryEntry | None, **request: Any) -> bool:
        """`_update_if`, then, if it was applied, `entry` appended to the history."""
        if not self._update_if(**request):
            return False
        if entry is not None:
            self.append_history(request["Key"]["job_id"], entry)
        return True

    def append_history(self, job_id: str, entry: JobHistoryEntry) -> None:
        """Append an entry that changes no status, while the history has room."""
        try:
            self.table.update_item(
                Key={"job_id": job_id},
                UpdateExpression="SET history = list_append(if_not_exists(history, :empty), :e) "
                + BUMP,
                ConditionExpression="attribute_not_exists(history) OR size(history) < :max",
                ExpressionAttributeNames={"#rev": REV},
                ExpressionAttributeValues={
                    ":e": _entry(entry),
                    ":empty": [],
                    ":max": MAX_HISTORY,
                    ":one": 1,
                },
            )
        except ClientError as exc:
            if not condition_failed(exc):
                raise

    def page(
        self,
        *,
        team: str | None,
        status: JobStatus | None = None,
        priority_class: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> tuple[list[JobRecord], str | None]:
        """One page of jobs, and the token of the next page (None on the last).

        With a team: newest first through ByTeam; without (admins): a filtered scan, in
        table order. Filters are applied by DynamoDB, so a page is filled across as many
        reads as it takes."""
        filters: list[str] = []
        names: dict[str, str] = {}
        values: dict[str, Any] = {}
        if status is not None:
            filters.append("#status = :status")
            names["#status"] = "status"
            values[":status"] = status.value
        if priority_class is not None:
            filters.append("priority_class = :pc")
            values[":pc"] = priority_class
        kwargs: dict[str, Any] = {"Limit": limit}
        if team is not None:
            key_fields: tuple[str, ...] = ("job_id", "team", "submitted_at")
            kwargs |= {
                "IndexName": "ByTeam",
                "KeyConditionExpression": "team = :team",
                "ScanIndexForward": False,
            }
            values[":team"] = team
            read = self.table.query
        else:
            key_fields = ("job_id",)
            read = self.table.scan
        if filters:
            kwargs["FilterExpression"] = " AND ".join(filters)
        if names:
            kwargs["ExpressionAttributeNames"] = names
        if values:
            kwargs["ExpressionAttributeValues"] = values
        if cursor is not None:
            kwargs["ExclusiveStartKey"] = decode_cursor(cursor, key_fields)
        items: list[dict[str, Any]] = []
        more = True
        while len(items) < limit and more:
            result = read(**kwargs)
            items.extend(result.get("Items", []))
            more = "LastEvaluatedKey" in result
            if more:
                kwargs["ExclusiveStartKey"] = result["LastEvaluatedKey"]
        if len(items) > limit or (len(items) == limit and more):
            items = items[:limit]
            token = encode_cursor({k: items[-1][k] for k in key_fields})
        else:
            token = None
        return [record_from_item(i) for i in items], token


def _paced(pace: list[PacePoint], slow: SlowFlag | None, values: dict[str, Any]) -> str:
    """The part of a SET expression that writes the job's pace and its slow flag (removed
    when None), its values added to `values`."""
    values[":p"] = [to_item(p) for p in pace]
    if slow is None:
        return ", pace = :p REMOVE slow"
    values[":f"] = to_item(slow)
    return ", pace = :p, slow = :f"
