"""The rules every Run store obeys: run ids, bounded fields, the manifest check, interrupted
Runs, and the blob liveness rule of Clear History's garbage collection."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

from memory_core.domain.errors import InvalidRequest
from memory_core.domain.ids import new_id
from memory_core.domain.model import EffectiveMemory, manifest_hash

INTERRUPTED = "retrieval_interrupted"
INTERRUPTED_STAGE = "unknown"
MAX_ERROR_FIELD = 100  # error stage and code are short stable words; bound them anyway
BLOB_GRACE_S = 3600.0  # a younger unreferenced blob may belong to an index build in progress

new_run_id = new_id


class Blobs(Protocol):
    """What garbage collection needs of a BlobStore (the port lives a layer above)."""

    def digests(self) -> Iterable[str]: ...

    def delete(self, digest: str) -> None: ...


def bounded(text: str | None, limit: int) -> str | None:
    return None if text is None else text[:limit]


def total_ms(latency: Mapping[str, float]) -> float | None:
    value = latency.get("total")
    return float(value) if value is not None else None


def check_manifest(effective_memory: EffectiveMemory) -> str:
    digest = manifest_hash(effective_memory.entries)
    if digest != effective_memory.hash:
        raise InvalidRequest(
            "Effective Memory hash does not match its manifest", expected=effective_memory.hash, actual=digest
        )
    return digest


def collect_blobs(blobs: Blobs, live: Callable[[], set[str]], grace_s: float) -> int:
    """Delete blob files not in ``live()`` and older than ``grace_s``; returns how many.

    ``live`` is read after the database commit that made blobs unreferenced, so a blob a new
    generation took up meanwhile is kept. Files only: a crash here leaves orphans, swept next time.
    """
    keep = live()
    cutoff = time.time() - grace_s
    deleted = 0
    for digest in list(blobs.digests()):
        if digest in keep or not _older_than(blobs, digest, cutoff):
            continue
        blobs.delete(digest)
        deleted += 1
    sweep = getattr(blobs, "sweep_temp", None)
    if sweep is not None:
        sweep()
    return deleted


def _older_than(blobs: Blobs, digest: str, cutoff: float) -> bool:
    path_of = getattr(blobs, "path_of", None)
    if path_of is None:  # a store without files (in memory) has no age
        return True
    try:
        return bool(os.stat(path_of(digest)).st_mtime <= cutoff)
    except FileNotFoundError:
        return False


def interrupted_summary(pid: int | None) -> str:
    return f"the process that ran this activation (pid {pid}) ended before the Run was recorded"
