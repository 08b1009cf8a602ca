"""Which model serves this memory best (issue 33, item 4): a project's judged cases replayed under
its current models and under other embedding models or cross-encoders, side by side, with the
paired difference of each against the current models (95 % bootstrap interval, randomization p).

Each variant re-embeds every frozen corpus of the cases into a scratch project of its own (the
embedding cache keys on the model's revision, so a model already embedded there costs nothing)
and ranks each case's query as the case's project ranks (its own ranking profile), with the
variant's cross-encoder in place of the project's when it names one. The current models are
replayed the same way, so every variant is compared on the same frozen corpora, not against
Runs recorded over another memory. The scratch projects are removed afterwards (their Runs too).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import attrs

from memory_core.domain.errors import InvalidRequest
from memory_core.domain.evaluation_errors import EvaluationSetEmpty
from memory_core.domain.progress import Progress, no_progress
from memory_core.evaluation.beir import Prepared
from memory_core.evaluation.cases import JudgmentSet
from memory_core.evaluation.metrics import MetricLevel, RankedItem, grade, ndcg_at
from memory_core.evaluation.statistics import paired_bootstrap, paired_randomization_p
from memory_core.ports.models import NO_RERANKER, ModelChoice
from memory_core.services.activation import Ranking
from memory_core.services.beir_import import EngineWorkspace
from memory_core.services.engine import Engine
from memory_core.services.fixtures import evaluation_set
from memory_core.services.manifests import stored_manifest
from memory_core.services.replay import check_indexed

CURRENT = "current"
SCRATCH_PREFIX = "model-compare"


@attrs.frozen
class VariantResult:
    """One variant's nDCG@10 per case (None: the case has no relevant item) and, for all but the
    current models, its paired difference from them over the compared cases."""

    name: str
    embedding: str
    reranker: str
    embedding_revision: str  # what its scratch index was built with (the re-embedding's proof)
    mean_ndcg_at_10: float | None
    per_case: tuple[float | None, ...]
    diff: float | None = None  # mean(variant - current)
    diff_low: float | None = None
    diff_high: float | None = None
    p_value: float | None = None
    significant: bool | None = None  # the interval excludes 0


@attrs.frozen
class ModelComparison:
    project_id: str
    level: str
    case_ids: tuple[str, ...]
    compared: int  # cases with a relevant item
    excluded: int
    variants: tuple[VariantResult, ...]


def _label(choice: ModelChoice) -> str:
    return f"embedding={choice.embedding} reranker={choice.reranker}"


def compare_models(
    engine: Engine,
    workspace: EngineWorkspace,
    project_id: str,
    variants: Sequence[ModelChoice],
    *,
    level: MetricLevel = MetricLevel.RESOURCE,
    include_unreviewed: bool = False,
    progress: Progress = no_progress,
) -> ModelComparison:
    """Replay ``project_id``'s judged cases under its models and each of ``variants`` (a None
    field keeps the project's); raises ``EvaluationSetEmpty``, ``ModelNotFound``, ``InvalidRequest``."""
    if engine.models is None:
        raise InvalidRequest("this engine has no model registry to compare models with")
    engine.catalog.get_project(project_id)
    if not variants:
        raise InvalidRequest("name at least one embedding model or reranker to compare with the current ones")
    current = engine.models.effective(project_id)
    chosen = [current] + [ModelChoice(v.embedding or current.embedding, v.reranker or current.reranker)
                          for v in variants]  # fmt: skip
    for choice in chosen[1:]:  # checked before anything is indexed
        engine.models.check_choice(choice)
    cases = evaluation_set(engine.evaluations(), project_id=project_id)
    records = [r for r in cases.records if include_unreviewed or r.case.reviewed]
    if not records:
        raise EvaluationSetEmpty(f"project {project_id!r} has no reviewed case to compare models on (review the "
                                 "judgments, or include unreviewed cases)", cases=len(cases.records))  # fmt: skip
    corpora = list(dict.fromkeys(r.case.corpus_id for r in records))
    results: list[tuple[ModelChoice, str, list[float | None]]] = []
    for index, choice in enumerate(chosen):
        scratch = {c: f"{SCRATCH_PREFIX}-{index}-{c[:12]}" for c in corpora}
        try:
            revision = ""
            for corpus_id, scratch_id in scratch.items():
                revision = _prepare(engine, workspace, scratch_id, choice, cases.files(corpus_id), progress)
                check_indexed(cases.corpora[corpus_id], _prepared(engine, scratch_id), scratch_id)
            scores: list[float | None] = []
            for done, r in enumerate(records, start=1):
                judgment_set = r.judgment_sets[-1] if r.judgment_sets else JudgmentSet(r.case.case_id, 0, (), None)
                judgments = judgment_set.to_metric_judgments(r.trace.unit_resources())
                ranking = _ranking(engine, r.case.project_id, scratch[r.case.corpus_id], choice)
                activation = engine.activate(scratch[r.case.corpus_id], r.case.query, ranking=ranking)
                ranked = [RankedItem(c.unit.unit_id, c.unit.resource_id, c.unit.resource_hash)
                          for c in activation.candidates]  # fmt: skip
                scores.append(ndcg_at(grade(ranked, judgments, level), 10))
                progress(f"rank ({_label(choice)})", done, len(records))
            results.append((choice, revision, scores))
        finally:
            for scratch_id in scratch.values():
                if any(p.project.project_id == scratch_id for p in engine.list_projects()):
                    engine.remove_project(scratch_id)
    return _compared(project_id, level, [r.case.case_id for r in records], results)


