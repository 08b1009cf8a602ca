"""Per-project ranking profiles and tuning through the engine over in-memory adapters (issue 18):
a project's own settings change how it ranks and every Run records them; bad settings are
refused whole; versions restore; tuning needs usable cases and applies only a proposal."""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from memory_core.domain.errors import InvalidRequest, ProjectNotFound
from memory_core.domain.evaluation_errors import EvaluationSetEmpty, TuningNotFound
from memory_core.domain.model import Layer, Source
from memory_core.services.activation import NO_RERANK_WINDOW, SCORE_FLOOR_REMOVED_ALL
from memory_core.services.beir_import import EngineWorkspace
from tests.core.test_engine import ORG, PROJ, SpyRecorder, make_engine

QUERIES = ("how do I roll back a deploy?", "code review approvals", "advisory locks", "where is the coffee",
           "printer broken", "ledger owner approvals", "helm upgrade", "postgres locks")  # fmt: skip


def engine_with_other(recorder: SpyRecorder | None = None) -> Any:
    engine = make_engine(recorder)
    engine.add_project("other", [Source(ORG, Layer.ORGANIZATION), Source(PROJ, Layer.PROJECT)])
    engine.index("demo")
    engine.index("other")
    return engine


def test_a_project_profile_changes_how_it_ranks_and_every_run_records_it() -> None:
    recorder = SpyRecorder()
    engine = engine_with_other(recorder)
    view = engine.set_project_profile("demo", {"name": "one", "max_fragments": 1, "alpha": 0.5})
    assert view.in_use is not None and view.in_use.version == 1 and view.in_use.source == "file"
    assert view.settings["max_fragments"] == 1 and view.settings["alpha"] == 0.5 and view.settings["rrf_k"] == 60
    mine = engine.activate("demo", QUERIES[0]).response
    theirs = engine.activate("other", QUERIES[0]).response
    assert len(mine.fragments) == 1 < len(theirs.fragments)
    assert mine.revisions["ranking_profile"] == view.ranking_profile and view.ranking_profile.startswith("one@")
    assert mine.revisions["reranker_model"] == view.reranker and "alpha=0.5" in view.reranker
    assert theirs.revisions["ranking_profile"].startswith("default@")
    assert "alpha=0.35" in theirs.revisions["reranker_model"]
    recorded = {trace.revisions["ranking_profile"] for _, trace in recorder.completed}
    assert recorded == {view.ranking_profile, theirs.revisions["ranking_profile"]}


