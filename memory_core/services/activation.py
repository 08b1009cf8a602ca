"""One activation (seed "Activation"; docs/ranking.md): validate, start a Run, rank the open
generation, select within the budget, compare with the live memory, record the trace.

The ``Engine`` facade calls ``activate`` with itself as the ``ActivationParts``: each call reads
the engine's parts as they are then (a test swaps the recorder, the daemon the live memory).
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import attrs

from memory_core.domain.canonical import is_utf8_text
from memory_core.domain.errors import (
    InvalidBudget,
    InvalidQuery,
    MemoryCoreError,
    ProjectNotIndexed,
    RetrievalFailed,
    RunNotFound,
)
from memory_core.domain.model import Generation, validate_project_id
from memory_core.ports import (
    Catalog,
    Embedder,
    GenerationStore,
    LexicalIndexFactory,
    LiveMemory,
    ManifestStore,
    Reranker,
    VectorIndexFactory,
)
from memory_core.ports.runs import RunRecorder
from memory_core.retrieval.activation_state import ActivationState
from memory_core.retrieval.exact import REVISION as EXACT_REVISION
from memory_core.retrieval.pipeline import BELOW_SCORE_THRESHOLD, SELECTED, Candidate, apply_rerank, fuse
from memory_core.retrieval.profile import MAX_BUDGET, MAX_QUERY_CHARS, MIN_BUDGET, RankingProfile
from memory_core.retrieval.selection import Limits, select
from memory_core.runs.records import RunFailure, RunStart, RunTrace
from memory_core.services.freshness import Freshness, begin_live_read, read_live
from memory_core.services.indexing import Indexer
from memory_core.services.open_generations import OpenGeneration, OpenGenerations

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


# Notice codes: why an answer holds no fragment although the query had candidates, when a setting
# of the project's ranking profile emptied it (the candidates' exclusion codes in the Run say more).
SCORE_FLOOR_REMOVED_ALL = "score_floor_removed_all"
NO_RERANK_WINDOW = "no_rerank_window"


@attrs.frozen
class Notice:
    """Something about an answer its caller should know: a stable code and what it means here."""

    code: str
    message: str


def empty_answer_notices(candidates: Sequence[Candidate], profile: RankingProfile) -> tuple[Notice, ...]:
    """Why selection took nothing from ``candidates`` when the profile's floor or window did it
    (an empty answer from an empty project, or the budget, needs no notice)."""
    if not candidates or any(c.disposition == SELECTED for c in candidates):
        return ()
    reranked = [c for c in candidates if c.rerank_rank is not None]
    below = sum(c.exclusion_code == BELOW_SCORE_THRESHOLD for c in candidates)
    if below:
        best = max(c.final_score for c in reranked)
        said = (f"no fragment returned: {below} of the {len(reranked)} reranked candidates scored below the "
                f"ranking profile's min_final_score {profile.min_final_score:g} (the best {best:.4g})")  # fmt: skip
        return (Notice(SCORE_FLOOR_REMOVED_ALL, said),)
    if not reranked:
        return (Notice(NO_RERANK_WINDOW, "no fragment returned: the ranking profile's rerank_depth is 0, and only "
                                         "reranked candidates are selectable"),)  # fmt: skip
    return ()


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
    notices: tuple[Notice, ...] = attrs.field(default=(), metadata={"schema": {"description": (
        f"why the answer is empty when the project's ranking profile emptied it: {SCORE_FLOOR_REMOVED_ALL} (its "
        f"min_final_score is above every reranked candidate's score), {NO_RERANK_WINDOW} (its rerank_depth is 0)"
    )}})  # fmt: skip


@attrs.frozen
class Activation:
    """The response and the ranked candidates it was built from (final order)."""

    response: ActivationResponse
    candidates: tuple[Candidate, ...]


@attrs.frozen
class Ranking:
    """How one project's activations rank: its ranking profile and reranker."""

    profile: RankingProfile
    reranker: Reranker


