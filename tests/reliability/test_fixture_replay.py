"""Fixtures that import but would replay wrong (issue 14 item 6), and fixtures without local
paths (item 10): through the real apsw store, the real file-system scanner and real Lucene.

A replay writes each frozen resource as a file and scans the folder again, so import refuses
(whole, ``invalid_evaluation_fixture`` naming the resource and why, nothing written) every
resource the scanner would not yield exactly as frozen; and a replay checks that what it
indexed is the frozen corpus before comparing anything (``evaluation_replay_corpus_mismatch``).
"""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from memory_core.adapters.files.evaluation_sources import FolderSources
from memory_core.adapters.files.filesystem_sources import FileSystemScanner
from memory_core.domain.canonical import sha256_hex
from memory_core.domain.evaluation_errors import EvaluationReplayCorpusMismatch, InvalidFixture
from memory_core.domain.model import Source
from memory_core.domain.resource_rules import DEFAULT_MAX_BYTES, MAX_RESOURCE_ID_BYTES, NAME_MAX_BYTES
from memory_core.entrypoints.cli import wire
from memory_core.evaluation.fixture import load_fixture
from memory_core.services.beir_import import EngineWorkspace
from memory_core.services.engine import Engine
from memory_core.services.replay import replay

from .harness import PROJECT, engine_for, write_memory
from .test_bad_input import Target, import_outcome, reseal

pytestmark = pytest.mark.slow  # a JVM (Lucene)


@pytest.fixture
def target(tmp_path: Path) -> Callable[..., Target]:
    return lambda memory=False: Target(tmp_path, memory=memory)


class Counting:
    """A workspace that counts the queries it ranks (a replay must rank none on a mismatch)."""

    def __init__(self, inner: EngineWorkspace) -> None:
        self.inner, self.ranked = inner, 0

    def prepare(self, project_id, files, progress=None):  # type: ignore[no-untyped-def]
        return self.inner.prepare(project_id, files)

    def activate(self, project_id: str, query: str) -> str:
        return self.inner.activate(project_id, query)

    def rank(self, project_id: str, query: str, ranked_as: str | None = None) -> list[Any]:
        self.ranked += 1
        return self.inner.rank(project_id, query)


@pytest.fixture(scope="module")
def origin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Engine, Path, str]]:
    """A real home (apsw, blobs, scanner, Lucene) with one reviewed case judged on resources."""
    base = tmp_path_factory.mktemp("fixture-replay")
    source = write_memory(base / "memory", 0)
    engine = engine_for(base / "home", lucene=True)
    engine.add_project(PROJECT, [Source(str(source))])
    engine.index(PROJECT)
    run_id = engine.activate(PROJECT, "how do I roll back the ledger").response.run_id
    assert run_id
    case = engine.create_evaluation_case(run_id)
    judged = [{"resource_id": "a.md", "relevance": 3}, {"resource_id": "b.md", "relevance": 1}]
    engine.replace_evaluation_judgments(case.case_id, 0, judged)
    engine.evaluations().mark_reviewed(case.case_id, 1)
    yield engine, source, case.case_id
    engine.close()


@pytest.fixture(scope="module")
def exported(origin: tuple[Engine, Path, str]) -> dict[str, Any]:
    return json.loads(origin[0].export_evaluation_set())  # type: ignore[no-any-return]


def add_resource(doc: dict[str, Any], resource_id: str, data: bytes, media_type: str = "text/markdown") -> None:
    """Add a resource (and its body) to the first corpus, in resource_id order."""
    if not any(b["sha256"] == sha256_hex(data) for b in doc["bodies"]):
        body = {"sha256": sha256_hex(data), "byte_size": len(data), "encoding": "base64",
                "content": base64.b64encode(data).decode()}  # fmt: skip
        doc["bodies"].append(body)
    resources = doc["corpora"][0]["resources"]
    entry = {**resources[0], "resource_id": resource_id, "uri": resource_id, "resource_hash": sha256_hex(data),
             "byte_size": len(data), "media_type": media_type}  # fmt: skip
    resources.append(entry)
    resources.sort(key=lambda r: r["resource_id"])
    for ordinal, r in enumerate(resources):
        r["ordinal"] = ordinal


LONG_PATH = "/".join(["d" * 200] * 18) + "/a.md"
assert len(LONG_PATH.encode()) > MAX_RESOURCE_ID_BYTES
# resource id, body, media type -> the field named and a word of the reason
UNREPLAYABLE: dict[str, tuple[str, bytes, str, str, str]] = {
    "ids colliding as paths": ("a.md/inner.md", b"# Inner\n", "text/markdown", "resource_id", "folder"),
    "a component over 255 bytes": ("é" * 127 + ".md", b"x", "text/markdown", "resource_id", "255-byte"),
    "a path over the limit": (LONG_PATH, b"x", "text/markdown", "resource_id", "limit of a resource path"),
    "a hidden name": (".secret.md", b"x", "text/markdown", "resource_id", "starting with '.'"),
    "a hidden folder": ("notes/.git/a.md", b"x", "text/markdown", "resource_id", "starting with '.'"),
    "a NUL in the name": ("nul\x00.md", b"x", "text/markdown", "resource_id", "NUL"),
    "an empty component": ("notes//a.md", b"x", "text/markdown", "resource_id", "empty path component"),
    "an extension the scanner ignores": ("page.html", b"x", "text/markdown", "resource_id", "extension"),
    "a media type its name does not give": ("plain.md", b"x", "text/plain", "media_type", "media type"),
    "a body with NUL bytes": ("binary.md", b"a\x00b", "text/markdown", "resource_hash", "NUL"),
    "a body that is not UTF-8": ("latin1.md", b"caf\xe9", "text/markdown", "resource_hash", "UTF-8"),
    "a body over the scanner's limit": (
        "big.md",
        b"a" * (DEFAULT_MAX_BYTES + 1),
        "text/markdown",
        "resource_hash",
        "limit",
    ),
}


