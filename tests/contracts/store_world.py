"""A store that keeps rows per project, beside the catalog it checks projects in: the SQLite pair on
one ``local.db`` or the in-memory pair, for the store contracts that run each test on both."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import attrs

from memory_core.adapters.in_memory.storage import InMemoryCatalog
from memory_core.adapters.sqlite import SqliteCatalog, open_database
from memory_core.domain.model import Project


@attrs.frozen
class World:
    catalog: Any
    store: Any


def store_world(
    kind: str,
    tmp_path: Path,
    sqlite_store: Callable[[Any], Any],
    memory_store: Callable[[Callable[[str], Any]], Any],
    projects: Sequence[str],
) -> Iterator[World]:
    """``kind`` "sqlite": ``sqlite_store(connection)`` on its own connection to the catalog's
    database; else ``memory_store(catalog.get_project)``. The ``projects`` are added first."""
    if kind == "sqlite":
        catalog: Any = SqliteCatalog(open_database(tmp_path / "local.db"))
        store = sqlite_store(open_database(tmp_path / "local.db"))
    else:
        catalog = InMemoryCatalog()
        store = memory_store(catalog.get_project)
    for name in projects:
        catalog.add_project(Project(name, (), "2026-01-01T00:00:00.000Z"))
    yield World(catalog, store)
    catalog.close()
