"""Each function ends its init by freezing what the init made out of the garbage collector's
walks (hyperguard.sandbox.init_done): after everything its top level builds."""

from __future__ import annotations

import ast
import gc
from pathlib import Path

import pytest
from tests.conftest import ROOT

from hyperguard.sandbox import init_done

HANDLERS = sorted((ROOT / "functions").glob("*/app.py"))


def test_what_exists_at_the_call_is_left_out_of_later_collections() -> None:
    made: list[list[int]] = [[] for _ in range(1000)]  # containers the collector tracks
    assert all(gc.is_tracked(m) for m in made)
    before = gc.get_freeze_count()
    try:
        init_done()
        assert gc.get_freeze_count() >= before + len(made)
    finally:
        gc.unfreeze()


@pytest.mark.parametrize("handler", HANDLERS, ids=lambda p: p.parent.name)
def test_every_function_ends_its_init_with_it(handler: Path) -> None:
    body = ast.parse(handler.read_text()).body
    calls = [
        i
        for i, node in enumerate(body)
        if isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Call)
        and isinstance(node.value.func, ast.Name)
        and node.value.func.id == "init_done"
    ]
    assert len(calls) == 1, f"{handler}: init_done() is called once at the top level"
    after = body[calls[0] + 1 :]
    # After it only definitions: nothing the init still makes.
    assert all(isinstance(node, ast.FunctionDef) for node in after), handler


def test_the_handlers_are_found() -> None:
    assert {p.parent.name for p in HANDLERS} >= {"api", "scheduler", "recovery"}
