"""Which node replaces a replaced HyperPod node: by its NodeLogicalId, or, where the id was
not kept, by the fallback (same group, new instance id, launched after the replace call)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hyperguard.models import Node
from hyperguard.models.nodes import BURST_LABEL
from hyperguard.recovery.steps import replacement_among

ASKED = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
BEFORE = ["i-0aaaaaaaaaaaaaaa1", "i-0aaaaaaaaaaaaaaa2", "i-0aaaaaaaaaaaaaaa3"]
LOGICAL = {BEFORE[0]: "slot-1", BEFORE[1]: "slot-2", BEFORE[2]: "slot-3"}
OLD = BEFORE[0]


def node(
    instance_id: str,
    logical_id: str | None,
    *,
    launched: datetime = ASKED - timedelta(days=1),
    pool: str = "workers",
    labels: dict[str, str] | None = None,
) -> Node:
    return Node(
        instance_id=instance_id,
        cluster="c",
        pool=pool,
        platform="hyperpod",
        instance_type="ml.p5.48xlarge",
        logical_id=logical_id,
        launch_time=launched,
        labels=labels or {},
    )


def find(nodes: list[Node], old: str = OLD, logical: dict[str, str] | None = None) -> Node | None:
    return replacement_among(
        nodes,
        old_id=old,
        pool="workers",
        pool_before=BEFORE,
        logical_ids_before=LOGICAL if logical is None else logical,
        requested_at=ASKED,
    )


def untouched() -> list[Node]:
    return [node(i, LOGICAL[i]) for i in BEFORE[1:]]


def test_the_node_that_kept_the_logical_id_is_the_replacement() -> None:
    new = node("i-0bbbbbbbbbbbbbbb1", "slot-1", launched=ASKED + timedelta(minutes=3))
    assert find([*untouched(), new]) == new


def test_a_new_logical_id_falls_back_to_the_new_node_of_the_group() -> None:
    new = node("i-0bbbbbbbbbbbbbbb1", "slot-9", launched=ASKED + timedelta(minutes=3))
    assert find([*untouched(), new]) == new


def test_nothing_while_the_old_node_is_still_listed() -> None:
    shutting = node(OLD, "slot-1")
    other = node("i-0bbbbbbbbbbbbbbb1", "slot-9", launched=ASKED + timedelta(minutes=3))
    assert find([shutting, *untouched(), other]) is None


def test_never_a_node_that_was_in_the_group_before_the_call() -> None:
    assert find(untouched()) is None
    # even one whose logical id changed meanwhile
    renamed = node(BEFORE[1], "slot-9", launched=ASKED + timedelta(minutes=3))
    assert find([renamed, node(BEFORE[2], "slot-3")]) is None


def test_never_a_node_launched_before_the_call_another_group_s_or_a_burst_s() -> None:
    early = node("i-0bbbbbbbbbbbbbbb1", "slot-8", launched=ASKED - timedelta(seconds=1))
    elsewhere = node(
        "i-0bbbbbbbbbbbbbbb2", "slot-9", launched=ASKED + timedelta(minutes=3), pool="other"
    )
    added = node(
        "i-0bbbbbbbbbbbbbbb3",
        "slot-7",
        launched=ASKED + timedelta(minutes=3),
        labels={BURST_LABEL: "b-1"},
    )
    assert find([*untouched(), early, elsewhere, added]) is None


def test_another_nodes_replacement_that_kept_its_id_is_not_taken() -> None:
    theirs = node("i-0bbbbbbbbbbbbbbb2", "slot-2", launched=ASKED + timedelta(minutes=2))
    assert find([theirs, node(BEFORE[2], "slot-3")]) is None
    ours = node("i-0bbbbbbbbbbbbbbb1", "slot-9", launched=ASKED + timedelta(minutes=4))
    assert find([theirs, ours, node(BEFORE[2], "slot-3")]) == ours


def test_two_replacements_that_lost_their_ids_take_one_new_node_each() -> None:
    first = node("i-0bbbbbbbbbbbbbbb1", "slot-8", launched=ASKED + timedelta(minutes=3))
    second = node("i-0bbbbbbbbbbbbbbb2", "slot-9", launched=ASKED + timedelta(minutes=4))
    listed = [first, second, node(BEFORE[2], "slot-3")]
    picks = [find(listed, old) for old in BEFORE[:2]]
    assert picks == [first, second]
    # Only one came so far: one of the two waits rather than share it.
    assert [find([first, node(BEFORE[2], "slot-3")], old) for old in BEFORE[:2]] == [first, None]


def test_the_same_listing_gives_the_same_answer() -> None:
    new = node("i-0bbbbbbbbbbbbbbb1", "slot-9", launched=ASKED + timedelta(minutes=3))
    listing = [*untouched(), new]
    assert find(listing) == find(list(reversed(listing))) == new


def test_without_any_known_logical_id_the_fallback_still_applies() -> None:
    new = node("i-0bbbbbbbbbbbbbbb1", None, launched=ASKED + timedelta(minutes=3))
    assert find([*untouched(), new], logical={}) == new
