"""Evaluation metrics (brief §7): pure functions over plain values.

Two levels, both reported:

- **unit level** (the seed's view): ranking items are units. A ranked unit earns its own judgment
  if it has one, otherwise its resource's judgment if no earlier unit of that resource earned it.
  Each resource judgment is earned at most once and no unit earns twice (a repeated unit earns 0).
  Relevant evidence items = judged units with relevance >= 1, plus judged resources with
  relevance >= 1 none of whose units has its own judgment >= 1.
- **resource level** (comparable with BEIR/TREC tables): the ranking keeps only the first unit of
  each resource; a resource's relevance is the larger of its resource judgment and its units'
  judgments.

Unjudged = 0 at both levels. Recall@k = relevant items earned in the top k / all relevant items;
nDCG@k = linear gain (relevance), discount log2(rank + 1), ideal from all judged items; MRR = 1 /
rank of the first item earning relevance >= 1, 0 if none. A case without any relevant item gets
``None`` from each of the three: callers exclude it from means and count it (``summarize``).

With unit judgments only (unit level) and at resource level, Recall@20, nDCG@10 and MRR equal
trec_eval's ``recall_20``, ``ndcg_cut_10`` and ``recip_rank`` on the corresponding run when scores
have no ties (tests/core/test_metrics.py checks it through pytrec_eval). trec_eval scores a query
with no relevant document 0 where these functions return ``None``.

Beside the seed's seven, three metrics of what the source Run *returned* to the agent (its
selected fragments, ``ReturnedFragment``; issue 18 item 5, docs/evaluation.md): wasted tokens,
relevant items per 1,000 returned tokens, and reuse that skipped a changed unit. A ``reuse``
fragment carries no text, so it returns 0 tokens (as it costs 0 against the budget).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Mapping, Sequence

import attrs

from memory_core.domain.errors import InvalidRequest
from memory_core.retrieval.pipeline import REUSE

MAX_RELEVANCE = 3
class MetricLevel(enum.Enum):
    UNIT = "unit"
    RESOURCE = "resource"


def resource_of_unit(unit_id: str) -> str:
    """The resource of a unit id ``<resource_id>#<ordinal>`` (glossary, brief §3)."""
    resource_id, sep, ordinal = unit_id.rpartition("#")
    if not sep or not resource_id or not ordinal.isdigit():
        raise InvalidRequest(f"unit id {unit_id!r} is not '<resource_id>#<ordinal>'", unit_id=unit_id)
    return resource_id


def _relevance_map(raw: Mapping[str, int]) -> dict[str, int]:
    out: dict[str, int] = {}
    for key, relevance in raw.items():
        # bool is an int subclass; True is not a relevance level.
        if type(relevance) is not int or not 0 <= relevance <= MAX_RELEVANCE:
            raise InvalidRequest(
                f"relevance of {key!r} must be an integer 0-{MAX_RELEVANCE}", item=key, relevance=relevance
            )
        out[key] = relevance
    return out


def _str_map(raw: Mapping[str, str]) -> dict[str, str]:
    return dict(raw)


@attrs.frozen
class RankedItem:
    """One ranked unit; ``resource_hash`` is the full-resource hash the candidate recorded."""

    unit_id: str
    resource_id: str
    resource_hash: str | None = None


