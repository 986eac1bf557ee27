"""EKS access entries, which moto lacks: CreateAccessEntry, DescribeAccessEntry,
ListAccessEntries and DeleteAccessEntry on the emulator's EKS API (botocore's eks model,
2017-11-01), kept on moto's cluster, and `identity_for`, which maps a caller to the
Kubernetes user and groups its access entry gives it, as EKS's authenticator does.

What EKS checks and the twin checks too (EKS API reference, CreateAccessEntry; "Create
access entries" in the EKS user guide): the principal is an IAM role or user ARN; one entry
per principal (ResourceInUseException); `type` is STANDARD unless given (the other types
are for nodes and are not used by HyperGuard, so the twin refuses them); a group may not
start with `system:` (InvalidParameterException); a username may not start with `system:`,
`eks:`, `aws:`, `amazon:` or `iam:`. An IAM role's default username is its assumed-role ARN
with the session name (`arn:aws:sts::<account>:assumed-role/<role>/{{SessionName}}`).

A caller is found by its STS identity: an assumed-role ARN stands for the role
(`arn:aws:iam::<account>:role/<path><name>`; EKS matches the role by name, ignoring the
path), a user ARN for itself. Kubernetes adds `system:authenticated` to every
authenticated user's groups.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from hyperguard_twin.plane.authn import Identity

_PRINCIPAL = re.compile(r"^arn:aws:iam::(\d{12}):(role|user)/(?:[\w+=,.@-]+/)*([\w+=,.@-]+)$")
_ASSUMED_ROLE = re.compile(r"^arn:aws:sts::(\d{12}):assumed-role/([\w+=,.@-]+)/([\w+=,.@-]+)$")
_RESERVED_USERNAME_PREFIXES = ("system:", "eks:", "aws:", "amazon:", "iam:")
AUTHENTICATED = "system:authenticated"


class AccessEntryError(ValueError):
    """A request EKS refuses: `code` is EKS's error code."""

    def __init__(self, code: str, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.code = code
        self.status = status


@dataclass
class AccessEntry:
    cluster_name: str
    principal_arn: str
    kubernetes_groups: list[str]
    username: str
    access_entry_arn: str
    type: str = "STANDARD"
    tags: dict[str, str] = field(default_factory=dict)
    created_at: datetime = field(default_factory=lambda: datetime.now(UTC))

    def as_api(self) -> dict[str, Any]:
        return {
            "clusterName": self.cluster_name,
            "principalArn": self.principal_arn,
            "kubernetesGroups": list(self.kubernetes_groups),
            "accessEntryArn": self.access_entry_arn,
            "createdAt": self.created_at,
            "modifiedAt": self.created_at,
            "tags": dict(self.tags),
            "username": self.username,
            "type": self.type,
        }


def default_username(principal_arn: str) -> str:
    match = _PRINCIPAL.match(principal_arn)
    if match is None:
        return principal_arn
    account, kind, name = match.groups()
    if kind == "role":
        return f"arn:aws:sts::{account}:assumed-role/{name}/{{{{SessionName}}}}"
    return principal_arn


def new_entry(
    cluster_name: str,
    cluster_arn: str,
    request: dict[str, Any],
    existing: dict[str, AccessEntry],
) -> AccessEntry:
    """The entry CreateAccessEntry makes of `request`, checked as EKS checks it."""
    principal = str(request.get("principalArn") or "")
    if _PRINCIPAL.match(principal) is None:
        raise AccessEntryError(
            "InvalidParameterException",
            f"The principalArn {principal!r} is not a valid IAM role or user ARN.",
        )
    if principal in existing:
        raise AccessEntryError(
            "ResourceInUseException",
            "The specified access entry resource is already in use on this cluster.",
            409,
        )
    kind = str(request.get("type") or "STANDARD")
    if kind != "STANDARD":
        raise AccessEntryError(
            "InvalidParameterException",
            f"The twin supports only STANDARD access entries, not {kind}.",
        )
    groups = [str(g) for g in request.get("kubernetesGroups") or []]
    for group in groups:
        if group.startswith("system:"):
            raise AccessEntryError(
                "InvalidParameterException",
                f"kubernetesGroups may not start with system: ({group}).",
            )
    username = str(request.get("username") or default_username(principal))
    if username.startswith(_RESERVED_USERNAME_PREFIXES):
        raise AccessEntryError(
            "InvalidParameterException", f"The username {username!r} uses a reserved prefix."
        )
    name = principal.rsplit("/", 1)[1]
    return AccessEntry(
        cluster_name=cluster_name,
        principal_arn=principal,
        kubernetes_groups=groups,
        username=username,
        access_entry_arn=f"{cluster_arn.replace(':cluster/', ':access-entry/')}/{name}",
        tags=dict(request.get("tags") or {}),
    )


def identity_for(caller_arn: str, entries: dict[str, AccessEntry]) -> Identity | None:
    """The Kubernetes identity EKS gives the STS caller `caller_arn`, or None when no access
    entry names it."""
    assumed = _ASSUMED_ROLE.match(caller_arn)
    if assumed is not None:
        account, role, session = assumed.groups()
        for entry in entries.values():
            match = _PRINCIPAL.match(entry.principal_arn)
            if match and match.groups() == (account, "role", role):
                username = entry.username.replace("{{SessionName}}", session)
                return Identity(
                    username,
                    (*entry.kubernetes_groups, AUTHENTICATED),
                    uid=f"aws-iam-authenticator:{account}:{role}",
                )
        return None
    found = entries.get(caller_arn)
    if found is None:
        return None
    return Identity(found.username, (*found.kubernetes_groups, AUTHENTICATED))


_lock = threading.Lock()


def _entries(cluster: Any) -> dict[str, AccessEntry]:
    with _lock:
        if not hasattr(cluster, "twin_access_entries"):
            cluster.twin_access_entries = {}
        return cluster.twin_access_entries  # type: ignore[no-any-return]


def entries_of(account: str, region: str, cluster_name: str) -> dict[str, AccessEntry]:
    """The access entries of the emulator's EKS cluster (empty when there is none)."""
    from moto.eks.models import eks_backends

    cluster = eks_backends[account][region].clusters.get(cluster_name)
    return dict(_entries(cluster)) if cluster is not None else {}


_patched = False


def install() -> None:
    """Serve the four operations on the emulator's EKS API."""
    global _patched
    if _patched:
        return
    _patched = True
    from moto.core.exceptions import JsonRESTError
    from moto.core.responses import ActionResult, EmptyResult
    from moto.eks import urls
    from moto.eks.responses import EKSResponse

    def cluster_of(self: Any) -> Any:
        name = self._get_param("name")
        cluster = self.eks_backend.clusters.get(name)
        if cluster is None:
            raise JsonRESTError("ResourceNotFoundException", f"No cluster found for name: {name}.")
        return cluster

    def refused(error: AccessEntryError) -> JsonRESTError:
        raised = JsonRESTError(error.code, str(error))
        raised.code = error.status
        return raised

    def create_access_entry(self: Any) -> Any:
        cluster = cluster_of(self)
        request = {
            key: self._get_param(key)
            for key in ("principalArn", "kubernetesGroups", "username", "type", "tags")
        }
        entries = _entries(cluster)
        try:
            entry = new_entry(cluster.name, cluster.arn, request, entries)
        except AccessEntryError as error:
            raise refused(error) from error
        with _lock:
            entries[entry.principal_arn] = entry
        return ActionResult({"accessEntry": entry.as_api()})

    def describe_access_entry(self: Any) -> Any:
        entry = _entries(cluster_of(self)).get(self._get_param("principalArn"))
        if entry is None:
            raise JsonRESTError(
                "ResourceNotFoundException",
                "The specified access entry resource could not be found.",
            )
        return ActionResult({"accessEntry": entry.as_api()})

    def list_access_entries(self: Any) -> Any:
        return ActionResult({"accessEntries": sorted(_entries(cluster_of(self)))})

    def delete_access_entry(self: Any) -> Any:
        entries = _entries(cluster_of(self))
        with _lock:
            if entries.pop(self._get_param("principalArn"), None) is None:
                raise JsonRESTError(
                    "ResourceNotFoundException",
                    "The specified access entry resource could not be found.",
                )
        return EmptyResult()

    for operation in (
        create_access_entry,
        describe_access_entry,
        list_access_entries,
        delete_access_entry,
    ):
        setattr(EKSResponse, operation.__name__, operation)
    urls.url_paths["{0}/clusters/(?P<name>[^/]+)/access-entries$"] = urls.response.dispatch
    urls.url_paths["{0}/clusters/(?P<name>[^/]+)/access-entries/(?P<principalArn>.+)$"] = (
        urls.response.dispatch
    )
