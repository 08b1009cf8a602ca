"""The engine: the one library entry point (projects, indexing, activation).

Built by the composition root (``memory_core.entrypoints.bootstrap``) with every port
overridable; entrypoints stay thin and call only this.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from memory_core.domain.canonical import is_utf8_text
from memory_core.domain.errors import (
    GenerationCorrupted,
    InvalidBudget,
    InvalidQuery,
    InvalidRequest,
    MemoryCoreError,
    ProjectNotIndexed,
    RetrievalFailed,
    RunNotFound,
    StorageUnavailable,
)
from memory_core.domain.model import (
    EffectiveMemory,
    Generation,
    ManifestEntry,
    Project,
    ScannedResource,
    Source,
    Unit,
    validate_project_id,
    validate_source_path,
)
from memory_core.domain.progress import Progress
from memory_core.evaluation.cases import Case, JudgmentSet
from memory_core.evaluation.fixture import ImportResult, dump
from memory_core.evaluation.report import Report
from memory_core.ports import (
    Catalog,
    Embedder,
    GenerationStore,
    LexicalIndexFactory,
    LexicalSearcher,
    LiveMemory,
    ManifestStore,
    Reranker,
    VectorIndexFactory,
    VectorSearcher,
)
from memory_core.ports.runs import RunRecorder, RunStore
from memory_core.retrieval.activation_state import ActivationState
from memory_core.retrieval.exact import REVISION as EXACT_REVISION
from memory_core.retrieval.exact import ExactIndex
from memory_core.retrieval.pipeline import SELECTED, Candidate, apply_rerank, fuse
from memory_core.retrieval.profile import MAX_BUDGET, MAX_QUERY_CHARS, MIN_BUDGET, RankingProfile
from memory_core.retrieval.selection import Limits, select
from memory_core.runs.records import (
    ClearReport,
    NullRecorder,
    RunDetail,
    RunFailure,
    RunFilter,
    RunPage,
    RunStart,
    RunTrace,
)
from memory_core.services.evaluation import EvaluationService
from memory_core.services.fixtures import export_document
from memory_core.services.indexing import LEXICAL_DIR, VECTOR_DIR, Indexer, IndexReport
from memory_core.services.local_storage import (
    CURRENT,
    PREVIOUS,
    UNREFERENCED,
    ProjectRemoval,
    ProjectStorage,
    StoredGeneration,
)

log = logging.getLogger(__name__)

# The error code of a stage failing with an exception that is not a MemoryCoreError (a model's
# RuntimeError, say): a stable code, the same in the failed Run and in the RetrievalFailed; the
# exception's class and message go to the Run's error_summary and the error's message.
STAGE_ERROR = "stage_error"


def error_code_of(exc: Exception) -> str:
    return exc.code if isinstance(exc, MemoryCoreError) else STAGE_ERROR


@attrs.frozen
class Fragment:
    unit_id: str
    unit_hash: str
    resource_id: str
    uri: str
    heading_path: tuple[str, ...]
    text: str | None  # None when the action is ``reuse``: the agent already holds it
    token_count: int
    delta_action: str
    final_rank: int
    final_score: float | None

    @classmethod
    def from_candidate(cls, c: Candidate, uri: str) -> Fragment:
        assert c.delta_action is not None
        return cls(
            unit_id=c.unit.unit_id,
            unit_hash=c.unit.unit_hash,
            resource_id=c.unit.resource_id,
            uri=uri,
            heading_path=c.unit.heading_path,
            text=None if c.delta_action == "reuse" else c.unit.text,
            token_count=c.unit.token_count,
            delta_action=c.delta_action,
            final_rank=c.final_rank,
            final_score=c.final_score,
        )


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


@attrs.frozen
class ActivationResponse:
    run_id: str | None
    project_id: str
    query: str
    fragments: tuple[Fragment, ...]
    activation_state: ActivationState  # the next state, ready to send back
    state_fingerprint: str  # fingerprint of the state this request carried
    revisions: Mapping[str, str]
    totals: Mapping[str, int]
    latency_ms: Mapping[str, float]
    freshness: Freshness


@attrs.frozen
class Activation:
    """The response and the ranked candidates it was built from (final order)."""

    response: ActivationResponse
    candidates: tuple[Candidate, ...]


@attrs.frozen
class ProjectInfo:
    project: Project
    generation: Generation | None


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
        """Release the open indexes and let pending Run writes land; the engine is unusable after."""
        self.lexical.close()
        self.vectors.close()


class _StageClock:
    def __init__(self) -> None:
        self.latency_ms: dict[str, float] = {}
        self.stage = "validate"
        self._last = time.perf_counter()
        self._start = self._last

    def begin(self, stage: str) -> None:
        self.stage = stage
        self._last = time.perf_counter()

    def end(self) -> None:
        self.latency_ms[self.stage] = round((time.perf_counter() - self._last) * 1000, 3)

    def total(self) -> None:
        self.latency_ms["total"] = round((time.perf_counter() - self._start) * 1000, 3)


def _validate_query(query: object) -> str:
    if not isinstance(query, str) or not query.strip():
        raise InvalidQuery("query must be a non-empty string")
    query = query.strip()
    if len(query) > MAX_QUERY_CHARS:
        raise InvalidQuery(f"query is longer than {MAX_QUERY_CHARS} characters", length=len(query))
    if not is_utf8_text(query):
        raise InvalidQuery("query is not valid Unicode text (it holds a lone surrogate)")
    return query


def _validate_budget(budget: object, default: int) -> int:
    if budget is None:
        return default
    if isinstance(budget, bool) or not isinstance(budget, int) or not MIN_BUDGET <= budget <= MAX_BUDGET:
        raise InvalidBudget(f"budget must be an integer from {MIN_BUDGET} to {MAX_BUDGET}", budget=budget)
    return budget


@attrs.define
class Engine:
    catalog: Catalog
    manifests: ManifestStore
    generations: GenerationStore
    indexer: Indexer
    embedder: Embedder
    lexical: LexicalIndexFactory
    vectors: VectorIndexFactory
    reranker: Reranker
    now: Callable[[], str]
    recorder: RunRecorder = attrs.field(factory=NullRecorder)
    profile: RankingProfile = attrs.field(factory=RankingProfile)
    history: RunStore | None = None
    evaluation: EvaluationService | None = None
    # The sources as they are now (brief §3); None records only the ranking generation's memory.
    live_memory: LiveMemory | None = None
    _open: dict[str, OpenGeneration] = attrs.field(factory=dict, init=False)
    _lock: threading.Lock = attrs.field(factory=threading.Lock, init=False)

    # -- projects -------------------------------------------------------------------------
    def add_project(self, name: str, sources: Sequence[Source]) -> Project:
        """Register project ``name`` over ``sources`` and return it; raises ``InvalidRequest`` (no
        source, bad name or path), ``ProjectExists`` or ``SourceUnavailable``."""
        if not sources:
            raise InvalidRequest("a project needs at least one source", project=name)
        for source in sources:
            validate_source_path(source.path)
        project = Project(validate_project_id(name), tuple(sources), self.now())
        self.catalog.add_project(project)
        return project

    def list_projects(self) -> list[ProjectInfo]:
        """Every project with its current generation (``None`` before the first index)."""
        return [ProjectInfo(p, self.catalog.current_generation(p.project_id)) for p in self.catalog.list_projects()]

    def show_project(self, name: str) -> ProjectInfo:
        """One project and its current generation; raises ``ProjectNotFound``."""
        project = self.catalog.get_project(name)
        return ProjectInfo(project, self.catalog.current_generation(name))

    def remove_project(self, name: str, *, purge: bool = False) -> ProjectRemoval:
        """Delete the project, its unpinned Runs and its Local Storage; its Evaluation Cases and
        their pinned Runs stay unless ``purge`` (brief §6). Database rows go first, files after:
        an interruption leaves rows to retry, never a project pointing at deleted files."""
        self.catalog.get_project(name)
        deleted_cases = 0
        if purge:
            service = self.evaluations()
            for case in service.list_cases(name):
                service.delete_case(case.case_id)  # unpins its Run when no other case uses it
                deleted_cases += 1
        self._close_generation(name)
        runs, pinned, blobs = 0, 0, 0
        if self.history is not None:
            first = self.history.clear(name)  # before the catalog row: a failure leaves it to retry
            runs, pinned, blobs = first.deleted_runs, first.kept_pinned, first.deleted_blobs
        location = self.generations.location(name)  # read while the catalog still knows it
        self.catalog.remove_project(name)
        self.generations.remove_project(name, location)
        if self.history is not None:
            # The generations no longer hold their blobs: collect them as Clear History does.
            blobs += self.history.clear(name).deleted_blobs
        return ProjectRemoval(name, purge, runs, pinned, deleted_cases, blobs)

    # -- Project Local Storage (brief §6: never touches Runs, Cases or blobs) -----------------
    def project_storage(self, name: str) -> ProjectStorage:
        """Where the project's generations are stored and their sizes; raises ``ProjectNotFound``."""
        self.catalog.get_project(name)
        pointed = ((PREVIOUS, self.catalog.previous_generation(name)), (CURRENT, self.catalog.current_generation(name)))
        roles = {g.index_revision: role for role, g in pointed if g is not None}
        location = self.generations.location(name)
        total, per = self.generations.usage(name)
        stored = tuple(
            StoredGeneration(rev, roles.get(rev, UNREFERENCED), str(location / "generations" / rev), size)
            for rev, size in sorted(per.items())
        )
        default = location == self.generations.default_location(name)
        return ProjectStorage(name, str(location), default, total, stored)

    def move_project_storage(self, name: str, destination: str | Path) -> ProjectStorage:
        """Copy the current and previous generations into ``destination`` (empty or new; made
        owner-only), switch the catalog to them in one transaction, then delete the old copy.
        Any failure before the switch removes the new copies and leaves the old ones serving."""
        self.catalog.get_project(name)
        projects = self.catalog.list_projects()
        # Not inside another project's storage (removing one would delete the other), nor in
        # or around a memory source (the generations would become memory, and watched).
        others = [self.generations.location(p.project_id) for p in projects if p.project_id != name]
        others += [Path(s.path) for p in projects for s in p.sources]
        old = self.generations.location(name)
        dest = self.generations.prepare_location(name, Path(destination), others)
        pointed = {
            g.index_revision: Path(g.directory)
            for g in (self.catalog.current_generation(name), self.catalog.previous_generation(name))
            if g is not None
        }
        moved = self.generations.copy_generations(name, pointed, dest)
        recorded = None if dest == self.generations.default_location(name) else str(dest)
        try:
            self.catalog.set_storage_location(name, recorded, {rev: str(d) for rev, d in moved.items()})
        except BaseException:
            self.generations.remove_project(name, dest)
            raise
        self._close_generation(name)  # the next activation opens the moved copy
        self.generations.remove_project(name, old)
        return self.project_storage(name)

    def clear_project_storage(self, name: str) -> ProjectStorage:
        """Delete the project's generations; ``memcore index`` rebuilds them (unchanged units
        from the embedding cache). Meanwhile an activation is ``project_not_indexed``, a failed
        Run, as for a project never indexed."""
        self.catalog.get_project(name)
        self.catalog.clear_generations(name)  # rows first: no pointer to a deleted directory
        self._close_generation(name)
        self.generations.prune(name, keep=set())
        return self.project_storage(name)

    def _close_generation(self, name: str) -> None:
        with self._lock:
            opened = self._open.pop(name, None)
        if opened is not None:
            opened.close()

    def index(self, name: str, *, force: bool = False, progress: Progress | None = None) -> IndexReport:
        """Index the project's sources into a new generation (``force``: even when nothing changed)
        and return the ``IndexReport``; raises ``ProjectNotFound``, ``SourceUnavailable``, ``EmptyProject``."""
        if progress is None:
            return self.indexer.index(name, force=force)
        return self.indexer.index(name, force=force, progress=progress)

    # -- activation -----------------------------------------------------------------------
    def revisions(self, generation: Generation | None) -> dict[str, str]:
        """The revisions (models, profile, index) an activation over ``generation`` answers with."""
        revs = {
            "exact": EXACT_REVISION,
            "reranker_model": self.reranker.revision,
            "ranking_profile": self.profile.revision,
        }
        if generation is not None:
            revs.update(
                {
                    "effective_memory_hash": generation.effective_memory_hash,
                    "index_revision": generation.index_revision,
                    "parser": generation.revisions.parser,
                    "chunker": generation.revisions.chunker,
                    "embedding_model": generation.revisions.embedding_model,
                    "lexical": generation.revisions.lexical,
                    "vector": generation.revisions.vector,
                }
            )
        return revs

    def _generation(self, project_id: str) -> tuple[OpenGeneration, bool]:
        current = self.catalog.current_generation(project_id)
        if current is None:
            raise ProjectNotIndexed(
                f"project {project_id!r} has no index yet: run `memcore index {project_id}`",
                project=project_id,
            )
        with self._lock:
            opened = self._open.get(project_id)
            if opened is not None and opened.generation.index_revision == current.index_revision:
                return opened, True
            directory = Path(current.directory)
            # Verified once when opened (then kept warm): a damaged generation is never served.
            try:
                self.generations.verify(directory)
            except GenerationCorrupted as exc:
                raise GenerationCorrupted(
                    f"{exc.message}; run `memcore index {project_id}` to rebuild it", project=project_id
                ) from exc
            units = self.generations.load_units(directory)
            manifest = self.manifests.get_manifest(current.effective_memory_hash)
            fresh = OpenGeneration(
                current,
                units,
                {e.resource_id: e.uri for e in manifest},
                self.lexical.open(directory / LEXICAL_DIR),
                self.vectors.open(directory / VECTOR_DIR),
                {e.resource_id: e.resource_hash for e in manifest},
            )
            self._open[project_id] = fresh
        if opened is not None:
            opened.close()
        return fresh, False

    def activate(
        self,
        project_id: str,
        query: str,
        *,
        budget: int | None = None,
        state: ActivationState | Mapping[str, Any] | None = None,
    ) -> Activation:
        """Rank the project's memory for ``query`` within ``budget`` tokens and return the Activation
        (its ``response`` for the agent); raises ``InvalidQuery``, ``InvalidBudget``,
        ``InvalidActivationState``, ``ProjectNotFound``, ``ProjectNotIndexed``, ``RetrievalFailed``."""
        clock = _StageClock()
        # Validation: a request failing here gets a typed error and creates no Run.
        project = self.catalog.get_project(validate_project_id(project_id))
        query = _validate_query(query)
        token_budget = _validate_budget(budget, self.profile.token_budget)
        held = state if isinstance(state, ActivationState) else ActivationState.from_json(state)
        clock.end()
        run_id = self._record_start(RunStart(project_id, query, held.fingerprint, token_budget, self.now()))
        opened: OpenGeneration | None = None
        warm = False
        try:
            clock.begin("load")
            opened, warm = self._generation(project_id)
            clock.end()
            candidates, totals = self._rank(opened, query, token_budget, held, clock)
        except Exception as exc:
            clock.end()
            clock.total()
            self._record_failure(run_id, exc, clock, warm, opened)
            if isinstance(exc, ProjectNotIndexed):
                exc.details["run_id"] = run_id or None
                raise
            raise RetrievalFailed(
                f"retrieval failed in stage {clock.stage}: {type(exc).__name__}: {exc}",
                stage=clock.stage,
                error_code=error_code_of(exc),
                run_id=run_id or None,
            ) from exc
        generation = opened.generation
        selected = [c for c in candidates if c.disposition == SELECTED]
        fragments = tuple(Fragment.from_candidate(c, opened.uris.get(c.unit.resource_id, "")) for c in selected)
        clock.begin("live_memory")
        live, freshness = self._live(project, opened, fragments, keep_blobs=bool(run_id))  # NullRecorder: ""
        clock.end()
        revisions = self.revisions(generation)
        clock.total()
        if run_id is not None:
            trace = RunTrace(
                # The Run records the memory the project saw now; the Index Revision (and the
                # revisions' effective_memory_hash) name the generation that ranked it.
                effective_memory_hash=live.hash if live is not None else generation.effective_memory_hash,
                index_revision=generation.index_revision,
                revisions=revisions,
                candidates=candidates,
                latency_ms=dict(clock.latency_ms),
                warm=warm,
                fragment_count=len(fragments),
                token_count=totals["tokens"],
                finished_at=self.now(),
                live_memory=live if live is not None and live.hash != generation.effective_memory_hash else None,
            )
            try:
                self.recorder.complete(run_id, trace)
            except Exception:
                log.exception("could not record Retrieval Run %s; the answer is unchanged", run_id)
                self._abandon(run_id, clock, warm, opened)
                run_id = None
        response = ActivationResponse(
            run_id=run_id or None,
            project_id=project_id,
            query=query,
            fragments=fragments,
            activation_state=held.updated({f.unit_id: f.unit_hash for f in fragments}),
            state_fingerprint=held.fingerprint,
            revisions=revisions,
            totals={**totals, "candidates": len(candidates), "budget": token_budget},
            latency_ms=dict(clock.latency_ms),
            freshness=freshness,
        )
        return Activation(response, tuple(candidates))

    def _live(
        self, project: Project, opened: OpenGeneration, fragments: Sequence[Fragment], *, keep_blobs: bool
    ) -> tuple[EffectiveMemory | None, Freshness]:
        """The live Effective Memory and the answer's freshness against it. Never raises: a
        source that cannot be read leaves the Run with the generation's memory and says so."""
        generation = opened.generation
        if self.live_memory is None:
            return None, Freshness(False, None, None, False, None, error="live memory is not read by this engine")
        try:
            pending = bool(self.live_memory.reindex_pending(project.project_id))
        except Exception:
            log.exception("could not ask whether project %s re-indexes", project.project_id)
            pending = False
        try:
            live = self.live_memory.effective_memory(project)
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
        returned = dict.fromkeys(f.resource_id for f in fragments)
        stale = tuple(r for r in returned if r in now and now[r] != then.get(r))
        missing = tuple(r for r in returned if r not in now)
        error = self._keep_live_blobs(live, foreign) if keep_blobs else None
        return live, Freshness(True, True, changed, pending, live.hash, stale, missing, error)

    def _keep_live_blobs(self, live: EffectiveMemory, foreign: Sequence[ManifestEntry]) -> str | None:
        """Store the bodies of live resources the generation does not hold, so a case made from
        this Run has its whole corpus (seed: the Run's content-addressed resource blobs). Only
        changed files are read, and each only once: a later Run finds its blob stored."""
        blobs, scanner = self.indexer.blobs, self.indexer.scanner
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

    def _rank(
        self, opened: OpenGeneration, query: str, budget: int, held: ActivationState, clock: _StageClock
    ) -> tuple[list[Candidate], dict[str, int]]:
        p = self.profile
        clock.begin("exact")
        exact = opened.exact.search(query)
        clock.end()
        clock.begin("bm25")
        bm25 = opened.lexical.search(query, p.lexical_depth)
        clock.end()
        clock.begin("embed_query")
        built_with = opened.generation.revisions.embedding_model
        if built_with != self.embedder.revision:
            # Query and unit vectors of two model revisions (say fp32 and int8) are not comparable.
            raise ProjectNotIndexed(
                f"project {opened.generation.project_id!r} was indexed with embedding model {built_with!r}, "
                f"this process embeds with {self.embedder.revision!r}: run `memcore index "
                f"{opened.generation.project_id}`",
                project=opened.generation.project_id,
            )
        query_vector = self.embedder.embed_query(query)
        clock.end()
        clock.begin("dense")
        dense = opened.vectors.search(query_vector, p.dense_depth)
        clock.end()
        clock.begin("fusion")
        fused = fuse(opened.units, exact, bm25, dense, p.rrf_k)
        window = fused[: p.rerank_depth]
        missing = [c for c in window if c.dense_similarity is None]
        if missing:
            sims = opened.vectors.similarities(query_vector, [c.unit.unit_id for c in missing])
            for c, sim in zip(missing, sims, strict=True):
                c.dense_similarity = float(sim)
        clock.end()
        clock.begin("rerank")
        scores = self.reranker.rerank(query, window)
        final = apply_rerank(fused, p.rerank_depth, scores)
        clock.end()
        clock.begin("select")
        limits = Limits(budget, p.max_fragments, p.per_resource_limit, p.min_final_score)
        totals = select(final, limits, held)
        clock.end()
        return final, {"selected": totals.selected, "tokens": totals.tokens, "reused": totals.reused}

    # -- Retrieval Runs -------------------------------------------------------------------
    def _runs(self) -> RunStore:
        if self.history is None:
            raise StorageUnavailable("retrieval history is not enabled for this engine")
        return self.history

    def list_runs(self, run_filter: RunFilter | None = None, *, limit: int = 50, cursor: str | None = None) -> RunPage:
        """A page of Retrieval Run summaries, newest first; raises ``StorageUnavailable`` without history."""
        return self._runs().list_runs(run_filter or RunFilter(), limit=limit, cursor=cursor)

    def get_run(self, run_id: str, *, manifest: bool = False) -> RunDetail:
        """A Run's trace; ``manifest``: with the Effective Memory manifest it saw (the sources at
        activation), so a reader can tell which candidates were stale or gone when the index lagged."""
        detail = self._runs().get_run(run_id)
        if manifest and detail.summary.effective_memory_hash is not None:
            entries = self._runs().run_manifest(detail.summary.effective_memory_hash)
            detail = attrs.evolve(detail, manifest=entries)
        return detail

    def clear_runs(self, project_id: str | None = None) -> ClearReport:
        """Delete the Runs (of ``project_id``, or all) no Evaluation Case pins; raises
        ``ProjectNotFound``, ``StorageUnavailable``."""
        if project_id is not None:
            self.catalog.get_project(project_id)
        return self._runs().clear(project_id)

    # -- Evaluation Sets (the seed's method names; the rest is on ``engine.evaluation``) ------
    def evaluations(self) -> EvaluationService:
        """The evaluation service; raises ``StorageUnavailable`` when evaluation is not enabled."""
        if self.evaluation is None:
            raise StorageUnavailable("evaluation is not enabled for this engine")
        return self.evaluation

    def create_evaluation_case(self, run_id: str) -> Case:
        """Freeze succeeded Run ``run_id`` as an Evaluation Case and return it; raises ``RunNotFound``,
        ``EvaluationRunNotSucceeded``, ``EvaluationCaseExists``."""
        return self.evaluations().create_case(run_id)

    def replace_evaluation_judgments(
        self, case_id: str, expected_judgment_version: int, judgments: object
    ) -> JudgmentSet:
        """Replace a case's judgments if its version is still ``expected_judgment_version``; returns
        the new set; raises ``EvaluationCaseNotFound``, ``EvaluationJudgmentConflict``, ``InvalidJudgments``."""
        return self.evaluations().replace_judgments(case_id, expected_judgment_version, judgments)

    def evaluation_report(self, project_id: str | None = None, case_ids: Sequence[str] | None = None) -> Report:
        """The metrics report over the project's (or the named) cases; raises ``StorageUnavailable``."""
        return self.evaluations().report(project_id, case_ids)

    def export_evaluation_document(
        self,
        *,
        project_id: str | None = None,
        case_ids: Sequence[str] | None = None,
        with_history: bool = False,
        with_uris: bool = False,
    ) -> Mapping[str, Any]:
        """The self-contained fixture of a project's (or the named) cases, as a document. A
        project with no case exports an empty set; a project that neither exists nor has cases
        (a removed project's cases still export) is ``project_not_found``, for every transport."""
        service = self.evaluations()
        if project_id is not None and not service.list_cases(project_id, case_ids):
            self.catalog.get_project(project_id)
        return export_document(
            service, project_id=project_id, case_ids=case_ids, with_history=with_history, with_uris=with_uris
        )

    def export_evaluation_set(
        self,
        *,
        project_id: str | None = None,
        case_ids: Sequence[str] | None = None,
        with_history: bool = False,
        with_uris: bool = False,
    ) -> bytes:
        """The fixture file ``memcore eval export`` writes (canonical JSON)."""
        return dump(
            self.export_evaluation_document(
                project_id=project_id, case_ids=case_ids, with_history=with_history, with_uris=with_uris
            )
        )

    def import_evaluation_set(self, data: bytes | str | Mapping[str, Any]) -> ImportResult:
        """Import a fixture (bytes, text or document) and return what it added; raises
        ``InvalidFixture``, ``FixtureHashMismatch``, ``EvaluationImportConflict``."""
        return self.evaluations().import_fixture(data)

    # -- recording (history never changes the agent's answer) -----------------------------
    def _record_start(self, run: RunStart) -> str | None:
        try:
            return self.recorder.start(run)
        except Exception:
            log.exception("could not start a Retrieval Run; the answer is unchanged")
            return None

    def _record_failure(
        self, run_id: str | None, exc: Exception, clock: _StageClock, warm: bool, opened: OpenGeneration | None
    ) -> None:
        if run_id is None:
            return
        generation = opened.generation if opened is not None else None
        failure = RunFailure.bounded(
            error_stage=clock.stage,
            error_code=error_code_of(exc),
            error_summary=f"{type(exc).__name__}: {exc}",
            latency_ms=dict(clock.latency_ms),
            warm=warm,
            finished_at=self.now(),
            effective_memory_hash=generation.effective_memory_hash if generation else None,
            index_revision=generation.index_revision if generation else None,
            revisions=self.revisions(generation),
        )
        try:
            self.recorder.fail(run_id, failure)
        except Exception:
            log.exception("could not record the failure of Retrieval Run %s", run_id)

    def _abandon(self, run_id: str, clock: _StageClock, warm: bool, opened: OpenGeneration | None) -> None:
        """Best effort: a Run whose trace could not be written must not stay ``running``."""
        try:
            failure = RunFailure.history_write_failed(dict(clock.latency_ms), warm, self.now())
            self.recorder.fail(run_id, failure)
        except RunNotFound:
            pass  # its start was never written either (the store inserts it while we rank)
        except Exception:
            log.warning("Retrieval Run %s stays running until recovery", run_id)

    def close(self) -> None:
        """Release the open indexes and let pending Run writes land; the engine is unusable after."""
        with self._lock:
            opened, self._open = list(self._open.values()), {}
        for o in opened:
            o.close()
        if self.history is not None:
            self.history.close()  # pending Run writes land before the caller lets go

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
