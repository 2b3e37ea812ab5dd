"""pyproject.toml: the license metadata form and the setuptools that understands it agree."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path


def test_license_is_an_spdx_string_and_setuptools_is_new_enough_for_it(repo_root: Path) -> None:
    # A TOML table (license = {text = ...}) makes setuptools >= 77 warn on every build; a plain SPDX
    # string is the current form (PEP 639) and older setuptools reject it, hence the floor.
    document = tomllib.loads((repo_root / "pyproject.toml").read_text())
    assert document["project"]["license"] == "Apache-2.0"
    floors = [
        re.fullmatch(r"setuptools>=(\d+)(\.\d+)*", requirement)
        for requirement in document["build-system"]["requires"]
        if requirement.startswith("setuptools")
    ]
    assert len(floors) == 1 and floors[0] is not None and int(floors[0].group(1)) >= 77, floors
