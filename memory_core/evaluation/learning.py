"""A ranker learned from a project's judgments (issue 32, item 2): features, the model's
envelope, the reranker that applies it, and the guard that decides whether to propose it.

Every candidate of a case's frozen trace records its stage ranks and scores (``CandidateRecord``),
so the features of the rerank window are computed from the trace without running retrieval
again (the units' texts cut from the case's frozen corpus), and at activation from the live
candidates with the same function (``window_features``):
what a model was trained on is what it is applied to. ``FEATURE_REVISION`` names that function;
a model trained under another revision is refused (``LearnedModelRefused``), never applied to
features it did not learn.

The learner itself (LightGBM's lambdarank) is an adapter behind ``memory_core.ports.learning``;
this module only calls the two functions it is given: ``fit`` (grouped ranking data -> model
text and feature importances) and ``load`` (model text -> a scorer of feature rows).

The guard is nested cross-validation by case (or by a group of cases, a conversation say, so no
fold learns from its own group). The learner's setting is chosen among ``SETTINGS``, a small fixed
grid whose first entry is no model at all (``KEEP_CURRENT``: the project's ranking kept). For each
of the k outer folds the setting is chosen by an inner cross-validation on the other folds alone
(``choose_setting``), a model of it trained on those folds and graded on the held-out cases (a
fold whose inner folds choose ``KEEP_CURRENT`` is graded with the current ranking); those nDCG@10
values are paired with the current ranking's on the same cases by a bootstrap interval and a
sign-flip p. The final setting is chosen by the same cross-validation over all cases and its
model trained on all of them; it is proposed only when that choice is a model and the interval's
lower bound is above 0. ``benchmarks/learning.py`` grades with this same selection.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import attrs

from memory_core.domain.canonical import canonical_json
from memory_core.domain.errors import InvalidRequest
from memory_core.domain.evaluation_errors import LearnedModelRefused
from memory_core.domain.progress import Progress, no_progress
from memory_core.evaluation.metrics import Judgments, MetricLevel, RankedItem, grade, mrr, ndcg_at, recall_at
from memory_core.evaluation.passages import CutTexts, ReadBody, candidate_passages, cut_texts
from memory_core.evaluation.report import MIN_CASES_FOR_INTERVAL, CaseInput
from memory_core.evaluation.statistics import DEFAULT_BOOTSTRAP_RESAMPLES
from memory_core.evaluation.text_features import (
    CLUSTER_FEATURES,
    TEXT_FEATURES,
    cluster_rows,
    label_terms,
    query_terms,
    text_rows,
)
from memory_core.evaluation.tuning import DEFAULT_FOLDS, FOLD_SEED, PairedGain, TuneMetrics, check_folds
from memory_core.retrieval.pipeline import Candidate, RerankInput
from memory_core.runs.records import CandidateRecord

# Change it whenever ``window_features`` changes what a column means: every stored model then
# refuses to load rather than rank with columns it never saw.
# v2: the exact columns come from exact-identity-v3 (a title or heading identifier several
# resources share matches none of them), so a model trained on v2's exact matches is not reused.
# v3: three text columns (``text_features``) appended; a v2 model has fewer columns.
# v4: three cluster columns (``text_features.cluster_rows``) appended after the text ones.
FEATURE_REVISION = "ltr-features-v4"
MODEL_FORMAT = "memory-core-learned-ranker"
# Bounds on one training (the adapter bounds rounds and leaves): rows are (case, window unit)
# pairs; 200,000 rows of ~30 features are ~50 MB as floats and a few seconds of one core. The
# units' texts (the text columns read them) are held once per distinct unit however many windows
# hold it, and only for the cases learned from (``learning_cases``): at most 200,000 texts of a
# unit's at most 256 tokens, some 250 MB if no two windows shared a unit, far less as they do. The
# bound is checked on the traces' counts before any body is read.
MAX_TRAINING_ROWS = 200_000
# Bound on a whole learning: every planned fit's rows times its rounds (``training_work``); two
# billion row-rounds are about ten minutes of one core at the grid's mix of tree sizes.
MAX_TRAINING_WORK = 2_000_000_000
INNER_FOLDS = 3
TOP_IMPORTANCES = 10
# Below this share of the window units learned from with their text (``LearnResult.text_share``),
# the text columns were mostly missing in training (no span recorded, the resource not in the
# frozen corpus or changed, its body unreadable) while every activation computes them: a learning
# that trained a model says so.
MIN_TEXT_SHARE = 0.9
# Fewer judged cases than this and a verdict without a proposal says it is usual: on the development
# collections `eval learn` first proposed a model at about 200 cases (conversations) and 400
# (scientific claims), declining with fewer (docs/evaluation.md, "How many judged cases it needs").
CASES_USUALLY_NEEDED = 400
MISSING = math.nan  # a stage that did not rank the unit: the learner treats NaN as missing

FEATURE_NAMES = (
    "exact",  # named by the exact identity stage
    "exact_score",
    "bm25_score",
    "bm25_relative",  # BM25 / the window's best BM25
    "bm25_rank",
    "lexical_rank",
    "dense_similarity",
    "dense_gap",  # cosine minus the window's best cosine
    "dense_rank",
    "rrf_score",
    "window_position",  # 1-based place in the fused order
    "resource_units",  # units of the same resource in the window
    "resource_best_bm25_relative",
    "resource_best_dense",
    "resource_mean_dense",
    "resource_rrf_sum",
    "resource_best_by_bm25",  # this unit is its resource's best lexical unit
    "resource_best_by_dense",
    "unit_ordinal",  # the unit's place in its resource (0: the first)
    "unit_start",  # code-point offset in its resource (log1p)
    "unit_tokens",
    "heading_depth",
    "heading_match",  # share of query terms in the heading path
    "title_match",  # share of query terms in the first heading (a document's title)
    "resource_name_match",  # share of query terms in the resource id
    "query_terms",
    "window_size",
    "fusion_prior",  # the shipped convex fusion's score: where a model can start from
    *TEXT_FEATURES,  # the query's stems in the unit's own text (text_features.py); after v2's
    *CLUSTER_FEATURES,  # how like the window's top units and the rest its text is; last, after v3's
)
# ``fusion_prior``: alpha * BM25 / the window's best + (1 - alpha) * the cosine clipped at 0, + 1
# for an exact match: the default fusion (``ConvexFusionReranker()``) with its weights frozen here,
# so a feature never changes with a project's profile or a new default.
PRIOR_ALPHA = 0.35


@attrs.frozen
class FeatureInput:
    """What the features read of one candidate: a trace's ``CandidateRecord`` with its text cut
    from the case's frozen corpus, or a live ``Candidate`` reduced to the same fields (also a
    ``RerankInput``, so any text-free reranker, the default fusion one among them, can score it)."""

    unit_id: str
    resource_id: str
    heading_path: tuple[str, ...]
    token_count: int
    start: int | None
    exact_rank: int | None
    exact_score: float | None
    bm25_rank: int | None
    bm25_score: float | None
    lexical_rank: int | None
    dense_rank: int | None
    dense_similarity: float | None
    rrf_score: float
    resource_hash: str = ""
    # The unit's own text (``Unit.text``, what its span and hash cover; not a Candidate's
    # ``search_text``, which a trace cannot give back). "" when it is not known: a trace's unit
    # whose frozen text cannot be shown (no span, not in the corpus, changed); a unit is never
    # empty, so its text features are then MISSING, not the values of a text without a match.
    text: str = ""

    @classmethod
    def of_record(cls, c: CandidateRecord, text: str) -> FeatureInput:
        """``text``: the unit's text as the case's frozen corpus holds it, or "" (not known)."""
        return cls(c.unit_id, c.resource_id, tuple(c.heading_path), c.token_count, c.start,
                   resource_hash=c.resource_hash, text=text, **stages_of(c))  # fmt: skip

    @classmethod
    def of(cls, c: RerankInput) -> FeatureInput:
        """From what a reranker is given: a pipeline ``Candidate`` (activation) or a FeatureInput."""
        if isinstance(c, FeatureInput):
            return c
        if not isinstance(c, Candidate):
            raise TypeError(f"a learned ranker reads pipeline candidates, got {type(c).__name__}")
        u = c.unit
        return cls(u.unit_id, u.resource_id, u.heading_path, u.token_count, u.start, resource_hash=u.resource_hash,
                   text=u.text, **stages_of(c))  # fmt: skip


# The stage ranks and scores a FeatureInput keeps, named alike on a pipeline ``Candidate`` and a
# trace's ``CandidateRecord``: read once here rather than listed at each place that copies them.
STAGES = ("exact_rank", "exact_score", "bm25_rank", "bm25_score", "lexical_rank", "dense_rank", "dense_similarity",
          "rrf_score")  # fmt: skip


def stages_of(c: object) -> dict[str, Any]:
    """``STAGES`` of a candidate, a record or a FeatureInput, by name."""
    return {name: getattr(c, name) for name in STAGES}


def _share(terms: frozenset[str], label: str) -> float:
    return len(terms & label_terms(label)) / len(terms) if terms else 0.0


def _ordinal(unit_id: str) -> float:
    _, sep, ordinal = unit_id.rpartition("#")
    return float(ordinal) if sep and ordinal.isdigit() else MISSING


def _num(value: float | int | None) -> float:
    return MISSING if value is None else float(value)


def window_features(query: str, window: Sequence[FeatureInput]) -> list[list[float]]:
    """One row of ``FEATURE_NAMES`` per unit of the window (in the window's fused order).

    Every value is finite or ``MISSING`` (NaN); the rows depend only on the query and the window
    (its units' texts among it), so the trace's window and the live one give the same rows."""
    terms = query_terms(query)
    bm25 = [c.bm25_score for c in window if c.bm25_score is not None]
    best_bm25 = max(bm25, default=0.0)
    cosines = [c.dense_similarity for c in window if c.dense_similarity is not None]
    best_cosine = max(cosines, default=MISSING)

    def relative(score: float | None) -> float:
        if score is None:
            return 0.0
        return score / best_bm25 if best_bm25 > 0 else 0.0

    by_resource: dict[str, list[FeatureInput]] = {}
    for c in window:
        by_resource.setdefault(c.resource_id, []).append(c)
    aggregates: dict[str, tuple[float, ...]] = {}
    for resource_id, units in by_resource.items():
        rel = [relative(u.bm25_score) for u in units]
        dense = [u.dense_similarity for u in units if u.dense_similarity is not None]
        aggregates[resource_id] = (
            float(len(units)),
            max(rel),
            max(dense, default=MISSING),
            math.fsum(dense) / len(dense) if dense else MISSING,
            math.fsum(u.rrf_score for u in units),
        )
    priors = [fusion_prior(relative(c.bm25_score), c) for c in window]
    # A unit whose text is not known gets MISSING text columns: NaN, never the values of a text
    # without a match, which would tell the model something false about it.
    unit_texts = [c.text for c in window]
    texts = [row or (MISSING,) * len(TEXT_FEATURES) for row in text_rows(query, unit_texts)]
    clusters = [row or (MISSING,) * len(CLUSTER_FEATURES)
                for row in cluster_rows(unit_texts, priors, [c.resource_id for c in window])]  # fmt: skip
    rows: list[list[float]] = []
    for position, c, prior, text, cluster in zip(range(1, len(window) + 1), window, priors, texts, clusters,
                                                 strict=True):  # fmt: skip
        count, res_bm25, res_dense, res_mean, res_rrf = aggregates[c.resource_id]
        own_bm25 = relative(c.bm25_score)
        rows.append([
            1.0 if c.exact_rank is not None else 0.0,
            _num(c.exact_score),
            _num(c.bm25_score),
            own_bm25,
            _num(c.bm25_rank),
            _num(c.lexical_rank),
            _num(c.dense_similarity),
            c.dense_similarity - best_cosine if c.dense_similarity is not None else MISSING,
            _num(c.dense_rank),
            float(c.rrf_score),
            float(position),
            count,
            res_bm25,
            res_dense,
            res_mean,
            res_rrf,
            1.0 if c.bm25_score is not None and own_bm25 >= res_bm25 else 0.0,
            1.0 if c.dense_similarity is not None and c.dense_similarity >= res_dense else 0.0,
            _ordinal(c.unit_id),
            math.log1p(c.start) if c.start is not None and c.start >= 0 else MISSING,
            float(c.token_count),
            float(len(c.heading_path)),
            _share(terms, " ".join(c.heading_path)),
            _share(terms, c.heading_path[0]) if c.heading_path else 0.0,
            _share(terms, c.resource_id.replace("_", " ").replace("-", " ")),
            float(len(terms)),
            float(len(window)),
            prior,
            *text,
            *cluster,
        ])  # fmt: skip
    return rows


def fusion_prior(bm25_relative: float, c: FeatureInput) -> float:
    """The ``fusion_prior`` column: the default fusion's score with its weights frozen (``PRIOR_ALPHA``)."""
    return (PRIOR_ALPHA * bm25_relative + (1 - PRIOR_ALPHA) * max(0.0, c.dense_similarity or 0.0)
            + (1.0 if c.exact_rank is not None else 0.0))  # fmt: skip


# -- the model and its envelope ---------------------------------------------------------------
Scorer = Callable[[Sequence[Sequence[float]]], Sequence[float]]


@attrs.frozen
class FeatureImportance:
    feature: str
    share: float  # of the model's total split gain


@attrs.frozen
class FittedModel:
    """What a trainer returns: the library's own model text and each feature's importance."""

    model: str
    importances: tuple[FeatureImportance, ...]


@attrs.frozen
class RankingData:
    """Grouped ranking data: ``rows[i]`` has relevance ``labels[i]``; ``groups`` are the
    consecutive rows of each query (their sizes, in order)."""

    rows: tuple[tuple[float, ...], ...]
    labels: tuple[int, ...]
    groups: tuple[int, ...]
    feature_names: tuple[str, ...] = FEATURE_NAMES


@attrs.frozen
class LearnedModel:
    """A learned ranker as stored: content-addressed by ``digest`` (SHA-256 of ``to_bytes``)."""

    trainer: str  # the trainer's revision (library, objective, bounds)
    model: str  # the library's own model text
    feature_revision: str = FEATURE_REVISION
    feature_names: tuple[str, ...] = FEATURE_NAMES
    level: str = MetricLevel.RESOURCE.value

    def to_bytes(self) -> bytes:
        return canonical_json({"format": MODEL_FORMAT, **attrs.asdict(self)})

    @property
    def digest(self) -> str:
        return model_digest(self.to_bytes())


def model_digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def read_model(data: bytes, expected_digest: str | None = None) -> LearnedModel:
    """The model in ``data``; ``LearnedModelRefused`` when its bytes are not the digest named,
    are not a model document, or were made under another feature revision."""
    short = (expected_digest or model_digest(data))[:12]
    if expected_digest is not None and model_digest(data) != expected_digest:
        raise LearnedModelRefused(f"learned model {short}: its bytes do not match its digest", model=short,
                                  reason="digest_mismatch")  # fmt: skip
    try:
        doc = json.loads(data.decode("utf-8"))
        if not isinstance(doc, dict) or doc.get("format") != MODEL_FORMAT:
            raise ValueError("not a learned-ranker document")
        model = LearnedModel(trainer=str(doc["trainer"]), model=str(doc["model"]),
                             feature_revision=str(doc["feature_revision"]), level=str(doc["level"]),
                             feature_names=tuple(str(n) for n in doc["feature_names"]))  # fmt: skip
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
        raise LearnedModelRefused(f"learned model {short} cannot be read: {exc}", model=short,
                                  reason="unreadable") from exc  # fmt: skip
    if model.feature_revision != FEATURE_REVISION or model.feature_names != FEATURE_NAMES:
        raise LearnedModelRefused(
            f"learned model {short} was trained on features {model.feature_revision!r}, this engine computes "
            f"{FEATURE_REVISION!r}: learn again (`memcore eval learn`)",
            model=short,
            reason="feature_revision",
            feature_revision=model.feature_revision,
        )
    return model


def squashed(score: float) -> float:
    """A model's raw score mapped into (0, 1), order kept (the logistic function, overflow-free):
    a profile's ``min_final_score`` then means the same for every model."""
    if score >= 0:
        return 1.0 / (1.0 + math.exp(-score))
    e = math.exp(score)
    return e / (1.0 + e)


@attrs.frozen
class LearnedReranker:
    """Scores the rerank window with a learned model (a ``Reranker``): the window's features
    (``window_features``) through the model's scorer, squashed into (0, 1)."""

    digest: str
    scorer: Scorer = attrs.field(eq=False, repr=False)

    @property
    def revision(self) -> str:
        return f"learned-ranker(model={self.digest[:12]},features={FEATURE_REVISION})"

    @property
    def score_range(self) -> tuple[float, float]:
        return 0.0, 1.0

    def rerank(self, query: str, candidates: Sequence[RerankInput]) -> list[float]:
        if not candidates:
            return []
        rows = window_features(query, [FeatureInput.of(c) for c in candidates])
        scores = [squashed(float(s)) for s in self.scorer(rows)]
        if len(scores) != len(rows):
            raise ValueError(f"the learned model gave {len(scores)} scores for {len(rows)} candidates")
        return scores


class _Reranks(Protocol):
    @property
    def revision(self) -> str: ...

    def rerank(self, query: str, candidates: Sequence[RerankInput]) -> list[float]: ...


@attrs.frozen
class RefusedModelFallback:
    """The ranking a profile gets when its learned model was refused: the profile's own fusion,
    unchanged, under a revision that names the refused model and why (every Run records it)."""

    fallback: _Reranks
    digest: str
    reason: str

    @property
    def revision(self) -> str:
        return f"{self.fallback.revision}+learned-model-refused({self.digest[:12]},{self.reason})"

    @property
    def score_range(self) -> tuple[float, float]:
        found: tuple[float, float] = getattr(self.fallback, "score_range", (0.0, 1.0))
        return found

    def rerank(self, query: str, candidates: Sequence[RerankInput]) -> list[float]:
        return self.fallback.rerank(query, candidates)


# -- the cases a learner trains on ------------------------------------------------------------
@attrs.frozen
class LearningCase:
    """One judged query: its recorded rerank window (fused order) and the rest, in fused order."""

    case_id: str
    group: str  # the unit of a fold: the case itself, or a group of cases (a conversation)
    query: str
    window: tuple[FeatureInput, ...]
    tail: tuple[FeatureInput, ...]
    judgments: Judgments


def fused_records(case: CaseInput) -> list[CandidateRecord]:
    """A case's recorded candidates in fused order."""
    return sorted(case.candidates, key=lambda c: (c.rrf_rank, c.unit_id))


def window_records(case: CaseInput, fused: Sequence[CandidateRecord] | None = None) -> list[CandidateRecord]:
    """The units a case's Run reranked (its recorded window), in fused order: the rows it trains on.
    ``fused``: the case's ``fused_records``, when the caller has them already."""
    return [c for c in (fused_records(case) if fused is None else fused) if c.rerank_rank is not None]


def learning_case(case: CaseInput, query: str, read_body: ReadBody, group: str | None = None, *,
                  cut: CutTexts | None = None) -> LearningCase:  # fmt: skip
    """From a case's frozen trace: the recorded window is the units the Run reranked, each with
    its text as the case's frozen corpus holds it (``candidate_passages``: cut by its span and
    checked against its unit hash; "" when it cannot be shown). ``read_body``: a frozen body by
    its resource hash (the blob store's ``get``); ``cut``: the texts a whole learning cut once
    (``learning_cases``), else this case's own are cut."""
    fused = fused_records(case)
    reranked = window_records(case, fused)
    passages = candidate_passages(reranked, case.corpus_hashes, read_body, cut)
    window = tuple(FeatureInput.of_record(c, p.text or "") for c, p in zip(reranked, passages, strict=True))
    tail = tuple(FeatureInput.of_record(c, "") for c in fused if c.rerank_rank is None)  # never featured
    return LearningCase(case.case_id, group if group is not None else case.case_id, query, window, tail,
                        case.judgments)  # fmt: skip


def learning_cases(cases: Sequence[CaseInput], queries: Sequence[str], read_body: ReadBody,
                   level: MetricLevel = MetricLevel.RESOURCE) -> list[LearningCase]:  # fmt: skip
    """``learning_case`` of every case (``queries[i]`` is ``cases[i]``'s): the rows ``learn`` would
    train on counted from the traces and bounded (``check_rows``) before any body is read, then
    the windows of the cases learned from cut together (``cut_texts``): a unit in many windows is
    one text, each body read and decoded once. The other cases' windows get no text: ``learn``
    drops them (``learns_from``) before any row is featured, and cutting theirs would read bodies
    and hold texts the row bound does not count."""
    windows = [window_records(c) for c in cases]
    learned = [learns_from(len(w), c.judgments, level) for c, w in zip(cases, windows, strict=True)]
    kept_windows = [(w, c.corpus_hashes) for c, w, kept in zip(cases, windows, learned, strict=True) if kept]
    check_rows([len(w) for w, _ in kept_windows])
    cut = cut_texts(kept_windows, read_body)
    uncut = CutTexts({}, frozenset())  # never featured: no text read for them
    return [learning_case(c, q, read_body, cut=cut if kept else uncut)
            for c, q, kept in zip(cases, queries, learned, strict=True)]  # fmt: skip


def labels(case: LearningCase, level: MetricLevel) -> list[int]:
    """Each window unit's relevance: its own judgment (unit level), else its resource's."""
    resources = case.judgments.resource_relevance()
    if level is MetricLevel.RESOURCE:
        return [resources.get(c.resource_id, 0) for c in case.window]
    return [case.judgments.units.get(c.unit_id, resources.get(c.resource_id, 0)) for c in case.window]


def case_rows(case: LearningCase) -> tuple[tuple[float, ...], ...]:
    """``window_features`` of a case's recorded window."""
    return tuple(tuple(r) for r in window_features(case.query, case.window))


CaseRows = Callable[[LearningCase], Sequence[tuple[float, ...]]]


def ranking_data(cases: Sequence[LearningCase], level: MetricLevel, rows_of: CaseRows = case_rows) -> RankingData:
    """The cases' ranking data; ``rows_of``: a case's feature rows (``case_rows``, or a cache of them)."""
    rows: list[tuple[float, ...]] = []
    out_labels: list[int] = []
    groups: list[int] = []
    for case in cases:
        rows += rows_of(case)
        out_labels += labels(case, level)
        groups.append(len(case.window))
    return RankingData(tuple(rows), tuple(out_labels), tuple(groups))


def learns_from(window_units: int, judgments: Judgments, level: MetricLevel) -> bool:
    """Whether ``learn`` learns from a case: it has a recorded window and a relevant item."""
    return window_units > 0 and grade([], judgments, level).relevant > 0


def check_rows(window_units: Sequence[int]) -> int:
    """The training rows of cases of ``window_units`` each; ``InvalidRequest`` above ``MAX_TRAINING_ROWS``."""
    rows = sum(window_units)
    if rows > MAX_TRAINING_ROWS:
        raise InvalidRequest(
            f"{len(window_units):,} cases hold {rows:,} window units, more than the {MAX_TRAINING_ROWS:,} one "
            "training takes: learn on fewer cases",
            rows=rows,
            limit=MAX_TRAINING_ROWS,
        )
    return rows


# -- the learner's settings -------------------------------------------------------------------
@attrs.frozen
class LearnerSetting:
    """What a trainer is told to fit with; the trainer (an adapter) validates and bounds it."""

    rounds: int = 100
    leaves: int = 7
    min_data_in_leaf: int = 50
    # Boost from the default fusion: every query starts at ``base_weight * fusion_prior`` (0: off).
    base_weight: float = 10.0
    feature_fraction: float = 1.0  # share of the features each tree may split on

    @property
    def label(self) -> str:
        sampled = f",features={self.feature_fraction:g}" if self.feature_fraction < 1.0 else ""
        return (f"rounds={self.rounds},leaves={self.leaves},min_leaf={self.min_data_in_leaf},"
                f"base={self.base_weight:g}{sampled}")  # fmt: skip


KEEP_CURRENT_LABEL = "keep the current ranking"
# The grid the inner cross-validations choose among (fixed before any graded fold was looked at;
# docs/evaluation.md): ``None`` is no model, the project's ranking kept, so a project whose training
# folds say no learner beats it keeps it; then the shipped learner, a deeper unboosted one, a longer
# shipped one, a heavily regularised one for small projects, and two with more capacity that sample
# half the features for each tree. On a tie the earlier wins, the current ranking first.
SETTINGS: tuple[LearnerSetting | None, ...] = (
    None,
    LearnerSetting(),
    LearnerSetting(leaves=15, min_data_in_leaf=20, base_weight=0.0),
    LearnerSetting(rounds=200),
    LearnerSetting(rounds=50, leaves=3, min_data_in_leaf=100),
    LearnerSetting(rounds=300, leaves=31, min_data_in_leaf=20, feature_fraction=0.5),
    LearnerSetting(rounds=200, feature_fraction=0.5),
)


def setting_label(setting: LearnerSetting | None) -> str:
    return KEEP_CURRENT_LABEL if setting is None else setting.label


def training_work(cases: Sequence[LearningCase], settings: Sequence[LearnerSetting | None], folds: int,
                  inner_folds: int = INNER_FOLDS) -> int:  # fmt: skip
    """The row-rounds ``learn`` trains on ``cases`` (the judged ones it learns from), each fit at the
    rows it is given, on the splits the fits use (``cv_splits``, ``inner_splits``): every model
    setting on each inner training split of each outer fold and on each training split of the
    final choice, then one model on each outer fold's training folds and one on all cases, counted
    at the grid's most rounds (which setting the folds choose is not known before they train)."""
    rounds = [s.rounds for s in settings if s is not None]
    if not rounds:
        return 0
    size = [len(c.window) for c in cases]

    def rows(among: Sequence[int]) -> int:
        return sum(size[i] for i in among)

    def choice(among: Sequence[int], k: int) -> int:
        """``choose_setting``'s fits over ``cases[among]``, then the chosen setting's on all of them."""
        inner = sum(rows(train) for train, _ in inner_splits(cases, among, settings, k))
        return sum(rounds) * inner + max(rounds) * rows(among)

    everyone = range(len(cases))
    return choice(everyone, folds) + sum(choice(train, inner_folds) for train, _ in cv_splits(cases, everyone, folds))


def check_work(cases: Sequence[LearningCase], settings: Sequence[LearnerSetting | None], folds: int,
               inner_folds: int = INNER_FOLDS) -> int:  # fmt: skip
    """``training_work``; ``InvalidRequest`` above ``MAX_TRAINING_WORK``. ``learn`` calls it once,
    on the cases it will train on, before any training."""
    work = training_work(cases, settings, folds, inner_folds)
    if work > MAX_TRAINING_WORK:
        rows = sum(len(c.window) for c in cases)
        raise InvalidRequest(
            f"{rows:,} window units x {len(settings)} settings x {folds} folds is {work:,} row-rounds of training, "
            f"more than the {MAX_TRAINING_WORK:,} one learning takes: learn on fewer cases or with fewer folds",
            rows=rows,
            work=work,
            limit=MAX_TRAINING_WORK,
        )
    return work


def reordered(case: LearningCase, scores: Sequence[float]) -> list[RankedItem]:
    """The final order ``scores`` of the window give (as ``apply_rerank``: the window by score,
    fused order on ties, then the rest in fused order)."""
    order = sorted(range(len(case.window)), key=lambda i: -scores[i])
    units = [case.window[i] for i in order] + list(case.tail)
    return [RankedItem(c.unit_id, c.resource_id, c.resource_hash) for c in units]


# -- the guard --------------------------------------------------------------------------------
@attrs.frozen
class LearnResult:
    """A learning and its verdict; ``model_digest`` names the model trained on all cases (None
    when there were too few cases or the final choice keeps the current ranking), kept whether
    proposed or not, applied only when ``proposed``."""

    learn_id: str
    project_id: str
    created_at: str
    level: str
    folds: int
    cases: int  # cases with a relevant item and a recorded window: the ones learned from
    excluded_cases: int
    groups: int  # the units folds are made of (cases, or conversations)
    current: str  # the reranker the project ranks with now (its revision)
    verdict: str
    feature_revision: str = FEATURE_REVISION
    trainer: str = ""
    training_rows: int = 0  # the window units of the cases learned from
    # Of those, the units whose text the frozen corpus showed (their text columns computed, not
    # missing); None: a learning kept before it was counted.
    text_units: int | None = None
    model_digest: str | None = None
    current_metrics: TuneMetrics | None = None
    cross_validated: TuneMetrics | None = None
    gain: float | None = None
    gain_low: float | None = None
    gain_high: float | None = None
    p_value: float | None = None
    proposed: bool = False
    importances: tuple[FeatureImportance, ...] = ()
    seconds: float = 0.0
    # The nested cross-validation: the grid chosen among (``setting_label``), the setting each outer
    # fold's inner folds chose, and the one cross-validation over all cases chose for the model
    # trained on all of them (``KEEP_CURRENT_LABEL``: no model, nothing proposed).
    settings: tuple[str, ...] = ()
    inner_folds: int = 0
    fold_settings: tuple[str, ...] = ()
    chosen_setting: str | None = None

    @property
    def text_share(self) -> float | None:
        """The share of the window units learned from that had their text (None: not counted)."""
        if self.text_units is None or self.training_rows == 0:
            return None
        return self.text_units / self.training_rows


MAX_GROUP_SEPARATOR = 8


def group_by_separator(separator: str) -> Callable[[LearningCase], str]:
    """Cases grouped by the text before ``separator`` in the id of their first judged resource
    (sorted; else the first resource its Run ranked; else the case alone), the whole id when it
    has no ``separator``:
    ``/`` groups by first folder, ``-`` LoCoMo's turns by conversation (``c26-D1:3.md`` ->
    ``c26``). A group's cases always fall in one fold, so a fold never trains on the cases beside
    the ones it is graded on. ``InvalidRequest`` for an empty, blank or over-long separator."""
    if not isinstance(separator, str) or not separator.strip() or len(separator) > MAX_GROUP_SEPARATOR:
        raise InvalidRequest(f"group_by must be 1-{MAX_GROUP_SEPARATOR} characters, not blank",
                             group_by=separator)  # fmt: skip

    def group(case: LearningCase) -> str:
        named = sorted(case.judgments.resource_relevance()) or [c.resource_id for c in case.window + case.tail]
        return str(named[0]).split(separator, 1)[0] if named else case.case_id  # nothing named: alone

    return group


def fold_groups(groups: Sequence[str], k: int) -> list[list[int]]:
    """Case indices of each of ``k`` folds: whole groups, shuffled by a fixed seed."""
    names = sorted(set(groups))
    random.Random(FOLD_SEED).shuffle(names)
    fold_of = {name: i % k for i, name in enumerate(names)}
    return [[i for i, g in enumerate(groups) if fold_of[g] == f] for f in range(k)]


Split = tuple[list[int], list[int]]  # a fold's training cases and the fold (indices of the cases)


def cv_splits(cases: Sequence[LearningCase], among: Sequence[int], k: int) -> list[Split]:
    """The ``k``-fold cross-validation over ``cases[among]`` by group (``fold_groups``): each fold's
    training cases (the others, in ``among``'s order) and the fold. The one plan of folds that
    ``nested_cv``'s outer folds, ``choose_setting``'s inner ones and ``training_work`` follow."""
    among = list(among)
    splits = []
    for part in fold_groups([cases[i].group for i in among], k):
        fold = [among[j] for j in part]
        held = set(fold)
        splits.append(([i for i in among if i not in held], fold))
    return splits


def inner_splits(cases: Sequence[LearningCase], among: Sequence[int], settings: Sequence[LearnerSetting | None],
                 folds: int) -> list[Split]:  # fmt: skip
    """``choose_setting``'s splits of ``cases[among]``: ``folds`` of them, or one per group when there
    are fewer groups; none (nothing to choose among, or too few groups to cross-validate) when a
    single setting or fewer than two groups leave it nothing to fit."""
    k = min(folds, len({cases[i].group for i in among}))
    return [] if len(settings) == 1 or k < 2 else cv_splits(cases, among, k)


Grades = tuple[float, float, float]  # nDCG@10, Recall@20, MRR
Fit = Callable[[RankingData, LearnerSetting], FittedModel]


def graded(order: Sequence[RankedItem], judgments: Judgments, level: MetricLevel) -> Grades:
    g = grade(order, judgments, level)
    return ndcg_at(g, 10) or 0.0, recall_at(g, 20) or 0.0, mrr(g) or 0.0


def _means(values: Sequence[Grades]) -> TuneMetrics:
    return TuneMetrics(*(math.fsum(v[i] for v in values) / len(values) for i in range(3)))


@attrs.frozen
class Trainer:
    """The trainer ``learn`` fits with: a setting's model on ranking data, a model's scorer."""

    fit: Fit
    load: Callable[[str], Scorer]
    level: MetricLevel = MetricLevel.RESOURCE
    on_fit: Callable[[], None] = lambda: None  # called after every fit (progress)
    # Each case's feature rows, computed once: a learning fits some 126 models on the same cases,
    # and recomputing the rows for every fit was about half its time. Keyed by the case object's
    # id, the case kept beside its rows: it stays alive while its entry does, so no other object
    # can be given its id (an id is unique among live objects) and an entry found is its own.
    _rows: dict[int, tuple[LearningCase, tuple[tuple[float, ...], ...]]] = attrs.field(
        factory=dict, init=False, eq=False, repr=False
    )

    def rows(self, case: LearningCase) -> tuple[tuple[float, ...], ...]:
        """``case_rows(case)``, from the cache."""
        kept = self._rows.get(id(case))
        if kept is None:
            kept = self._rows[id(case)] = (case, case_rows(case))
        return kept[1]

    def data(self, cases: Sequence[LearningCase]) -> RankingData:
        return ranking_data(cases, self.level, self.rows)

    def grades(self, cases: Sequence[LearningCase], train: Sequence[int], test: Sequence[int],
               setting: LearnerSetting) -> list[Grades]:  # fmt: skip
        """``test``'s grades under ``setting``'s model trained on ``train`` (indices of ``cases``)."""
        fitted = self.fit(self.data([cases[i] for i in train]), setting)
        self.on_fit()
        scorer = self.load(fitted.model)
        # One call for all held-out rows (a model scores row by row, so the scores are the same): a
        # call per case spent some 8 % of a learning in the library's per-call overhead.
        rows = [self.rows(cases[i]) for i in test]
        scores = list(scorer([r for case_rows in rows for r in case_rows]))
        if len(scores) != sum(map(len, rows)):
            raise ValueError(f"the model gave {len(scores)} scores for {sum(map(len, rows))} rows")
        out, start = [], 0
        for i, case_rows in zip(test, rows, strict=True):
            out.append(graded(reordered(cases[i], scores[start : start + len(case_rows)]), cases[i].judgments,
                              self.level))  # fmt: skip
            start += len(case_rows)
        return out


def choose_setting(cases: Sequence[LearningCase], among: Sequence[int], now: Sequence[Grades],
                   settings: Sequence[LearnerSetting | None], trainer: Trainer,
                   folds: int) -> tuple[int, list[float]]:  # fmt: skip
    """The index in ``settings`` whose ``folds``-fold cross-validation over ``cases[among]`` alone
    (by group) gives the highest mean nDCG@10, the earlier on a tie, with each setting's mean
    (``None``: the current ranking, its grades ``now``). Fewer than two groups cannot be
    cross-validated: the current ranking is kept (the first setting, if the grid has no ``None``)."""
    fallback = settings.index(None) if None in settings else 0
    splits = inner_splits(cases, among, settings, folds)
    if not splits:
        return (0 if len(settings) == 1 else fallback), []
    means = []
    for setting in settings:
        if setting is None:
            means.append(math.fsum(now[i][0] for i in among) / len(among))
            continue
        scores = dict.fromkeys(among, 0.0)
        for train, part in splits:
            for i, g in zip(part, trainer.grades(cases, train, part, setting), strict=True):
                scores[i] = g[0]
        # Exactly rounded: the same grades in another case order are a tie, on every Python.
        means.append(math.fsum(scores[i] for i in among) / len(among))
    return max(range(len(settings)), key=lambda j: (means[j], -j)), means


@attrs.frozen
class NestedCV:
    """Each case's grades on its outer fold under the setting that fold's inner folds chose."""

    held_out: tuple[Grades, ...]
    choices: tuple[int, ...]  # per outer fold, an index in the settings
    inner_means: tuple[tuple[float, ...], ...]  # per outer fold, each setting's inner mean nDCG@10


def nested_cv(cases: Sequence[LearningCase], now: Sequence[Grades], settings: Sequence[LearnerSetting | None],
              trainer: Trainer, *, folds: int = DEFAULT_FOLDS, inner_folds: int = INNER_FOLDS) -> NestedCV:  # fmt: skip
    """Nested cross-validation: the outer folds as ``learn`` makes them; each held-out fold is
    graded with the setting chosen by ``choose_setting`` on the training folds only (the held-out
    cases never reach an inner fit), a model of it trained on all training folds, or the current
    ranking (``now``) when the inner folds keep it."""
    held_out: list[Grades] = [(0.0, 0.0, 0.0)] * len(cases)
    choices, inner = [], []
    for train, fold in cv_splits(cases, range(len(cases)), folds):
        best, means = choose_setting(cases, train, now, settings, trainer, inner_folds)
        choices.append(best)
        inner.append(tuple(round(m, 6) for m in means))
        setting = settings[best]
        grades = [now[i] for i in fold] if setting is None else trainer.grades(cases, train, fold, setting)
        for i, g in zip(fold, grades, strict=True):
            held_out[i] = g
    return NestedCV(tuple(held_out), tuple(choices), tuple(inner))


def learn(
    cases: Sequence[LearningCase],
    *,
    fit: Fit,
    load: Callable[[str], Scorer],
    current: Callable[[str, Sequence[FeatureInput]], Sequence[float]],
    current_revision: str,
    trainer: Callable[[LearnerSetting], str],
    learn_id: str,
    project_id: str,
    created_at: str,
    folds: int = DEFAULT_FOLDS,
    level: MetricLevel = MetricLevel.RESOURCE,
    settings: Sequence[LearnerSetting | None] = SETTINGS,
    inner_folds: int = INNER_FOLDS,
    resamples: int = DEFAULT_BOOTSTRAP_RESAMPLES,
    clock: Callable[[], float] = time.perf_counter,
    progress: Progress = no_progress,
    baseline_note: str = "",
) -> tuple[LearnResult, LearnedModel | None]:
    """Grade learning against ``current`` (the project's reranker, scoring a window) by nested
    cross-validation (``nested_cv``), choose the final setting by cross-validation over all cases
    and train its model on all of them; the result proposes it only when that choice is a model
    and the paired interval of the held-out nDCG@10 gain lies above 0. ``trainer``: a setting's
    trainer revision. ``progress``: ("training", models trained, the most there can be);
    ``baseline_note``: what the verdict adds of what ``current`` is (services/learning.py)."""
    t0 = clock()
    check_folds(folds)
    if not settings or inner_folds < 2:
        raise InvalidRequest("learning needs at least one setting and at least 2 inner folds")
    judged = [c for c in cases if learns_from(len(c.window), c.judgments, level)]
    rows = check_rows([len(c.window) for c in judged])
    groups = len({c.group for c in judged})
    labels_ = tuple(setting_label(s) for s in settings)
    base: dict[str, Any] = dict(learn_id=learn_id, project_id=project_id, created_at=created_at,
                                level=level.value, folds=folds, cases=len(judged),
                                excluded_cases=len(cases) - len(judged), groups=groups, current=current_revision,
                                training_rows=rows, text_units=sum(bool(u.text) for c in judged for u in c.window),
                                settings=labels_, inner_folds=inner_folds)  # fmt: skip
    needed = max(MIN_CASES_FOR_INTERVAL, folds)
    if len(judged) < needed or groups < folds:
        verdict = (f"too few judged cases to cross-validate: {len(judged)} cases in {groups} group(s); "
                   f"{folds}-fold cross-validation needs at least {needed} cases in {folds} groups"
                   + few_cases_note(len(judged)))  # fmt: skip
        return LearnResult(verdict=verdict + baseline_note, trainer=trainer(LearnerSetting()),
                           seconds=round(clock() - t0, 3), **base), None  # fmt: skip
    check_work(judged, settings, folds, inner_folds)  # the one bound on the work, before any training
    models = sum(s is not None for s in settings)
    most = models * (folds * inner_folds + folds) + folds + 1
    fitted = [0]

    def on_fit() -> None:
        fitted[0] += 1
        progress("training", min(fitted[0], most), most)

    progress("training", 0, most)
    fitter = Trainer(fit, load, level, on_fit)
    now = [graded(reordered(c, current(c.query, c.window)), c.judgments, level) for c in judged]
    nested = nested_cv(judged, now, settings, fitter, folds=folds, inner_folds=inner_folds)
    gain = PairedGain.of([v[0] for v in nested.held_out], [v[0] for v in now], resamples)
    best, _ = choose_setting(judged, range(len(judged)), now, settings, fitter, folds)
    setting = settings[best]
    said = (f"nested cross-validated nDCG@10 {gain.gain:+.4f} over the current ranking, 95% interval "
            f"{gain.interval}, p = {gain.p_value:.3f}")  # fmt: skip
    model = None
    ranked: list[FeatureImportance] = []
    if setting is None:
        proposed = False
        verdict = (f"no proposal: cross-validation over all cases keeps the current ranking, no learned "
                   f"setting beat it ({said})" + few_cases_note(len(judged)))  # fmt: skip
    else:
        final = fit(fitter.data(judged), setting)
        model = LearnedModel(trainer=trainer(setting), model=final.model, level=level.value)
        ranked = sorted(final.importances, key=lambda f: (-f.share, f.feature))[:TOP_IMPORTANCES]
        proposed = gain.gain_low > 0
        verdict = (
            f"proposed: {said}"
            if proposed
            else f"no proposal: the interval does not lie above 0 ({said})" + few_cases_note(len(judged))
        )
    progress("training", most, most)
    result = LearnResult(
        trainer=trainer(setting if setting is not None else LearnerSetting()),
        model_digest=model.digest if model is not None else None,
        current_metrics=_means(now),
        cross_validated=_means(nested.held_out),
        proposed=proposed,
        verdict=verdict + baseline_note,
        importances=tuple(ranked),
        seconds=round(clock() - t0, 3),
        fold_settings=tuple(labels_[i] for i in nested.choices),
        chosen_setting=labels_[best],
        **gain.fields(),
        **base,
    )
    return result, model


def few_cases_note(cases: int) -> str:
    """What a verdict without a proposal adds when the project has few judged cases: it is usual,
    and how many helped elsewhere (``CASES_USUALLY_NEEDED``)."""
    if cases >= CASES_USUALLY_NEEDED:
        return ""
    return (
        f"; with {cases} judged cases that is usual: on the development collections a model was first "
        f"proposed at about 200 (conversations) to {CASES_USUALLY_NEEDED} (scientific claims) judged cases, "
        "so judge more and learn again"
    )


def importances_of(names: Sequence[str], gains: Sequence[float]) -> tuple[FeatureImportance, ...]:
    """Each feature's share of the total gain (all 0 when the model never split)."""
    total = math.fsum(gains)
    return tuple(
        FeatureImportance(n, round(g / total, 6) if total > 0 else 0.0) for n, g in zip(names, gains, strict=True)
    )
