"""Build commit generations: Effective Memory → blobs, units, Lucene and vector indexes.

A generation is built in a staging directory and becomes current only when complete; a failed
or interrupted build leaves the previous one current. Indexing an unchanged project is a no-op.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import attrs

from memory_core.domain.errors import EmptyProject, GenerationCorrupted, MemoryCoreError, SourceUnavailable
from memory_core.domain.model import (
    EffectiveMemory,
    Generation,
    IndexRevisions,
    Project,
    ScannedResource,
    Unit,
    Vector,
    index_revision_of,
)
from memory_core.domain.model import (
    IndexReport as IndexReport,  # re-exported: callers named it here before it moved to the domain
)
from memory_core.domain.progress import Progress
from memory_core.ports import (
    BlobStore,
    Catalog,
    Chunker,
    Embedder,
    EmbeddingCache,
    GenerationStore,
    LexicalIndexFactory,
    ManifestStore,
    SourceScanner,
    VectorIndexFactory,
)
from memory_core.ports.runs import CorpusRegistry
from memory_core.retrieval.effective_memory import read_effective_memory
from memory_core.services.manifests import stored_manifest

EMBED_BATCH = 64
LEXICAL_DIR = "lexical"
VECTOR_DIR = "vectors"


def _no_progress(stage: str, done: int, total: int) -> None:
    return None


def _require_entries(memory: EffectiveMemory) -> None:
    if not memory.entries:
        raise EmptyProject(
            f"project {memory.project_id!r} has no markdown or text resource to index", project=memory.project_id
        )


@attrs.define
class Indexer:
    catalog: Catalog
    manifests: ManifestStore
    scanner: SourceScanner
    blobs: BlobStore
    generations: GenerationStore
    chunker: Chunker
    embedder: Embedder
    embedding_cache: EmbeddingCache
    lexical: LexicalIndexFactory
    vectors: VectorIndexFactory
    now: Callable[[], str]
    corpus: CorpusRegistry | None = None
    # The embedder each project indexes with (issue 33: a project may choose its model).
    # None from it, or no ``embedder_for``: ``embedder`` (the built-in model) indexes the project.
    embedder_for: Callable[[str], Embedder | None] | None = None
    # The units of each resource this indexer last chunked, by (resource_id, resource_hash,
    # media_type) for one (chunker, parser) revision: a re-index chunks only what changed (in the
    # daemon's watcher, about two thirds of a one-file re-index at 10,000 units). Their bodies
    # were read, verified and stored when they were chunked (or they come from a generation
    # whose units match its seal), so a re-index does not read them again while their blob is
    # there; ``--force`` reads every body (and so repairs a damaged blob).
    _chunked: dict[tuple[str, str, str], list[Unit]] = attrs.field(factory=dict, init=False, eq=False, repr=False)
    _chunked_revision: tuple[str, str] = attrs.field(default=("", ""), init=False, eq=False, repr=False)
    # The vectors of the last build's units by unit hash, for one embedding model revision.
    _vectors: dict[str, Vector] = attrs.field(factory=dict, init=False, eq=False, repr=False)
    _vectors_model: str = attrs.field(default="", init=False, eq=False, repr=False)

    def project_embedder(self, project_id: str | None) -> Embedder:
        """The embedder that indexes ``project_id`` (its chosen model; ``embedder`` by default)."""
        chosen = self.embedder_for(project_id) if self.embedder_for is not None and project_id is not None else None
        return chosen or self.embedder

    def revisions(self, project_id: str | None = None) -> IndexRevisions:
        """The revisions a generation of ``project_id`` built now records (its embedding model's)."""
        return IndexRevisions(
            parser=self.chunker.parser_revision,
            chunker=self.chunker.revision,
            embedding_model=self.project_embedder(project_id).revision,
            lexical=self.lexical.revision,
            vector=self.vectors.revision,
        )

    def index(self, project_id: str, *, force: bool = False, progress: Progress = _no_progress) -> IndexReport:
        # From its first read of the pointers to its last prune, the build's Local Storage stays
        # where it is: it waits for a move under way, and a move is refused while it runs (no
        # staging directory or new generation left in a place a move has just emptied).
        self.catalog.get_project(project_id)  # project_not_found before any lock is taken
        with self.generations.building(project_id):
            return self._index(project_id, force=force, progress=progress)

    def _index(self, project_id: str, *, force: bool, progress: Progress) -> IndexReport:
        started = time.perf_counter()
        project = self.catalog.get_project(project_id)
        # --force hashes every file anew: a cached hash is stale after an edit the file's stamp
        # cannot show (and a stale hash makes every read fail its check).
        memory = read_effective_memory(project, self.scanner, rehash=force)
        _require_entries(memory)
        # One embedder for the whole build, read once: a model chosen meanwhile changes the next
        # build, never mixes into this one (its revision is the generation's).
        embedder = self.project_embedder(project_id)
        revisions = attrs.evolve(self.revisions(), embedding_model=embedder.revision)
        current = self.catalog.current_generation(project_id)
        if current is not None and current.index_revision == index_revision_of(memory.hash, revisions) and not force:
            try:
                self.generations.verify(Path(current.directory))
            except GenerationCorrupted:
                pass  # a damaged current generation is rebuilt below
            else:
                return IndexReport(
                    project_id,
                    current.index_revision,
                    "unchanged",
                    memory.hash,
                    len(memory.entries),
                    current.unit_count,
                    0,
                    0,
                    time.perf_counter() - started,
                    memory.warnings,
                )
        if not force:
            self._seed_chunked(current)
        memory, units = self._read_units(project, memory, progress, force)
        revision = index_revision_of(memory.hash, revisions)
        staging = self.generations.stage(project_id)
        try:
            embedded, reused, vectors = self._embed(units, progress, embedder)
            progress("lexical index", 0, 1)
            self.lexical.build(staging / LEXICAL_DIR, units, previous=self._previous_lexical(current, force))
            progress("lexical index", 1, 1)
            self.vectors.build(staging / VECTOR_DIR, [u.unit_id for u in units], vectors)
            self.generations.write_units(staging, units)
            directory = self.generations.publish(project_id, staging, revision)
        except BaseException:
            self.generations.discard(staging)
            raise
        self.manifests.put_manifest(memory)
        if self.corpus is not None:
            self.corpus.record_manifest(memory)
            for entry in memory.entries:
                self.corpus.record_blob(entry.resource_hash, entry.byte_size, entry.media_type)
        previous = current.index_revision if current is not None else None
        if previous == revision:
            # A forced rebuild of the same revision keeps the catalog's previous generation as
            # previous: pruning it would leave that pointer naming a deleted directory.
            prior = self.catalog.previous_generation(project_id)
            previous = prior.index_revision if prior is not None else None
        self.catalog.set_current_generation(
            Generation(
                project_id=project_id,
                index_revision=revision,
                effective_memory_hash=memory.hash,
                unit_count=len(units),
                resource_count=len(memory.entries),
                revisions=revisions,
                created_at=self.now(),
                directory=str(directory),
            )
        )
        self.generations.prune(project_id, keep={revision} | ({previous} if previous else set()))
        return IndexReport(
            project_id,
            revision,
            "built",
            memory.hash,
            len(memory.entries),
            len(units),
            embedded,
            reused,
            time.perf_counter() - started,
            memory.warnings,
        )

    def _previous_lexical(self, current: Generation | None, force: bool) -> Path | None:
        """The current generation's lexical index when it was built by this lexical revision: the
        new one starts from it and changes only the units whose text changed (``--force``
        builds from nothing). Generations are immutable, so reading it while it serves is safe;
        the factory falls back to a full build when it cannot use it."""
        if force or current is None or current.revisions.lexical != self.lexical.revision:
            return None
        try:
            # Its files are linked into the new generation, whose seal is made from them: a
            # damaged one must not be carried over and sealed as sound.
            self.generations.verify(Path(current.directory))
        except GenerationCorrupted:
            return None
        return Path(current.directory) / LEXICAL_DIR

    def _seed_chunked(self, current: Generation | None) -> None:
        """Start the chunk memo from the current generation's units when this indexer has none
        (a fresh process, the daemon's first re-index): they are what the chunker made of those
        resource hashes, if its revisions are the generation's. ``--force`` chunks everything."""
        revision = (self.chunker.revision, self.chunker.parser_revision)
        if current is None or (self._chunked and self._chunked_revision == revision):
            return
        if (current.revisions.chunker, current.revisions.parser) != revision:
            return
        try:
            units = self.generations.load_units(Path(current.directory))  # checked against its seal
            entries = stored_manifest(self.manifests, current.effective_memory_hash, current.project_id)
        except MemoryCoreError:
            return  # a damaged or pruned generation: chunk everything
        by_resource: dict[str, list[Unit]] = {}
        for unit in units:
            by_resource.setdefault(unit.resource_id, []).append(unit)
        self._chunked = {
            (e.resource_id, e.resource_hash, e.media_type): by_resource[e.resource_id]
            for e in entries
            if e.resource_id in by_resource
        }
        self._chunked_revision = revision

    def _read_units(
        self, project: Project, memory: EffectiveMemory, progress: Progress, force: bool = False
    ) -> tuple[EffectiveMemory, list[Unit]]:
        """Read and chunk every resource not chunked before. One file never stops the index: when
        some changed or vanished since the scan (or their cached hash was stale), scan again
        hashing every file and build what is there now; a file that still cannot be read is left
        out with a warning."""
        units, failed = self._chunk(memory, progress, force)
        if failed:
            memory = read_effective_memory(project, self.scanner, rehash=True)
            _require_entries(memory)
            units, failed = self._chunk(memory, progress, force)
        if failed:
            kept = [e for e in memory.entries if e.resource_id not in failed]
            memory = EffectiveMemory.from_entries(
                memory.project_id,
                [attrs.evolve(e, ordinal=i) for i, e in enumerate(kept)],
                {e.resource_id: memory.paths[e.resource_id] for e in kept},
                [*memory.warnings, *(f"skipped {reason}" for reason in failed.values())],
            )
            _require_entries(memory)
        return memory, units

    def _chunk(
        self, memory: EffectiveMemory, progress: Progress, force: bool = False
    ) -> tuple[list[Unit], dict[str, str]]:
        """The units of every resource that reads back as scanned (or was chunked before and
        still has its blob), and why each other one did not (resource id -> reason)."""
        units: list[Unit] = []
        failed: dict[str, str] = {}
        total = len(memory.entries)
        revision = (self.chunker.revision, self.chunker.parser_revision)
        known = self._chunked if self._chunked_revision == revision else {}
        chunked: dict[tuple[str, str, str], list[Unit]] = {}  # only this memory's: the memo stays bounded
        for done, entry in enumerate(memory.entries, start=1):
            key = (entry.resource_id, entry.resource_hash, entry.media_type)
            found = None if force else known.get(key)
            if found is not None and self.blobs.exists(entry.resource_hash):
                # Unchanged since it was read and verified: reading every body again was the
                # largest cost of a one-file re-index that grew with the project.
                chunked[key] = found
                units.extend(found)
                progress("chunk", done, total)
                continue
            try:
                data = self.scanner.read(
                    ScannedResource(
                        resource_id=entry.resource_id,
                        layer=entry.layer,
                        uri=entry.uri,
                        resource_hash=entry.resource_hash,
                        byte_size=entry.byte_size,
                        media_type=entry.media_type,
                        path=memory.paths[entry.resource_id],
                    )
                )
            except SourceUnavailable as exc:
                failed[entry.resource_id] = exc.message
            else:
                self.blobs.put(data)
                if found is None:
                    found = self.chunker.chunk(
                        entry.resource_id, entry.resource_hash, data.decode("utf-8"), entry.media_type
                    )
                chunked[key] = found
                units.extend(found)
            progress("chunk", done, total)
        self._chunked, self._chunked_revision = chunked, revision
        return units, failed

    def _embed(self, units: list[Unit], progress: Progress, embedder: Embedder) -> tuple[int, int, list[Vector]]:
        # Every vector here is of ``model``: the memo and the cache are both keyed by it, so a
        # vector of another model's revision can never enter this generation.
        model = embedder.revision
        # Vectors of the last build's units first: a re-index asks the cache only for new
        # hashes (asking it for all 10,000 took about a second on a loaded machine).
        memo = self._vectors if self._vectors_model == model else {}
        wanted = {u.unit_hash for u in units}
        known = {h: memo[h] for h in wanted if h in memo}
        if len(known) < len(wanted):
            known.update(self.embedding_cache.get_many(model, wanted - known.keys()))
        missing: dict[str, str] = {}
        tokens: dict[str, int] = {}
        for u in units:
            if u.unit_hash not in known and u.unit_hash not in missing:
                missing[u.unit_hash] = u.search_text
                tokens[u.unit_hash] = u.token_count
        # Longest first across all missing units (not per call): each batch then pads to nearly
        # its own length, where a batch of mixed lengths costs its longest text for every row.
        hashes = sorted(missing, key=lambda h: -tokens[h])
        for start in range(0, len(hashes), EMBED_BATCH):
            batch = hashes[start : start + EMBED_BATCH]
            vectors = embedder.embed_documents([missing[h] for h in batch])
            fresh = dict(zip(batch, vectors, strict=True))
            self.embedding_cache.put_many(model, fresh)
            known.update(fresh)
            progress("embed", min(start + EMBED_BATCH, len(hashes)), len(hashes))
        self._vectors, self._vectors_model = {h: known[h] for h in wanted}, model  # only this build's: bounded
        return len(hashes), len(units) - len(hashes), [known[u.unit_hash] for u in units]