@attrs.frozen
class Judgments:
    """Unit and resource judgments (relevance 0-3) of one case.

    ``unit_resources`` maps each judged unit to its resource; a judged unit missing from it falls
    back to parsing its id (``<resource_id>#<ordinal>``).
    """

    units: Mapping[str, int] = attrs.field(factory=dict, converter=_relevance_map)
    resources: Mapping[str, int] = attrs.field(factory=dict, converter=_relevance_map)
    unit_resources: Mapping[str, str] = attrs.field(factory=dict, converter=_str_map)

    @classmethod
    def of(
        cls,
        units: Mapping[str, int] | None = None,
        resources: Mapping[str, int] | None = None,
        unit_resources: Mapping[str, str] | None = None,
    ) -> Judgments:
        return cls(units=units or {}, resources=resources or {}, unit_resources=unit_resources or {})

    def resource_of(self, unit_id: str) -> str:
        found = self.unit_resources.get(unit_id)
        return found if found is not None else resource_of_unit(unit_id)

    def evidence_resources(self) -> frozenset[str]:
        """Judged resources with relevance >= 1 that count as evidence items themselves."""
        covered = {self.resource_of(u) for u, rel in self.units.items() if rel >= 1}
        return frozenset(r for r, rel in self.resources.items() if rel >= 1 and r not in covered)

    def resource_relevance(self) -> dict[str, int]:
        """Resource level: the larger of a resource's judgment and its units' judgments."""
        out = dict(self.resources)
        for unit_id, rel in self.units.items():
            resource_id = self.resource_of(unit_id)
            out[resource_id] = max(rel, out.get(resource_id, 0))
        return out


@attrs.frozen
class Graded:
    """A ranking graded at one level: what each rank earned, and the ideal to compare with.

    ``hits[i]`` says whether rank ``i + 1`` earned a relevant evidence item (recall's numerator);
    ``gains[i]`` is the relevance it earned (nDCG and MRR).
    """

    gains: tuple[int, ...]
    hits: tuple[bool, ...]
    ideal: tuple[int, ...]
    relevant: int

    @property
    def has_relevant(self) -> bool:
        return self.relevant > 0


def earned_gains(ranking: Sequence[RankedItem], judgments: Judgments) -> list[int]:
    """Unit level: the relevance each ranked unit earns, in rank order."""
    return list(grade_units(ranking, judgments).gains)


def ideal_gains(judgments: Judgments) -> list[int]:
    """Unit level ideal: every judged item (unit or resource) once with its relevance, descending.

    Each judged unit and each resource judgment can be earned once, so this bounds every
    ranking's DCG and nDCG stays within [0, 1]. With unit judgments only, or resource judgments
    only, it is exactly the relevant evidence items with their relevance (plus zeros). It differs
    only when a resource carries a judgment >= 1 and one of its units also has its own >= 1: the
    resource is then no evidence item, but an unjudged unit of it still earns its judgment.
    """
    return sorted([*judgments.units.values(), *judgments.resources.values()], reverse=True)


def grade_units(ranking: Sequence[RankedItem], judgments: Judgments) -> Graded:
    """Unit level grading (brief §7)."""
    evidence_resources = judgments.evidence_resources()
    seen_units: set[str] = set()
    earned_resources: set[str] = set()
    gains: list[int] = []
    hits: list[bool] = []
    for item in ranking:
        gain, hit = 0, False
        if item.unit_id in seen_units:
            pass  # no unit earns twice
        elif item.unit_id in judgments.units:
            gain = judgments.units[item.unit_id]
            hit = gain >= 1
        elif item.resource_id in judgments.resources and item.resource_id not in earned_resources:
            earned_resources.add(item.resource_id)
            gain = judgments.resources[item.resource_id]
            hit = item.resource_id in evidence_resources
        seen_units.add(item.unit_id)
        gains.append(gain)
        hits.append(hit)
    relevant = sum(1 for rel in judgments.units.values() if rel >= 1) + len(evidence_resources)
    return Graded(gains=tuple(gains), hits=tuple(hits), ideal=tuple(ideal_gains(judgments)), relevant=relevant)


def resource_ranking(ranking: Sequence[RankedItem]) -> list[RankedItem]:
    """Resource level ranking: the first unit of each resource, in rank order."""
    seen: set[str] = set()
    out: list[RankedItem] = []
    for item in ranking:
        if item.resource_id not in seen:
            seen.add(item.resource_id)
            out.append(item)
    return out


def grade_resources(ranking: Sequence[RankedItem], judgments: Judgments) -> Graded:
    """Resource level grading (brief §7)."""
    relevance = judgments.resource_relevance()
    gains = tuple(relevance.get(item.resource_id, 0) for item in resource_ranking(ranking))
    return Graded(
        gains=gains,
        hits=tuple(g >= 1 for g in gains),
        ideal=tuple(sorted(relevance.values(), reverse=True)),
        relevant=sum(1 for rel in relevance.values() if rel >= 1),
    )


