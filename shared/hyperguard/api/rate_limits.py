"""Per-caller rate limits, checked by the API function before any route runs (D147).

API Gateway's stage throttle is one bucket per method and route shared by every caller: one
flooding caller emptied it for everyone. Here each request is counted twice, in fixed
one-second windows shared by every execution environment (RateLimitTable): against its
principal's limit, then against its team's. A principal over its own limit is refused
without touching its team's counter, so a member flooding the API spends its own budget,
never its team's, and no caller spends another team's.

Who counts as one principal: an assumed-role session counts as its role (a caller chooses
its session names, and would otherwise multiply its limit by inventing them). Which team:
the caller's mapping (hyperguard.api.auth), cached per execution environment for
GROUP_CACHE_S, since the routes resolve it again, uncached, before they act; admins without
a team share the group ADMINS, every principal mapped nowhere the group UNMAPPED (so many
unmapped principals together still take one team's share at most).

A counter write that fails for any reason but a full window or DynamoDB's throttling admits
the request (fail open), counted as `ApiRateLimitUnavailable`: the limits keep callers fair,
they protect nothing the stage does not, and a limiter that failed closed would turn a
table or permission mistake into an outage of every route, the operators' node actions
included.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections import OrderedDict
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Literal

from hyperguard.api.auth import resolve_caller, role_arn
from hyperguard.api.errors import ApiError
from hyperguard.aws import AWS_ERRORS
from hyperguard.observability import MetricUnit, logger, metrics
from hyperguard.store.rate_limits import CounterThrottledError, RateCounterStore
from hyperguard.store.teams import TeamStore

Limit = Literal["principal", "team"]

WINDOW_S = 1
"""One counter per caller per second: the limits are requests per second."""
COUNTER_TTL_S = 60
"""A counter expires a minute after its window (TTL deletes it within days; nothing reads
a window that has passed)."""
GROUP_CACHE_S = 60.0
"""How long an environment trusts a principal's team for counting (a remapped principal is
counted on its old team for at most this long; the routes always read the mapping anew)."""
GROUP_CACHE_ENTRIES = 1024
"""Principals whose team an environment remembers (the oldest is forgotten first)."""
MAX_NAME_CHARS = 512
"""A principal or team name longer than this is counted under its SHA-256 (IAM's own limits
keep ARNs far shorter; DynamoDB refuses a key over 2,048 bytes)."""
ADMINS = "(admins)"
UNMAPPED = "(unmapped)"
ANONYMOUS = "(anonymous)"


@dataclass(frozen=True, slots=True)
class RateLimits:
    """Requests per second a principal, and a team, may make (template parameters
    ApiPrincipalRateLimit and ApiTeamRateLimit), and where they are counted."""

    per_principal: int
    per_team: int
    counters: RateCounterStore


@dataclass(frozen=True, slots=True)
class Refusal:
    """A request over a limit: which limit, whose, and when to try again."""

    limit: Limit
    who: str
    allowed: int
    retry_after_s: int

    @property
    def message(self) -> str:
        whose = f"principal {self.who}" if self.limit == "principal" else _group_words(self.who)
        return (
            f"rate limit: {whose} may make {self.allowed} requests a second; "
            f"retry after {self.retry_after_s} s"
        )


def _group_words(group: str) -> str:
    if group == ADMINS:
        return "admins without a team"
    if group == UNMAPPED:
        return "principals mapped to no team"
    return f"team {group}"


def window_of(now: float) -> int:
    """The window (epoch seconds of its start) that `now` falls in."""
    return math.floor(now / WINDOW_S) * WINDOW_S


def retry_after(now: float) -> int:
    """Whole seconds until the next window starts (at least 1, as Retry-After counts)."""
    return max(1, math.ceil(window_of(now) + WINDOW_S - now))


def counted_principal(principal: str | None) -> str:
    """The identity a request is counted against: an assumed-role session's role, else the
    principal itself."""
    if not principal:
        return ANONYMOUS
    return role_arn(principal) or principal


def counter_key(limit: Limit, name: str, window: int) -> str:
    """The counter of `name`'s `limit` in `window`, bounded in length."""
    if len(name) > MAX_NAME_CHARS:
        name = "sha256:" + hashlib.sha256(name.encode()).hexdigest()
    return f"{limit}#{name}#{window}"


@dataclass
class CallerRateLimiter:
    """The limits as one execution environment applies them."""

    limits: RateLimits
    teams: TeamStore
    bootstrap_admins: Collection[str]
    clock: Callable[[], float] = time.time
    _groups: OrderedDict[str, tuple[str, float]] = field(default_factory=OrderedDict)

    def check(self, principal: str | None) -> Refusal | None:
        """The refusal of a request by `principal` (the IAM ARN API Gateway verified), or None
        when it is within both limits, now counted."""
        now = self.clock()
        window = window_of(now)
        expires_at = window + COUNTER_TTL_S
        who = counted_principal(principal)
        try:
            checks: tuple[tuple[Limit, str, int], ...] = (
                ("principal", who, self.limits.per_principal),
                ("team", self._group(principal, now), self.limits.per_team),
            )
            for limit, name, allowed in checks:
                try:
                    counted = self.limits.counters.take(
                        counter_key(limit, name, window), allowed, expires_at
                    )
                except CounterThrottledError:
                    counted = False
                if not counted:
                    metrics.add_metric(name="ApiRateLimited", unit=MetricUnit.Count, value=1)
                    return Refusal(limit, name, allowed, retry_after(now))
        except AWS_ERRORS as exc:
            metrics.add_metric(name="ApiRateLimitUnavailable", unit=MetricUnit.Count, value=1)
            logger.warning(
                "rate limits unavailable: request admitted uncounted",
                extra={"principal": who, "error": str(exc)},
            )
        return None

    def _group(self, principal: str | None, now: float) -> str:
        key = principal or ""
        cached = self._groups.get(key)
        if cached is not None and cached[1] > now:
            return cached[0]
        try:
            caller = resolve_caller(principal, self.teams, self.bootstrap_admins)
        except ApiError:  # no identity, or mapped nowhere
            group = UNMAPPED
        else:
            group = caller.team or (ADMINS if caller.admin else UNMAPPED)
        self._groups[key] = (group, now + GROUP_CACHE_S)
        self._groups.move_to_end(key)
        while len(self._groups) > GROUP_CACHE_ENTRIES:
            self._groups.popitem(last=False)
        return group
