"""The emulator's fast DynamoDB answers
(hyperguard_twin.dynamodb.answers.fast_dynamodb_responses) must be moto's own answers, byte
for byte in meaning: the twin, the tests and the scheduler bench all read DynamoDB through
them."""

from __future__ import annotations

import json
from collections import Counter
from types import SimpleNamespace
from typing import Any

import botocore.session
import pytest
from moto.core.responses import ActionResult

from hyperguard_twin.dynamodb.answers import (
    CHECKED_ITEMS,
    CHECKED_RESPONSES,
    fast_dynamodb_responses,
)


def context(service: str, operation: str) -> Any:
    """A serialisation context whose operation's output shape is botocore's own."""
    model = botocore.session.get_session().get_service_model(service)
    return SimpleNamespace(service_model=model, operation_model=model.operation_model(operation))


class Moto:
    """Stands in for moto's shape-walking serialiser: counts its calls, answers `body`."""

    def __init__(self, body: dict[str, Any]) -> None:
        self.body = body
        self.calls = 0

    def __call__(self, result: ActionResult, _context: Any) -> tuple[int, dict[str, str], str]:
        self.calls += 1
        return 200, {"x-amzn-requestid": "r"}, json.dumps(self.body)


@pytest.fixture
def fast(monkeypatch: pytest.MonkeyPatch) -> Any:
    def build(moto: Moto, checked: Counter[str]) -> Any:
        monkeypatch.setattr(ActionResult, "execute_result", moto)
        return fast_dynamodb_responses(checked)

    return build


ITEM = {"Item": {"job_id": {"S": "j"}, "history": {"L": [{"M": {"at": {"S": "t"}}}]}}}


def test_after_the_checked_answers_moto_is_no_longer_asked_and_the_answer_is_the_same(
    fast: Any,
) -> None:
    moto, checked = Moto(ITEM), Counter[str]()
    execute = fast(moto, checked)
    answers = [execute(ActionResult(ITEM), context("dynamodb", "GetItem")) for _ in range(8)]
    assert moto.calls == CHECKED_RESPONSES
    assert checked["GetItem"] == CHECKED_RESPONSES
    assert {json.dumps(json.loads(body)) for _, _, body in answers} == {json.dumps(ITEM)}
    assert {status for status, _, _ in answers} == {200}
    assert all(h == {"x-amzn-requestid": "r"} for _, h, _ in answers)


def test_an_operation_whose_answer_differs_from_motos_is_left_to_moto_from_then_on(
    fast: Any, caplog: pytest.LogCaptureFixture
) -> None:
    moto = Moto({"Item": {"job_id": {"S": "other"}}})
    execute = fast(moto, Counter())
    answers = [execute(ActionResult(ITEM), context("dynamodb", "GetItem")) for _ in range(8)]
    assert moto.calls == 8
    assert {json.loads(body)["Item"]["job_id"]["S"] for _, _, body in answers} == {"other"}
    assert "fast GetItem answer differs" in caplog.text


def test_keys_outside_the_output_shape_are_dropped_as_moto_drops_them(fast: Any) -> None:
    """moto's DeleteItem adds a legacy `ConsumedCapacityUnits` its shape walk leaves out."""
    old = {"Attributes": {"pk": {"S": "QUOTA"}}}
    moto, checked = Moto(old), Counter[str]()
    execute = fast(moto, checked)
    answers = [
        execute(
            ActionResult({**old, "ConsumedCapacityUnits": 0.5}), context("dynamodb", "DeleteItem")
        )
        for _ in range(CHECKED_RESPONSES + 2)
    ]
    assert moto.calls == CHECKED_RESPONSES
    assert {body for _, _, body in answers[CHECKED_RESPONSES:]} == {json.dumps(old)}


def test_a_null_other_services_and_other_operations_are_left_to_moto(fast: Any) -> None:
    moto = Moto({})
    execute = fast(moto, Counter({"Query": CHECKED_RESPONSES, "GetItem": CHECKED_RESPONSES}))
    execute(ActionResult({"Items": [], "LastEvaluatedKey": None}), context("dynamodb", "Query"))
    execute(ActionResult(ITEM), context("sqs", "ReceiveMessage"))
    execute(ActionResult({"Table": {}}), context("dynamodb", "DescribeTable"))
    assert moto.calls == 3


class Echo(Moto):
    """A serialiser that answers what it is given, and keeps the sizes it was given."""

    def __init__(self) -> None:
        super().__init__({})
        self.items: list[int] = []

    def __call__(self, result: ActionResult, _context: Any) -> tuple[int, dict[str, str], str]:
        self.calls += 1
        answer = result.result
        assert isinstance(answer, dict)
        self.items.append(len(answer.get("Items") or next(iter(answer["Responses"].values()))))
        return 200, {"x-amzn-requestid": "r"}, json.dumps(answer)


def page(n: int) -> dict[str, Any]:
    return {"Items": [{"job_id": {"S": f"j{i}"}} for i in range(n)], "Count": n, "ScannedCount": n}


def test_a_large_page_is_checked_on_its_first_items_and_answered_whole(fast: Any) -> None:
    moto, checked = Echo(), Counter[str]()
    execute = fast(moto, checked)
    _, _, body = execute(ActionResult(page(500)), context("dynamodb", "Scan"))
    assert moto.items == [CHECKED_ITEMS]
    assert json.loads(body) == page(500)
    answer = {"Responses": {"jobs": page(300)["Items"]}, "UnprocessedKeys": {}}
    _, _, body = execute(ActionResult(answer), context("dynamodb", "BatchGetItem"))
    assert moto.items == [CHECKED_ITEMS, CHECKED_ITEMS]
    assert json.loads(body) == answer
    assert checked == Counter({"Scan": 1, "BatchGetItem": 1})


def test_a_sampled_item_moto_would_answer_otherwise_leaves_the_operation_to_moto(
    fast: Any, caplog: pytest.LogCaptureFixture
) -> None:
    moto = Moto(page(CHECKED_ITEMS + 1))  # one item more than the sample: they differ
    execute = fast(moto, Counter())
    _, _, body = execute(ActionResult(page(100)), context("dynamodb", "Scan"))
    assert json.loads(body) == page(CHECKED_ITEMS + 1)  # moto's, whole
    assert "fast Scan answer differs" in caplog.text
