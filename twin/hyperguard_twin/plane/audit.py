"""kube-apiserver's audit log: the policy that records every request from outside the control
plane, and those requests read back."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml


def write_policy(path: Path) -> Path:
    """Metadata level for every caller but the control plane's own (kcm, the scheduler,
    kube-system's controllers, the nodes and the system:masters add-ons): their requests
    are most of the traffic and none of HyperGuard's."""
    policy = {
        "apiVersion": "audit.k8s.io/v1",
        "kind": "Policy",
        "omitStages": ["RequestReceived"],
        "rules": [
            {
                "level": "None",
                "users": [
                    "system:kube-controller-manager",
                    "system:kube-scheduler",
                    "system:apiserver",
                ],
            },
            {
                "level": "None",
                "userGroups": [
                    "system:masters",
                    "system:nodes",
                    "system:serviceaccounts:kube-system",
                ],
            },
            {"level": "Metadata"},
        ],
    }
    path.write_text(yaml.safe_dump(policy))
    return path


def requests(audit_log: Path) -> list[dict[str, Any]]:
    """The requests the API server answered for callers outside the control plane, in
    order: `user`, `groups`, `verb`, `resource` (with `/subresource`), `namespace`,
    `name`, `code` (the HTTP status), `authorized` (False: RBAC refused it; a 403 from
    an admission check is authorized) and `at` (the audit event's stageTimestamp)."""
    out: list[dict[str, Any]] = []
    if not audit_log.exists():
        return out
    with audit_log.open() as lines:
        for line in lines:
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line the server is still writing
            if event.get("stage") == "ResponseComplete":
                out.append(_request(event))
    return out


def _request(event: dict[str, Any]) -> dict[str, Any]:
    ref = event.get("objectRef") or {}
    resource = ref.get("resource", "")
    if ref.get("subresource"):
        resource = f"{resource}/{ref['subresource']}"
    user = event.get("user") or {}
    decision = (event.get("annotations") or {}).get("authorization.k8s.io/decision")
    return {
        "user": user.get("username"),
        "groups": user.get("groups") or [],
        "verb": event.get("verb"),
        "resource": resource or event.get("requestURI"),
        "namespace": ref.get("namespace"),
        "name": ref.get("name"),
        "code": (event.get("responseStatus") or {}).get("code"),
        "authorized": decision != "forbid",
        "at": event.get("stageTimestamp"),
    }
