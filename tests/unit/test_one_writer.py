"""One writer per state: only the job lifecycle module calls the JobStore's writes; every
other module asks the lifecycle (`...lifecycle.<move>(...)`)."""

from __future__ import annotations

import ast

from tests.conftest import ROOT

WRITES = {"transition", "submit", "record_checkpoint", "set_reason", "put"}
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
