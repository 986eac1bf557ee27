"""The per-caller rate limits' pure parts (windows, keys, who counts as whom) and the limiter
on in-memory fakes of its two tables: what is counted, what is refused, and what a failure
of the counters means (D147)."""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError, EndpointConnectionError

from hyperguard.api.rate_limits import (
    ADMINS,
    ANONYMOUS,
    GROUP_CACHE_ENTRIES,
    GROUP_CACHE_S,
    MAX_NAME_CHARS,
    UNMAPPED,
    CallerRateLimiter,
    RateLimits,
    Refusal,
    counted_principal,
    counter_key,
    retry_after,
    window_of,
)
from hyperguard.store.rate_limits import RateCounterStore
from hyperguard.store.teams import PRINCIPAL_PK, TeamStore

ROLE = "arn:aws:iam::123456789012:role/nlp-engineer"
ADMIN = "arn:aws:iam::123456789012:role/hyperguard-admin"


def test_windows_are_whole_seconds_and_retry_after_reaches_the_next() -> None:
    assert window_of(1_000.0) == window_of(1_000.999) == 1_000
    assert window_of(1_001.0) == 1_001
    assert retry_after(1_000.0) == retry_after(1_000.2) == retry_after(1_000.999) == 1


def test_a_session_counts_as_its_role_and_no_identity_as_anonymous() -> None:
    session = "arn:aws:sts::123456789012:assumed-role/nlp-engineer/any-name-at-all"
    assert counted_principal(session) == ROLE
    assert counted_principal(ROLE) == ROLE
    user = "arn:aws:iam::123456789012:user/alice"
    assert counted_principal(user) == user
    assert counted_principal(None) == counted_principal("") == ANONYMOUS


def test_counter_keys_name_limit_caller_and_window_and_stay_bounded() -> None:
    assert counter_key("principal", ROLE, 1_000) == f"principal#{ROLE}#1000"
    assert counter_key("team", "nlp", 1_000) != counter_key("team", "nlp", 1_001)
    long_name = "arn:aws:iam::123456789012:role/" + "p/" * 1_000 + "x"
    key = counter_key("principal", long_name, 1_000)
    assert key.startswith("principal#sha256:") and len(key) < 100
    assert key != counter_key("principal", long_name + "y", 1_000)
    assert len(counter_key("team", "t" * MAX_NAME_CHARS, 1)) > MAX_NAME_CHARS


class CounterTable:
    """DynamoDB's conditional ADD on one attribute, or the error `failure` names."""

    def __init__(self) -> None:
        self.calls: dict[str, int] = {}
        self.expires: dict[str, int] = {}
        self.failure: str | None = None

    def update_item(self, **request: Any) -> dict[str, Any]:
        if self.failure == "connection":
            raise EndpointConnectionError(endpoint_url="https://dynamodb")
        if self.failure is not None:
            raise ClientError({"Error": {"Code": self.failure, "Message": "-"}}, "UpdateItem")
        key = request["Key"]["pk"]
        values = request["ExpressionAttributeValues"]
        if self.calls.get(key, 0) >= values[":limit"]:
            raise ClientError(
                {"Error": {"Code": "ConditionalCheckFailedException", "Message": "-"}},
                "UpdateItem",
            )
        self.calls[key] = self.calls.get(key, 0) + values[":one"]
        self.expires[key] = values[":expires"]
        return {}


class GrantTable:
    def __init__(self, grants: dict[str, dict[str, Any]]) -> None:
        self.grants = grants
        self.reads = 0

    def get_item(self, **request: Any) -> dict[str, Any]:
        self.reads += 1
        assert request["Key"]["pk"] == PRINCIPAL_PK
        grant = self.grants.get(request["Key"]["sk"])
        return {"Item": {"pk": PRINCIPAL_PK, "sk": request["Key"]["sk"], **grant}} if grant else {}


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.25

    def __call__(self) -> float:
        return self.now