class ActivationParts(Protocol):
    """What an activation reads of its engine (``Engine`` is one)."""

    @property
    def catalog(self) -> Catalog: ...
    @property
    def manifests(self) -> ManifestStore: ...
    @property
    def generations(self) -> GenerationStore: ...
    @property
    def indexer(self) -> Indexer: ...
    @property
    def embedder(self) -> Embedder: ...

    def query_embedder(self, generation: Generation) -> Embedder:
        """The embedder of the model ``generation``'s vectors are of (issue 33: per project)."""
        ...

    @property
    def lexical(self) -> LexicalIndexFactory: ...
    @property
    def vectors(self) -> VectorIndexFactory: ...
    @property
    def now(self) -> Callable[[], str]: ...
    @property
    def recorder(self) -> RunRecorder: ...
    @property
    def live_memory(self) -> LiveMemory | None: ...

    def ranking_for(self, project_id: str) -> Ranking:
        """The profile and reranker the project ranks with (its own profile, else the defaults)."""
        ...


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


class _Beside:
    """One helper thread per process for the part of an activation that runs beside it (the
    query embedding). Made on first use and again in a forked child (a fork keeps no threads);
    when no thread can start (the interpreter is shutting down) the work runs inline, at once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._pid = 0

    def run(self, work: Callable[[str], Any], arg: str) -> _Timed:
        timed = _Timed(work, arg)
        with self._lock:
            if self._pool is None or self._pid != os.getpid():
                self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="memcore-beside")
                self._pid = os.getpid()
            try:
                timed.future = self._pool.submit(timed)
            except RuntimeError:  # shutting down: no new threads
                timed()
        return timed


class _Timed:
    """``work(arg)``, its value or error kept with the milliseconds it took where it ran."""

    def __init__(self, work: Callable[[str], Any], arg: str) -> None:
        self._work, self._arg = work, arg
        self.future: concurrent.futures.Future[None] | None = None
        self._value: Any = None
        self._error: BaseException | None = None
        self._ms = 0.0

    def __call__(self) -> None:
        started = time.perf_counter()
        try:
            self._value = self._work(self._arg)
        except BaseException as exc:  # re-raised on the activation's thread, in the stage it belongs to
            self._error = exc
        self._ms = round((time.perf_counter() - started) * 1000, 3)

    def result(self) -> tuple[Any, float]:
        if self.future is not None:
            self.future.result()
        if self._error is not None:
            raise self._error
        return self._value, self._ms


_BESIDE = _Beside()


def validate_query(query: object) -> str:
    if not isinstance(query, str) or not query.strip():
        raise InvalidQuery("query must be a non-empty string")
    query = query.strip()
    if len(query) > MAX_QUERY_CHARS:
        raise InvalidQuery(f"query is longer than {MAX_QUERY_CHARS} characters", length=len(query))
    if not is_utf8_text(query):
        raise InvalidQuery("query is not valid Unicode text (it holds a lone surrogate)")
    return query


def validate_budget(budget: object, default: int) -> int:
    if budget is None:
        return default
    if isinstance(budget, bool) or not isinstance(budget, int) or not MIN_BUDGET <= budget <= MAX_BUDGET:
        raise InvalidBudget(f"budget must be an integer from {MIN_BUDGET} to {MAX_BUDGET}", budget=budget)
    return budget


def revisions(generation: Generation | None, reranker: Reranker, profile: RankingProfile) -> dict[str, str]:
    """The revisions (models, profile, index) an activation over ``generation`` answers with."""
    revs = {
        "exact": EXACT_REVISION,
        "reranker_model": reranker.revision,
        "ranking_profile": profile.revision,
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


# A storage move runs in another process (a daemon job) and deletes the old folder once the
# catalog points at the new one; a reader that took the old pointer just before may find it gone.
_MOVED_RETRIES = 3


def _serve_current(parts: ActivationParts, served: OpenGenerations, project_id: str) -> tuple[OpenGeneration, bool]:
    """The project's current generation, open, and whether it was warm. A generation that fails to
    open while the catalog has meanwhile switched to another place (a move) is read again: a move
    never fails an activation. A failure with the pointer unchanged is the generation's own."""
    current = parts.catalog.current_generation(project_id)
    for _ in range(_MOVED_RETRIES):
        try:
            return served.serve(project_id, current, parts.generations, parts.manifests, parts.lexical, parts.vectors)
        except Exception as failure:
            try:
                again = parts.catalog.current_generation(project_id)
            except Exception:
                raise failure from None  # the opening's error is the one to report
            if current is None or again is None or again.directory == current.directory:
                raise
            log.info("project %s: its generation moved to %s while it was opened; reading it there",
                     project_id, again.directory)  # fmt: skip
            current = again
    return served.serve(project_id, current, parts.generations, parts.manifests, parts.lexical, parts.vectors)


