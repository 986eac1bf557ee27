"""The complexity gate (hyperguard.tools.complexity): new functions stay within radon's C;
listed ones never grow, and their entries go as they get simpler."""

from __future__ import annotations

from hyperguard.tools.complexity import WORST_ALLOWED, violations


def test_a_new_function_worse_than_c_fails_the_gate() -> None:
    assert violations({"a.py:f": WORST_ALLOWED}, {}) == []
    (found,) = violations({"a.py:f": WORST_ALLOWED + 1}, {})
    assert found.startswith("a.py:f: complexity 21")


def test_a_listed_function_may_not_grow() -> None:
    assert violations({"a.py:f": 30}, {"a.py:f": 30}) == []
    (found,) = violations({"a.py:f": 31}, {"a.py:f": 30})
    assert "it grew" in found


def test_entries_follow_their_functions_down_and_out() -> None:
    (lower,) = violations({"a.py:f": 25}, {"a.py:f": 30})
    assert "lower its entry" in lower
    (gone,) = violations({"a.py:f": 12}, {"a.py:f": 30})
    assert "remove its entry" in gone
    (deleted,) = violations({}, {"a.py:f": 30})
    assert "remove its entry" in deleted
