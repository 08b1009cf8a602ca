"""Shared pieces of the reliability tests: one engine wiring, a seeded home, the checks that must
hold after any crash, and a child process that acknowledges each write it completes.

The wiring is the product's own composition root with the real storage adapters (``local.db``,
blobs, generations, usearch vectors, embedding cache, file scanner) and two cheap stand-ins: a
hashing embedder instead of MiniLM and a BM25 index kept as a file instead of Lucene (``lucene``
switches the real one back in). A child process costs about 0.3 s this way, 2 s with the JVM.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import weakref
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import apsw
import attrs

from memory_core.adapters.in_memory.lexical import InMemoryLexicalIndexFactory, InMemoryLexicalSearcher
from memory_core.adapters.in_memory.vectors import HashingEmbedder, WhitespaceTokenCounter
from memory_core.adapters.storage_format import CONVERTER as STORED
from memory_core.adapters.system.crash_points import CRASH_EXIT, CRASH_POINT_ENV
from memory_core.domain.canonical import canonical_json
from memory_core.domain.errors import GenerationCorrupted
from memory_core.domain.model import Source, Unit
from memory_core.retrieval.chunking import MarkdownChunker
from memory_core.services.engine import Engine

ROOT = Path(__file__).resolve().parents[2]
PROJECT = "proj"
QUERIES = (
    "how do I roll back the ledger",
    "advisory locks for idempotency keys",
    "who pages the owner when on call",
    "where is the coffee",
    "helm upgrade atomic deploy",
)
LUCENE_ENV = "RELIABILITY_LUCENE"
BROKEN_EMBEDDER_ENV = "RELIABILITY_BROKEN_EMBEDDER"
SYNC_HISTORY_ENV = "RELIABILITY_SYNC_HISTORY"  # the child commits each trace before answering
CHILD_TIMEOUT_S = 120


# -- wiring ---------------------------------------------------------------------------------------


class FileLexicalIndexFactory:
    """The in-memory BM25 twin, persisted as a file so a restarted process can open it."""

    revision = "file-bm25/1"
    FILE = "units.jsonl"

    def build(self, directory: Path, units: Sequence[Unit], *, previous: Path | None = None) -> None:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)  # always whole: ``previous`` unused
        body = b"".join(canonical_json(STORED.unstructure(u)) + b"\n" for u in units)
        fd = os.open(directory / self.FILE, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(body)

    def open(self, directory: Path) -> InMemoryLexicalSearcher:
        try:
            lines = (directory / self.FILE).read_bytes().splitlines()
        except FileNotFoundError:
            raise GenerationCorrupted(f"no lexical index at {directory}", directory=str(directory)) from None
        twin = InMemoryLexicalIndexFactory()
        twin.build(directory, [STORED.structure(json.loads(line), Unit) for line in lines if line])
        return twin.open(directory)


class BrokenEmbedder(HashingEmbedder):
    """Embeds documents, then raises on every query: a model that fails at run time."""

    def embed_query(self, text: str) -> list[float]:
        raise RuntimeError("the embedding model failed (injected)")


def engine_for(home: str | os.PathLike[str], *, lucene: bool = False, **overrides: Any) -> Engine:
    """The product's composition root with the cheap embedder and (unless ``lucene``) lexical index."""
    from memory_core.adapters.search.usearch_index import UsearchIndexFactory
    from memory_core.entrypoints.bootstrap import bootstrap

    if lucene:
        from memory_core.adapters.search.lucene_index import LuceneIndexFactory

        lexical: Any = LuceneIndexFactory()
    else:
        lexical = FileLexicalIndexFactory()
    parts: dict[str, Any] = {
        "embedder": HashingEmbedder(),
        "chunker": MarkdownChunker(WhitespaceTokenCounter(), max_tokens=64),
        "lexical": lexical,
        "vectors": UsearchIndexFactory(),
    }
    parts.update(overrides)
    engine = bootstrap(home, **parts)
    _ENGINES.append(weakref.ref(engine))
    return engine


# Engines this process made: a check of the home settles their Run writers first (a trace is
# written right behind its answer, and some tests never close the engine they asked).
_ENGINES: list[weakref.ref[Engine]] = []


