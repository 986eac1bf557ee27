"""Who is calling: the IAM principal API Gateway's IAM authorizer verified, mapped to a team.

API Gateway (AWS_IAM authorization) puts the SigV4 signer in
`requestContext.identity.userArn`. A role session arrives as
`arn:aws:sts::<account>:assumed-role/<role>/<session>`; it is looked up as itself first,
then as its role, `arn:aws:iam::<account>:role/<role>`, so one mapping covers every session
of a role. Mappings are TeamsTable items `PRINCIPAL/<ARN>` with `team` and `admin`
(hyperguard.store.teams); the ARNs in ADMIN_PRINCIPAL_ARNS are admins without an item, so
a new deployment has someone who can create the first mappings.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass

from hyperguard.api.errors import ForbiddenError, UnauthenticatedError
from hyperguard.store.teams import TeamStore

_ASSUMED_ROLE = re.compile(r"^arn:(aws[a-z-]*):sts::(\d{12}):assumed-role/([^/]+)/.+$")


@dataclass(frozen=True, slots=True)
class Caller:
    principal: str
    team: str | None
    admin: bool

    def require_admin(self) -> None:
        if not self.admin:
            raise ForbiddenError(f"{self.principal} is not an admin", None)

    def may_see_team(self, team: str) -> bool:
        return self.admin or self.team == team

    def require_team(self, team: str, field: str = "team") -> None:
        if not self.may_see_team(team):
            raise ForbiddenError(f"{self.principal} may not act for team {team}", field)


def role_arn(principal: str) -> str | None:
    """The IAM role ARN of an assumed-role session ARN, else None."""
    match = _ASSUMED_ROLE.match(principal)
    if match is None:
        return None
    partition, account, role = match.groups()
    return f"arn:{partition}:iam::{account}:role/{role}"


def resolve_caller(
    principal: str | None, teams: TeamStore, bootstrap_admins: Collection[str]
) -> Caller:
    if not principal:
        raise UnauthenticatedError("the request carries no IAM identity", None)
    candidates = [principal]
    role = role_arn(principal)
    if role is not None:
        candidates.append(role)
    for candidate in candidates:
        grant = teams.principal(candidate)
        if grant is not None:
            admin = grant.admin or candidate in bootstrap_admins
            return Caller(principal, grant.team, admin)
    if any(candidate in bootstrap_admins for candidate in candidates):
        return Caller(principal, None, True)
    raise ForbiddenError(f"{principal} is not mapped to a team", None)
