"""The complexity gate (hyperguard.tools.complexity): new functions stay within radon's C;
listed ones never grow, and their entries go as they get simpler; the twin's modules and
classes stay small."""

from __future__ import annotations

from pathlib import Path

from hyperguard.tools.complexity import (
    TWIN_CLASS_LINES,
    TWIN_MODULE_LINES,
    WORST_ALLOWED,
    oversized,
    violations,
)


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


def test_a_twin_module_or_class_past_its_size_fails_the_gate(tmp_path: Path) -> None:
    twin = tmp_path / "twin"
    twin.mkdir()
    body = "".join(f"    x{i} = {i}\n" for i in range(TWIN_CLASS_LINES - 1))
    (twin / "fits.py").write_text("class Fits:\n" + body)
    assert oversized(tmp_path, "twin") == []
    (twin / "fits.py").write_text("class Fits:\n" + body + "    y = 0\n")
    (found,) = oversized(tmp_path, "twin")
    assert found == f"twin/fits.py:Fits: class of {TWIN_CLASS_LINES + 1} lines, over 300"
    (twin / "long.py").write_text("x = 1\n" * (TWIN_MODULE_LINES + 1))
    assert f"twin/long.py: {TWIN_MODULE_LINES + 1} lines, over 500: split it" in oversized(
        tmp_path, "twin"
    )