def settle_history() -> None:
    alive = [e for e in (ref() for ref in _ENGINES) if e is not None]
    _ENGINES[:] = [weakref.ref(e) for e in alive]
    for engine in alive:
        if engine.history is not None:
            engine.history.settle()


# -- a project and a seeded home ------------------------------------------------------------------


def write_memory(folder: Path, version: int) -> Path:
    """Four resources; ``b.md`` and ``c.md`` change (and change size) with ``version``."""
    folder.mkdir(parents=True, exist_ok=True)
    files = {
        "a.md": "# Deploy runbook\n\nDeploy the ledger with helm upgrade --atomic.\n\n"
        "## Rollback\n\nRoll back with helm rollback ledger, then replay the outbox.\n",
        "b.md": f"# Advisory locks\n\nUse Postgres advisory locks for idempotency keys.{' Revised.' * version}\n",
        "c.md": f"# On-call\n\nThe on-call engineer pages the service owner.{' Escalate.' * version}\n",
        "d.txt": "Coffee is on the second floor.\n\nThe printer is broken.\n",
    }
    for name, text in files.items():
        (folder / name).write_text(text, encoding="utf-8")
    return folder


def judgments_for(engine: Engine, case_id: str, version: int) -> list[dict[str, Any]]:
    """The judgment file written as ``version`` of a case: deterministic, so a restarted parent
    can tell exactly what an acknowledged version held."""
    trace = engine.evaluations().get_trace(case_id)
    units = [c.unit_id for c in trace.candidates]
    chosen = units[: 1 + version % max(len(units), 1)]
    return [{"unit_id": u, "relevance": (version + i) % 4, "note": f"v{version}"} for i, u in enumerate(chosen)]


@attrs.frozen
class Seeded:
    """What ``seed_home`` made: Runs on three generations, two cases, a fourth version on disk."""

    home: Path
    source: Path
    revisions: tuple[str, ...]  # rev0, rev1, rev2 (current)
    runs: tuple[str, ...]  # r0 on rev0, r1 and r2 on rev1, r3 on rev2
    cases: tuple[str, ...]  # from r1 (judged once) and from r3: two corpora


def seed_home(base: Path, *, lucene: bool = False) -> Seeded:
    """A home whose crash-relevant state is all there: a current and a previous generation, an
    older one only a Run refers to (Clear History collects its blobs), pinned and unpinned Runs,
    judged cases; every blob aged past the GC grace period; version 3 of the sources on disk."""
    home, source = base / "home", base / "memory"
    engine = engine_for(home, lucene=lucene)
    write_memory(source, 0)
    engine.add_project(PROJECT, [Source(str(source))])
    revisions, runs = [], []
    for version, queries in ((0, QUERIES[:1]), (1, QUERIES[1:3]), (2, QUERIES[3:4])):
        write_memory(source, version)
        revisions.append(engine.index(PROJECT).index_revision)
        runs += [engine.activate(PROJECT, q).response.run_id for q in queries]
    assert all(runs)
    first = engine.create_evaluation_case(runs[1]).case_id
    engine.replace_evaluation_judgments(first, 0, judgments_for(engine, first, 1))
    second = engine.create_evaluation_case(runs[3]).case_id
    engine.close()
    age_blobs(home)
    write_memory(source, 3)
    return Seeded(home, source, tuple(revisions), tuple(r for r in runs if r), (first, second))


def age_blobs(home: Path, seconds: float = 7200.0) -> None:
    """Blob GC spares files younger than an hour (an index build may be using them)."""
    past = time.time() - seconds
    for path in (home / "evaluation-corpora" / "blobs").rglob("*"):
        if path.is_file():
            os.utime(path, (past, past))


# -- the child ------------------------------------------------------------------------------------


@attrs.frozen
class ChildResult:
    returncode: int
    acks: tuple[dict[str, Any], ...]
    stderr: str

    def of(self, kind: str) -> list[Any]:
        return [a[kind] for a in self.acks if kind in a]


def child_env(crash: str | None = None, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in (CRASH_POINT_ENV, "MEMORY_CORE_HOME")}
    env["PYTHONPATH"] = str(ROOT)
    if crash:
        env[CRASH_POINT_ENV] = crash
    env.update(extra)
    return env


