"""The `_COMPLETE` marker of checkpoint contract v2 (docs/trainer.md).

Contract v1: a checkpoint folder `step-<8 digits>/` is complete once it holds an object
`_COMPLETE`, written last; its content is not read. Contract v2 keeps the name and the
order and gives the marker a JSON body that says what is complete:

    {"format": "hyperguard-checkpoint/2", "job_id": "...", "run": 3, "attempt": 0,
     "step": 1200, "world_size": 8, "written_at": "2026-11-27T06:00:00+00:00",
     "shards": [{"name": "rank-00000.pt", "size": 123, "sha256": "<64 hex>"}, ...]}

A reader resumes from it only if every listed shard is there with its size (and, when it
loads the shard, its checksum), the job is the reader's, and the run was not fenced off.
Objects in the folder that the marker does not list are stale and never read.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from datetime import UTC, datetime

MARKER = "_COMPLETE"
FORMAT = "hyperguard-checkpoint/2"
MAX_MARKER_BYTES = 256 * 1024
MAX_SHARDS = 4096
_NAME = re.compile(r"[A-Za-z0-9._-][A-Za-z0-9._/-]{0,255}")
_SHA = re.compile(r"[0-9a-f]{64}")


class MarkerError(ValueError):
    """A marker that is not a contract v2 marker this kit can trust."""


def folder(step: int) -> str:
    return f"step-{step:08d}/"


@dataclass(frozen=True)
class Shard:
    name: str
    size: int
    sha256: str


@dataclass(frozen=True)
class Marker:
    job_id: str
    run: int
    attempt: int
    step: int
    world_size: int
    shards: tuple[Shard, ...]
    written_at: str = ""

    def dumps(self) -> bytes:
        body = asdict(self) | {"format": FORMAT}
        body["written_at"] = self.written_at or datetime.now(UTC).isoformat()
        return json.dumps(body, sort_keys=True).encode()

    @classmethod
    def loads(cls, data: bytes) -> Marker:
        """The marker in `data`; MarkerError for an empty (contract v1) or malformed one."""
        if not data.strip():
            raise MarkerError("an empty marker (contract v1): it lists no shards")
        if len(data) > MAX_MARKER_BYTES:
            raise MarkerError(f"the marker is over {MAX_MARKER_BYTES} bytes")
        try:
            body = json.loads(data)
        except (ValueError, RecursionError) as error:  # nesting deeper than the stack
            raise MarkerError(f"the marker is not JSON: {error}"[:300]) from None
        if not isinstance(body, dict) or body.get("format") != FORMAT:
            raise MarkerError(f"the marker's format is not {FORMAT}")
        try:
            shards = tuple(_shard(item) for item in body["shards"][: MAX_SHARDS + 1])
            marker = cls(
                job_id=_text(body["job_id"]),
                run=_count(body["run"]),
                attempt=_count(body["attempt"]),
                step=_count(body["step"]),
                world_size=_count(body["world_size"]),
                shards=shards,
                written_at=_text(body.get("written_at", "")),
            )
        except (KeyError, TypeError) as error:
            raise MarkerError(f"the marker lacks or mistypes {error}") from None
        if not shards or len(shards) > MAX_SHARDS:
            raise MarkerError(f"the marker lists {len(shards)} shards (1 to {MAX_SHARDS})")
        return marker

    def missing(self, listing: dict[str, int]) -> list[str]:
        """The listed shards that `listing` (name → size) lacks or holds at another size."""
        return [
            f"{s.name} ({'absent' if s.name not in listing else f'{listing[s.name]} bytes'}, "
            f"listed at {s.size})"
            for s in self.shards
            if listing.get(s.name) != s.size
        ]


def _shard(item: object) -> Shard:
    if not isinstance(item, dict):
        raise TypeError("shards")
    name, size, sha = item["name"], item["size"], item["sha256"]
    if not isinstance(name, str) or not _NAME.fullmatch(name) or ".." in name or name == MARKER:
        raise MarkerError(f"a shard's name is not a safe relative name: {name!r:.80}")
    if not isinstance(sha, str) or not _SHA.fullmatch(sha):
        raise MarkerError(f"shard {name}'s sha256 is not 64 hex digits")
    return Shard(name, _count(size), sha)


def _count(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**63:
        raise MarkerError(f"{value!r:.40} is not a count")
    return value


def _text(value: object) -> str:
    if not isinstance(value, str) or len(value) > 1024:
        raise MarkerError(f"{value!r:.40} is not a short string")
    return value
