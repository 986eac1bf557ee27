"""The API's wake-ups, coalesced on the lease item (D169): a burst of changes queues one
wake-up, the pass takes the note with its lease and reads every job it names, and the first
change after that wakes the scheduler again. Moto's DynamoDB, the stack's TeamsTable."""

from __future__ import annotations

import pytest
from tests.conftest import Stack

from hyperguard.messaging import CoalescedWakeup
from hyperguard.store import TeamStore
from hyperguard.store import teams as teams_module

CLUSTER = "hyperguard-twin"


class Queue:
    """The scheduler's queue as the coalescer sees it: what it was asked to send."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str | None]] = []

    def wake(self, reason: str, job_id: str | None = None) -> None:
        self.sent.append((reason, job_id))


@pytest.fixture
def teams(stack: Stack) -> TeamStore:
    return TeamStore(stack.tables["TeamsTable"])


def test_a_burst_of_changes_queues_one_wakeup_whose_pass_reads_every_job(
    teams: TeamStore,
) -> None:
    queue = Queue()
    wakeup = CoalescedWakeup(queue, teams, CLUSTER)
    for job_id in ("job-c", "job-a", "job-b"):
        wakeup.wake("job submitted", job_id)
    wakeup.wake("quota changed")
    assert queue.sent == [("job submitted", "job-c")]

    lease = teams.acquire_lease(CLUSTER, "a-pass", 60)
    assert lease is not None and lease.woken == ("job-a", "job-b", "job-c")
    assert lease.token == 1
    teams.release_lease(lease)
    # Taken with the lease: the next change wakes the scheduler again, and the next pass
    # reads only what was noted since.
    wakeup.wake("job submitted", "job-d")
    assert queue.sent[-1] == ("job submitted", "job-d")
    again = teams.acquire_lease(CLUSTER, "next-pass", 60)
    assert again is not None and again.woken == ("job-d",) and again.token == 2
    teams.release_lease(again)
    assert teams.acquire_lease(CLUSTER, "idle-pass", 60).woken == ()  # type: ignore[union-attr]


def test_a_pending_wakeup_older_than_a_minute_is_sent_again(teams: TeamStore) -> None:
    """Its sender may have failed after noting it: the message may never have been sent."""
    assert teams.note_wakeup(CLUSTER, "job-a", now=1_000.0)
    assert not teams.note_wakeup(CLUSTER, "job-b", now=1_030.0)
    assert teams.note_wakeup(CLUSTER, "job-c", now=1_000.0 + teams_module.WAKEUP_STALE_S + 1)


def test_past_the_cap_a_change_still_wakes_but_is_left_to_the_index(
    teams: TeamStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(teams_module, "MAX_WOKEN", 2)
    assert teams.note_wakeup(CLUSTER, "job-a", now=1.0)
    assert not teams.note_wakeup(CLUSTER, "job-b", now=1.0)
    assert not teams.note_wakeup(CLUSTER, "job-c", now=1.0)  # noted, not named
    lease = teams.acquire_lease(CLUSTER, "a-pass", 60)
    assert lease is not None and lease.woken == ("job-a", "job-b")