def child_command(home: Path, action: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "tests.reliability.child", str(home), action, *args]


def run_child(home: Path, action: str, *args: str, crash: str | None = None, **env: str) -> ChildResult:
    """Run one child to completion (or to its crash point)."""
    done = subprocess.run(
        child_command(home, action, *args),
        cwd=ROOT, env=child_env(crash, **env), capture_output=True, text=True, timeout=CHILD_TIMEOUT_S,
    )  # fmt: skip
    acks = tuple(json.loads(line) for line in done.stdout.splitlines() if line.startswith("{"))
    return ChildResult(done.returncode, acks, done.stderr)


def crashed(result: ChildResult) -> ChildResult:
    """The child must have died at its crash point, not finished or failed otherwise."""
    assert result.returncode == CRASH_EXIT, f"exit {result.returncode}, acks {result.acks}:\n{result.stderr[-3000:]}"
    return result


# -- what must hold after any crash ---------------------------------------------------------------


def raw_integrity(home: Path) -> None:
    """Before anything repairs or migrates: the database file itself is sound."""
    conn = apsw.Connection(str(home / "local.db"))
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
    finally:
        conn.close()


def rows(engine: Engine, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    return [tuple(r) for r in engine.catalog.connection.execute(sql, params).fetchall()]  # type: ignore[attr-defined]


def table_counts(conn: apsw.Connection) -> dict[str, int]:
    names = [n for (n,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
    return {n: int(conn.execute(f'SELECT count(*) FROM "{n}"').fetchall()[0][0]) for n in names}


def files_under(root: Path) -> dict[str, int]:
    """Every file below ``root`` (relative path -> size): what "nothing written" compares."""
    if not root.exists():
        return {}
    return {str(p.relative_to(root)): p.stat().st_size for p in sorted(root.rglob("*")) if p.is_file()}


def restart_and_verify(home: Path, *, lucene: bool = False) -> Engine:
    """Restart (a new engine through the composition root: recovery runs) and check every
    invariant of issue 8: integrity, no ``running`` Run, no partial candidates, every referenced
    blob present and verified, every published generation sound, every case complete."""
    settle_history()
    raw_integrity(home)
    engine = engine_for(home, lucene=lucene)
    assert rows(engine, "SELECT run_id FROM retrieval_runs WHERE status = 'running'") == []
    partial = rows(
        engine,
        "SELECT run_id, candidate_count FROM retrieval_runs r WHERE candidate_count != "
        "(SELECT count(*) FROM retrieval_run_candidates c WHERE c.run_id = r.run_id)",
    )
    assert partial == [], f"terminal Runs with partial candidates: {partial}"
    history = engine.history
    blobs = engine.evaluations().blobs
    assert history is not None
    for digest in sorted(history.live_blobs()):  # type: ignore[attr-defined]
        blobs.get(digest)  # BlobNotFound / BlobCorrupted fail the test
    for digest in blobs.digests():  # nothing torn under a final name either
        blobs.get(digest)
    for info in engine.list_projects():
        store = engine.generations
        for revision in store.list_generations(info.project.project_id):  # type: ignore[attr-defined]
            store.verify(store.generation_dir(info.project.project_id, revision))  # type: ignore[attr-defined]
        for generation in (info.generation, engine.catalog.previous_generation(info.project.project_id)):
            if generation is not None:
                store.verify(Path(generation.directory))
    service = engine.evaluations()
    for case in service.list_cases():
        corpus = service.get_corpus(case.corpus_id)
        for digest in corpus.digests():
            blobs.get(digest)
        history_versions = [s.version for s in service.judgment_history(case.case_id)]
        assert history_versions == list(range(1, case.judgment_version + 1)), (case, history_versions)
        if case.provenance == "run":
            assert rows(engine, "SELECT pinned FROM retrieval_runs WHERE run_id = ?", (case.source_run_id,)) == [(1,)]
    return engine


def activations_still_work(engine: Engine, query: str = QUERIES[0]) -> None:
    response = engine.activate(PROJECT, query).response
    assert response.run_id and response.fragments
    assert engine.get_run(response.run_id).summary.status == "succeeded"


def iter_lines(stream: Any) -> Iterator[str]:
    for line in iter(stream.readline, ""):
        yield line.rstrip("\n")
