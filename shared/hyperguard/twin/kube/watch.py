"""Watches, as kube-apiserver's watch cache serves them (k8s.io/apiserver
pkg/storage/cacher): every committed change of a resource is kept in a bounded window, a
watch starts from a resourceVersion inside that window (or, without one, from a synthetic
ADDED for every object that exists now) and streams one JSON watch event per line:
`{"type": "ADDED" | "MODIFIED" | "DELETED" | "BOOKMARK" | "ERROR", "object": ...}`.

As the cacher does: label and field selectors are applied to both sides of a change, so an
object that stops matching arrives as DELETED and one that starts matching as ADDED; a
resourceVersion older than the window gets an ERROR event carrying a 410 Expired Status
("too old resource version"), in a 200 response, since the cacher reports errors found after
the request was accepted as a watch event (cacher.go, newErrWatcher); bookmarks are sent
only when the client asks for them (allowWatchBookmarks), at most once per
`bookmark_interval_s` of a quiet stream; the stream ends after timeoutSeconds.
"""

from __future__ import annotations

import collections
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from hyperguard.twin.kube.store import (
    Event,
    KubeError,
    Obj,
    ObjectStore,
    ResourceType,
    parse_field_selector,
    parse_label_selector,
)

HISTORY = 1000
"""Changes kept per resource for watches to resume from (the watch cache's capacity)."""
DEFAULT_TIMEOUT_S = 1800
"""A watch without timeoutSeconds ends after kube-apiserver's --min-request-timeout."""


@dataclass(frozen=True, slots=True)
class _Change:
    rv: int
    event: Event
    obj: Obj
    old: Obj | None


@dataclass(frozen=True, slots=True)
class WatchRequest:
    rt: ResourceType
    namespace: str | None
    resource_version: str | None
    label_selector: str | None
    field_selector: str | None
    timeout_s: float
    bookmarks: bool


class WatchHub:
    """The changes of one store, kept per resource, and the watches reading them."""

    def __init__(self, store: ObjectStore, *, bookmark_interval_s: float = 60.0) -> None:
        self._store = store
        self._bookmark_interval_s = bookmark_interval_s
        self._changed = threading.Condition()
        self._history: dict[str, collections.deque[_Change]] = collections.defaultdict(
            lambda: collections.deque(maxlen=HISTORY)
        )
        with store.lock:
            self._start_rv = int(store.current_resource_version)
            self._expired: dict[str, int] = collections.defaultdict(lambda: self._start_rv)
            self._latest_rv = self._start_rv
            store.add_listener(self._record, copies=False)  # kept and serialised as they are
        self._closed = False

    def close(self) -> None:
        """End every open watch (the server is stopping)."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()

    def _record(
        self, event: Event, rt: ResourceType, obj: Obj, old: Obj | None, _user: str | None
    ) -> None:
        rv = int(obj["metadata"]["resourceVersion"])
        with self._changed:
            history = self._history[rt.key]
            if len(history) == history.maxlen:
                self._expired[rt.key] = history[0].rv
            history.append(_Change(rv, event, obj, old))
            self._latest_rv = max(self._latest_rv, rv)
            self._changed.notify_all()

    def open(self, request: WatchRequest) -> Iterator[bytes]:
        """Start a watch; call with the store's lock held, so that the objects listed for a
        watch without a resourceVersion and the changes after them join without a gap."""
        labels = parse_label_selector(request.label_selector)
        fields = parse_field_selector(request.field_selector)

        def matches(obj: Obj | None) -> bool:
            if obj is None:
                return False
            meta = obj.get("metadata") or {}
            if request.rt.namespaced and request.namespace not in (None, meta.get("namespace")):
                return False
            return labels(meta.get("labels") or {}) and fields(obj)

        initial: list[Obj] = []
        rv = request.resource_version
        if rv in (None, "", "0"):
            cursor = int(self._store.current_resource_version)
            initial = self._store.list(
                request.rt, request.namespace, request.label_selector, request.field_selector
            )
        else:
            try:
                cursor = int(rv or "")
            except ValueError:
                raise KubeError(400, "BadRequest", f"invalid resource version: {rv!r}") from None
        with self._changed:
            expired = cursor < self._expired[request.rt.key]
        return self._stream(request, matches, initial, cursor, expired)

    def _stream(
        self,
        request: WatchRequest,
        matches: Callable[[Obj | None], bool],
        initial: list[Obj],
        cursor: int,
        expired: bool,
    ) -> Iterator[bytes]:
        if expired:
            message = f"too old resource version: {cursor} ({self._expired[request.rt.key]})"
            gone = {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "message": message,
                "reason": "Expired",
                "code": 410,
            }
            yield _line("ERROR", gone)
            return
        for obj in initial:
            yield _line("ADDED", obj)
        deadline = time.monotonic() + request.timeout_s
        next_bookmark = time.monotonic() + self._bookmark_interval_s
        while True:
            changes, latest = self._wait(request.rt, cursor, min(deadline, next_bookmark))
            if changes is None:
                return
            for change in changes:
                cursor = change.rv
                line = _filtered(change, matches)
                if line is not None:
                    yield line
            now = time.monotonic()
            if now >= deadline:
                return
            if changes:
                next_bookmark = now + self._bookmark_interval_s
            elif request.bookmarks and now >= next_bookmark:
                next_bookmark = now + self._bookmark_interval_s
                marker = {
                    "kind": request.rt.kind,
                    "apiVersion": request.rt.api_version,
                    "metadata": {"resourceVersion": str(latest)},
                }
                yield _line("BOOKMARK", marker)

    def _wait(
        self, rt: ResourceType, cursor: int, until: float
    ) -> tuple[list[_Change] | None, int]:
        """The changes of `rt` after `cursor`, waiting for one until `until`; None once the
        hub is closed, or when changes after `cursor` have left the window (a watch that fell
        that far behind is ended, as the cacher ends one that cannot keep up; the client
        resumes and learns its version is too old)."""
        with self._changed:
            while True:
                if self._closed or cursor < self._expired[rt.key]:
                    return None, self._latest_rv
                changes = [c for c in self._history[rt.key] if c.rv > cursor]
                remaining = until - time.monotonic()
                if changes or remaining <= 0:
                    return changes, self._latest_rv
                self._changed.wait(remaining)


def _filtered(change: _Change, matches: Callable[[Obj | None], bool]) -> bytes | None:
    now, before = matches(change.obj), matches(change.old)
    if change.event == "MODIFIED" and now != before:
        if now:
            return _line("ADDED", change.obj)
        gone = dict(change.old or {})
        gone["metadata"] = {
            **(gone.get("metadata") or {}),
            "resourceVersion": str(change.rv),
        }
        return _line("DELETED", gone)
    return _line(change.event, change.obj) if now else None


def _line(event: str, obj: Obj) -> bytes:
    return (json.dumps({"type": event, "object": obj}) + "\n").encode()
