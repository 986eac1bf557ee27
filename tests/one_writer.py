"""One writer per state, checked by behaviour: every DynamoDB write a test makes happen is
looked at as it is sent, whoever sends it and whatever the call is named.

- A write to the jobs table must be sent by the job store (hyperguard/store/jobs.py), and
  the store must have been called by the job lifecycle (hyperguard/governance/jobs.py), or
  by the test itself (tests of the store).
- The service's code is the library and the handlers (functions/). A write with none of
  it on the stack is the test arranging its world (say, a GSI that has not caught up), not
  the service, and is let through.
- A write to the incidents table must be sent by the incident store.
- Either write is conditional (a ConditionExpression on it, or on each item of its
  transaction), so that a stale writer loses rather than overwrites.

tests/unit/test_one_writer.py reads the code for the same rule by call names; this guard
catches what names hide: a raw client call, a store built in another module, a write
routed through a helper.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

import botocore.client

ROOT = Path(__file__).resolve().parents[1]
LIBRARY = ROOT / "shared" / "hyperguard"
SERVICE = (LIBRARY, ROOT / "functions")
WRITES = {"PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems", "BatchWriteItem"}
JOB_STORE = LIBRARY / "store" / "jobs.py"
LIFECYCLE = LIBRARY / "governance" / "jobs.py"
INCIDENT_STORE = LIBRARY / "store" / "incidents.py"


_SERVICE_PREFIXES = tuple(f"{top}{os.sep}" for top in SERVICE)


def _service_frames() -> list[Path]:
    """The service's files on the calling stack, innermost first (a string test per frame:
    the guard looks at every write of every test)."""
    frames: list[Path] = []
    frame: FrameType | None = sys._getframe(2)
    while frame is not None:
        filename = frame.f_code.co_filename
        if filename.startswith(_SERVICE_PREFIXES):
            frames.append(Path(filename))
        frame = frame.f_back
    return frames


def _items(operation: str, params: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(table, request) of each item a write touches."""
    if operation == "TransactWriteItems":
        return [
            (request["TableName"], request)
            for item in params.get("TransactItems", [])
            for request in item.values()
        ]
    if operation == "BatchWriteItem":
        return [(table, {}) for table in params.get("RequestItems", {})]
    return [(params.get("TableName", ""), params)]


def offence(operation: str, params: dict[str, Any], frames: list[Path], tables: Tables) -> str:
    """What is wrong with this write, or ''. `frames`: the service's, innermost first."""
    if not frames:
        return ""  # the test's own arrangement
    sender = frames[0]
    for table, request in _items(operation, params):
        owner = tables.owner(table)
        if owner is None:
            continue
        if sender != owner:
            return f"{operation} on {table} sent from {sender}"
        callers = [f for f in frames if f != owner]
        if owner == JOB_STORE and callers and callers[0] != LIFECYCLE:
            return f"{operation} on {table}: the job store was called by {callers[0]}"
        if request and "ConditionExpression" not in request and operation != "BatchWriteItem":
            return f"{operation} on {table} without a condition"
    return ""


class Tables:
    def __init__(self, jobs: str, incidents: str) -> None:
        self.owners = {jobs: JOB_STORE, incidents: INCIDENT_STORE}

    def owner(self, table: str) -> Path | None:
        return self.owners.get(table)


@contextmanager
def guarded(jobs_table: str, incidents_table: str) -> Iterator[list[str]]:
    """Record every write that breaks the rule while the block runs; the list of them."""
    tables = Tables(jobs_table, incidents_table)
    found: list[str] = []
    original = botocore.client.BaseClient._make_api_call

    def checked(self: Any, operation: str, params: dict[str, Any]) -> Any:
        if operation in WRITES:
            problem = offence(operation, params, _service_frames(), tables)
            if problem:
                found.append(problem)
        return original(self, operation, params)

    botocore.client.BaseClient._make_api_call = checked
    try:
        yield found
    finally:
        botocore.client.BaseClient._make_api_call = original
