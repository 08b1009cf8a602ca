"""The metrics, each declared once: its name, cut-off, kind, what it means and the definition it
follows, and how one case's value is computed (as ir_measures registers its measures). The report
(``evaluation/report.py``: which metrics, their conventions, each case's values) and the CLI read
this registry, and so does the UI (its server puts ``described()`` in the page, static/metrics.js
reads it); a new metric is one ``register(Metric(...))`` here (its function in ``metrics.py``) and
its test.

Kinds: ``judged`` metrics rank against judgments (and exclude a case without relevant items),
``ranking`` metrics describe a ranking without judgments, ``returned`` metrics are of what the
source Run returned to the agent (B4 only)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import attrs

from memory_core.evaluation.metrics import (
    Graded,
    Judgments,
    MetricLevel,
    RankedItem,
    ReturnedFragment,
    changed_unit_reuse,
    mrr,
    ndcg_at,
    recall_at,
    relevant_per_1k_tokens,
    resource_diversity_at,
    scope_violation_at,
    stale_result_at,
    wasted_tokens,
)

JUDGED, RANKING, RETURNED = "judged", "ranking", "returned"


@attrs.frozen
class MetricInput:
    """What a metric reads of one case at one level: the graded ranking, the items it ranks
    (resource level: one per resource), the frozen corpus's hashes; the returned fragments and the
    judgments for ``returned`` metrics."""

    graded: Graded | None
    items: Sequence[RankedItem]
    corpus_hashes: Mapping[str, str]
    judgments: Judgments
    level: MetricLevel
    fragments: Sequence[ReturnedFragment] = ()


@attrs.frozen
class Metric:
    name: str  # the key reports, the API and the UI use, with its cut-off: "ndcg@10"
    label: str  # how a person reads it: "nDCG@10"
    cutoff: int | None
    kind: str
    definition: str  # the convention the report states
    source: str  # the definition it follows
    compute: Callable[[MetricInput], float | None] = attrs.field(eq=False, repr=False)
    digits: int = 3  # the decimals a person reads it with (the UI's tables)


REGISTRY: dict[str, Metric] = {}


def register(metric: Metric) -> Metric:
    if metric.name in REGISTRY:
        raise ValueError(f"metric {metric.name!r} is registered twice")
    if metric.kind not in (JUDGED, RANKING, RETURNED):
        raise ValueError(f"metric {metric.name!r} has no kind {metric.kind!r}")
    REGISTRY[metric.name] = metric
    return metric


def of_kind(*kinds: str) -> tuple[Metric, ...]:
    """The registered metrics of these kinds, in registration order."""
    return tuple(m for m in REGISTRY.values() if m.kind in kinds)


def described() -> list[dict[str, object]]:
    """Every registered metric as data (no function): what the UI's tables list and explain."""
    return [
        {"name": m.name, "label": m.label, "cutoff": m.cutoff, "kind": m.kind, "definition": m.definition,
         "source": m.source, "digits": m.digits}
        for m in REGISTRY.values()
    ]  # fmt: skip


def _graded(value: MetricInput) -> Graded:
    assert value.graded is not None, "a judged metric needs the graded ranking"
    return value.graded


RECALL = register(Metric(
    "recall@20", "Recall@20", 20, JUDGED, "relevant items earned in the top 20 / all relevant items",
    "trec_eval recall_20 (Manning, Raghavan and Schütze, Introduction to Information Retrieval, 2008, 8.3)",
    lambda v: recall_at(_graded(v), 20)))
NDCG = register(Metric(
    "ndcg@10", "nDCG@10", 10, JUDGED, "linear gain = relevance, discount log2(rank + 1), ideal from all judged items",
    "Järvelin and Kekäläinen, Cumulated gain-based evaluation of IR techniques, ACM TOIS 20(4), 2002; "
    "trec_eval ndcg_cut_10", lambda v: ndcg_at(_graded(v), 10)))
MRR = register(Metric(
    "mrr", "MRR", None, JUDGED, "1 / rank of the first item earning relevance >= 1, 0 if none",
    "Voorhees, The TREC-8 Question Answering Track Report, 1999; trec_eval recip_rank",
    lambda v: mrr(_graded(v))))
DIVERSITY = register(Metric(
    "resource_diversity@10", "Resource diversity@10", 10, RANKING,
    "distinct resources in the top 10 / items in the top 10", "brief §7 (this project's)",
    lambda v: resource_diversity_at(v.items, 10)))
SCOPE = register(Metric(
    "scope_violation@20", "Scope violation@20", 20, RANKING,
    "share of the top 20 whose resource is absent from the frozen corpus", "brief §7 (this project's)",
    lambda v: scope_violation_at(v.items, v.corpus_hashes, 20)))
STALE = register(Metric(
    "stale_result@20", "Stale result@20", 20, RANKING,
    "share of the top 20 whose resource is in the corpus under a different recorded hash", "brief §7 (this project's)",
    lambda v: stale_result_at(v.items, v.corpus_hashes, 20)))
WASTED = register(Metric(
    "wasted_tokens", "Wasted tokens", None, RETURNED,
    "tokens returned on units judged 0 (own judgment, else its resource's; resource level: the resource's "
    "relevance); null without any judgment", "issue 18 item 5 (this project's; docs/evaluation.md)",
    lambda v: wasted_tokens(v.fragments, v.judgments, v.level), digits=1))
DENSITY = register(Metric(
    "relevant_per_1k_tokens", "Relevant per 1k tokens", None, RETURNED,
    "1000 * relevant items earned by the fragments that carried text / their tokens; null without relevant "
    "items or returned tokens", "issue 18 item 5 (this project's; docs/evaluation.md)",
    lambda v: relevant_per_1k_tokens(v.fragments, v.judgments, v.level), digits=2))
CHANGED_REUSE = register(Metric(
    "changed_unit_reuse", "Changed unit reuse", None, RETURNED,
    "reuse decisions whose resource the frozen corpus lacks or holds under another hash than the candidate "
    "recorded", "issue 18 item 5 (this project's; docs/evaluation.md)",
    lambda v: changed_unit_reuse(v.fragments, v.corpus_hashes), digits=2))