def grade(ranking: Sequence[RankedItem], judgments: Judgments, level: MetricLevel) -> Graded:
    if level is MetricLevel.UNIT:
        return grade_units(ranking, judgments)
    return grade_resources(ranking, judgments)


def _check_k(k: int) -> None:
    if type(k) is not int or k < 1:
        raise InvalidRequest(f"cutoff k must be a positive integer, got {k!r}", k=k)


def _dcg(gains: Iterable[int]) -> float:
    return math.fsum(g / math.log2(rank + 1) for rank, g in enumerate(gains, start=1) if g)


def recall_at(graded: Graded, k: int) -> float | None:
    """Relevant items earned in the top k / all relevant items; None without relevant items."""
    _check_k(k)
    if not graded.has_relevant:
        return None
    return sum(graded.hits[:k]) / graded.relevant


def ndcg_at(graded: Graded, k: int) -> float | None:
    """DCG of the top k / DCG of the ideal top k; None without relevant items."""
    _check_k(k)
    if not graded.has_relevant:
        return None
    return _dcg(graded.gains[:k]) / _dcg(graded.ideal[:k])


def mrr(graded: Graded) -> float | None:
    """1 / rank of the first item earning relevance >= 1, 0 if none; None without relevant items."""
    if not graded.has_relevant:
        return None
    for rank, gain in enumerate(graded.gains, start=1):
        if gain >= 1:
            return 1.0 / rank
    return 0.0


def resource_diversity_at(ranking: Sequence[RankedItem], k: int = 10) -> float | None:
    """Distinct resources in the top k / items in the top k; None for an empty ranking."""
    _check_k(k)
    top = ranking[:k]
    if not top:
        return None
    return len({item.resource_id for item in top}) / len(top)


class ScopeStatus(enum.Enum):
    IN_SCOPE = "in_scope"
    SCOPE_VIOLATION = "scope_violation"
    STALE = "stale"


def scope_status(item: RankedItem, corpus: Mapping[str, str]) -> ScopeStatus:
    """One status per item, so Scope Violation and Stale Result never count the same item.

    An item that recorded no resource hash cannot be shown stale and counts as in scope.
    """
    frozen_hash = corpus.get(item.resource_id)
    if frozen_hash is None:
        return ScopeStatus.SCOPE_VIOLATION
    if item.resource_hash is not None and item.resource_hash != frozen_hash:
        return ScopeStatus.STALE
    return ScopeStatus.IN_SCOPE


def _share_at(ranking: Sequence[RankedItem], corpus: Mapping[str, str], k: int, status: ScopeStatus) -> float | None:
    _check_k(k)
    top = ranking[:k]
    if not top:
        return None
    return sum(1 for item in top if scope_status(item, corpus) is status) / len(top)


def scope_violation_at(ranking: Sequence[RankedItem], corpus: Mapping[str, str], k: int = 20) -> float | None:
    """Share of the top k whose resource is absent from the frozen corpus (resource_id -> hash)."""
    return _share_at(ranking, corpus, k, ScopeStatus.SCOPE_VIOLATION)


def stale_result_at(ranking: Sequence[RankedItem], corpus: Mapping[str, str], k: int = 20) -> float | None:
    """Share of the top k whose resource is in the corpus under a different recorded hash."""
    return _share_at(ranking, corpus, k, ScopeStatus.STALE)


# -- what the agent was given (issue 18 item 5) ---------------------------------------------------


