"""The generations activation serves: each project's current one, opened once (verified, units
loaded, searchers open) and kept warm until the catalog makes another current."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from memory_core.domain.errors import GenerationCorrupted, ProjectNotIndexed
from memory_core.domain.model import Generation, ManifestEntry, Unit
from memory_core.ports import (
    GenerationStore,
    LexicalIndexFactory,
    LexicalSearcher,
    ManifestStore,
    VectorIndexFactory,
    VectorSearcher,
)
from memory_core.retrieval.exact import ExactIndex
from memory_core.services.indexing import LEXICAL_DIR, VECTOR_DIR
from memory_core.services.manifests import stored_manifest


class OpenGeneration:
    """A generation's searchers and units, opened once and kept warm."""

    def __init__(
        self,
        generation: Generation,
        units: Sequence[Unit],
        uris: Mapping[str, str],
        lexical: LexicalSearcher,
        vectors: VectorSearcher,
        hashes: Mapping[str, str] | None = None,
    ) -> None:
        self.generation = generation
        self.units = {u.unit_id: u for u in units}
        self.uris = dict(uris)
        self.hashes = dict(hashes or {})  # resource_id -> resource hash in this generation
        self.hash_set = frozenset(self.hashes.values())
        # The last live memory compared with this generation: (its hash, resource_id -> hash,
        # resources changed, its entries whose body the generation lacks). Activations between
        # two edits see the same live memory: the manifest is walked once per change, not per Run.
        self.last_live: tuple[str, dict[str, str], int, tuple[ManifestEntry, ...]] | None = None
        self.exact = ExactIndex(units)
        self.lexical = lexical
        self.vectors = vectors

    def close(self) -> None:
        """Release the open indexes."""
        self.lexical.close()
        self.vectors.close()


def open_generation(
    current: Generation,
    generations: GenerationStore,
    manifests: ManifestStore,
    lexical: LexicalIndexFactory,
    vectors: VectorIndexFactory,
) -> OpenGeneration:
    """Verify a published generation against its seal and open it (a damaged one is never served)."""
    project_id = current.project_id
    directory = Path(current.directory)
    try:
        generations.verify(directory)
    except GenerationCorrupted as exc:
        raise GenerationCorrupted(
            f"{exc.message}; run `memcore index {project_id}` to rebuild it", project=project_id
        ) from exc
    units = generations.load_units(directory)
    manifest = stored_manifest(manifests, current.effective_memory_hash, project_id)
    lexical_searcher = lexical.open(directory / LEXICAL_DIR)
    try:
        vector_searcher = vectors.open(directory / VECTOR_DIR)
    except BaseException:
        lexical_searcher.close()  # else its reader keeps the (perhaps deleted) files open
        raise
    return OpenGeneration(
        current,
        units,
        {e.resource_id: e.uri for e in manifest},
        lexical_searcher,
        vector_searcher,
        {e.resource_id: e.resource_hash for e in manifest},
    )


def _same_place(a: Generation, b: Generation) -> bool:
    return a.index_revision == b.index_revision and a.directory == b.directory


class OpenGenerations:
    """Each project's open current generation; thread-safe (the daemon activates concurrently)."""

    def __init__(self) -> None:
        self._open: dict[str, OpenGeneration] = {}
        self._lock = threading.Lock()

    def serve(
        self,
        project_id: str,
        current: Generation | None,
        generations: GenerationStore,
        manifests: ManifestStore,
        lexical: LexicalIndexFactory,
        vectors: VectorIndexFactory,
    ) -> tuple[OpenGeneration, bool]:
        """The open ``current`` generation and whether it was open already (warm). A project
        whose current generation changed (a re-index) has the new one opened, the old closed."""
        if current is None:
            raise ProjectNotIndexed(
                f"project {project_id!r} has no index yet: run `memcore index {project_id}`",
                project=project_id,
            )
        with self._lock:
            opened = self._open.get(project_id)
            # The same revision in the same place: a storage move (a daemon job, in another
            # process) keeps the revision and changes the directory, and the old one goes away.
            if opened is not None and _same_place(opened.generation, current):
                return opened, True
            fresh = open_generation(current, generations, manifests, lexical, vectors)
            self._open[project_id] = fresh
        if opened is not None:
            opened.close()
        return fresh, False

    def warm_revision(self, project_id: str) -> str | None:
        """The index revision of the project's open generation, or None when none is open."""
        with self._lock:
            opened = self._open.get(project_id)
        return opened.generation.index_revision if opened is not None else None

    def close(self, project_id: str) -> None:
        """Close the project's open generation, if any (its storage moves, clears or goes)."""
        with self._lock:
            opened = self._open.pop(project_id, None)
        if opened is not None:
            opened.close()

    def close_all(self) -> None:
        with self._lock:
            opened, self._open = list(self._open.values()), {}
        for o in opened:
            o.close()


WARM_WORDS = 10  # a warm-up query: the first words of a unit, as long as a typical agent's question


def warm_lexical(
    generation: Generation,
    generations: GenerationStore,
    lexical: LexicalIndexFactory,
    *,
    searches: int,
    depth: int,
    deadline: float,
) -> int:
    """Run up to ``searches`` BM25 searches of ``depth`` over ``generation``, each the first words
    of one of its units, until ``deadline`` (``time.monotonic()``, checked before and after its
    units load, then before each search), on a searcher opened for them and closed after; returns
    how many ran. Why: the JVM compiles Lucene's search path only after
    a few hundred searches, and until then a search is 2-5x slower, so a daemon just started (an
    on-demand one restarts after its idle limit) would make its first agents' questions pay for
    it. Opens nothing the engine keeps and records no Run: the first activation is still cold in
    its trace (it opens the generation), only the JVM's code is warm."""
    if searches <= 0 or time.monotonic() >= deadline:
        return 0
    units = [u for u in generations.load_units(Path(generation.directory)) if u.text.strip()]
    if not units or time.monotonic() >= deadline:  # a large generation's load may spend the budget
        return 0
    step = max(1, len(units) // searches)  # spread over the whole memory, not its first files
    queries = [" ".join(u.text.split()[:WARM_WORDS]) for u in units[::step]][:searches]
    searcher = lexical.open(Path(generation.directory) / LEXICAL_DIR)
    ran = 0
    try:
        while ran < searches and time.monotonic() < deadline:
            searcher.search(queries[ran % len(queries)], depth)
            ran += 1
    finally:
        searcher.close()
    return ran
