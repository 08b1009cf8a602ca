"""Embeddings by ``(model revision, unit_hash)`` in an apsw (SQLite) file, so an unchanged unit is
never embedded twice. Vectors are stored as little-endian float32 bytes."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import cast

import apsw
import numpy as np

from memory_core.domain.errors import InvalidRequest, StorageUnavailable
from memory_core.domain.model import Vector

_SCHEMA = """
CREATE TABLE IF NOT EXISTS embeddings (
    model_revision TEXT NOT NULL,
    unit_hash TEXT NOT NULL,
    dimensions INTEGER NOT NULL,
    vector BLOB NOT NULL,
    PRIMARY KEY (model_revision, unit_hash)
) WITHOUT ROWID;
"""
_FLOAT32 = np.dtype("<f4")
# SQLite allows 32k bound parameters nowadays; 500 keeps statements small and cacheable.
_CHUNK = 500


class SqliteEmbeddingCache:
    def __init__(self, path: Path | str, busy_timeout_ms: int = 5_000) -> None:
        self.path = Path(path)
        try:
            if not self.path.parent.exists():
                self.path.parent.mkdir(mode=0o700, parents=True)
            # Create the file 0600 ourselves: SQLite gives its -wal and -shm files the same mode.
            os.close(os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600))
            os.chmod(self.path, 0o600)
            self._conn = apsw.Connection(str(self.path))
            self._conn.set_busy_timeout(busy_timeout_ms)
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=NORMAL")
            with self._conn:
                self._conn.execute(_SCHEMA)
        except (OSError, apsw.Error) as e:
            raise StorageUnavailable(f"embedding cache {self.path} is unavailable: {e}", path=str(self.path)) from e

    def get_many(self, model_revision: str, unit_hashes: Iterable[str]) -> dict[str, Vector]:
        wanted = list(dict.fromkeys(unit_hashes))
        found: dict[str, Vector] = {}
        try:
            with self._conn:  # one read transaction: a consistent view across chunks
                for start in range(0, len(wanted), _CHUNK):
                    chunk = wanted[start : start + _CHUNK]
                    marks = ",".join("?" * len(chunk))
                    rows = self._conn.execute(
                        "SELECT unit_hash, dimensions, vector FROM embeddings"
                        f" WHERE model_revision = ? AND unit_hash IN ({marks})",
                        (model_revision, *chunk),
                    )
                    for unit_hash, dims, blob in rows:
                        vector = np.frombuffer(blob, dtype=_FLOAT32).astype(np.float32)
                        if vector.shape[0] == dims:  # a torn or foreign row is a miss, not an error
                            # A 1-d float32 array serves as the port's Sequence[float] (as minilm's).
                            found[unit_hash] = cast(Vector, vector)
        except apsw.Error as e:
            raise StorageUnavailable(f"embedding cache read failed: {e}", path=str(self.path)) from e
        return found

    def put_many(self, model_revision: str, vectors: dict[str, Vector]) -> None:
        rows = []
        for unit_hash, vector in vectors.items():
            array = np.asarray(vector, dtype=_FLOAT32).reshape(-1)
            if not np.isfinite(array).all():
                raise InvalidRequest("embedding holds a NaN or infinite value", unit_hash=unit_hash)
            rows.append((model_revision, unit_hash, int(array.shape[0]), array.tobytes()))
        if not rows:
            return
        try:
            with self._conn:
                self._conn.executemany(
                    "INSERT OR REPLACE INTO embeddings (model_revision, unit_hash, dimensions, vector)"
                    " VALUES (?, ?, ?, ?)",
                    rows,
                )
        except apsw.Error as e:
            raise StorageUnavailable(f"embedding cache write failed: {e}", path=str(self.path)) from e

    def count(self, model_revision: str | None = None) -> int:
        if model_revision is None:
            row = self._conn.execute("SELECT count(*) FROM embeddings").fetchone()
        else:
            row = self._conn.execute(
                "SELECT count(*) FROM embeddings WHERE model_revision = ?", (model_revision,)
            ).fetchone()
        return int(row[0]) if row else 0

    def close(self) -> None:
        self._conn.close()
