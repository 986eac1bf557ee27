"""Putting recorded events on the twin's EventBridge, optionally aimed at one of its nodes."""

from __future__ import annotations

import copy
import json
import re
from typing import Any

FORWARDER_SOURCE = "hyperguard.node-forwarder"
_INSTANCE_ID = re.compile(r"i-[0-9a-zA-Z]{8,17}")


class InjectError(ValueError):
    pass


def retarget(event: dict[str, Any], instance_id: str, cluster: str | None = None) -> dict[str, Any]:
    """The same event, about another instance (and, where it names one, another cluster).

    Every place a source names its instance is rewritten: resources ARNs, EC2's
    `instance-id`, HyperPod's `InstanceId`, AWS Health's affected entities (bare id or ARN
    alike), the forwarder's `instanceId`/`providerId`.
    """
    out = copy.deepcopy(event)
    detail = out.get("detail")
    if not isinstance(detail, dict):
        raise InjectError("event has no detail object to retarget")

    def swap(text: str) -> str:
        return _INSTANCE_ID.sub(instance_id, text)

    out["resources"] = [swap(r) for r in out.get("resources", []) if isinstance(r, str)]
    for key in ("instance-id", "InstanceId", "instanceId", "providerId"):
        if isinstance(detail.get(key), str):
            detail[key] = swap(detail[key])
    for entity in detail.get("affectedEntities", []) or []:
        if isinstance(entity, dict) and isinstance(entity.get("entityValue"), str):
            entity["entityValue"] = swap(entity["entityValue"])
    if cluster is not None:
        for key in ("ClusterName", "clusterName"):
            if key in detail:
                detail[key] = cluster
        if isinstance(detail.get("ClusterArn"), str):
            detail["ClusterArn"] = detail["ClusterArn"].rsplit("/", 1)[0] + "/" + cluster
            out["resources"] = [
                detail["ClusterArn"] if ":cluster/" in r else r for r in out["resources"]
            ]
    return out


def put_entry(event: dict[str, Any], service_bus: str) -> dict[str, Any]:
    """A PutEvents entry for a recorded event. EventBridge assigns a fresh id and keeps
    `time`; forwarder events go to the service bus, AWS-sourced ones to the default bus
    (only the emulator lets a client put `aws.*` sources — on AWS, AWS does)."""
    for field in ("source", "detail-type", "detail"):
        if field not in event:
            raise InjectError(f"event has no '{field}'")
    entry: dict[str, Any] = {
        "Source": event["source"],
        "DetailType": event["detail-type"],
        "Detail": json.dumps(event["detail"]),
        "Resources": event.get("resources", []),
        "EventBusName": service_bus if event["source"] == FORWARDER_SOURCE else "default",
    }
    return entry
