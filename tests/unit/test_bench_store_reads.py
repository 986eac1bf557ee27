"""bench/store_reads.py in a tiny configuration: both sides read the same items (it refuses
to report otherwise) and it reports a CPU figure per side and read."""

from __future__ import annotations

import json

import pytest
from bench import store_reads


def test_both_sides_read_the_same_items_and_are_reported(
    capsys: pytest.CaptureFixture[str],
) -> None:
    store_reads.main(["--calls", "2", "--rounds", "1"])
    runs = json.loads(capsys.readouterr().out)["runs"]
    assert [(r["side"], r["read"]) for r in runs] == [
        ("resource", "revisions"),
        ("wire form", "revisions"),
        ("resource", "whole items"),
        ("wire form", "whole items"),
    ]
    assert all(r["cpu_ms_per_call"] > 0 for r in runs)
