"""``tune`` on Cranfield's judged cases, through the real engine's recorded traces: the tuner's
re-ranking of a stored trace with the Run's own settings is the recorded final order, its
grades are the report's, and its verdict follows the cross-validated interval."""

from __future__ import annotations

import time
from collections.abc import Iterator

import attrs
import pytest

from memory_core.domain.errors import InvalidRequest
from memory_core.evaluation.metrics import MetricLevel
from memory_core.evaluation.report import BASELINE, NDCG, CaseInput, build_report, variant_ranking
from memory_core.evaluation.tuning import current_setting, final_order, tune
from memory_core.services.beir_import import import_beir
from tests.conftest import CRANFIELD
from tests.quality.beir_workspace import evaluation_over

pytestmark = pytest.mark.slow

PROJECT = "cranfield-tune"


@attrs.frozen
class Traced:
    cases: list[CaseInput]
    current: dict[str, object]


@pytest.fixture(scope="module")
def traced(cranfield_home, cranfield_engine) -> Iterator[Traced]:  # type: ignore[no-untyped-def]
    service, workspace, conn = evaluation_over(cranfield_home[0], cranfield_engine, "tune-sources")
    import_beir(service, workspace, CRANFIELD, PROJECT)
    cases = service.case_inputs(service.list_cases(PROJECT))
    profile = cranfield_engine.profile
    yield Traced(cases, current_setting(profile.rrf_k, profile.rerank_depth, cranfield_engine.reranker))
    conn.close()


def _tune(cases: list[CaseInput], current: dict[str, object], **kwargs: object) -> object:
    return tune(cases, current, tune_id="t", project_id=PROJECT, created_at="now", **kwargs)  # type: ignore[arg-type]


def test_the_current_setting_reproduces_every_recorded_final_order(traced: Traced) -> None:
    assert len(traced.cases) == 225
    for case in traced.cases:
        recorded = [i.unit_id for i in variant_ranking(case.candidates, BASELINE)]
        assert [i.unit_id for i in final_order(case, traced.current)] == recorded


def test_tuning_grades_the_current_setting_as_the_report_does_and_says_its_verdict(traced: Traced) -> None:
    started = time.perf_counter()
    result = _tune(traced.cases, traced.current)
    seconds = time.perf_counter() - started
    report = build_report(traced.cases, resamples=200)
    b4 = report.levels[MetricLevel.RESOURCE.value].variants[BASELINE.name][NDCG]
    assert result.cases == b4.counted and result.current_metrics is not None  # type: ignore[attr-defined]
    assert result.current_metrics.ndcg_at_10 == pytest.approx(b4.mean, abs=1e-12)  # type: ignore[attr-defined]
    assert result.gain == pytest.approx(  # type: ignore[attr-defined]
        result.cross_validated.ndcg_at_10 - result.current_metrics.ndcg_at_10, abs=1e-9  # type: ignore[attr-defined]
    )
    assert result.proposed == (result.gain_low > 0 and result.best != result.current)  # type: ignore[attr-defined]
    assert (result.proposal is not None) == result.proposed  # type: ignore[attr-defined]
    said = "proposed:" if result.proposed else "no proposal" if result.best != result.current else "the current"  # type: ignore[attr-defined]
    assert result.verdict.startswith(said)  # type: ignore[attr-defined]
    print(f"\ntune over {result.cases} Cranfield cases, {result.grid_size} settings: {seconds:.1f} s; "  # type: ignore[attr-defined]
          f"{result.verdict}")  # type: ignore[attr-defined]


def test_the_same_cases_give_the_same_tuning(traced: Traced) -> None:
    grid = {"alpha": [0.2, 0.35, 0.5], "rrf_k": [30, 60]}
    first, second = _tune(traced.cases, traced.current, grid=grid), _tune(traced.cases, traced.current, grid=grid)
    assert attrs.evolve(first, seconds=0) == attrs.evolve(second, seconds=0)  # type: ignore[misc]


def test_too_few_cases_propose_nothing_and_say_why(traced: Traced) -> None:
    result = _tune(traced.cases[:4], traced.current)
    assert not result.proposed and result.proposal is None and result.gain is None  # type: ignore[attr-defined]
    assert result.verdict.startswith("too few judged cases")  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("grid", "message"),
    [
        ({"alpha": [i / 1000 for i in range(1001)], "rrf_k": list(range(1, 30))}, "more than"),
        ({"weights": [1]}, "unknown grid key"),
        ({"alpha": [1.5]}, "alpha must be within"),
        ({"rrf_k": [0]}, "rrf_k must be within"),
        ({"normalisation": ["zscore"]}, "normalisation must be one of"),
        ({"alpha": []}, "has no values"),
    ],
)
def test_a_bad_grid_is_a_clear_error(traced: Traced, grid: dict[str, list[object]], message: str) -> None:
    with pytest.raises(InvalidRequest, match=message):
        _tune(traced.cases[:10], traced.current, grid=grid)
