"""A tuning's work is bounded (issue 30, item 2): settings x cases, refused before any trace is read."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memory_core.domain.errors import InvalidRequest
from memory_core.evaluation import tuning
from tests.core.test_project_profiles import engine_with_other, judged_cases


@given(st.integers(0, 50_000), st.integers(0, 5_000))
def test_the_bound_is_settings_times_cases(settings: int, cases: int) -> None:
    if settings * cases > tuning.MAX_TUNE_WORK:
        with pytest.raises(InvalidRequest) as refused:
            tuning.check_work(settings, cases)
        assert refused.value.details == {"settings": settings, "cases": cases, "limit": tuning.MAX_TUNE_WORK}
    else:
        tuning.check_work(settings, cases)


def test_a_tuning_over_the_bound_is_refused_and_keeps_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    engine = engine_with_other()
    cases = judged_cases(engine, reviewed=True)
    grid = {"alpha": [0.2, 0.5], "rrf_k": [60], "rerank_depth": [50], "normalisation": ["max"], "cosine_floor": [0.0]}
    # Two settings (the current one and alpha 0.2/0.5 less the duplicate) on every case: over a bound one under that.
    settings = len(tuning.grid_settings(grid, tuning.current_setting(60, 50, engine.ranking_for("demo").reranker)))
    monkeypatch.setattr(tuning, "MAX_TUNE_WORK", settings * len(cases) - 1)
    with pytest.raises(InvalidRequest, match="gradings, more than"):
        engine.tune_project("demo", grid=grid)
    assert engine.tunings("demo") == []
    monkeypatch.setattr(tuning, "MAX_TUNE_WORK", settings * len(cases))
    engine.tune_project("demo", grid=grid)
    assert len(engine.tunings("demo")) == 1