@pytest.mark.parametrize("name", list(UNREPLAYABLE))
def test_a_resource_a_replay_cannot_reproduce_is_refused_at_import_with_nothing_written(
    exported: dict[str, Any], target: Callable[..., Target], name: str
) -> None:
    resource_id, data, media_type, field, reason = UNREPLAYABLE[name]
    assert len(("é" * 127 + ".md").encode()) > NAME_MAX_BYTES
    doc = copy.deepcopy(exported)
    add_resource(doc, resource_id, data, media_type)
    reseal(doc)  # every hash right: only the replayability check stands in the way
    payload = json.dumps(doc).encode()
    assert import_outcome(target(), payload) == "refused:invalid_evaluation_fixture"  # nothing written
    with pytest.raises(InvalidFixture) as refused:
        load_fixture(payload)
    place = refused.value.place
    assert place.startswith("/corpora/0/resources/") and place.endswith(f"/{field}"), place
    assert refused.value.details["resource_id"] == resource_id[:200]
    assert reason in refused.value.message and "could not index it" in refused.value.message


def test_the_same_additions_with_replayable_names_import(
    exported: dict[str, Any], target: Callable[..., Target]
) -> None:
    """The control: the mutation itself is sound, only the unreplayable part is refused."""
    doc = copy.deepcopy(exported)
    add_resource(doc, "nested/inner.md", b"# Inner\n")
    add_resource(doc, "é" * 126 + ".md", b"x")
    add_resource(doc, "plain.txt", b"x", "text/plain")
    add_resource(doc, "big.md", b"a" * DEFAULT_MAX_BYTES)
    reseal(doc)
    assert import_outcome(target(), json.dumps(doc).encode(), export=False) == "accepted"


def test_a_replay_checks_it_indexed_the_frozen_corpus_before_comparing(
    origin: tuple[Engine, Path, str], exported: dict[str, Any], tmp_path: Path
) -> None:
    """The same fixture replays through real Lucene and passes, its corpus checked; through a
    scanner that skips one of its resources (a smaller size limit) the replay stops with a typed
    error naming the resource left out and the scanner's reason, before any case is compared."""
    loaded = load_fixture(json.dumps(exported).encode())
    home = tmp_path / "replay-home"
    engine = engine_for(home, lucene=True)
    try:
        result = replay(loaded, EngineWorkspace(engine, FolderSources(home / "evaluation-sources")))
    finally:
        engine.close()
    corpus = loaded.corpora[loaded.records[0].case.corpus_id]
    assert result.passed and result.compared == 1
    assert [(c.corpus_id, c.resources) for c in result.corpora] == [(corpus.corpus_id, len(corpus.resources))]
    assert wire.to_json(result)["corpora"][0]["resources"] == 4

    largest = max(corpus.resources, key=lambda e: e.byte_size)
    small = FileSystemScanner(max_bytes=largest.byte_size - 1)
    engine = engine_for(home, lucene=True, scanner=small)
    workspace = Counting(EngineWorkspace(engine, FolderSources(home / "evaluation-sources")))
    try:
        with pytest.raises(EvaluationReplayCorpusMismatch) as mismatch:
            replay(loaded, workspace, project_prefix="strict")
    finally:
        engine.close()
    details = mismatch.value.details
    assert details["missing"] == [largest.resource_id] and details["unexpected"] == details["changed"] == []
    assert any("over the" in w for w in details["warnings"]) and "nothing was compared" in mismatch.value.message
    assert mismatch.value.code == "evaluation_replay_corpus_mismatch" and workspace.ranked == 0


def test_an_export_carries_no_local_path_unless_asked(
    origin: tuple[Engine, Path, str], exported: dict[str, Any], tmp_path: Path
) -> None:
    """By default each resource's uri is its resource id (no ``file:///`` naming the user's
    folders); ``with_uris`` keeps them. Both import; the portable one re-imported into the home
    it came from is the same record (unchanged, no conflict); export -> import -> export is
    byte-identical apart from ``exported_at``."""
    engine, source, case_id = origin
    raw = engine.export_evaluation_set()
    assert b"file://" not in raw and str(source).encode() not in raw and str(tmp_path.parent).encode() not in raw
    resources = [r for c in exported["corpora"] for r in c["resources"]]
    assert resources and all(r["uri"] == r["resource_id"] for r in resources)
    with_uris = json.loads(engine.export_evaluation_set(with_uris=True))
    assert all(r["uri"].startswith("file:///") for c in with_uris["corpora"] for r in c["resources"])
    # The home's own case, corpus and trace are untouched by a portable export.
    stored = engine.evaluations().get_case(case_id)
    assert with_uris["cases"][0]["corpus_id"] == stored.corpus_id != exported["cases"][0]["corpus_id"]

    assert engine.import_evaluation_set(raw).cases_unchanged == (case_id,)
    assert engine.import_evaluation_set(json.dumps(with_uris)).cases_unchanged == (case_id,)
    for n, document in enumerate((exported, with_uris)):  # one with uris (an older export) imports too
        fresh = engine_for(tmp_path / f"fresh-{n}")
        try:
            assert fresh.import_evaluation_set(json.dumps(document)).cases_added == (case_id,)
            again = json.loads(fresh.export_evaluation_set(with_uris=document is with_uris))
        finally:
            fresh.close()
        assert {**again, "exported_at": None} == {**document, "exported_at": None}