def test_a_profile_names_a_registered_fusion_and_ranks_with_it() -> None:
    """Issue 32: the fusion is a profile setting; Runs record its revision; tuning searches its parameters."""
    recorder = SpyRecorder()
    engine = engine_with_other(recorder)
    view = engine.set_project_profile("demo", {"name": "dist", "fusion": "dbsf", "alpha": 0.4, "resource_weight": 0.25})
    assert view.reranker == "dbsf-v1(alpha=0.4,exact=1,resource=0.25)"
    assert view.settings["fusion"] == "dbsf" and view.settings["resource_weight"] == 0.25
    assert "cosine_floor" not in view.settings  # not one of dbsf's parameters
    mine = engine.activate("demo", QUERIES[0]).response
    theirs = engine.activate("other", QUERIES[0]).response
    assert mine.revisions["reranker_model"] == view.reranker
    assert theirs.revisions["reranker_model"].startswith("convex-fusion-v2(")  # the engine's default
    assert {trace.revisions["reranker_model"] for _, trace in recorder.completed} == {
        view.reranker, theirs.revisions["reranker_model"]}  # fmt: skip
    # The RRF fusion keeps the fused order: the final order is B3's.
    engine.set_project_profile("demo", {"fusion": "rrf"})
    ranked = engine.activate("demo", QUERIES[0]).candidates
    assert [c.final_rank for c in sorted(ranked, key=lambda c: c.rrf_rank)] == list(range(1, len(ranked) + 1))
    # Tuning searches what the fusion in use takes: rrf has no alpha, so a grid over it is refused.
    engine = engine_with_other()  # one that keeps its Runs, for the cases
    engine.set_project_profile("demo", {"fusion": "rrf"})
    judged_cases(engine, reviewed=True)
    with pytest.raises(InvalidRequest, match="does not take alpha"):
        engine.tune_project("demo", grid={"alpha": [0.5]}, folds=2)
    result = engine.tune_project("demo", grid={"rrf_k": [60], "rerank_depth": [50]}, folds=2)
    assert result.current["fusion"] == "rrf" and result.grid_size == 1


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"fusion": "combsum"}, "fusion must be one of"),
        ({"fusion": "rrf", "alpha": 0.5}, "fusion rrf does not take alpha"),
        ({"fusion": "convex_minmax", "cosine_floor": 0.1}, "does not take cosine_floor"),
        ({"fusion": "rrf", "min_final_score": 1.5}, r"min_final_score must be within \[0, 1\]"),
        ({"weights": 1}, "unknown profile setting"),
        ({"bm25_k1": 1.2}, "unknown profile setting"),
        ({"rrf_k": "30"}, "rrf_k must be an integer"),
        ({"rrf_k": True}, "rrf_k must be an integer"),
        ({"alpha": 2}, "alpha must be within"),
        ({"rerank_depth": -1}, "rerank_depth must be within"),
        ({"lexical_depth": 100_000}, "lexical_depth must be within"),
        ({"normalisation": "zscore"}, "normalisation must be one of"),
        ({"min_final_score": float("nan")}, "finite"),
        ({"name": "a@b"}, "name must be"),
        ({"name": "gate\x00"}, r"name holds a control character \(U\+0000\)"),
        ({"name": "tuned\u202egpj.exe"}, r"name holds a bidirectional control \(U\+202E\)"),
        ({"min_final_score": 1e300}, r"min_final_score must be within \[0, 2\]"),
        ({"exact_bonus": 1e300}, r"exact_bonus must be within \[0, 10\]"),
        (["rrf_k"], "JSON object"),
    ],
)
def test_bad_settings_are_refused_and_nothing_is_stored(settings: Any, message: str) -> None:
    engine = engine_with_other()
    with pytest.raises(InvalidRequest, match=message):
        engine.set_project_profile("demo", settings)
    assert engine.project_profile("demo").history == ()


def test_an_answer_emptied_by_the_profile_says_so_and_a_full_one_says_nothing() -> None:
    engine = engine_with_other()
    query = "where is the coffee"  # no exact identity match: every reranked score is at most 1
    assert engine.activate("demo", query).response.notices == ()
    engine.set_project_profile("demo", {"name": "strict", "min_final_score": 1.5})
    activation = engine.activate("demo", query)
    (notice,) = activation.response.notices
    reranked = [c for c in activation.candidates if c.rerank_rank is not None]
    assert activation.response.fragments == () and notice.code == SCORE_FLOOR_REMOVED_ALL
    assert {c.exclusion_code for c in reranked} == {"below_score_threshold"}
    best = max(c.final_score for c in reranked)
    assert notice.message == (f"no fragment returned: {len(reranked)} of the {len(reranked)} reranked "
                              f"candidates scored below the ranking profile's min_final_score 1.5 "
                              f"(the best {best:.4g})")  # fmt: skip
    engine.set_project_profile("demo", {"name": "gate", "rerank_depth": 0})
    (notice,) = engine.activate("demo", query).response.notices
    assert notice.code == NO_RERANK_WINDOW and "rerank_depth is 0" in notice.message
    engine.set_project_profile("demo", {"name": "tight", "token_budget": 1})  # the budget, not the profile's floor
    tight = engine.activate("demo", query).response
    assert tight.fragments == () and tight.notices == ()


def test_a_stored_profile_that_todays_checks_refuse_names_its_version_and_the_way_out() -> None:
    engine = engine_with_other()
    engine.set_project_profile("demo", {"name": "fine"})
    engine.profile_store.add_profile("demo", {"name": "old", "min_final_score": 1e300}, "file")  # stored unchecked
    with pytest.raises(InvalidRequest, match="ranking profile version 2 is no longer accepted: min_final_score"):
        engine.activate("demo", QUERIES[0])
    back = engine.restore_project_profile("demo", 1)
    assert back.ranking_profile.startswith("fine@") and engine.activate("demo", QUERIES[0]).response.fragments