@attrs.frozen
class ReturnedFragment:
    """One fragment the source Run returned (a selected candidate), in final order.

    ``unit_hash`` and ``resource_hash`` are those the candidate recorded, i.e. of the generation
    that ranked it; ``delta_action`` is ``add``, ``replace`` or ``reuse``.
    """

    unit_id: str
    resource_id: str
    unit_hash: str
    resource_hash: str | None
    token_count: int
    delta_action: str

    @property
    def carries_text(self) -> bool:
        return self.delta_action != REUSE

    @property
    def tokens(self) -> int:
        """Tokens returned to the agent: the unit's, or 0 for a reuse (a reference, no text)."""
        return self.token_count if self.carries_text else 0

    def ranked(self) -> RankedItem:
        return RankedItem(self.unit_id, self.resource_id, self.resource_hash)


def returned_tokens(fragments: Iterable[ReturnedFragment]) -> int:
    return sum(f.tokens for f in fragments)


def _judged(judgments: Judgments) -> bool:
    return bool(judgments.units or judgments.resources)


def judged_zero(fragment: ReturnedFragment, judgments: Judgments, level: MetricLevel) -> bool:
    """Whether the fragment's unit is judged 0 at ``level`` (unjudged is not "judged 0").

    Unit level: its own judgment is 0, or it has none and its resource's judgment is 0. Resource
    level: its resource's relevance (the larger of the resource's and its units' judgments) is 0.
    """
    if level is MetricLevel.UNIT:
        own = judgments.units.get(fragment.unit_id)
        if own is not None:
            return own == 0
        return judgments.resources.get(fragment.resource_id) == 0
    return judgments.resource_relevance().get(fragment.resource_id) == 0


def wasted_tokens(
    fragments: Sequence[ReturnedFragment], judgments: Judgments, level: MetricLevel = MetricLevel.UNIT
) -> int | None:
    """Tokens returned on units judged 0 (``judged_zero``): text the agent was sent that a judge
    found irrelevant. 0 when nothing was returned; ``None`` for a case without any judgment.

    Unjudged units do not count: the figure is what is known to be wasted, a lower bound.
    """
    if not _judged(judgments):
        return None
    return sum(f.tokens for f in fragments if judged_zero(f, judgments, level))


def relevant_per_1k_tokens(
    fragments: Sequence[ReturnedFragment], judgments: Judgments, level: MetricLevel = MetricLevel.UNIT
) -> float | None:
    """Relevant evidence items the returned text earned, per 1,000 returned tokens.

    1000 * (relevant items earned, as Recall's numerator at ``level``, by the fragments that
    carried text, in final order) / (the tokens they carried). A reused fragment is left out of
    both: it cost no tokens and gave the agent nothing new. ``None`` for a case without relevant
    items (as Recall, nDCG and MRR) and when no token was returned (nothing to divide by).
    """
    text = [f for f in fragments if f.carries_text]
    tokens = returned_tokens(text)
    graded = grade([f.ranked() for f in text], judgments, level)
    if not graded.has_relevant or tokens == 0:
        return None
    return 1000.0 * sum(graded.hits) / tokens


def skipped_change(fragment: ReturnedFragment, corpus: Mapping[str, str]) -> bool:
    """Whether a reuse told the agent to keep a unit the frozen corpus no longer holds unchanged.

    The frozen corpus (resource_id -> hash) records resources, not units: a unit is unchanged
    when its resource is there under the hash the candidate recorded (the same body chunks to the
    same units and unit hashes). A resource absent from the corpus, or there under another hash,
    counts as changed: exact for deleted resources, an upper bound for edited ones (an edit
    elsewhere in the resource shifts spans, and a unit hash covers its span, so most units of an
    edited resource do change hash). An item without a recorded resource hash counts as unchanged.
    """
    if fragment.carries_text:
        return False
    frozen = corpus.get(fragment.resource_id)
    if frozen is None:
        return True
    return fragment.resource_hash is not None and fragment.resource_hash != frozen


def changed_unit_reuse(fragments: Iterable[ReturnedFragment], corpus: Mapping[str, str]) -> int:
    """Reuse decisions that skipped a changed unit (``skipped_change``): the agent was told its
    copy was current while the sources held other text. Needs no judgment; 0 without reuse."""
    return sum(1 for f in fragments if skipped_change(f, corpus))
