"""The Retrieval Run ports: the recorder the pipeline writes to and the store that keeps Runs."""

from __future__ import annotations

from typing import Protocol

from memory_core.domain.model import EffectiveMemory, ManifestEntry
from memory_core.runs.records import ClearReport, RunDetail, RunFailure, RunFilter, RunPage, RunStart, RunTrace


class RunRecorder(Protocol):
    def start(self, run: RunStart) -> str: ...

    def complete(self, run_id: str, trace: RunTrace) -> None: ...

    def fail(self, run_id: str, failure: RunFailure) -> None: ...


class CorpusRegistry(Protocol):
    """Manifests and blob metadata a Run refers to, recorded once at index time so that
    recording a Run costs the same whatever the corpus size."""

    def record_manifest(self, effective_memory: EffectiveMemory) -> str: ...

    def record_blob(self, sha256: str, byte_size: int, media_type: str) -> None: ...


class RunStore(RunRecorder, CorpusRegistry, Protocol):
    """Recorded Runs: read, recover and clear (seed "Status and recovery", brief §5-§6)."""

    def pin(self, run_id: str) -> None: ...

    def unpin(self, run_id: str) -> None: ...

    def list_runs(self, run_filter: RunFilter, *, limit: int = 50, cursor: str | None = None) -> RunPage: ...

    def get_run(self, run_id: str) -> RunDetail: ...

    def run_manifest(self, manifest_hash: str) -> tuple[ManifestEntry, ...] | None:
        """The ordered manifest recorded under that hash, or None when it was never recorded."""
        ...

    def recover_interrupted(self) -> int:
        """Mark ``running`` Runs whose owner process is gone ``failed`` (retrieval_interrupted)."""
        ...

    def clear(self, project_id: str | None = None) -> ClearReport:
        """Delete unpinned Runs (one project or all) and garbage-collect unreferenced blobs."""
        ...

    def settle(self) -> None:
        """Return once every write queued by this process has landed (a store may write a
        Run's trace behind the answer; its own reads settle first, other readers may call this)."""
        ...

    def close(self) -> None:
        """Finish pending writes; the store stays usable (it may restart its own threads)."""
        ...
