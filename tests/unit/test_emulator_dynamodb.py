"""The emulator's DynamoDB (hyperguard_twin.dynamodb) answers as moto does, without moto's
whole-table copies: a cancelled transaction leaves every item as it was, and a keys-only
index is paged by its entries."""

from __future__ import annotations

import base64
import contextlib
import functools
import inspect
from collections import Counter
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError
from hypothesis import given, settings
from hypothesis import strategies as st
from moto import mock_aws
from moto.dynamodb.exceptions import ConditionalCheckFailed
from moto.dynamodb.models import DynamoDBBackend
from moto.dynamodb.models.dynamo_type import DynamoType
from moto.dynamodb.models.table import Table
from moto.dynamodb.models.utilities import dynamo_to_dict
from tests.conftest import REGION

from hyperguard import aws
from hyperguard_twin.dynamodb.answers import CHECKED_RESPONSES, plain_answers
from hyperguard_twin.dynamodb.projection import top_level_projection
from hyperguard_twin.dynamodb.queries import keys_only_index_query

TABLE = "emulated"


def create_table(client: Any, name: str = TABLE) -> None:
    """A table keyed by `id`, with a keys-only `Live` index on `live` (as the jobs table)."""
    client.create_table(
        TableName=name,
        BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[
            {"AttributeName": "id", "AttributeType": "S"},
            {"AttributeName": "live", "AttributeType": "S"},
        ],
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        GlobalSecondaryIndexes=[
            {
                "IndexName": "Live",
                "KeySchema": [
                    {"AttributeName": "live", "KeyType": "HASH"},
                    {"AttributeName": "id", "KeyType": "RANGE"},
                ],
                "Projection": {"ProjectionType": "KEYS_ONLY"},
            }
        ],
    )


@pytest.fixture
def ddb(aws_env: None) -> Iterator[Any]:
    client = boto3.client("dynamodb", region_name=REGION)
    create_table(client)
    yield client


def moto_own(owner: type, name: str = "transact_write_items") -> Any:
    """moto's function that the emulator's replaces."""
    return getattr(owner, name).__wrapped__


def items(client: Any) -> list[dict[str, Any]]:
    return sorted(client.scan(TableName=TABLE)["Items"], key=lambda i: i["id"]["S"])


def put(client: Any, item_id: str, **attrs: str) -> None:
    item = {"id": {"S": item_id}, **{k: {"S": v} for k, v in attrs.items()}}
    client.put_item(TableName=TABLE, Item=item)


def set_v(item_id: str, value: str, **condition: Any) -> dict[str, Any]:
    """A transaction's Update of item `item_id`: SET v = value (under `condition`)."""
    update = {
        "TableName": TABLE,
        "Key": {"id": {"S": item_id}},
        "UpdateExpression": "SET v = :v",
        "ExpressionAttributeValues": {":v": {"S": value}},
    }
    if condition:
        update["ConditionExpression"] = condition["expression"]
        update["ExpressionAttributeValues"] |= condition["values"]
    return {"Update": update}


def cancelled_transaction(client: Any) -> str:
    """An update, a put of a new item and a delete, then a condition that fails."""
    with pytest.raises(ClientError) as caught:
        client.transact_write_items(
            TransactItems=[
                set_v("a", "changed"),
                {"Put": {"TableName": TABLE, "Item": {"id": {"S": "new"}, "v": {"S": "x"}}}},
                {"Delete": {"TableName": TABLE, "Key": {"id": {"S": "b"}}}},
                {
                    "ConditionCheck": {
                        "TableName": TABLE,
                        "Key": {"id": {"S": "c"}},
                        "ConditionExpression": "attribute_not_exists(id)",
                    }
                },
            ]
        )
    return str(caught.value.response["Error"]["Code"])


