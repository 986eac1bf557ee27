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


def test_parsed_and_taken_as_sent_read_the_same_items_and_are_reported(
    capsys: pytest.CaptureFixture[str],
) -> None:
    store_reads.main(["--calls", "2", "--rounds", "1", "--parsed"])
    runs = json.loads(capsys.readouterr().out)["runs"]
    assert [(r["side"], r["read"]) for r in runs] == [
        ("wire form, parsed", "revisions"),
        ("wire form, taken as sent", "revisions"),
        ("wire form, parsed", "whole items"),
        ("wire form, taken as sent", "whole items"),
    ]
    assert all(r["cpu_ms_per_call"] > 0 for r in runs)
