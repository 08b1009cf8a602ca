"""Ports: the narrow interfaces the core needs from the world.

Every port has a real adapter in ``memory_core.adapters`` and an in-memory one in
``memory_core.adapters.in_memory`` for fast core tests; one contract suite per port
(``tests/contracts``) runs against both.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Protocol

from memory_core.domain.model import (
    EffectiveMemory,
    Generation,
    Hit,
    ManifestEntry,
    Project,
    ScannedResource,
    Source,
    Unit,
    Vector,
)
from memory_core.retrieval.pipeline import RerankInput


class Chunker(Protocol):
    @property
    def revision(self) -> str: ...
    @property
    def parser_revision(self) -> str: ...

    def chunk(self, resource_id: str, resource_hash: str, text: str, media_type: str) -> list[Unit]: ...


class SourceScanner(Protocol):
    """Walks one source directory: markdown and plain text, hidden and binary files skipped."""

    def scan(self, source: Source, *, rehash: bool = False) -> tuple[list[ScannedResource], list[str]]:
        """The resources found and human-readable warnings (skipped files, size limit).
        ``rehash`` reads every file again instead of trusting a cached hash."""
        ...

    def read(self, resource: ScannedResource) -> bytes: ...


class Embedder(Protocol):
    @property
    def revision(self) -> str: ...
    @property
    def dimensions(self) -> int: ...

    def embed_documents(self, texts: Sequence[str]) -> Sequence[Vector]: ...

    def embed_query(self, text: str) -> Vector: ...


class LexicalSearcher(Protocol):
    def search(self, query: str, depth: int) -> list[Hit]: ...

    def close(self) -> None: ...


class LexicalIndexFactory(Protocol):
    @property
    def revision(self) -> str: ...

    def build(self, directory: Path, units: Sequence[Unit], *, previous: Path | None = None) -> None:
        """``previous``: an earlier generation's index of this revision, which the build may
        start from; the result equals a full build of ``units`` either way."""
        ...

    def open(self, directory: Path) -> LexicalSearcher: ...


class VectorSearcher(Protocol):
    def search(self, query_vector: Vector, depth: int) -> list[Hit]: ...

    def similarities(self, query_vector: Vector, unit_ids: Sequence[str]) -> list[float]:
        """Cosine similarity of the query with each stored unit vector, in order."""
        ...

    def close(self) -> None: ...


class VectorIndexFactory(Protocol):
    @property
    def revision(self) -> str: ...

    def build(self, directory: Path, unit_ids: Sequence[str], vectors: Sequence[Vector]) -> None: ...

    def open(self, directory: Path) -> VectorSearcher: ...


class EmbeddingCache(Protocol):
    """Embeddings by ``(model revision, unit_hash)``: an unchanged unit is never embedded twice."""

    def get_many(self, model_revision: str, unit_hashes: Iterable[str]) -> dict[str, Vector]: ...

    def put_many(self, model_revision: str, vectors: dict[str, Vector]) -> None: ...

    def close(self) -> None: ...


class BlobStore(Protocol):
    """Content-addressed bodies: atomic writes, verified reads."""

    def put(self, data: bytes) -> str: ...

    def get(self, digest: str) -> bytes: ...

    def exists(self, digest: str) -> bool: ...

    def delete(self, digest: str) -> None: ...

    def digests(self) -> Iterator[str]: ...


class GenerationStore(Protocol):
    """Project Local Storage: rebuildable commit generations, atomically published."""

    def stage(self, project_id: str) -> Path:
        """A fresh empty staging directory for a generation being built."""
        ...

    def write_units(self, directory: Path, units: Sequence[Unit]) -> None: ...

    def publish(self, project_id: str, staging: Path, index_revision: str) -> Path:
        """Seal the staging directory and move it into place; returns its final path."""
        ...

    def load_units(self, directory: Path) -> list[Unit]:
        """Units of a published generation; raises GenerationCorrupted if it is not sealed."""
        ...

    def verify(self, directory: Path) -> None:
        """Re-hash every sealed file; GenerationCorrupted on a missing file or a mismatch."""
        ...

    def prune(self, project_id: str, keep: set[str]) -> None: ...

    def discard(self, staging: Path) -> None: ...

    def remove_project(self, project_id: str, location: Path | None = None) -> None:
        """Delete the project's Local Storage at ``location`` (default: where it is now)."""
        ...

    def location(self, project_id: str) -> Path:
        """The directory that holds the project's generations (brief §6)."""
        ...

    def default_location(self, project_id: str) -> Path: ...

    def usage(self, project_id: str) -> tuple[int, dict[str, int]]:
        """Bytes under the location, and per published generation (index revision -> bytes)."""
        ...

    def prepare_location(self, project_id: str, destination: Path, taken: Sequence[Path]) -> Path:
        """Check and create an empty, owner-only, writable destination that overlaps no other
        project's storage (``taken``); InvalidStorageLocation otherwise. Returns its real path."""
        ...

    def copy_generations(self, project_id: str, directories: Mapping[str, Path], destination: Path) -> dict[str, Path]:
        """Copy the published generations (index revision -> directory) under ``destination``,
        each verified against its seal; all or none (a failed write: StorageUnavailable).
        Returns their new directories."""
        ...

    def abandon_location(self, project_id: str, destination: Path) -> None:
        """Undo a move into ``destination`` that did not complete: its copies, and the
        directories ``prepare_location`` created (never one that was there before)."""
        ...

    def overlap(self, path: Path, places: Sequence[Path]) -> Path | None:
        """The first of ``places`` that ``path`` lies in or around (symlinks resolved), else None."""
        ...

    def gone(self, directory: Path) -> bool:
        """Whether nothing is left of a published generation (its directory is not there)."""
        ...

    def building(self, project_id: str) -> AbstractContextManager[None]:
        """Held while an index reads the pointers, builds, publishes and prunes: shared with
        other builds of the project; waits while a move or clear of it runs."""
        ...

    def relocating(self, project_id: str) -> AbstractContextManager[None]:
        """Held while the project's Local Storage moves or is cleared: exclusive; refused at
        once (StorageUnavailable, reason ``busy``) while another one, or a build of it, runs."""
        ...


