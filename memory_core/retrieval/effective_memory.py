"""Effective Memory: the ordered, override-resolved resources a project sees now (brief §3)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from memory_core.domain.model import EffectiveMemory, ManifestEntry, Project, ScannedResource, Source


def resolve(
    project_id: str, scanned: Sequence[Sequence[ScannedResource]], warnings: Sequence[str] = ()
) -> EffectiveMemory:
    """Override by ``resource_id`` in layer order.

    ``scanned`` holds one list per source, in the project's source order. A resource from a
    higher layer replaces one with the same id from a lower layer; between sources of the same
    layer the later source wins. The manifest is ordered by resource id so that it does not
    depend on the order in which sources were walked.
    """
    chosen: dict[str, tuple[int, int, ScannedResource]] = {}
    for source_index, resources in enumerate(scanned):
        for resource in resources:
            key = (resource.layer.precedence, source_index)
            current = chosen.get(resource.resource_id)
            if current is None or key >= current[:2]:
                chosen[resource.resource_id] = (*key, resource)
    ordered = sorted(chosen.values(), key=lambda item: item[2].resource_id)
    entries = [
        ManifestEntry(
            ordinal=ordinal,
            resource_id=r.resource_id,
            layer=r.layer,
            uri=r.uri,
            resource_hash=r.resource_hash,
            byte_size=r.byte_size,
            media_type=r.media_type,
        )
        for ordinal, (_, _, r) in enumerate(ordered)
    ]
    paths = {r.resource_id: r.path for _, _, r in ordered}
    return EffectiveMemory.from_entries(project_id, entries, paths, warnings)


class Scanner(Protocol):
    """What reading an Effective Memory needs of a scanner (``ports.SourceScanner`` is one)."""

    def scan(self, source: Source, *, rehash: bool = False) -> tuple[list[ScannedResource], list[str]]: ...


def read_effective_memory(project: Project, scanner: Scanner, *, rehash: bool = False) -> EffectiveMemory:
    """Walk every source of ``project`` and resolve overrides (``rehash``: hash every file anew)."""
    scanned: list[list[ScannedResource]] = []
    warnings: list[str] = []
    for source in project.sources:
        found, source_warnings = scanner.scan(source, rehash=rehash)
        scanned.append(found)
        warnings.extend(source_warnings)
    return resolve(project.project_id, scanned, warnings)
