"""Dense vector index: exact cosine over a float32 matrix, HNSW (usearch) above a size limit.

Files in a generation directory (all 0600):

- ``vectors.npy``    float32 ``(n, d)``, rows L2-normalised at build time
- ``unit_ids.json``  the unit ids, row order
- ``vectors.usearch`` HNSW graph, only when ``n > exact_limit``
- ``vector_index.json`` what was built (mode, count, dimensions, ids hash)

Exact search (numpy matrix-vector product, one BLAS thread) is reproducible and needs no build;
it costs ~1-3 ms at 10-50k units. Above ``exact_limit`` the HNSW graph picks the candidates and
they are rescored exactly from the matrix, so scores agree with ``similarities`` (to float32
rounding) and ties resolve by unit order on both paths.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import threading
from collections.abc import Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import numpy as np

from memory_core.adapters.files.blob_store import write_private
from memory_core.adapters.files.disk_errors import disk_writes
from memory_core.domain.errors import GenerationCorrupted, InvalidRequest
from memory_core.domain.model import Hit, Vector
from memory_core.domain.storage_rules import validate_build_input

VECTORS_FILE = "vectors.npy"
IDS_FILE = "unit_ids.json"
HNSW_FILE = "vectors.usearch"
META_FILE = "vector_index.json"
FORMAT = "memory-core-vectors"
FORMAT_VERSION = 1
DEFAULT_EXACT_LIMIT = 20_000

_controller: Any = None


def blas_single_thread() -> AbstractContextManager[Any]:
    """Limit BLAS to one thread: idle OpenBLAS threads spin and starve torch on two cores
    (brief §11). About 6 µs per use once the controller exists."""
    global _controller
    if _controller is None:
        from threadpoolctl import ThreadpoolController

        _controller = ThreadpoolController()
    limit: AbstractContextManager[Any] = _controller.limit(limits=1, user_api="blas")
    return limit


def _normalise_rows(matrix: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    # Zero rows stay zero (cosine 0 with everything) instead of becoming NaN.
    return (matrix / np.where(norms == 0.0, 1.0, norms)).astype(np.float32)


def _top(scores: np.ndarray, depth: int) -> np.ndarray:
    """Row indices of the best ``depth`` scores: score descending, then row order."""
    n = scores.shape[0]
    k = min(max(depth, 0), n)
    if k == 0:
        return np.empty(0, dtype=np.int64)
    if k < n:
        kth = np.partition(scores, n - k)[n - k]
        # Every row tied with the k-th score competes, so ties resolve by row order, not by
        # whatever argpartition happened to pick.
        candidates = np.flatnonzero(scores >= kth)
    else:
        candidates = np.arange(n)
    order = np.argsort(-scores[candidates], kind="stable")
    return candidates[order][:k]


class UsearchVectorSearcher:
    def __init__(self, unit_ids: list[str], matrix: np.ndarray, hnsw: Any = None) -> None:
        self._unit_ids = unit_ids
        self._matrix = matrix
        self._hnsw = hnsw
        self._rows = {unit_id: row for row, unit_id in enumerate(unit_ids)}
        self._closed = False

    @property
    def mode(self) -> str:
        return "hnsw" if self._hnsw is not None else "exact"

    def __len__(self) -> int:
        return len(self._unit_ids)

    def _query(self, query_vector: Vector) -> np.ndarray:
        if self._closed:
            raise RuntimeError("vector searcher is closed")
        query = np.asarray(query_vector, dtype=np.float64).reshape(-1)
        dims = self._matrix.shape[1]
        if self._unit_ids and query.shape[0] != dims:
            raise InvalidRequest(
                f"query vector has {query.shape[0]} dimensions, the index {dims}",
                expected=dims,
                actual=int(query.shape[0]),
            )
        if not np.isfinite(query).all():
            raise InvalidRequest("query vector holds a NaN or infinite value")
        norm = float(np.linalg.norm(query))
        return (query / norm if norm > 0.0 else query).astype(np.float32)

    def search(self, query_vector: Vector, depth: int) -> list[Hit]:
        query = self._query(query_vector)
        if not self._unit_ids or depth <= 0:
            return []
        with blas_single_thread():
            if self._hnsw is None:
                scores = self._matrix @ query
                rows = _top(scores, depth)
                picked = scores[rows]
            else:
                matches = self._hnsw.search(query, depth)
                keys = np.sort(np.asarray(matches.keys, dtype=np.int64))
                # Rescore exactly: scores equal ``similarities`` and ties resolve by row order.
                exact = self._matrix[keys] @ query
                order = _top(exact, depth)
                rows, picked = keys[order], exact[order]
        return [(self._unit_ids[r], float(s)) for r, s in zip(rows.tolist(), picked.tolist(), strict=True)]

    def similarities(self, query_vector: Vector, unit_ids: Sequence[str]) -> list[float]:
        query = self._query(query_vector)
        try:
            rows = [self._rows[u] for u in unit_ids]
        except KeyError as e:
            raise GenerationCorrupted("unit id absent from the vector index", unit_id=e.args[0]) from None
        if not rows:
            return []
        with blas_single_thread():
            scores = self._matrix[np.asarray(rows, dtype=np.int64)] @ query
        return [float(s) for s in scores.tolist()]

    def close(self) -> None:
        self._closed = True
        self._hnsw = None
        self._matrix = np.empty((0, 0), dtype=np.float32)


class UsearchIndexFactory:
    """Builds and opens vector indexes in a generation directory."""

    def __init__(
        self,
        exact_limit: int = DEFAULT_EXACT_LIMIT,
        connectivity: int = 16,
        expansion_add: int = 128,
        expansion_search: int = 256,
    ) -> None:
        self.exact_limit = exact_limit
        self.connectivity = connectivity
        self.expansion_add = expansion_add
        self.expansion_search = expansion_search
        self.revision = (
            f"usearch-cos/{FORMAT_VERSION}:exact<={exact_limit}:"
            f"hnsw-m{connectivity}-efc{expansion_add}-efs{expansion_search}"
        )
        # The last build's vectors (the objects, held so an ``is`` test is sound) and normalised
        # rows: a re-index hands back the same Vector objects for unchanged units, and
        # converting 10,000 rows of Python floats again was most of a one-file re-index's build.
        self._memo_lock = threading.Lock()
        self._last: tuple[list[Vector], np.ndarray] | None = None

    def build(self, directory: Path, unit_ids: Sequence[str], vectors: Sequence[Vector]) -> None:
        ids = [str(u) for u in unit_ids]
        if len(ids) != len(vectors):
            raise InvalidRequest(f"{len(ids)} unit ids but {len(vectors)} vectors")
        normalised = self._reused(vectors)
        if normalised is None:
            normalised = self._normalised(ids, vectors)
        dims = validate_build_input(ids, [normalised.shape[1]] * normalised.shape[0])
        normalised = normalised.reshape(len(ids), dims)
        with self._memo_lock:
            self._last = (list(vectors), normalised)
        directory = Path(directory)
        mode = "hnsw" if len(ids) > self.exact_limit else "exact"
        ids_bytes = json.dumps(ids, ensure_ascii=False).encode("utf-8")
        meta = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "mode": mode,
            "count": len(ids),
            "dimensions": dims,
            "unit_ids_sha256": hashlib.sha256(ids_bytes).hexdigest(),
            "revision": self.revision,
        }
        # A full disk is storage_unavailable naming the directory, not an untyped OSError; the
        # half-written staging directory is the indexer's to discard.
        with disk_writes("the vector index", directory):
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            if mode == "hnsw":
                self._build_hnsw(directory / HNSW_FILE, normalised)
            fd = os.open(directory / VECTORS_FILE, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as f:
                np.save(f, normalised, allow_pickle=False)
                f.flush()
                os.fsync(f.fileno())
            write_private(directory / IDS_FILE, ids_bytes)
            write_private(directory / META_FILE, json.dumps(meta, sort_keys=True).encode("utf-8"))

    @staticmethod
    def _normalised(ids: list[str], vectors: Sequence[Vector]) -> np.ndarray:
        try:
            matrix = np.asarray(vectors, dtype=np.float64) if len(vectors) else np.empty((0, 0))
        except ValueError:  # ragged rows
            raise InvalidRequest("vectors of different dimensions") from None
        if matrix.ndim != 2:
            raise InvalidRequest("vectors of different dimensions")
        validate_build_input(ids, [matrix.shape[1]] * matrix.shape[0])
        if not np.isfinite(matrix).all():
            raise InvalidRequest("vectors hold a NaN or infinite value")
        with blas_single_thread():
            return _normalise_rows(matrix)

    def _reused(self, vectors: Sequence[Vector]) -> np.ndarray | None:
        """The normalised matrix of ``vectors`` from the last build's rows where the same Vector
        object was built before, the others converted and checked as a full build does (rows
        are normalised one by one, so the result is the same bytes); None when nothing is reused."""
        with self._memo_lock:
            last = self._last
        if last is None or not len(vectors) or last[1].ndim != 2 or not last[1].shape[0]:
            return None
        old_vectors, old_matrix = last
        row_of = {id(v): row for row, v in enumerate(old_vectors)}
        rows = [row_of.get(id(v), -1) for v in vectors]
        # ``is`` as well as id(): an id is only the same object while both lists hold it.
        rows = [r if r >= 0 and old_vectors[r] is v else -1 for r, v in zip(rows, vectors, strict=True)]
        fresh = [i for i, r in enumerate(rows) if r < 0]
        if len(fresh) == len(vectors):
            return None
        out = np.empty((len(vectors), old_matrix.shape[1]), dtype=np.float32)
        kept = [i for i, r in enumerate(rows) if r >= 0]
        out[kept] = old_matrix[[rows[i] for i in kept]]
        if fresh:
            new = self._normalised([str(i) for i in fresh], [vectors[i] for i in fresh])
            if new.shape[1] != out.shape[1]:
                raise InvalidRequest("vectors of different dimensions")
            out[fresh] = new
        return out

    def _build_hnsw(self, path: Path, matrix: np.ndarray) -> None:
        from usearch.compiled import MetricKind  # where usearch.index imports it from
        from usearch.index import Index

        index = Index(
            ndim=matrix.shape[1],
            metric=MetricKind.Cos,
            dtype="f32",
            connectivity=self.connectivity,
            expansion_add=self.expansion_add,
            expansion_search=self.expansion_search,
        )
        # One thread: usearch's parallel insertion makes another graph each build (other
        # neighbours, so other approximate answers), and identical inputs must rank identically
        # (replay, evaluation). It costs about 2x the graph's build time (16 s against 7.6 s for
        # 20,000 vectors here), which embedding the units dwarfs.
        index.add(np.arange(matrix.shape[0], dtype=np.uint64), matrix, threads=1)
        try:
            index.save(str(path))
        except RuntimeError as exc:  # usearch reports a failed write (a full disk) so
            raise OSError(errno.EIO, f"usearch could not save the graph: {exc}", str(path)) from exc
        os.chmod(path, 0o600)

    def open(self, directory: Path) -> UsearchVectorSearcher:
        directory = Path(directory)
        try:
            meta = json.loads((directory / META_FILE).read_bytes())
            ids_bytes = (directory / IDS_FILE).read_bytes()
            ids = json.loads(ids_bytes)
            if meta.get("format") != FORMAT or meta.get("format_version") != FORMAT_VERSION:
                raise ValueError(f"unknown format {meta.get('format')!r} {meta.get('format_version')!r}")
            if hashlib.sha256(ids_bytes).hexdigest() != meta["unit_ids_sha256"]:
                raise ValueError("unit ids do not match their recorded hash")
            hnsw_mode = meta["mode"] == "hnsw"
            # The HNSW path touches only the rows it rescores: map the matrix instead of reading it.
            matrix = np.load(directory / VECTORS_FILE, mmap_mode="r" if hnsw_mode else None, allow_pickle=False)
            count, dims = int(meta["count"]), int(meta["dimensions"])
            if matrix.dtype != np.float32 or matrix.shape != (count, dims) or len(ids) != count:
                raise ValueError(f"vectors {matrix.shape} {matrix.dtype} do not match {count} x {dims}")
            if not hnsw_mode and not np.isfinite(matrix).all():
                raise ValueError("vectors hold a NaN or infinite value")
            hnsw = self._open_hnsw(directory / HNSW_FILE, count, dims) if hnsw_mode else None
        except (OSError, ValueError, KeyError, TypeError, RuntimeError) as e:
            raise GenerationCorrupted(
                f"vector index at {directory} is missing or corrupt: {e}", directory=str(directory)
            ) from e
        return UsearchVectorSearcher(list(ids), matrix, hnsw)

    def _open_hnsw(self, path: Path, count: int, dims: int) -> Any:
        from usearch.index import Index

        if not path.is_file():
            raise ValueError(f"{path.name} is missing")
        index = Index.restore(str(path), view=True)
        if index is None or index.size != count or index.ndim != dims:
            raise ValueError(f"{path.name} does not match {count} x {dims}")
        # usearch declares the setter away from the getter, so mypy sees a read-only property
        index.expansion_search = self.expansion_search  # type: ignore[misc]
        return index