class ManifestStore(Protocol):
    """Canonical Effective Memory manifests, stored once by hash."""

    def put_manifest(self, effective_memory: EffectiveMemory) -> str:
        """Store the manifest under its hash (once) and return the hash; ``InvalidRequest`` when
        ``effective_memory.hash`` is not the hash of its entries."""
        ...

    def get_manifest(self, manifest_hash: str) -> tuple[ManifestEntry, ...] | None:
        """The entries stored under that hash, in order; None when none are."""
        ...


class Catalog(ManifestStore, Protocol):
    """Projects, their current generation, the manifests generations name and the file-hash
    cache (``local.db``); the composition root uses the catalog as the ``ManifestStore`` too."""

    def add_project(self, project: Project) -> None: ...

    def get_project(self, project_id: str) -> Project: ...

    def list_projects(self) -> list[Project]: ...

    def remove_project(self, project_id: str) -> None: ...

    def current_generation(self, project_id: str) -> Generation | None: ...

    def previous_generation(self, project_id: str) -> Generation | None: ...

    def set_current_generation(self, generation: Generation) -> None:
        """Atomically make ``generation`` current; the old current becomes previous."""
        ...

    def storage_location(self, project_id: str) -> str | None:
        """The project's recorded Local Storage directory; None: the default place."""
        ...

    def set_storage_location(
        self, project_id: str, location: str | None, directories: Mapping[str, str], forget: Iterable[str] = ()
    ) -> None:
        """Atomically record the location and the moved generations' directories, and forget
        the generations ``forget`` names (gone from disk: no pointer may keep naming them)."""
        ...

    def clear_generations(self, project_id: str) -> None:
        """Forget every generation of the project (the next index rebuilds)."""
        ...

    def close(self) -> None: ...


class Clock(Protocol):
    def now_iso(self) -> str: ...

    def monotonic(self) -> float: ...


class Reranker(Protocol):
    @property
    def revision(self) -> str: ...

    def rerank(self, query: str, candidates: Sequence[RerankInput]) -> list[float]:
        """One score per candidate, in order; higher is better."""
        ...


class LiveMemory(Protocol):
    """The Effective Memory a project sees now, from its live sources (brief §3), read cheaply."""

    def effective_memory(self, project: Project) -> EffectiveMemory: ...

    def read_ahead(self, project: Project) -> Callable[[], EffectiveMemory]:
        """Begin reading ``project``'s live memory while the caller ranks; the callable, called
        once on the caller's thread, finishes the read and returns it (or raises as
        ``effective_memory`` would). An adapter with nothing to overlap defers the whole read."""
        ...

    def reindex_pending(self, project_id: str) -> bool: ...
