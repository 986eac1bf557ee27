"""Open the twin's HTML report in headless Chromium and count what plotly drew.

A report that only parses is not a report that renders: the charts exist only once
plotly.js has run in a browser. Chromium's `--dump-dom` gives the DOM after the page's
scripts ran, and in it each chart div the report lists (its `hyperguard-charts` meta)
either holds the SVG plotly drew or nothing. The count per chart is the number of
`<g class="trace ...">` groups in it: plotly draws one per trace with data (a bar series, a
line, a stacked area), none for a trace without data, and there is nothing in the div at all
when plotly.js did not run. Legend entries are `class="traces"`, a different token.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from html.parser import HTMLParser
from pathlib import Path

from hyperguard_twin.report import CHARTS_META

# HTML's void elements: a start tag with no end tag.
VOID = frozenset(
    {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source"}
    | {"track", "wbr"}
)


def chromium() -> str | None:
    """Chromium's path on PATH (Debian's `chromium`, or `chromium-browser`), if installed."""
    for name in ("chromium", "chromium-browser"):
        if path := shutil.which(name):
            return path
    return None


def _run(args: list[str], timeout_s: float) -> str:
    """Headless Chromium with a throwaway profile; its stdout. The whole process group is
    killed on timeout (Chromium's renderer and GPU processes included)."""
    exe = chromium()
    if exe is None:
        raise RuntimeError("Chromium is not installed: apt-get install chromium (or make browser)")
    with tempfile.TemporaryDirectory(prefix="hyperguard-chromium-") as profile:
        command = [
            exe,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            f"--user-data-dir={profile}",
            *args,
        ]
        with subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        ) as process:
            try:
                stdout, stderr = process.communicate(timeout=timeout_s)
            except subprocess.TimeoutExpired as e:
                os.killpg(process.pid, signal.SIGKILL)
                process.communicate()
                raise RuntimeError(f"Chromium did not finish in {timeout_s:g}s: {command}") from e
    if process.returncode != 0:
        raise RuntimeError(
            f"Chromium exited with {process.returncode}: {command}\n{stderr[-2000:]}"
        )
    return stdout


class _TraceCounter(HTMLParser):
    """The chart ids of the report's meta, and the trace groups inside each chart's div."""

    def __init__(self) -> None:
        super().__init__()
        self.expected: list[str] = []
        self.traces: dict[str, int] = {}
        self._chart: str | None = None
        self._depth = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        if tag == "meta" and attributes.get("name") == CHARTS_META:
            self.expected = (attributes.get("content") or "").split()
        elif self._chart is not None:
            if tag not in VOID:
                self._depth += 1
            if tag == "g" and "trace" in (attributes.get("class") or "").split():
                self.traces[self._chart] += 1
        elif tag == "div" and attributes.get("id") in self.expected:
            self._chart = str(attributes["id"])
            self.traces.setdefault(self._chart, 0)
            self._depth = 1

    def handle_endtag(self, tag: str) -> None:
        if self._chart is None or tag in VOID:
            return
        self._depth -= 1
        if self._depth == 0:
            self._chart = None


def rendered_charts(html_path: Path, *, timeout_s: float = 60) -> dict[str, int]:
    """For each chart the report lists, the trace groups plotly drew in it (0: not rendered)."""
    dom = _run(
        ["--virtual-time-budget=10000", "--dump-dom", html_path.resolve().as_uri()], timeout_s
    )
    counter = _TraceCounter()
    counter.feed(dom)
    counter.close()
    return {chart: counter.traces.get(chart, 0) for chart in counter.expected}
