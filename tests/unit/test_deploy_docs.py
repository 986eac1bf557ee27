"""A newcomer deploys with the documented steps only: README's deploy command names every
parameter the template requires (and only parameters it has), docs/operations.md describes
every parameter, and the twin deploys the template with exactly README's parameters, so the
twin's deploy path is the documented one."""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import ROOT, template

from hyperguard_twin.config import TwinConfig


def readme_parameters() -> set[str]:
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Deploying to AWS") :]
    block = section[section.index("```sh") : section.index("```", section.index("```sh") + 5)]
    overrides = block[block.index("--parameter-overrides") :]
    return set(re.findall(r"\b([A-Z][A-Za-z]+)=<", overrides))


def test_readme_names_every_required_parameter_and_only_real_ones() -> None:
    parameters = template()["Parameters"]
    named = readme_parameters()
    required = {name for name, spec in parameters.items() if "Default" not in spec}
    assert required <= named, sorted(required - named)
    assert named <= set(parameters), sorted(named - set(parameters))
    assert {"CheckpointBucketName", "AdminPrincipalArns"} <= named  # issue 37's two gaps


def test_operations_describes_every_parameter() -> None:
    text = (ROOT / "docs" / "operations.md").read_text()
    section = text[text.index("## Deploy to AWS") :]
    section = section[: section.index("\n## ", 5)]
    missing = [name for name in template()["Parameters"] if f"`{name}`" not in section]
    assert missing == []


def test_the_twin_deploys_with_readmes_parameters() -> None:
    config = TwinConfig(root=Path(ROOT))
    assert set(config.parameters) == readme_parameters()
