"""The test tiers import their modules by basename (no packages, pytest's default
`prepend` import mode): two test files of one name in different tiers cannot be collected in
one run (`make test-fast` runs unit and integration together)."""

from __future__ import annotations

from collections import Counter

from tests.conftest import ROOT


def test_no_two_test_modules_share_a_name() -> None:
    names = Counter(path.name for path in (ROOT / "tests").rglob("test_*.py"))
    assert [name for name, count in names.items() if count > 1] == []
