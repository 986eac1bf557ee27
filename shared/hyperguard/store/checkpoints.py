"""Job checkpoints in S3, by HyperGuard's completion-marker convention.

A job checkpoints under its `checkpoint_location` (s3://bucket/prefix/), one folder per
checkpoint named `step-<8-digit step>/`. A checkpoint is complete only once its folder holds
the marker object `_COMPLETE` (written last, after every shard); a folder without the marker
— a checkpoint cut short by the fault — is never used. A job may also report a completed
checkpoint through the API (POST /jobs/{jobId}/checkpoints); recovery takes the newer of
the two.
"""

from __future__ import annotations

import re
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from hyperguard.aws import client
from hyperguard.models import Checkpoint

MARKER = "_COMPLETE"
_FOLDER = re.compile(r"step-(\d{8})/")


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
        given), or None. Costs one listing of the step folders (a delimiter listing, so the
        shards inside them are never listed) and a HEAD of the marker per folder tried,
        newest first."""
        bucket, prefix = split_s3_uri(location)
        kwargs: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix, "Delimiter": "/"}
        if after is not None:
            # Keys are listed in UTF-8 order and steps are zero-padded, so every key of a
            # later step sorts after this (exclusive) start.
            kwargs["StartAfter"] = f"{prefix}step-{after + 1:08d}"
        steps: list[int] = []
        try:
            for page in self.s3.get_paginator("list_objects_v2").paginate(**kwargs):
                for common in page.get("CommonPrefixes", []):
                    match = _FOLDER.fullmatch(common["Prefix"][len(prefix) :])
                    if match:
                        steps.append(int(match.group(1)))
        except (ClientError, BotoCoreError) as exc:
            raise CheckpointLocationError(f"{location}: {_s3_error(exc)}") from exc
        for step in sorted(steps, reverse=True):
            key = f"{prefix}step-{step:08d}/{MARKER}"
            try:
                head = self.s3.head_object(Bucket=bucket, Key=key)
            except ClientError as exc:
                if exc.response["Error"]["Code"] in ("404", "NoSuchKey", "NotFound"):
                    continue
                raise CheckpointLocationError(f"{location}: {_s3_error(exc)}") from exc
            except BotoCoreError as exc:
                raise CheckpointLocationError(f"{location}: {_s3_error(exc)}") from exc
            return Checkpoint(
                step=step, uri=checkpoint_folder(location, step), completed_at=head["LastModified"]
            )
        return None


def _s3_error(exc: Exception) -> str:
    """What S3 said, in one line: its error code and message, or the client's failure."""
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        code = error.get("Code") or "error"
        message = error.get("Message") or ""
        return f"{code}: {message}"[:300] if message else str(code)
    return str(exc)[:300]
