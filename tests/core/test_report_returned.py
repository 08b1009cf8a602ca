"""The report carries what the agent was given (issue 18 item 5) on B4 at both levels, as the
metrics define it, and the exported report still validates against the fixture schema."""

from __future__ import annotations

import json
import math
from pathlib import Path

import jsonschema
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memory_core.domain.canonical import plain
from memory_core.evaluation.metrics import (
    Judgments,
    MetricLevel,
    changed_unit_reuse,
    relevant_per_1k_tokens,
    wasted_tokens,
)
from memory_core.evaluation.report import (
    BASELINE,
    CHANGED_REUSE,
    DENSITY,
    METRIC_CONVENTIONS,
    RETURNED_METRICS,
    VARIANTS,
    WASTED,
    CaseInput,
    build_report,
    returned_fragments,
)
from memory_core.runs.records import CandidateRecord
from tests.contracts.test_run_store import ranked

SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "contracts" / "evaluation-fixture.schema.json").read_text())


def case_of(seed: int, case_id: str, judge: bool) -> CaseInput:
    candidates = tuple(CandidateRecord.from_candidate(c) for c in ranked(seed))
    units = {c.unit_id: (i * 7) % 4 for i, c in enumerate(candidates) if i % 2 == 0} if judge else {}
    recorded = {c.resource_id: c.resource_hash for c in candidates}
    resources = sorted(recorded)
    # Half of the resources frozen as recorded, the others edited since the index; the last gone.
    corpus = {r: (recorded[r] if i % 2 else "f" * 64) for i, r in enumerate(resources[:-1])}
    return CaseInput(case_id, candidates, {"total": 1.0}, True, Judgments.of(units), corpus)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, 10_000), st.booleans()), min_size=1, max_size=6))
def test_b4_carries_the_returned_metrics_at_both_levels(seeds: list[tuple[int, bool]]) -> None:
    cases = [case_of(seed, f"c{i}", judge) for i, (seed, judge) in enumerate(seeds)]
    report = build_report(cases, resamples=20)
    for level in MetricLevel:
        variants = report.level(level).variants
        for v in VARIANTS:
            assert (
                set(RETURNED_METRICS) <= set(variants[v.name])
                if v is BASELINE
                else not (set(RETURNED_METRICS) & set(variants[v.name]))
            )
        per_case = []
        for c in cases:
            fragments = returned_fragments(c.candidates)
            assert [f.unit_id for f in fragments] == [
                r.unit_id for r in sorted(c.candidates, key=lambda r: r.final_rank) if r.disposition == "selected"
            ]
            per_case.append(
                {
                    WASTED: wasted_tokens(fragments, c.judgments, level),
                    DENSITY: relevant_per_1k_tokens(fragments, c.judgments, level),
                    CHANGED_REUSE: changed_unit_reuse(fragments, c.corpus_hashes),
                }
            )
        for metric in RETURNED_METRICS:
            values = [m[metric] for m in per_case]
            kept = [float(x) for x in values if x is not None]
            summary = variants[BASELINE.name][metric]
            assert (summary.counted, summary.excluded) == (len(kept), len(values) - len(kept))
            assert summary.mean == (math.fsum(kept) / len(kept) if kept else None)
        # Reuse that skipped a changed unit needs no judgment: every case counts.
        assert variants[BASELINE.name][CHANGED_REUSE].counted == len(cases)
    # per_case keeps the judged metrics only; the conventions document the new ones.
    assert all(
        set(metrics) == {"recall@20", "ndcg@10", "mrr"}
        for levels in report.per_case.values()
        for variants in levels.values()
        for metrics in variants.values()
    )
    assert set(RETURNED_METRICS) <= set(METRIC_CONVENTIONS["returned"])


def test_the_report_document_validates_against_the_fixture_schema_with_and_without_them() -> None:
    report = plain(build_report([case_of(seed, f"c{seed}", True) for seed in range(8)], resamples=20))
    schema = {"$schema": SCHEMA["$schema"], "$defs": SCHEMA["$defs"], "$ref": "#/$defs/report"}
    validator = jsonschema.Draft202012Validator(schema)
    validator.validate(report)
    b4 = report["levels"]["unit"]["variants"]["b4_reranked"]
    assert {WASTED, DENSITY, CHANGED_REUSE} <= set(b4)
    # A fixture exported before these metrics (no such keys) stays valid.
    for level in report["levels"].values():
        for metric in RETURNED_METRICS:
            del level["variants"]["b4_reranked"][metric]
    validator.validate(report)
