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
from datetime import datetime
from typing import Any

from hyperguard.aws import client
from hyperguard.models import Checkpoint

MARKER = "_COMPLETE"
_STEP = re.compile(r"step-(\d{8})/" + MARKER + "$")


class CheckpointLocationError(ValueError):
    pass


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

    def latest_complete(self, location: str) -> Checkpoint | None:
        bucket, prefix = split_s3_uri(location)
        best: tuple[int, datetime] | None = None
        for page in self.s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            for obj in page.get("Contents", []):
                match = _STEP.search(obj["Key"])
                if match and (best is None or int(match.group(1)) > best[0]):
                    best = (int(match.group(1)), obj["LastModified"])
        if best is None:
            return None
        step, completed = best
        return Checkpoint(step=step, uri=checkpoint_folder(location, step), completed_at=completed)