def test_a_cancelled_transaction_leaves_every_item_as_moto_does(
    ddb: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    for item_id in "abc":
        put(ddb, item_id, v="original", live="L")
    before = items(ddb)
    assert cancelled_transaction(ddb) == "TransactionCanceledException"
    assert items(ddb) == before
    # moto's own, without the replacement, ends the same way
    monkeypatch.setattr(DynamoDBBackend, "transact_write_items", moto_own(DynamoDBBackend))
    assert cancelled_transaction(ddb) == "TransactionCanceledException"
    assert items(ddb) == before


def test_a_transaction_naming_an_item_twice_is_refused_and_undone(ddb: Any) -> None:
    put(ddb, "a", v="original")
    with pytest.raises(ClientError) as caught:
        ddb.transact_write_items(TransactItems=[set_v("a", "changed"), set_v("a", "changed")])
    assert caught.value.response["Error"]["Code"] == "ValidationException"
    assert items(ddb) == [{"id": {"S": "a"}, "v": {"S": "original"}}]


def test_a_transaction_that_succeeds_writes_every_item(ddb: Any) -> None:
    put(ddb, "a", v="original")
    ddb.transact_write_items(
        TransactItems=[
            set_v("a", "changed", expression="v = :o", values={":o": {"S": "original"}}),
            {"Put": {"TableName": TABLE, "Item": {"id": {"S": "b"}}}},
        ]
    )
    assert items(ddb) == [{"id": {"S": "a"}, "v": {"S": "changed"}}, {"id": {"S": "b"}}]


def live_keys(client: Any, **extra: Any) -> tuple[list[str], int]:
    """Every id in the Live index, and how many pages it took."""
    found: list[str] = []
    pages = 0
    start: dict[str, Any] | None = None
    while True:
        page = client.query(
            TableName=TABLE,
            IndexName="Live",
            KeyConditionExpression="live = :l",
            ExpressionAttributeValues={":l": {"S": "L"}},
            **extra,
            **({"ExclusiveStartKey": start} if start else {}),
        )
        pages += 1
        found += [i["id"]["S"] for i in page["Items"]]
        assert all(set(i) == {"id", "live"} for i in page["Items"])  # keys only
        start = page.get("LastEvaluatedKey")
        if start is None:
            return found, pages


def test_a_keys_only_index_is_paged_by_its_entries_not_its_items(
    ddb: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    big = "x" * 100_000  # ~100 KB items: 1 MB of whole items is 10 of them
    ids = [f"job-{n:02d}" for n in range(25)]
    for item_id in ids:
        put(ddb, item_id, live="L", body=big)
    put(ddb, "ended", body=big)  # not in the index
    assert live_keys(ddb) == (ids, 1)  # DynamoDB reads 25 small entries in one page
    assert live_keys(ddb, Limit=10) == (ids, 3)
    assert live_keys(ddb, ScanIndexForward=False) == (ids[::-1], 1)
    # moto's own pages by the whole items
    with monkeypatch.context() as patched:
        patched.setattr(Table, "query", moto_own(Table, "query"))
        theirs, pages = live_keys(ddb)
    assert theirs == ids and pages > 1


def test_a_keys_only_index_is_compared_with_moto_only_for_the_first_answers(
    ddb: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """moto cuts a large index's answer short (it pages by whole items); its first page is
    compared and counted, so moto does not read the whole table again at every query."""
    asked: list[int] = []
    own = moto_own(Table, "query")

    @functools.wraps(own)  # the replacement reads moto's signature
    def counted(*args: Any, **kwargs: Any) -> Any:
        asked.append(1)
        return own(*args, **kwargs)

    monkeypatch.setattr(Table, "query", keys_only_index_query(counted, Counter()))
    for item_id in range(15):
        put(ddb, f"job-{item_id:02d}", live="L", body="x" * 100_000)
    for _ in range(CHECKED_RESPONSES + 3):
        assert live_keys(ddb) == ([f"job-{n:02d}" for n in range(15)], 1)
    assert len(asked) == CHECKED_RESPONSES


def test_items_with_binary_values_are_answered_as_dynamodb_answers_them(ddb: Any) -> None:
    """DynamoDB stores B and BS values; the emulator's answers hold them as bytes, which its
    fast JSON dump cannot write: moto serialises those answers, past the checked ones too."""
    item = {"id": {"S": "a"}, "blob": {"B": b"\x00\xffhi"}, "blobs": {"BS": [b"x", b"\x01"]}}
    ddb.put_item(TableName=TABLE, Item=item)
    key = {"id": {"S": "a"}}
    for _ in range(CHECKED_RESPONSES + 2):
        assert ddb.get_item(TableName=TABLE, Key=key)["Item"] == item
    batch = ddb.batch_get_item(RequestItems={TABLE: {"Keys": [key]}})
    assert batch["Responses"][TABLE] == [item]
    assert items(ddb) == [item]


wire_values = st.recursive(
    st.one_of(
        st.text(max_size=5).map(lambda v: {"S": v}),
        st.integers(-1000, 1000).map(lambda v: {"N": str(v)}),
        st.booleans().map(lambda v: {"BOOL": v}),
        st.just({"NULL": True}),
        st.binary(max_size=4).map(lambda v: {"B": base64.b64encode(v).decode()}),
        st.lists(st.text(max_size=3), max_size=3, unique=True).map(lambda v: {"SS": v}),
    ),
    lambda children: st.one_of(
        st.dictionaries(st.text(max_size=4), children, max_size=3).map(lambda m: {"M": m}),
        st.lists(children, max_size=3).map(lambda v: {"L": v}),
    ),
    max_leaves=10,
)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.dictionaries(st.text(min_size=1, max_size=4), wire_values, max_size=4)))
def test_answers_are_made_plain_as_moto_makes_them(found: list[dict[str, Any]]) -> None:
    """A BatchGetItem answer's stored items, as moto's `dynamo_to_dict` turns them into plain
    values and as the emulator's faster replacement does."""
    from moto.dynamodb.models.dynamo_type import DynamoType, LimitedSizeDict

    answer = {
        "Responses": {
            TABLE: [LimitedSizeDict({k: DynamoType(v) for k, v in i.items()}) for i in found]
        },
        "UnprocessedKeys": {},
        "ConsumedCapacity": [{"CapacityUnits": len(found), "TableName": TABLE}],
    }
    assert plain_answers(dynamo_to_dict)(answer) == dynamo_to_dict(answer)


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(st.sampled_from(["a", "b", "rev", "job_id"]), wire_values, max_size=4),
    st.lists(st.sampled_from(["a", "b", "rev", "job_id", "missing"]), min_size=1, unique=True),
)
def test_a_top_level_projection_is_the_item_moto_projects(
    attrs: dict[str, Any], names: list[str]
) -> None:
    """The emulator's projection of top-level names picks them from the item; moto converts
    the whole item per path: the same projected item."""
    from moto.dynamodb.models.dynamo_type import DynamoType, Item

    item = Item(DynamoType({"S": "key"}), None, {"id": {"S": "key"}, **attrs})
    paths = [[name] for name in names]
    project = getattr(Item.project, "__wrapped__", Item.project)  # moto's own
    assert top_level_projection(project)(item, paths).to_json() == project(item, paths).to_json()