def _prepare(engine: Engine, workspace: EngineWorkspace, scratch_id: str, choice: ModelChoice,
             files: dict[str, bytes], progress: Progress) -> str:  # fmt: skip
    """The scratch project of one corpus, with the variant's models chosen before it is indexed;
    returns the embedding revision its generation was built with."""
    source = workspace.write_source(scratch_id, files)
    engine.add_project(scratch_id, [source])
    engine.set_project_models(scratch_id, embedding=choice.embedding, reranker=choice.reranker)
    report = engine.index(scratch_id, progress=progress)
    generation = engine.catalog.current_generation(scratch_id)
    assert generation is not None and generation.index_revision == report.index_revision
    return generation.revisions.embedding_model


def _prepared(engine: Engine, scratch_id: str) -> Prepared:
    generation = engine.catalog.current_generation(scratch_id)
    assert generation is not None
    entries = stored_manifest(engine.manifests, generation.effective_memory_hash, scratch_id)
    return Prepared({e.resource_id: e.resource_hash for e in entries}, ())


def _ranking(engine: Engine, case_project: str, scratch_id: str, choice: ModelChoice) -> Ranking:
    """How the case's project ranks (its profile), with the variant's cross-encoder if it names one."""
    assert engine.models is not None
    ranking = engine.profile_ranking(case_project)
    if choice.reranker == NO_RERANKER:
        return ranking
    profile = ranking.profile  # its cross-encoder batch and length apply to the variant's cross-encoder too
    cross_encoder = engine.models.reranker_for(scratch_id, batch=profile.rerank_batch,
                                               max_tokens=profile.rerank_max_tokens)  # fmt: skip
    return ranking if cross_encoder is None else attrs.evolve(ranking, reranker=cross_encoder)


def _compared(project_id: str, level: MetricLevel, case_ids: list[str],
              results: list[tuple[ModelChoice, str, list[float | None]]]) -> ModelComparison:  # fmt: skip
    base = results[0][2]
    kept = [i for i, v in enumerate(base) if v is not None and all(r[2][i] is not None for r in results)]
    variants = []
    for index, (choice, revision, scores) in enumerate(results):
        values = [scores[i] for i in kept]
        mean = math.fsum(v or 0.0 for v in values) / len(values) if values else None
        name = CURRENT if index == 0 else _label(choice)
        assert choice.embedding is not None and choice.reranker is not None
        result = VariantResult(name, choice.embedding, choice.reranker, revision, mean, tuple(scores))
        if index and kept:
            mine = [float(scores[i] or 0.0) for i in kept]
            theirs = [float(base[i] or 0.0) for i in kept]
            interval = paired_bootstrap(mine, theirs)
            p = paired_randomization_p(mine, theirs)
            result = attrs.evolve(result, diff=interval.mean_diff, diff_low=interval.low, diff_high=interval.high,
                                  p_value=p, significant=interval.low > 0 or interval.high < 0)  # fmt: skip
        variants.append(result)
    return ModelComparison(project_id, level.value, tuple(case_ids), len(kept), len(case_ids) - len(kept),
                           tuple(variants))  # fmt: skip
