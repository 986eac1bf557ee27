"""Operator actions on nodes: the port the API calls, implemented by the recovery side."""

from __future__ import annotations

from typing import Any, Protocol

from hyperguard.api.errors import NodeActionsUnavailableError


class NodeActions(Protocol):
    """Each method returns a JSON-able outcome. Raise `hyperguard.cluster.NodeNotFoundError`
    for an unknown node and `hyperguard.recovery.operator.OperatorActionError` for an action
    that cannot be taken now; the API maps them to 404 and 409."""

    def cordon(self, instance_id: str) -> dict[str, Any]: ...

    def uncordon(self, instance_id: str) -> dict[str, Any]: ...

    def reboot(self, instance_id: str) -> dict[str, Any]: ...

    def replace(self, instance_id: str) -> dict[str, Any]: ...

    def veto(self, instance_id: str, reason: str) -> dict[str, Any]: ...

    def approve(self, incident_id: str) -> dict[str, Any]: ...


class UnavailableNodeActions:
    """Until node actions are wired in: every action answers 501."""

    def _unavailable(self) -> dict[str, Any]:
        raise NodeActionsUnavailableError("node actions are not available in this deployment")

    def cordon(self, instance_id: str) -> dict[str, Any]:
        return self._unavailable()

    def uncordon(self, instance_id: str) -> dict[str, Any]:
        return self._unavailable()

    def reboot(self, instance_id: str) -> dict[str, Any]:
        return self._unavailable()

    def replace(self, instance_id: str) -> dict[str, Any]:
        return self._unavailable()

    def veto(self, instance_id: str, reason: str) -> dict[str, Any]:
        return self._unavailable()

    def approve(self, incident_id: str) -> dict[str, Any]:
        return self._unavailable()
