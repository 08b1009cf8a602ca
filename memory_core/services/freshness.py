"""How an answer compares with the sources as they are now (brief §3): the live Effective
Memory read through the ``LiveMemory`` port, compared with the generation that ranked it."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import attrs

from memory_core.domain.errors import MemoryCoreError
from memory_core.domain.model import EffectiveMemory, ManifestEntry, Project, ScannedResource
from memory_core.ports import BlobStore, LiveMemory, SourceScanner
from memory_core.services.open_generations import OpenGeneration

log = logging.getLogger(__name__)


def _described(text: str, default: Any = attrs.NOTHING) -> Any:
    """A field with its wire description (the daemon's OpenAPI and the MCP schema show it)."""
    return attrs.field(default=default, metadata={"schema": {"description": text}})


@attrs.frozen
class Freshness:
    """How the generation that ranked this answer compares with the sources as they are now.

    The answer always comes from the current generation; freshness only says how far it lags
    the live sources. When ``live`` is False the live memory could not be read (``error`` says
    why) and the counts are unknown.
    """

    live: bool = _described("the live Effective Memory was read; false: see error, the counts are unknown")
    index_behind: bool | None = _described("the sources changed since the index was built (a re-index would differ)")
    changed_resources: int | None = _described("resources added, edited or deleted since the index was built")
    reindex_pending: bool = _described("a re-index is queued or running (the daemon's watcher); never in process")
    effective_memory_hash: str | None = _described("the hash of the live Effective Memory this Run recorded")
    stale_resources: tuple[str, ...] = _described(
        "resources of returned fragments edited since the index was built: their text may be out of date", ()
    )
    missing_resources: tuple[str, ...] = _described(
        "resources of returned fragments deleted since the index was built: do not rely on them", ()
    )
    error: str | None = _described("why the live memory could not be read", None)


def begin_live_read(live_memory: LiveMemory | None, project: Project) -> Callable[[], EffectiveMemory] | None:
    """Start reading the live memory as the activation begins, so it overlaps the ranking
    (``LiveMemory.read_ahead``); never raises: a failure to start is raised by the callable."""
    if live_memory is None:
        return None
    try:
        return live_memory.read_ahead(project)
    except Exception as exc:
        failure = exc

        def failed() -> EffectiveMemory:
            raise failure

        return failed


def read_live(
    live_memory: LiveMemory | None,
    started: Callable[[], EffectiveMemory] | None,
    project: Project,
    opened: OpenGeneration,
    returned: Iterable[str],
    *,
    keep_blobs: BlobStore | None,
    scanner: SourceScanner,
) -> tuple[EffectiveMemory | None, Freshness]:
    """The live Effective Memory and the answer's freshness against it (``started``: the read
    ``begin_live_read`` began; ``returned``: the resource ids of the fragments, in order). Never
    raises: a source that cannot be read leaves the Run with the generation's memory and says
    so. ``keep_blobs``: where to keep the bodies of live resources the generation lacks (None
    when no Run records this answer)."""
    generation = opened.generation
    if live_memory is None or started is None:
        return None, Freshness(False, None, None, False, None, error="live memory is not read by this engine")
    try:
        pending = bool(live_memory.reindex_pending(project.project_id))
    except Exception:
        log.exception("could not ask whether project %s re-indexes", project.project_id)
        pending = False
    try:
        live = started()
    except Exception as exc:
        log.warning("could not read the live memory of %s: %s", project.project_id, exc)
        reason = exc.message if isinstance(exc, MemoryCoreError) else f"{type(exc).__name__}: {exc}"
        return None, Freshness(False, None, None, pending, None, error=reason[:500])
    if live.hash == generation.effective_memory_hash:
        return live, Freshness(True, False, 0, pending, live.hash)
    then = opened.hashes
    last = opened.last_live
    if last is None or last[0] != live.hash:
        now = {e.resource_id: e.resource_hash for e in live.entries}
        changed = sum(1 for r, h in now.items() if then.get(r) != h) + sum(1 for r in then if r not in now)
        foreign = tuple(e for e in live.entries if e.resource_hash not in opened.hash_set)
        last = opened.last_live = (live.hash, now, changed, foreign)
    _, now, changed, foreign = last
    ordered = dict.fromkeys(returned)
    stale = tuple(r for r in ordered if r in now and now[r] != then.get(r))
    missing = tuple(r for r in ordered if r not in now)
    error = keep_live_blobs(keep_blobs, scanner, live, foreign) if keep_blobs is not None else None
    return live, Freshness(True, True, changed, pending, live.hash, stale, missing, error)


def keep_live_blobs(
    blobs: BlobStore, scanner: SourceScanner, live: EffectiveMemory, foreign: Sequence[ManifestEntry]
) -> str | None:
    """Store the bodies of live resources the generation does not hold, so a case made from
    this Run has its whole corpus (seed: the Run's content-addressed resource blobs). Only
    changed files are read, and each only once: a later Run finds its blob stored."""
    failed: list[str] = []
    for e in foreign:  # the live entries whose body the generation does not hold
        if blobs.exists(e.resource_hash):
            continue
        try:
            blobs.put(scanner.read(ScannedResource(
                e.resource_id, e.layer, e.uri, e.resource_hash, e.byte_size, e.media_type, live.paths[e.resource_id]
            )))  # fmt: skip
        except Exception as exc:  # changed again or vanished since the scan: a case will say so
            log.warning("could not keep the body of %s: %s", e.resource_id, exc)
            failed.append(e.resource_id)
    if failed:
        return f"{len(failed)} changed resource body(ies) could not be kept (first: {failed[0]!r})"
    return None
