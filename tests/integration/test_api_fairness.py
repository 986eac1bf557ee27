"""Fairness per caller (issue 34, item 6; D147): a principal flooding the API gets its own
429s, counted in the stack's RateLimitTable before any route runs, while every other team's
paced calls, and its own team's other members', keep their rate. Through the real resolver on
moto, with the template's default limits and a clock that moves one window at a time."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta

from tests.conftest import Stack, template
from tests.integration.api_harness import ADMIN, Api, Reply, member

PAUSED_AT = datetime(2026, 11, 26, 6, 0, tzinfo=UTC)
UNMAPPED = "arn:aws:iam::123456789012:role/someone-else"


def defaults() -> tuple[int, int]:
    parameters = template()["Parameters"]
    return (
        int(parameters["ApiPrincipalRateLimit"]["Default"]),
        int(parameters["ApiTeamRateLimit"]["Default"]),
    )


class Clock:
    def __init__(self) -> None:
        self.now = PAUSED_AT

    def __call__(self) -> datetime:
        return self.now

    def next_window(self) -> None:
        self.now += timedelta(seconds=1)


def limited_api(stack: Stack) -> tuple[Api, Clock]:
    clock = Clock()
    api = Api(stack, clock=clock, rate_limits=defaults())
    for team in ("nlp", "vision"):
        assert (
            api.call("PUT", "/principals", {"principal_arn": member(team), "team": team}).status
            == 200
        )
        assert api.quota(team, 64).status == 201
    clock.next_window()  # the set-up's own calls counted in a window of their own
    return api, clock


def statuses(replies: list[Reply]) -> Counter[int]:
    return Counter(reply.status for reply in replies)


def test_a_flooding_member_gets_its_own_429s_and_another_teams_paced_calls_all_succeed(
    stack: Stack,
) -> None:
    """The tester's scenario: one nlp member floods POST /jobs while a vision member submits
    one job a second; before, the vision member got 18 of 20 answers 429."""
    api, clock = limited_api(stack)
    per_principal, _ = defaults()
    flood: list[Reply] = []
    paced: list[Reply] = []
    for _ in range(20):
        flood += [api.submit("nlp", 1, principal=member("nlp")) for _ in range(per_principal + 5)]
        paced.append(api.submit("vision", 1, principal=member("vision")))
        clock.next_window()
    assert statuses(paced) == {201: 20}
    assert statuses(flood) == {201: 20 * per_principal, 429: 20 * 5}
    refused = next(r for r in flood if r.status == 429)
    assert refused.body == {
        "error": f"rate limit: principal {member('nlp')} may make {per_principal} requests a "
        "second; retry after 1 s",
        "field": None,
        "limit": "principal",
    }
    assert refused.headers["Retry-After"] == ["1"]
    # Nothing was done for a refused request: only the admitted ones are jobs.
    assert len(api.jobs.records()) == 20 * per_principal + 20


def test_an_unmapped_flood_is_refused_per_caller_before_its_403s_and_starves_nobody(
    stack: Stack,
) -> None:
    api, clock = limited_api(stack)
    per_principal, _ = defaults()
    flood: list[Reply] = []
    paced: list[Reply] = []
    for _ in range(5):
        flood += [api.submit("nlp", 1, principal=UNMAPPED) for _ in range(3 * per_principal)]
        paced.append(api.submit("vision", 1, principal=member("vision")))
        paced.append(api.call("GET", "/jobs", query={"team": "nlp"}, principal=member("nlp")))
        clock.next_window()
    assert statuses(paced) == {201: 5, 200: 5}
    assert statuses(flood) == {403: 5 * per_principal, 429: 5 * 2 * per_principal}


def test_a_flood_of_bad_requests_counts_and_sessions_of_one_role_share_its_limit(
    stack: Stack,
) -> None:
    """The limits are counted before the body is even read, and an assumed-role session
    counts as its role, whatever session name the caller chose."""
    api, _ = limited_api(stack)
    per_principal, _ = defaults()
    sessions = [
        f"arn:aws:sts::123456789012:assumed-role/nlp-engineer/run-{n}"
        for n in range(per_principal + 3)
    ]
    bad = [api.call("POST", "/jobs", raw="{not json", principal=s) for s in sessions]
    assert statuses(bad) == {400: per_principal, 429: 3}
    assert api.submit("nlp", 1, principal=member("nlp")).status == 429


def test_a_team_over_its_limit_is_refused_as_a_team_and_other_teams_are_not(
    stack: Stack,
) -> None:
    api, clock = limited_api(stack)
    per_principal, per_team = defaults()
    members = [
        f"arn:aws:iam::123456789012:role/nlp-{n}" for n in range(per_team // per_principal + 1)
    ]
    for principal in members:
        api.call("PUT", "/principals", {"principal_arn": principal, "team": "nlp"})
    clock.next_window()
    replies = [
        api.call("GET", "/jobs", query={"team": "nlp"}, principal=principal)
        for principal in members
        for _ in range(per_principal)
    ]
    assert statuses(replies) == {200: per_team, 429: len(replies) - per_team}
    assert {r.body["limit"] for r in replies if r.status == 429} == {"team"}
    assert api.submit("vision", 1, principal=member("vision")).status == 201
    assert api.call("GET", "/views/teams", principal=ADMIN).status == 200


def test_the_limits_fail_open_when_their_counters_cannot_be_written(stack: Stack) -> None:
    """A counters table the function cannot write (here deleted; a missing grant answers the
    same way) admits every request uncounted rather than refusing the API to everyone; each
    is counted as ApiRateLimitUnavailable, which ApiRateLimitsUnavailableAlarm watches."""
    import boto3

    api = Api(stack, clock=Clock(), rate_limits=(1, 1))
    assert [api.call("GET", "/views/teams").status for _ in range(2)] == [200, 429]
    boto3.client("dynamodb", region_name="us-east-1").delete_table(
        TableName=stack.tables["RateLimitTable"]
    )
    replies = [api.call("GET", "/views/teams") for _ in range(5)]
    assert statuses(replies) == {200: 5}
