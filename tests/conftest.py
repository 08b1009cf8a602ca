"""Shared, expensive fixtures: one Cranfield project indexed with the real adapters per session."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
from benchmarks.common import CRANFIELD  # noqa: E402, F401  (one home for the data paths)

# Any test that opens a non-loopback connection fails (no network at run time).
from tests.reliability.network_guard import no_network  # noqa: E402, F401

CRANFIELD_PROJECT = "cranfield"

os.umask(0o077)


def write_cranfield_markdown(target: Path) -> Path:
    """One markdown resource per Cranfield document, ``<id>.md`` with the title as H1: the same
    files the quality benchmark indexes (benchmarks/cranfield_quality.py)."""
    from benchmarks.cranfield_quality import Cranfield

    Cranfield.load().write_memory(target)
    return target


@pytest.fixture(scope="session")
def cranfield_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    """(home, source folder) with project ``cranfield`` indexed by the real adapters."""
    from memory_core.domain.model import Source
    from memory_core.entrypoints.bootstrap import bootstrap

    base = tmp_path_factory.mktemp("cranfield")
    source = write_cranfield_markdown(base / "memory")
    home = base / "home"
    engine = bootstrap(home)
    engine.add_project(CRANFIELD_PROJECT, [Source(str(source))])
    engine.index(CRANFIELD_PROJECT)
    engine.close()
    yield home, source


@pytest.fixture(scope="session")
def cranfield_engine(cranfield_home: tuple[Path, Path]):  # type: ignore[no-untyped-def]
    from memory_core.entrypoints.bootstrap import bootstrap

    engine = bootstrap(cranfield_home[0])
    yield engine
    engine.close()