def test_a_nested_projection_is_left_to_moto(ddb: Any) -> None:
    put(ddb, "x", v="1")
    ddb.update_item(
        TableName=TABLE,
        Key={"id": {"S": "x"}},
        UpdateExpression="SET m = :m",
        ExpressionAttributeValues={":m": {"M": {"inner": {"S": "kept"}, "other": {"N": "2"}}}},
    )
    answer = ddb.batch_get_item(
        RequestItems={TABLE: {"Keys": [{"id": {"S": "x"}}], "ProjectionExpression": "m.inner, v"}}
    )
    assert answer["Responses"][TABLE] == [{"m": {"M": {"inner": {"S": "kept"}}}, "v": {"S": "1"}}]


L_EMPTY: dict[str, Any] = {"L": []}
UPDATE_CASES: list[tuple[str, str | None, dict[str, str], dict[str, Any] | None]] = [
    ("SET v = :s", None, {}, {":s": {"S": "x"}}),
    (
        "SET h = list_append(if_not_exists(h, :empty), :e)",
        None,
        {},
        {":empty": L_EMPTY, ":e": {"L": [{"S": "e"}, {"M": {"k": {"N": "1"}}}]}},
    ),
    ("ADD n :one", None, {}, {":one": {"N": "1"}}),
    ("ADD n :half", None, {}, {":half": {"N": "0.5"}}),
    ("REMOVE v", None, {}, None),
    ("SET m.k = :s", "attribute_exists(m)", {}, {":s": {"S": "y"}}),
    ("SET m = :m", None, {}, {":m": {"M": {"k": {"S": "z"}}}}),
    ("SET v = :s", "v = :s", {}, {":s": {"S": "x"}}),
    ("SET v = :s", "attribute_not_exists(id)", {}, {":s": {"S": "x"}}),
    (
        "SET v = :t ADD n :one",
        "size(h) < :max",
        {},
        {":t": {"S": "t"}, ":one": {"N": "1"}, ":max": {"N": "3"}},
    ),
    # the shape of a job's transition: names, several clauses, a condition on the status
    (
        "SET #r = :r, h = list_append(if_not_exists(h, :empty), :e), #s = :s, #l = :l "
        "REMOVE #x ADD #n0 :one, #n1 :one",
        "#s IN (:a, :b) AND (attribute_not_exists(h) OR size(h) < :max)",
        {"#r": "reason", "#s": "status", "#x": "v", "#n0": "rev", "#n1": "n", "#l": "live"},
        {
            ":r": {"S": "why"},
            ":l": {"S": "1"},
            ":empty": L_EMPTY,
            ":e": {"L": [{"S": "entry"}]},
            ":s": {"S": "Running"},
            ":a": {"S": "Pending"},
            ":b": {"S": "Running"},
            ":one": {"N": "1"},
            ":max": {"N": "4"},
        },
    ),
    (
        "SET #r = :r ADD #rev :one",
        "#s = :a",
        {"#r": "reason", "#rev": "rev", "#s": "status"},
        {":r": {"S": "w"}, ":one": {"N": "1"}, ":a": {"S": "Pending"}},
    ),
    ("SET #s = :a", None, {"#s": "status"}, {":a": {"S": "Pending"}}),
    # an index's key: set, removed; refused when empty or of another type
    ("SET #l = :l", None, {"#l": "live"}, {":l": {"S": "1"}}),
    ("REMOVE #l", None, {"#l": "live"}, None),
    ("SET #l = :l", None, {"#l": "live"}, {":l": {"S": ""}}),
    ("SET #l = :l", None, {"#l": "live"}, {":l": {"N": "1"}}),
    # refused, each for its own reason (moto's answer either way)
    ("ADD v :one", None, {}, {":one": {"N": "1"}}),
    ("SET id = :s", None, {}, {":s": {"S": "other"}}),
    ("SET status = :s", None, {}, {":s": {"S": "x"}}),
    ("SET #zz = :s", None, {}, {":s": {"S": "x"}}),
    ("SET v = :missing", None, {}, {":s": {"S": "x"}}),
    ("SET v = :s, v = :t", None, {}, {":s": {"S": "x"}, ":t": {"S": "y"}}),
    ("SET v = :s REMOVE v", None, {}, {":s": {"S": "x"}}),
    (
        "SET h = list_append(if_not_exists(v, :empty), :e)",
        None,
        {},
        {":empty": L_EMPTY, ":e": {"L": []}},
    ),
    (
        "SET v = list_append(if_not_exists(v, :empty), :e)",
        None,
        {},
        {":empty": L_EMPTY, ":e": {"L": [{"S": "e"}]}},
    ),
    ("SET s = :set", None, {}, {":set": {"SS": ["a", "b"]}}),
    ("DELETE s :set", None, {}, {":set": {"SS": ["a"]}}),
    # refused after list_append was evaluated: the item's own list must be left alone
    (
        "SET h = list_append(if_not_exists(h, :empty), :e), w = nowhere",
        None,
        {},
        {":empty": L_EMPTY, ":e": {"L": [{"S": "f"}]}},
    ),
]
UPDATES = st.sampled_from(UPDATE_CASES)


