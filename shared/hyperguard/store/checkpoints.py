"""Job checkpoints in S3, by HyperGuard's completion-marker convention.

A job checkpoints under its `checkpoint_location` (s3://bucket/prefix/), one folder per
checkpoint named `step-<8-digit step>/`. A checkpoint is complete only once its folder holds
the marker object `_COMPLETE` (written last, after every shard); a folder without the marker
— a checkpoint cut short by the fault — is never used. A job may also report a completed
checkpoint through the API (POST /jobs/{jobId}/checkpoints); recovery takes the newer of
the two.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from hyperguard.aws import client
from hyperguard.models import Checkpoint
from hyperguard.models.jobs import RefusedCheckpoint
from hyperguard.models.records import JobRecord

MARKER = "_COMPLETE"
FORMAT_V2 = "hyperguard-checkpoint/2"
MAX_MARKER_BYTES = 256 * 1024
"""A v2 marker lists up to 4,096 shards; a bigger body is refused, never read whole."""
_FOLDER = re.compile(r"step-(\d{8})/")


@dataclass(frozen=True, slots=True)
class Fence:
    """Whose checkpoints a lookup may take: the job's, of its current run `run` (which
    began at `began`), or of an earlier run completed before that."""

    job_id: str
    run: int
    began: datetime | None


@dataclass(frozen=True, slots=True)
class Lookup:
    """The newest checkpoint to resume from, and the newer ones refused on the way (newest
    first)."""

    checkpoint: Checkpoint | None
    refused: tuple[RefusedCheckpoint, ...] = ()

    def news(self, seen: RefusedCheckpoint | None) -> RefusedCheckpoint | None:
        """The newest refusal, if it is newer than the one last noted (`seen`)."""
        newest = self.refused[0] if self.refused else None
        if newest is not None and (seen is None or newest.step > seen.step):
            return newest
        return None


class CheckpointLocationError(ValueError):
    """A job's checkpoint location that cannot be read: not an S3 location, or S3 refused to
    list it (no such bucket, access denied, another region, throttled). Callers that read many
    jobs' locations skip that job and go on (D138)."""


def split_s3_uri(uri: str) -> tuple[str, str]:
    """(bucket, key prefix ending in "/" or empty) of an s3:// location."""
    if not uri.startswith("s3://"):
        raise CheckpointLocationError(f"not an s3:// location: {uri!r}")
    bucket, _, prefix = uri.removeprefix("s3://").partition("/")
    if not bucket:
        raise CheckpointLocationError(f"no bucket in {uri!r}")
    return bucket, prefix if not prefix or prefix.endswith("/") else prefix + "/"


def checkpoint_folder(location: str, step: int) -> str:
    return f"{location.rstrip('/')}/step-{step:08d}/"


