"""The metric registry (issue 31 item 4): each metric declared once, and the report reads it."""

from __future__ import annotations

import pytest

from memory_core.evaluation import metric_registry as registry
from memory_core.evaluation import report
from memory_core.evaluation.metric_registry import JUDGED, RANKING, RETURNED, Metric
from memory_core.evaluation.metrics import Judgments, MetricLevel, RankedItem


def test_each_metric_declares_its_cutoff_in_its_name_and_cites_its_definition() -> None:
    assert list(registry.REGISTRY) == [*report.METRICS, *report.RETURNED_METRICS]
    for metric in registry.REGISTRY.values():
        assert metric.name.endswith(f"@{metric.cutoff}") == (metric.cutoff is not None), metric.name
        assert metric.definition and metric.source and metric.label


def test_the_report_states_each_registered_definition() -> None:
    conventions = report.METRIC_CONVENTIONS
    for metric in registry.of_kind(JUDGED, RANKING):
        assert conventions[metric.name] == metric.definition
    for metric in registry.of_kind(RETURNED):
        assert conventions["returned"][metric.name] == metric.definition
    assert report.JUDGED_METRICS == ("recall@20", "ndcg@10", "mrr")


def test_a_registered_metric_is_computed_by_the_report(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "REGISTRY", dict(registry.REGISTRY))
    registry.register(Metric("top_items@3", "Top items@3", 3, RANKING, "items in the top 3", "a test's",
                             lambda v: float(len(v.items[:3]))))  # fmt: skip
    ranking = [RankedItem(f"r{i}.md#0", f"r{i}.md", "h") for i in range(5)]
    judgments = Judgments(units={"r1.md#0": 2})
    values = report.ranking_metrics(ranking, judgments, {}, MetricLevel.UNIT)
    assert values["top_items@3"] == 3.0
    assert values["ndcg@10"] is not None and values["mrr"] == 0.5
    with pytest.raises(ValueError, match="twice"):
        registry.register(registry.NDCG)