def apply_case(
    update: Any,
    backend: Any,
    table: str,
    case: tuple[str, str | None, dict[str, str], dict[str, Any] | None],
) -> None:
    """One of UPDATE_CASES, through `update` (a backend's update_item), on item `k`."""
    expression, condition, names, values = case
    update(
        backend,
        table,
        {"id": {"S": "k"}},
        expression,
        names,
        values or {},
        condition_expression=condition,
    )


@settings(max_examples=120, deadline=None)
@given(st.booleans(), st.lists(UPDATES, min_size=1, max_size=8))
def test_the_emulators_updates_change_an_item_as_moto_does(
    exists: bool,
    updates: list[tuple[str, str | None, dict[str, str], dict[str, Any] | None]],
) -> None:
    """The same updates, through the emulator's update_item (simple updates applied
    directly, the rest without moto's copies) and through moto's own, on two copies of an
    item (or of none): the same items and the same refusals after each."""
    from moto.core.models import DEFAULT_ACCOUNT_ID
    from moto.dynamodb.models import dynamodb_backends

    from hyperguard_twin.dynamodb.updates import simple_updates, update_without_copies

    with mock_aws():
        # a session sharing the process's model loader: boto3's default one, which mock_aws
        # makes anew, parses DynamoDB's model again for every example (36 s of a full run)
        client = aws.new_session().client("dynamodb", region_name=REGION)
        for name in ("ours", "moto"):
            create_table(client, name)
            if exists:
                item = {"id": {"S": "k"}, "v": {"S": "x"}, "status": {"S": "Pending"}}
                client.put_item(TableName=name, Item=item)
        backend = dynamodb_backends[DEFAULT_ACCOUNT_ID][REGION]
        own = inspect.unwrap(DynamoDBBackend.update_item)
        ours = simple_updates(update_without_copies(own))
        for case in updates:
            expression = case[0]
            outcomes = []
            for table, update in (("ours", ours), ("moto", own)):
                try:
                    apply_case(update, backend, table, case)
                    outcomes.append("written")
                except Exception as error:  # the refusal, by its kind and words
                    outcomes.append(f"{type(error).__name__}: {error}")
            assert outcomes[0] == outcomes[1], (expression, outcomes)
            # read in the backend: a Scan through the client for each table after each update
            # was half the test's time
            items = [
                [i.to_json() for i in backend.get_table(name).all_items()]
                for name in ("ours", "moto")
            ]
            assert items[0] == items[1], (expression, items)