def limiter(
    per_principal: int = 2, per_team: int = 3
) -> tuple[CallerRateLimiter, CounterTable, GrantTable, Clock]:
    counters, grants, clock = CounterTable(), GrantTable({}), Clock()
    limits = RateLimits(per_principal, per_team, RateCounterStore("counters", table=counters))
    grants.grants = {
        ROLE: {"team": "nlp", "admin": False},
        "arn:aws:iam::123456789012:role/nlp-other": {"team": "nlp", "admin": False},
        "arn:aws:iam::123456789012:role/vision": {"team": "vision", "admin": False},
    }
    teams = TeamStore("teams", table=grants)
    return CallerRateLimiter(limits, teams, {ADMIN}, clock=clock), counters, grants, clock


def test_a_principal_over_its_limit_is_refused_without_spending_its_teams() -> None:
    limits, counters, _, clock = limiter()
    assert [limits.check(ROLE) for _ in range(2)] == [None, None]
    assert limits.check(ROLE) == Refusal("principal", ROLE, 2, 1)
    assert counters.calls == {"principal#" + ROLE + "#1000": 2, "team#nlp#1000": 2}
    # The team's third request is still there for another member,
    assert limits.check("arn:aws:iam::123456789012:role/nlp-other") is None
    # after which the team is full for everyone in it, and no one else.
    refusal = limits.check("arn:aws:iam::123456789012:role/nlp-other")
    assert refusal == Refusal("team", "nlp", 3, 1)
    assert refusal.message == "rate limit: team nlp may make 3 requests a second; retry after 1 s"
    assert limits.check("arn:aws:iam::123456789012:role/vision") is None
    clock.now += 1  # a new window
    assert limits.check(ROLE) is None
    assert counters.expires["principal#" + ROLE + "#1001"] == 1_001 + 60


def test_admins_without_a_team_and_unmapped_principals_count_as_a_group_each() -> None:
    limits, counters, _, _ = limiter(per_principal=5, per_team=2)
    strangers = [f"arn:aws:iam::123456789012:role/stranger-{n}" for n in range(3)]
    assert [limits.check(s) for s in strangers] == [None, None, Refusal("team", UNMAPPED, 2, 1)]
    assert limits.check(None) == Refusal("team", UNMAPPED, 2, 1)
    assert counters.calls["principal#(anonymous)#1000"] == 1
    assert limits.check(ADMIN) is None
    assert counters.calls[f"team#{ADMINS}#1000"] == 1
    refused = Refusal("team", UNMAPPED, 2, 1)
    assert refused.message.startswith("rate limit: principals mapped to no team may make 2")


def test_a_principals_team_is_read_once_a_minute_and_the_cache_is_bounded() -> None:
    limits, _, grants, clock = limiter(per_principal=1_000, per_team=1_000)
    for _ in range(5):
        limits.check(ROLE)
    assert grants.reads == 1
    clock.now += GROUP_CACHE_S + 1
    limits.check(ROLE)
    assert grants.reads == 2
    for n in range(GROUP_CACHE_ENTRIES + 10):
        limits.check(f"arn:aws:iam::123456789012:role/r{n}")
    assert len(limits._groups) == GROUP_CACHE_ENTRIES


def test_a_throttled_counter_refuses_and_any_other_failure_admits() -> None:
    limits, counters, _, _ = limiter()
    counters.failure = "ThrottlingException"  # its window is written far beyond any limit
    assert limits.check(ROLE) == Refusal("principal", ROLE, 2, 1)
    counters.failure = "ProvisionedThroughputExceededException"
    assert limits.check(ROLE) == Refusal("principal", ROLE, 2, 1)
    for failure in ("AccessDeniedException", "ResourceNotFoundException", "connection"):
        counters.failure = failure
        assert limits.check(ROLE) is None, failure


def test_a_failing_team_lookup_admits_too() -> None:
    limits, _, grants, _ = limiter()

    def refused(**_: Any) -> dict[str, Any]:
        raise ClientError({"Error": {"Code": "InternalServerError", "Message": "-"}}, "GetItem")

    grants.get_item = refused  # type: ignore[method-assign]
    assert limits.check(ROLE) is None