def activate(
    parts: ActivationParts,
    served: OpenGenerations,
    project_id: str,
    query: str,
    budget: int | None,
    state: ActivationState | Mapping[str, Any] | None,
    ranking: Ranking | None = None,
) -> Activation:
    """``Engine.activate``: ``served`` keeps the engine's open generations; ``ranking``: rank
    with it instead of the project's own (replay ranks a frozen corpus as its case's project)."""
    clock = _StageClock()
    # Validation: a request failing here gets a typed error and creates no Run.
    project = parts.catalog.get_project(validate_project_id(project_id))
    query = validate_query(query)
    ranking = ranking or parts.ranking_for(project_id)
    token_budget = validate_budget(budget, ranking.profile.token_budget)
    held = state if isinstance(state, ActivationState) else ActivationState.from_json(state)
    clock.end()
    live_read = begin_live_read(parts.live_memory, project)  # overlaps the ranking
    recorder = parts.recorder
    run_id = _record_start(recorder, RunStart(project_id, query, held.fingerprint, token_budget, parts.now()))
    opened: OpenGeneration | None = None
    warm = False
    try:
        clock.begin("load")
        opened, warm = _serve_current(parts, served, project_id)
        clock.end()
        candidates, totals = _rank(parts, ranking, opened, query, token_budget, held, clock)
    except Exception as exc:
        clock.end()
        clock.total()
        _record_failure(parts, ranking, run_id, exc, clock, warm, opened)
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
    live, freshness = read_live(
        parts.live_memory,
        live_read,
        project,
        opened,
        (f.resource_id for f in fragments),
        keep_blobs=parts.indexer.blobs if run_id else None,  # NullRecorder: ""
        scanner=parts.indexer.scanner,
    )
    clock.end()
    revs = revisions(generation, ranking.reranker, ranking.profile)
    clock.total()
    if run_id is not None:
        trace = RunTrace(
            # The Run records the memory the project saw now; the Index Revision (and the
            # revisions' effective_memory_hash) name the generation that ranked it.
            effective_memory_hash=live.hash if live is not None else generation.effective_memory_hash,
            index_revision=generation.index_revision,
            revisions=revs,
            candidates=candidates,
            latency_ms=dict(clock.latency_ms),
            warm=warm,
            fragment_count=len(fragments),
            token_count=totals["tokens"],
            finished_at=parts.now(),
            live_memory=live if live is not None and live.hash != generation.effective_memory_hash else None,
        )
        try:
            recorder.complete(run_id, trace)
        except Exception:
            log.exception("could not record Retrieval Run %s; the answer is unchanged", run_id)
            _abandon(parts, run_id, clock, warm)
            run_id = None
    response = ActivationResponse(
        run_id=run_id or None,
        project_id=project_id,
        query=query,
        fragments=fragments,
        activation_state=held.updated({f.unit_id: f.unit_hash for f in fragments}),
        state_fingerprint=held.fingerprint,
        revisions=revs,
        totals={**totals, "candidates": len(candidates), "budget": token_budget},
        latency_ms=dict(clock.latency_ms),
        freshness=freshness,
        notices=empty_answer_notices(candidates, ranking.profile),
    )
    return Activation(response, tuple(candidates))