def spied_simple_updates() -> tuple[Any, Any, list[str]]:
    """The emulator's update_item over moto's, the backend, and the expressions it left to
    moto (filled as updates are made)."""
    from moto.core.models import DEFAULT_ACCOUNT_ID
    from moto.dynamodb.models import dynamodb_backends

    from hyperguard_twin.dynamodb.updates import simple_updates

    asked: list[str] = []

    def moto(*args: Any, **kwargs: Any) -> Any:
        asked.append(args[3])
        return inspect.unwrap(DynamoDBBackend.update_item)(*args, **kwargs)

    moto.__wrapped__ = inspect.unwrap(DynamoDBBackend.update_item)  # type: ignore[attr-defined]
    update = simple_updates(moto)
    backend = dynamodb_backends[DEFAULT_ACCOUNT_ID][REGION]
    return update, backend, asked


def test_a_jobs_transition_is_applied_without_moto_and_anything_else_with_it(ddb: Any) -> None:
    """The simple forms are the emulator's own work; the rest goes to moto."""
    put(ddb, "k", v="x", status="Pending")
    update, backend, asked = spied_simple_updates()
    for case in UPDATE_CASES:
        with contextlib.suppress(Exception):  # the refusals are the property test's
            apply_case(update, backend, TABLE, case)
    assert "SET v = :s" not in asked and not any(e.startswith("SET #r = :r,") for e in asked)
    assert {"SET m.k = :s", "SET id = :s", "DELETE s :set"} <= set(asked)


def test_an_update_that_creates_its_item_is_the_emulators_too(ddb: Any) -> None:
    """A missing item's simple update creates it without moto (the inventory's first sync of
    each node); a condition it fails creates nothing, and has no old item to return."""
    update, backend, asked = spied_simple_updates()
    key = {"id": {"S": "new"}}
    with pytest.raises(ConditionalCheckFailed) as refused:
        update(
            backend,
            TABLE,
            key,
            "SET v = :s",
            {},
            {":s": {"S": "x"}},
            condition_expression="attribute_exists(id)",
            return_values_on_condition_check_failure="ALL_OLD",
        )
    assert '"Item"' not in refused.value.description
    assert backend.get_table(TABLE).get_item(DynamoType(key["id"])) is None
    update(backend, TABLE, key, "SET v = :s ADD n :one", {}, {":s": {"S": "x"}, ":one": {"N": "1"}})
    item = backend.get_table(TABLE).get_item(DynamoType(key["id"]))
    assert item is not None
    assert item.to_json()["Attributes"] == {"id": {"S": "new"}, "v": {"S": "x"}, "n": {"N": "1"}}
    assert asked == []


