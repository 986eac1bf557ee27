"""One writer per state: only the job lifecycle module calls the JobStore's writes; every
other module asks the lifecycle (`...lifecycle.<move>(...)`)."""

from __future__ import annotations

import ast

from tests.conftest import ROOT

WRITES = {
    "transition",
    "transition_all",
    "submit",
    "record_checkpoint",
    "set_reason",
    "set_reasons",
    "put",
}
OWNER = ROOT / "shared" / "hyperguard" / "governance" / "jobs.py"
STORE = ROOT / "shared" / "hyperguard" / "store" / "jobs.py"


def test_only_the_lifecycle_writes_jobs() -> None:
    offenders = []
    sources = [*(ROOT / "shared" / "hyperguard").rglob("*.py"), *(ROOT / "functions").rglob("*.py")]
    for path in sources:
        if path in (OWNER, STORE):
            continue
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            if node.func.attr not in WRITES:
                continue
            receiver = ast.unparse(node.func.value)
            if receiver.endswith("lifecycle") or "jobs" not in receiver.lower():
                continue
            offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} {receiver}.{node.func.attr}")
    assert offenders == []


def test_the_check_would_see_a_direct_write() -> None:
    tree = ast.parse("self.jobs.transition(job_id, expect=set(), status=None, entry=e)")
    call = next(n for n in ast.walk(tree) if isinstance(n, ast.Call))
    assert isinstance(call.func, ast.Attribute)
    assert call.func.attr in WRITES and "jobs" in ast.unparse(call.func.value)


def test_the_behavioural_guard_tells_a_write_around_the_lifecycle() -> None:
    """tests/one_writer.py watches every write as it is sent (the `stack` fixture)."""
    from tests.one_writer import INCIDENT_STORE, JOB_STORE, LIBRARY, LIFECYCLE, Tables, offence

    tables = Tables("jobs", "incidents")
    conditional = {"TableName": "jobs", "ConditionExpression": "attribute_exists(job_id)"}
    service = LIBRARY / "governance" / "service.py"
    assert offence("UpdateItem", conditional, [JOB_STORE, LIFECYCLE, service], tables) == ""
    assert offence("UpdateItem", conditional, [JOB_STORE], tables) == ""  # a store test
    assert "called by" in offence("UpdateItem", conditional, [JOB_STORE, service], tables)
    assert "sent from" in offence("PutItem", conditional, [service, LIFECYCLE], tables)
    handler = LIBRARY.parents[1] / "functions" / "api" / "app.py"
    assert "sent from" in offence("PutItem", conditional, [handler], tables)
    assert offence("PutItem", {"TableName": "jobs"}, [], tables) == ""  # the test's own
    unconditional = {"TableName": "jobs"}
    assert "without a condition" in offence("PutItem", unconditional, [JOB_STORE], tables)
    transaction = {
        "TransactItems": [
            {"Put": {"TableName": "other", "Item": {}}},
            {"Update": {"TableName": "incidents", "ConditionExpression": "x"}},
        ]
    }
    assert offence("TransactWriteItems", transaction, [INCIDENT_STORE], tables) == ""
    assert "sent from" in offence("TransactWriteItems", transaction, [JOB_STORE], tables)
