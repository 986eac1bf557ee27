"""bench/store_reads.py in a tiny configuration: both sides read the same items (it refuses
to report otherwise) and it reports a CPU figure per side and read."""

from __future__ import annotations

import json

import pytest
from bench import store_reads


@pytest.mark.parametrize(
    ("flags", "sides"),
    [
        ([], ("resource", "wire form")),
        (["--parsed"], ("wire form, parsed", "wire form, taken as sent")),
    ],
)
def test_both_sides_read_the_same_items_and_are_reported(
    capsys: pytest.CaptureFixture[str], flags: list[str], sides: tuple[str, str]
) -> None:
    store_reads.main(["--calls", "2", "--rounds", "1", *flags])
    runs = json.loads(capsys.readouterr().out)["runs"]
    assert [(r["side"], r["read"]) for r in runs] == [
        (side, read) for read in ("revisions", "whole items") for side in sides
    ]
    assert all(r["cpu_ms_per_call"] > 0 for r in runs)
