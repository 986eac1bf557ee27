"""Putting recorded events on the twin's EventBridge, optionally aimed at one of its nodes."""

from __future__ import annotations

import copy
import json
import re
from typing import Any

from hyperguard_twin.ids import hyperpod_cluster_id

FORWARDER_SOURCE = "hyperguard.node-forwarder"
_INSTANCE_ID = re.compile(r"i-[0-9a-zA-Z]{8,17}")


class InjectError(ValueError):
    pass


_INSTANCE_KEYS = {"instance-id", "InstanceId", "instanceId", "providerId", "entityValue"}
_CLUSTER_KEYS = {"ClusterName", "clusterName"}


def retarget(event: dict[str, Any], instance_id: str, cluster: str | None = None) -> dict[str, Any]:
    """The same event, about another instance (and, where it names one, another cluster).

    Every place a source names its instance is rewritten, however deep: resources ARNs,
    EC2's `instance-id`, HyperPod's `InstanceId` (also inside cluster events'
    `EventDetails`), AWS Health's affected entities (bare id or ARN alike), the forwarder's
    `instanceId`/`providerId`; with `cluster`, every `ClusterName`/`ClusterArn`.
    """
    out = copy.deepcopy(event)
    if not isinstance(out.get("detail"), dict):
        raise InjectError("event has no detail object to retarget")

    def swap(text: str) -> str:
        return _INSTANCE_ID.sub(instance_id, text)

    def rename_cluster(arn: str) -> str:
        if not cluster or ":cluster/" not in arn:
            return arn
        return arn.rsplit("/", 1)[0] + "/" + hyperpod_cluster_id(cluster)

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            for key, value in node.items():
                if key in _INSTANCE_KEYS and isinstance(value, str):
                    node[key] = swap(value)
                elif key in _CLUSTER_KEYS and cluster and isinstance(value, str):
                    node[key] = cluster
                elif key == "ClusterArn" and isinstance(value, str):
                    node[key] = rename_cluster(value)
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)
        return node

    walk(out["detail"])
    out["resources"] = [
        rename_cluster(swap(r)) for r in out.get("resources", []) if isinstance(r, str)
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
