"""The manifest a project's generation names, read through the ManifestStore port."""

from __future__ import annotations

from memory_core.domain.errors import GenerationCorrupted
from memory_core.domain.model import ManifestEntry
from memory_core.ports import ManifestStore


def stored_manifest(manifests: ManifestStore, manifest_hash: str, project_id: str) -> tuple[ManifestEntry, ...]:
    """The manifest a project's generation names. A generation is made current only after its
    manifest is stored, so a missing one means a damaged ``local.db``: ``GenerationCorrupted``,
    which a re-index repairs, rather than an ``AttributeError`` on None."""
    entries = manifests.get_manifest(manifest_hash)
    if entries is None:
        raise GenerationCorrupted(
            f"the Effective Memory manifest {manifest_hash} of project {project_id!r} is not stored; "
            f"run `memcore index {project_id}` to rebuild it",
            project=project_id,
            effective_memory_hash=manifest_hash,
        )
    return entries
