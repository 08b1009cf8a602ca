"""docs/performance.md is generated from benchmarks/results: every saved result must render."""

from __future__ import annotations

import importlib

import pytest

from benchmarks.__main__ import MODULES
from benchmarks.common import read_result


@pytest.mark.parametrize("name", MODULES)
def test_each_saved_result_renders_a_dated_section(name: str) -> None:
    module = importlib.import_module(f"benchmarks.{name}")
    result = read_result(module.NAME)
    assert result is not None, f"benchmarks/results/{module.NAME}.json is missing: run python -m benchmarks {name}"
    section = module.render(result)
    assert section.lstrip().startswith("#")
    assert result["machine"]["date"] in section
