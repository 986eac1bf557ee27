"""hyperguard-trainer installs with one pip line into a fresh virtualenv, with no dependency
of its own, and checkpoints there (no torch, no boto3: a local path)."""

from __future__ import annotations

import subprocess
import sys
import venv
from pathlib import Path

from tests.conftest import ROOT

ROUND_TRIP = """
import random, hyperguard_trainer as kit
state = {"data": {"offset": 42}}
random.seed(3)
kit.Checkpointer("ck", context=kit.Context(job_id="j")).save(7, state)
draw = random.random()
random.seed(9)
again = {"data": None}
assert kit.Checkpointer("ck", context=kit.Context(job_id="j")).resume(again) == 7
assert again["data"] == {"offset": 42} and random.random() == draw
print("ok")
"""


def test_the_kit_installs_with_one_pip_line_into_a_fresh_venv(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "-w",
            str(wheels),
            str(ROOT / "trainer"),
        ],
        check=True,
    )
    fresh = tmp_path / "fresh"
    venv.create(fresh, with_pip=True)
    python = fresh / "bin" / "python"
    (wheel,) = wheels.glob("hyperguard_trainer-*.whl")
    # the one line a training image runs (here offline, from the wheel just built)
    subprocess.run(
        [python, "-m", "pip", "install", "--quiet", "--no-index", str(wheel)], check=True
    )
    listed = subprocess.run(
        [python, "-m", "pip", "list", "--format=freeze"], check=True, capture_output=True, text=True
    ).stdout
    assert sorted(line.split("==")[0] for line in listed.split()) == ["hyperguard-trainer", "pip"]
    result = subprocess.run(
        [python, "-c", ROUND_TRIP], cwd=tmp_path, check=True, capture_output=True, text=True
    )
    assert result.stdout.strip() == "ok"