def test_settings_and_a_tuning_id_are_one_or_the_other_and_the_project_must_exist() -> None:
    engine = engine_with_other()
    with pytest.raises(InvalidRequest, match="either"):
        engine.set_project_profile("demo", {"rrf_k": 30}, from_tune="T")
    with pytest.raises(InvalidRequest, match="either"):
        engine.set_project_profile("demo")
    with pytest.raises(ProjectNotFound):
        engine.set_project_profile("nope", {"rrf_k": 30})
    with pytest.raises(TuningNotFound):
        engine.set_project_profile("demo", from_tune="T")


def test_restore_puts_back_the_previous_version_or_the_defaults_and_keeps_every_version() -> None:
    engine = engine_with_other()
    with pytest.raises(InvalidRequest, match="no profile of its own"):
        engine.restore_project_profile("demo")
    engine.set_project_profile("demo", {"name": "a", "rrf_k": 30})
    b = engine.set_project_profile("demo", {"name": "b", "rrf_k": 10})
    back = engine.restore_project_profile("demo")
    assert back.settings["rrf_k"] == 30 and back.in_use is not None and back.in_use.source == "restore:1"
    assert engine.restore_project_profile("demo", 2).ranking_profile == b.ranking_profile
    defaults = engine.restore_project_profile("demo", 0)
    assert defaults.ranking_profile.startswith("default@") and defaults.settings["rrf_k"] == 60
    assert [p.version for p in defaults.history] == [1, 2, 3, 4, 5]
    with pytest.raises(InvalidRequest, match="no profile version 9"):
        engine.restore_project_profile("demo", 9)


def judged_cases(engine: Any, *, reviewed: bool) -> list[str]:
    service = engine.evaluations()
    case_ids = []
    for query in QUERIES:
        response = engine.activate("demo", query).response
        case = service.create_case(response.run_id)
        judgment = {"relevance": 2, "resource_id": response.fragments[-1].resource_id}
        service.replace_judgments(case.case_id, case.judgment_version, [judgment])
        if reviewed:
            service.mark_reviewed(case.case_id, service.get_case(case.case_id).judgment_version)
        case_ids.append(case.case_id)
    return case_ids


def refused_until_reviewed(operation: str) -> Any:
    """An engine whose ``operation`` (``tune_project`` or ``learn_project``) of 'demo' was refused
    with no cases, then with only unreviewed ones (the one rule both take their cases by); it
    holds those unreviewed cases now."""
    engine = engine_with_other()
    with pytest.raises(EvaluationSetEmpty, match="no Evaluation Cases"):
        getattr(engine, operation)("demo")
    judged_cases(engine, reviewed=False)
    with pytest.raises(EvaluationSetEmpty, match="--include-unreviewed"):
        getattr(engine, operation)("demo")
    return engine


def test_tuning_needs_cases_and_by_default_reviewed_ones() -> None:
    engine = refused_until_reviewed("tune_project")
    with pytest.raises(InvalidRequest, match="level must be one of"):
        engine.tune_project("demo", include_unreviewed=True, level="document")


def test_a_tuning_is_kept_and_only_a_proposal_is_applied() -> None:
    engine = engine_with_other()
    judged_cases(engine, reviewed=True)
    only_current = {"alpha": [0.35], "rrf_k": [60], "rerank_depth": [50], "normalisation": ["max"],
                    "cosine_floor": [0.0]}  # fmt: skip
    result = engine.tune_project("demo", grid=only_current, folds=2)
    assert result.cases == len(QUERIES) and result.grid_size == 1 and not result.proposed
    assert result.verdict.startswith("the current setting is already the best")
    assert engine.tunings("demo") == [result]
    with pytest.raises(InvalidRequest, match="proposed nothing"):
        engine.set_project_profile("demo", from_tune=result.tune_id)
    assert engine.project_profile("demo").history == ()

    engine.set_project_profile("demo", {"name": "mine", "max_fragments": 3})
    proposal = {**result.current, "alpha": 0.6, "rrf_k": 30}
    proposed = attrs.evolve(result, tune_id="01TUNEDPROPOSAL0000000000X", proposed=True, proposal=proposal)
    engine.profile_store.put_tuning(proposed)
    view = engine.set_project_profile("demo", from_tune=proposed.tune_id)
    assert view.in_use is not None and view.in_use.source == f"tune:{proposed.tune_id}"
    assert view.settings["alpha"] == 0.6 and view.settings["rrf_k"] == 30 and view.settings["max_fragments"] == 3
    assert view.settings["name"] == "tuned-0000000x"
    with pytest.raises(InvalidRequest, match="measured on project 'demo'"):
        engine.set_project_profile("other", from_tune=proposed.tune_id)


