"""Where checkpoints go: an S3 location, or a local or FSx for Lustre path. Both are a flat
namespace of keys under the location's root; a checkpoint is the folder `step-<8 digits>/`."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any, Protocol


class Target(Protocol):
    uri: str

    def listing(self, folder: str) -> dict[str, int]:
        """Every object under `folder` (relative to the root, ending in "/"), with its size:
        names relative to the folder."""
        ...

    def folders(self) -> list[str]:
        """The names of the root's immediate sub-folders, each ending in "/"."""
        ...

    def put(self, key: str, data: bytes) -> None: ...

    def get(self, key: str) -> bytes: ...

    def delete(self, keys: list[str]) -> None: ...


def target_for(uri: str, *, s3: Any | None = None) -> Target:
    """The target of `uri`: `s3://bucket/prefix/`, or a local path (FSx is mounted as one)."""
    if uri.startswith("s3://"):
        return S3Target(uri, s3)
    if "://" in uri:
        raise ValueError(f"not an s3:// location or a path: {uri!r}")
    return LocalTarget(uri)


class LocalTarget:
    """A directory. Every object is written to a temporary name and renamed, so that a
    reader never sees half an object."""

    def __init__(self, root: str) -> None:
        self.uri = root
        self.root = Path(root)

    def listing(self, folder: str) -> dict[str, int]:
        base = self.root / folder
        if not base.is_dir():
            return {}
        return {
            str(path.relative_to(base)): path.stat().st_size
            for path in base.rglob("*")
            if path.is_file() and not path.name.startswith(".tmp-")
        }

    def folders(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return [f"{path.name}/" for path in self.root.iterdir() if path.is_dir()]

    def put(self, key: str, data: bytes) -> None:
        path = self.root / key
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=path.parent)
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)

    def get(self, key: str) -> bytes:
        return (self.root / key).read_bytes()

    def delete(self, keys: list[str]) -> None:
        for key in keys:
            (self.root / key).unlink(missing_ok=True)


class S3Target:
    """An S3 location. Objects are whole PUTs (up to 5 GB each: a bigger shard is a
    multipart upload through boto3's transfer manager)."""

    def __init__(self, uri: str, s3: Any | None = None) -> None:
        bucket, _, prefix = uri.removeprefix("s3://").partition("/")
        if not bucket:
            raise ValueError(f"no bucket in {uri!r}")
        self.uri = uri
        self.bucket = bucket
        self.prefix = prefix if not prefix or prefix.endswith("/") else prefix + "/"
        self._s3 = s3

    @property
    def s3(self) -> Any:
        if self._s3 is None:
            import boto3  # only where an s3:// target is used

            self._s3 = boto3.client("s3")
        return self._s3

    def listing(self, folder: str) -> dict[str, int]:
        start = self.prefix + folder
        found: dict[str, int] = {}
        for page in self.s3.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=start
        ):
            for item in page.get("Contents", []):
                found[item["Key"][len(start) :]] = item["Size"]
        return found

    def folders(self) -> list[str]:
        found: list[str] = []
        for page in self.s3.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=self.prefix, Delimiter="/"
        ):
            found.extend(c["Prefix"][len(self.prefix) :] for c in page.get("CommonPrefixes", []))
        return found

    def put(self, key: str, data: bytes) -> None:
        if len(data) > 5 * 1024**3:
            import io

            self.s3.upload_fileobj(io.BytesIO(data), self.bucket, self.prefix + key)
        else:
            self.s3.put_object(Bucket=self.bucket, Key=self.prefix + key, Body=data)

    def get(self, key: str) -> bytes:
        body: bytes = self.s3.get_object(Bucket=self.bucket, Key=self.prefix + key)["Body"].read()
        return body

    def delete(self, keys: list[str]) -> None:
        for start in range(0, len(keys), 1000):  # DeleteObjects takes 1,000 keys a call
            batch = [{"Key": self.prefix + key} for key in keys[start : start + 1000]]
            self.s3.delete_objects(Bucket=self.bucket, Delete={"Objects": batch, "Quiet": True})
