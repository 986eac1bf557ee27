"""The twin's HTML report in a real browser: headless Chromium renders every chart it lists.

Chromium is a system package (`make browser`). Without it the test skips on a laptop but
fails in CI, where a skipped browser check would pass for a check that ran.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from tests.deadlines import loaded
from tests.unit.test_report import ALL_CHARTS, sample_data

from hyperguard_twin.browser import chromium, rendered_charts
from hyperguard_twin.report import write_report


@pytest.fixture(autouse=True)
def _needs_chromium() -> None:
    if chromium() is None:
        if os.environ.get("CI"):
            pytest.fail("Chromium is not installed in CI: run `make browser`", pytrace=False)
        pytest.skip("Chromium is not installed (make browser)")


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_report(tmp_path_factory.mktemp("report") / "report.html", sample_data())


def test_every_listed_chart_is_drawn(report: Path) -> None:
    drawn = rendered_charts(report, timeout_s=loaded(60))
    assert set(drawn) == ALL_CHARTS
    assert all(traces > 0 for traces in drawn.values()), drawn


def test_without_plotly_js_nothing_is_drawn(report: Path, tmp_path: Path) -> None:
    text = report.read_text(encoding="utf-8")
    stripped, removed = re.subn(
        r"<script>.*?</script>", "<script></script>", text, count=1, flags=re.S
    )
    assert removed == 1 and len(stripped) < len(text) / 10  # it was plotly.js, inlined
    copy = tmp_path / "no-plotly.html"
    copy.write_text(stripped, encoding="utf-8")
    assert rendered_charts(copy, timeout_s=loaded(60)) == dict.fromkeys(ALL_CHARTS, 0)