class CheckpointStore:
    def __init__(self, s3: Any | None = None) -> None:
        self._s3 = s3

    @property
    def s3(self) -> Any:
        if self._s3 is None:
            self._s3 = client("s3")
        return self._s3

    def latest_complete(self, location: str, *, after: int | None = None) -> Checkpoint | None:
        """The newest complete checkpoint under `location` (newer than step `after`, if
        given), or None; by contract v1 only (no fence)."""
        return self.lookup(location, after=after).checkpoint

    def lookup(
        self, location: str, *, after: int | None = None, fence: Fence | None = None
    ) -> Lookup:
        """The newest complete checkpoint under `location` newer than step `after` (if
        given) that `fence` allows, and those refused on the way. Costs one listing of the
        step folders (a delimiter listing, so the shards inside them are never listed), then,
        newest first, a GET of each folder's marker and, for a v2 marker, a listing of its
        folder."""
        bucket, prefix = split_s3_uri(location)
        kwargs: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix, "Delimiter": "/"}
        if after is not None:
            # Keys are listed in UTF-8 order and steps are zero-padded, so every key of a
            # later step sorts after this (exclusive) start.
            kwargs["StartAfter"] = f"{prefix}step-{after + 1:08d}"
        steps: list[int] = []
        refused: list[RefusedCheckpoint] = []
        try:
            for page in self.s3.get_paginator("list_objects_v2").paginate(**kwargs):
                for common in page.get("CommonPrefixes", []):
                    match = _FOLDER.fullmatch(common["Prefix"][len(prefix) :])
                    if match:
                        steps.append(int(match.group(1)))
            for step in sorted(steps, reverse=True):
                folder = f"{prefix}step-{step:08d}/"
                marker = self._marker(bucket, folder + MARKER)
                if marker is None:
                    continue
                body, completed_at = marker
                reason = self._refusal(bucket, folder, step, body, completed_at, fence)
                if reason is not None:
                    refused.append(RefusedCheckpoint(step=step, reason=reason[:1024]))
                    continue
                found = Checkpoint(
                    step=step, uri=checkpoint_folder(location, step), completed_at=completed_at
                )
                return Lookup(found, tuple(refused))
        except (ClientError, BotoCoreError) as exc:
            raise CheckpointLocationError(f"{location}: {_s3_error(exc)}") from exc
        return Lookup(None, tuple(refused))

    def _marker(self, bucket: str, key: str) -> tuple[bytes, datetime] | None:
        """The marker's body (up to MAX_MARKER_BYTES and one byte) and when it was written,
        or None when the folder has none."""
        try:
            got = self.s3.get_object(Bucket=bucket, Key=key, Range=f"bytes=0-{MAX_MARKER_BYTES}")
        except ClientError as exc:
            if exc.response["Error"]["Code"] in ("404", "NoSuchKey", "NotFound"):
                return None
            if exc.response["Error"]["Code"] == "InvalidRange":  # an empty marker (v1)
                head = self.s3.head_object(Bucket=bucket, Key=key)
                return b"", head["LastModified"]
            raise
        return got["Body"].read(), got["LastModified"]

    def _refusal(
        self,
        bucket: str,
        folder: str,
        step: int,
        body: bytes,
        completed_at: datetime,
        fence: Fence | None,
    ) -> str | None:
        """Why the checkpoint in `folder` must not be resumed from, or None."""
        marker = _v2(body)
        if marker is None:
            return None  # contract v1
        if isinstance(marker, str):
            return marker
        if marker["step"] != step:
            return f"its marker names step {marker['step']}, not the folder's {step}"
        if fence is not None:
            run = marker["run"]
            if marker["job_id"] != fence.job_id:
                return f"its marker names job {marker['job_id']!r:.80}, not {fence.job_id}"
            if run > fence.run:
                return (
                    f"written by run {run}, which HyperGuard has not started "
                    f"(the job is at run {fence.run})"
                )
            if run < fence.run and fence.began is not None and completed_at > fence.began:
                return (
                    f"written by run {run} at {completed_at.isoformat()}, after run {fence.run} "
                    f"began at {fence.began.isoformat()}: a stale writer, fenced off"
                )
        listing: dict[str, int] = {}
        for page in self.s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=folder):
            for item in page.get("Contents", []):
                listing[item["Key"][len(folder) :]] = item["Size"]
        missing = [
            f"{name} ({f'{listing[name]} bytes' if name in listing else 'absent'}, "
            f"listed at {size})"
            for name, size in marker["shards"]
            if listing.get(name) != size
        ]
        if missing:
            shown = ", ".join(missing[:5]) + (
                f" and {len(missing) - 5} more" if len(missing) > 5 else ""
            )
            return f"shards missing or cut: {shown}"
        return None


def _v2(body: bytes) -> dict[str, Any] | str | None:
    """A v2 marker's fields (job_id, run, step, shards as (name, size) pairs); the reason a
    body that says it is v2 is not a valid one; None for any other body (contract v1)."""
    if FORMAT_V2.encode() not in body:
        return None
    if len(body) > MAX_MARKER_BYTES:
        return f"its marker is over {MAX_MARKER_BYTES} bytes"
    try:
        parsed = json.loads(body)
    except (ValueError, RecursionError):  # RecursionError: nesting deeper than Python's stack
        return "its marker names contract v2 but is not JSON"
    if not isinstance(parsed, dict) or parsed.get("format") != FORMAT_V2:
        return None
    try:
        shards = [(str(s["name"]), _count(s["size"])) for s in parsed["shards"]]
        fields = {
            "job_id": str(parsed["job_id"]),
            "run": _count(parsed["run"]),
            "step": _count(parsed["step"]),
            "shards": shards,
        }
    except (KeyError, TypeError, ValueError) as error:
        return f"its v2 marker lacks or mistypes {error}"[:300]
    if not shards:
        return "its v2 marker lists no shards"
    return fields


def _count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{value!r:.40} is not a count")
    return value


def fence_of(record: JobRecord) -> Fence:
    """The job's current run, begun at its admission, restart or resize (whichever came
    last), whose checkpoints, and earlier runs' completed before it, a lookup may take."""
    began = [t for t in (record.started_at, record.scaled_at) if t is not None]
    return Fence(record.job.job_id, record.job.run, max(began) if began else None)


def _s3_error(exc: Exception) -> str:
    """What S3 said, in one line: its error code and message, or the client's failure."""
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        code = error.get("Code") or "error"
        message = error.get("Message") or ""
        return f"{code}: {message}"[:300] if message else str(code)
    return str(exc)[:300]
