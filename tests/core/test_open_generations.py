"""A generation whose manifest is not stored is a typed error, never an AttributeError on None."""

from __future__ import annotations

from typing import Any

import pytest

from memory_core.domain.errors import GenerationCorrupted, RetrievalFailed
from memory_core.domain.model import EffectiveMemory
from memory_core.services.manifests import stored_manifest
from tests.core.test_engine import SpyRecorder, make_engine


class LostManifests:
    """A ManifestStore that loses what it stores (a damaged ``local.db``)."""

    def put_manifest(self, effective_memory: EffectiveMemory) -> str:
        return effective_memory.hash

    def get_manifest(self, manifest_hash: str) -> None:
        return None


def test_a_missing_manifest_is_a_corrupted_generation() -> None:
    with pytest.raises(GenerationCorrupted) as info:
        stored_manifest(LostManifests(), "ab" * 32, "demo")
    assert info.value.details == {"project": "demo", "effective_memory_hash": "ab" * 32}
    assert "memcore index demo" in info.value.message


def test_activating_a_generation_whose_manifest_is_lost_fails_typed() -> None:
    recorder = SpyRecorder()
    engine = make_engine(recorder, manifests=LostManifests())
    engine.index("demo")
    with pytest.raises(RetrievalFailed) as info:
        engine.activate("demo", "rollback")
    assert info.value.error_code == "generation_corrupted"
    assert recorder.failed[-1][1].error_code == "generation_corrupted"
    # A re-index chunks afresh instead of failing on the lost manifest.
    assert engine.index("demo", force=True).status == "built"


def test_a_generation_whose_vectors_fail_to_open_leaves_no_lexical_searcher_open(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A move can delete a generation between its lexical and its vector index opening: the
    lexical searcher already open is closed, or its reader would hold the deleted files."""
    engine = make_engine()
    engine.index("demo")
    opened: list[Any] = []
    closed: list[Any] = []
    lexical_open = type(engine.lexical).open

    def tracked(factory: Any, directory: Any) -> Any:
        searcher = lexical_open(factory, directory)
        opened.append(searcher)
        searcher_close = type(searcher).close
        monkeypatch.setattr(type(searcher), "close", lambda s: (closed.append(s), searcher_close(s))[1])
        return searcher

    def gone(factory: Any, directory: Any) -> Any:
        raise GenerationCorrupted("the vector index went away", directory=str(directory))

    monkeypatch.setattr(type(engine.lexical), "open", tracked)
    monkeypatch.setattr(type(engine.vectors), "open", gone)
    with pytest.raises(RetrievalFailed):
        engine.activate("demo", "rollback")
    assert opened and closed == opened