def deploy_workspace(engine: Any) -> EngineWorkspace:
    """A replay workspace 'ws' of one deploy note, written through the engine's in-memory scanner."""

    def write_source(project_id: str, files: Any) -> Source:
        for rel, data in files.items():
            engine.indexer.scanner.write(f"/ws/{project_id}", rel, data)
        return Source(f"/ws/{project_id}")

    workspace = EngineWorkspace(engine, write_source)
    workspace.prepare("ws", {"a.md": b"# Deploy\n\nRoll back with helm rollback.\n"})
    return workspace


def test_replay_ranks_a_frozen_corpus_as_its_cases_project_does() -> None:
    recorder = SpyRecorder()
    engine = engine_with_other(recorder)
    engine.set_project_profile("demo", {"name": "gate", "rerank_depth": 0})
    workspace = deploy_workspace(engine)
    workspace.rank("ws", QUERIES[0])
    workspace.rank("ws", QUERIES[0], ranked_as="demo")
    first, second = (trace.revisions["ranking_profile"] for _, trace in recorder.completed[-2:])
    assert first.startswith("default@") and second.startswith("gate@")


CURRENT = {"rrf_k": 60, "rerank_depth": 50, "normalisation": "max", "cosine_floor": 0.0, "alpha": 0.35,
           "exact_bonus": 1.0}  # fmt: skip


@pytest.mark.parametrize(
    ("grid", "message"),
    [
        ({"alpha": ["x"]}, "alpha must be a finite number"),
        ({"rerank_depth": [2.5]}, "rerank_depth must be an integer"),
        ({"rrf_k": [True]}, "rrf_k must be an integer"),
        ({"alpha": [[1]]}, "alpha must be a finite number"),
        ({"normalisation": [1]}, "normalisation must be a string"),
        ({"alpha": "0.5"}, "takes a list of values"),
        ({"cosine_floor": [float("nan")]}, "cosine_floor must be a finite number"),
        ({"cosine_floor": [1.0]}, "cosine_floor must be within"),
        ({"rerank_depth": [5000]}, "rerank_depth must be within"),
        ({"alpha": [i / 1000 for i in range(1001)], "rrf_k": list(range(1, 30))}, "more than 20,000"),
    ],
)
def test_a_bad_grid_is_refused_before_any_case_is_read(grid: dict[str, Any], message: str) -> None:
    from memory_core.evaluation.tuning import grid_settings

    with pytest.raises(InvalidRequest, match=message):
        grid_settings(grid, CURRENT)
    engine = engine_with_other()  # no case at all: the grid is refused first, not the empty set
    with pytest.raises(InvalidRequest, match=message):
        engine.tune_project("demo", grid=grid)


def test_the_current_setting_is_graded_first_and_once() -> None:
    from memory_core.evaluation.tuning import grid_settings

    settings = grid_settings({"alpha": [0.35, 0.5], "rrf_k": [60], "rerank_depth": [50], "normalisation": ["max"],
                              "cosine_floor": [0.0]}, CURRENT)  # fmt: skip
    # Each setting is the whole current one (the fusion named: settings from before issue 32 name none).
    assert settings == [{"fusion": "convex_floor", **CURRENT}, {"fusion": "convex_floor", **CURRENT, "alpha": 0.5}]


def test_a_grid_key_the_fusion_in_use_does_not_take_is_refused() -> None:
    from memory_core.evaluation.tuning import grid_settings

    with pytest.raises(InvalidRequest, match="does not take cosine_floor"):
        grid_settings({"cosine_floor": [0.1]}, {"rrf_k": 60, "rerank_depth": 50, "fusion": "convex_minmax",
                                                "alpha": 0.5, "exact_bonus": 1.0, "resource_weight": 0.0})  # fmt: skip
    rrf = {"rrf_k": 60, "rerank_depth": 50, "fusion": "rrf"}
    with pytest.raises(InvalidRequest, match="does not take alpha"):
        grid_settings({"alpha": [0.5]}, rrf)
    # RRF takes no parameter of its own: only the fusion stage's keys are searched.
    assert grid_settings({"rrf_k": [60, 30], "rerank_depth": [50]}, rrf) == [rrf, {**rrf, "rrf_k": 30}]
