"""The twin's own routes on the emulator's port (`/_hyperguard/...`), which the
`hyperguard twin` commands of another process call: its status, the simulated nodes, a
hardware fault, and kubeconfigs that authenticate as a function."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs

from hyperguard_twin.cluster import FaultKind

Route = Callable[[dict[str, Any]], tuple[int, Any]]


def add_routes(
    routes: dict[str, Route],
    *,
    status: Callable[[], dict[str, Any]],
    nodes: Callable[[], Any],
    fault: Callable[[str, FaultKind], dict[str, Any]],
    kubeconfig_for: Callable[[str], str],
) -> None:
    def fault_route(environ: dict[str, Any]) -> tuple[int, Any]:
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = json.loads(environ["wsgi.input"].read(length) or b"{}")
        kind = body.get("kind", "gpu")
        if kind not in ("gpu", "persistent", "kernel"):
            return 400, {"error": f"unknown fault kind {kind!r}: gpu, persistent or kernel"}
        try:
            return 200, fault(str(body["instance_id"]), kind)
        except KeyError:
            return 400, {"error": 'name the node: {"instance_id": "i-..."}'}
        except LookupError as exc:
            return 404, {"error": str(exc)}

    def kubeconfig_route(environ: dict[str, Any]) -> tuple[int, Any]:
        wanted = (parse_qs(environ.get("QUERY_STRING", "")).get("as") or [""])[0]
        try:
            return 200, {"kubeconfig": kubeconfig_for(wanted)}
        except LookupError as exc:
            return 404, {"error": str(exc)}

    routes["/_hyperguard/status"] = lambda _env: (200, status())
    routes["/_hyperguard/nodes"] = lambda _env: (200, nodes())
    routes["/_hyperguard/fault"] = fault_route
    routes["/_hyperguard/kubeconfig"] = kubeconfig_route