CONDITIONS = [
    "#s IN (:a, :b) AND (attribute_not_exists(h) OR size(h) < :max)",
    "attribute_exists(id) AND (attribute_not_exists(c) OR c.step < :n)",
    "#s = :a OR #v <> :b",
    "attribute_not_exists(id)",
    "#v BETWEEN :a AND :b",
    "begins_with(#v, :a) AND NOT contains(#s, :b)",
    "#missing = :a",
    "#s = :undefined",
]
small_strings = st.sampled_from(["Pending", "Running", "a", "b", ""])


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(CONDITIONS),
            small_strings,
            small_strings,
            st.integers(0, 5),
            st.fixed_dictionaries(
                {},
                optional={
                    "status": small_strings.map(lambda v: {"S": v}),
                    "v": small_strings.map(lambda v: {"S": v}),
                    "h": st.lists(st.just({"S": "e"}), max_size=6).map(lambda v: {"L": v}),
                    "c": st.integers(0, 5).map(lambda n: {"M": {"step": {"N": str(n)}}}),
                },
            ),
        ),
        min_size=1,
        max_size=12,
    )
)
def test_a_kept_condition_judges_every_item_as_a_fresh_parse(
    checks: list[tuple[str, str, str, int, dict[str, Any]]],
) -> None:
    """The same conditions, asked again and again (with the same or other values), over
    other items: the kept parse and a fresh one of moto's agree on every item, and on what
    the expression refers to; an expression moto cannot parse is refused alike."""
    from moto.dynamodb.comparisons import create_condition_expression_parser as installed
    from moto.dynamodb.models.dynamo_type import DynamoType, Item

    from hyperguard_twin.dynamodb.conditions import parsed_conditions

    fresh = inspect.unwrap(installed)
    kept = parsed_conditions(fresh)
    names = {"#s": "status", "#v": "v", "#missing": "nothere"}
    for expression, a, b, n, attrs in checks:
        values = {
            ":a": {"S": a},
            ":b": {"S": b},
            ":max": {"N": "3"},
            ":n": {"N": str(n)},
            ":unused": {"S": "x"},
        }
        item = Item(DynamoType({"S": "k"}), None, {"id": {"S": "k"}, **attrs})
        outcomes = []
        for make in (kept, fresh):
            parser = make(expression, names, values)
            try:
                judged: Any = parser.parse().expr(item)
            except Exception as error:  # the refusal, by its kind
                judged = type(error).__name__
            outcomes.append((judged, parser.expr_attr_names_found, parser.expr_attr_values_found))
        assert outcomes[0] == outcomes[1], (expression, attrs)


def test_a_request_that_does_not_fit_its_operations_shape_is_refused_as_dynamodb_does(
    ddb: Any,
) -> None:
    """The emulator checks each request against the operation's input shape, as DynamoDB
    does and moto does not (the service's wire client sends unchecked: D180). The request
    is refused before anything is done; a well-formed one is answered."""
    unchecked = boto3.client(
        "dynamodb",
        region_name=REGION,
        config=Config(parameter_validation=False),
    )
    put(unchecked, "a", v="1")
    malformed = [
        {"Update": {"TableName": TABLE, "Key": {"id": {"S": "a"}}, "UpdateExpression": 7}},
        {"Put": {"TableName": TABLE}},  # no Item
    ]
    for action in malformed:
        with pytest.raises(ClientError) as caught:
            unchecked.transact_write_items(TransactItems=[action])
        assert caught.value.response["Error"]["Code"] == "ValidationException"
    with pytest.raises(ClientError) as refused:
        unchecked.batch_get_item(
            RequestItems={TABLE: {"Keys": [{"id": {"S": "a"}}], "ConsistentRead": "yes"}}
        )
    assert "ConsistentRead" in refused.value.response["Error"]["Message"]
    assert [i["id"]["S"] for i in items(unchecked)] == ["a"]  # nothing was written
    unchecked.transact_write_items(TransactItems=[set_v("a", "2")])
    assert items(unchecked)[0]["v"] == {"S": "2"}