def _require_built_with(opened: OpenGeneration, what: str, built_with: str, current: str) -> None:
    """``ProjectNotIndexed`` when the generation was built by another revision of ``what`` than
    this process searches with; `memcore index` builds one with the current revision."""
    if built_with != current:
        project = opened.generation.project_id
        raise ProjectNotIndexed(
            f"project {project!r} was indexed with {what} {built_with!r}, this process uses {current!r}: "
            f"run `memcore index {project}`",
            project=project,
        )


def _rank(
    parts: ActivationParts,
    ranking: Ranking,
    opened: OpenGeneration,
    query: str,
    budget: int,
    held: ActivationState,
    clock: _StageClock,
) -> tuple[list[Candidate], dict[str, int]]:
    p = ranking.profile
    embedder = parts.query_embedder(opened.generation)
    # The query is embedded on the helper thread while this one runs the exact and BM25 stages:
    # ONNX Runtime and the JVM both run without the GIL, so on two free cores the embedding's
    # time is hidden behind BM25's (docs/performance.md, *Through the daemon, on short queries*).
    embedding = _BESIDE.run(embedder.embed_query, query)
    clock.begin("exact")
    exact = opened.exact.search(query)
    clock.end()
    clock.begin("bm25")
    # A generation's lexical revision names the BM25 parameters its Runs record: searching it with
    # others (a new default) would record one ranking and run another.
    _require_built_with(opened, "lexical index", opened.generation.revisions.lexical, parts.lexical.revision)
    bm25 = opened.lexical.search(query, p.lexical_depth)
    clock.end()
    clock.begin("embed_query")
    # Query and unit vectors of two model revisions (say fp32 and int8) are not comparable.
    _require_built_with(opened, "embedding model", opened.generation.revisions.embedding_model, embedder.revision)
    query_vector, clock.latency_ms["embed_query"] = embedding.result()  # its own time, not the wait
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
    scores = ranking.reranker.rerank(query, window)
    final = apply_rerank(fused, p.rerank_depth, scores)
    clock.end()
    clock.begin("select")
    limits = Limits(budget, p.max_fragments, p.per_resource_limit, p.min_final_score)
    totals = select(final, limits, held)
    clock.end()
    return final, {"selected": totals.selected, "tokens": totals.tokens, "reused": totals.reused}


# -- recording (history never changes the agent's answer) -------------------------------------


def _record_start(recorder: RunRecorder, run: RunStart) -> str | None:
    try:
        return recorder.start(run)
    except Exception:
        log.exception("could not start a Retrieval Run; the answer is unchanged")
        return None


def _record_failure(
    parts: ActivationParts,
    ranking: Ranking,
    run_id: str | None,
    exc: Exception,
    clock: _StageClock,
    warm: bool,
    opened: OpenGeneration | None,
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
        finished_at=parts.now(),
        effective_memory_hash=generation.effective_memory_hash if generation else None,
        index_revision=generation.index_revision if generation else None,
        revisions=revisions(generation, ranking.reranker, ranking.profile),
    )
    try:
        parts.recorder.fail(run_id, failure)
    except Exception:
        log.exception("could not record the failure of Retrieval Run %s", run_id)


def _abandon(parts: ActivationParts, run_id: str, clock: _StageClock, warm: bool) -> None:
    """Best effort: a Run whose trace could not be written must not stay ``running``."""
    try:
        failure = RunFailure.history_write_failed(dict(clock.latency_ms), warm, parts.now())
        parts.recorder.fail(run_id, failure)
    except RunNotFound:
        pass  # its start was never written either (the store inserts it while we rank)
    except Exception:
        log.warning("Retrieval Run %s stays running until recovery", run_id)
