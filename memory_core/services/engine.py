"""The engine: the one library entry point (projects, indexing, activation, Runs, evaluation).

Built by the composition root (``memory_core.entrypoints.bootstrap``) with every port
overridable; entrypoints stay thin and call only this. A facade: projects and their Local
Storage are here, an activation is ``services/activation.py``, indexing ``services/indexing.py``,
evaluation ``services/evaluation.py`` and ``services/fixtures.py``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Unpack

import attrs

from memory_core.domain.errors import InvalidRequest, StorageUnavailable
from memory_core.domain.model import Generation, Project, Source, validate_project_id, validate_source_path
from memory_core.domain.models import ModelOverrides
from memory_core.domain.progress import Progress, no_progress
from memory_core.evaluation.cases import Case, JudgmentSet
from memory_core.evaluation.fixture import ExportScope, ImportResult, dump
from memory_core.evaluation.learning import LearnResult
from memory_core.evaluation.report import Report
from memory_core.evaluation.tuning import TuneResult
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
from memory_core.ports.learning import RankLearner
from memory_core.ports.models import NO_RERANKER, ModelChoice
from memory_core.ports.profiles import ProfileStore
from memory_core.ports.runs import RunRecorder, RunStore
from memory_core.retrieval.activation_state import ActivationState
from memory_core.retrieval.profile import RankingProfile
from memory_core.runs.records import ClearReport, NullRecorder, RunDetail, RunFilter, RunPage
from memory_core.services.activation import Activation, Ranking, activate, revisions
from memory_core.services.evaluation import EvaluationService
from memory_core.services.fixtures import export_document
from memory_core.services.indexing import Indexer, IndexReport
from memory_core.services.learning import learn_project
from memory_core.services.local_storage import (
    CURRENT,
    PREVIOUS,
    UNREFERENCED,
    ProjectRemoval,
    ProjectStorage,
    StoredGeneration,
)
from memory_core.services.models import ModelRegistry, ModelView, ProjectModels
from memory_core.services.open_generations import OpenGenerations
from memory_core.services.profiles import ProfileView, ProjectProfiles, two_window_rerankers
from memory_core.services.tuning import tune_project

log = logging.getLogger(__name__)


@attrs.frozen
class ProjectInfo:
    project: Project
    generation: Generation | None


@attrs.define
class Engine:
    catalog: Catalog
    manifests: ManifestStore
    generations: GenerationStore
    indexer: Indexer
    embedder: Embedder
    lexical: LexicalIndexFactory
    vectors: VectorIndexFactory
    reranker: Reranker
    now: Callable[[], str]
    recorder: RunRecorder = attrs.field(factory=NullRecorder)
    profile: RankingProfile = attrs.field(factory=RankingProfile)
    history: RunStore | None = None
    evaluation: EvaluationService | None = None
    # The sources as they are now (brief §3); None records only the ranking generation's memory.
    live_memory: LiveMemory | None = None
    # Each project's own ranking settings and tunings (issue 18); None: every project ranks alike.
    profile_store: ProfileStore | None = None
    # The learning-to-rank library (issue 32): learns a project's ranker and loads learned models.
    learner: RankLearner | None = None
    # The home's model registry and each project's models (issue 33); None: ``embedder`` for all.
    models: ModelRegistry | None = None
    _open: OpenGenerations = attrs.field(factory=OpenGenerations, init=False)
    _profiles: ProjectProfiles = attrs.field(init=False)

    @_profiles.default
    def _project_profiles(self) -> ProjectProfiles:
        return ProjectProfiles(self.profile_store, self.profile, self.reranker, self.learner, self._cross_encoder)

    # -- projects -------------------------------------------------------------------------
    def add_project(self, name: str, sources: Sequence[Source]) -> Project:
        """Register project ``name`` over ``sources`` and return it; raises ``InvalidRequest`` (no
        source, bad name or path), ``ProjectExists`` or ``SourceUnavailable``."""
        if not sources:
            raise InvalidRequest("a project needs at least one source", project=name)
        for source in sources:
            validate_source_path(source.path)
        project = Project(validate_project_id(name), tuple(sources), self.now())
        self._check_apart_from_storage(project)
        self.catalog.add_project(project)
        return project

    def _check_apart_from_storage(self, project: Project) -> None:
        """A source in or around any project's Local Storage (this one's future default place
        too) is refused, as a move into or around a source is: the generations would become
        memory, be watched, and be deleted with the storage."""
        owners = [p.project_id for p in self.catalog.list_projects() if p.project_id != project.project_id]
        places = {self.generations.location(owner): owner for owner in [*owners, project.project_id]}
        for source in project.sources:
            place = self.generations.overlap(Path(source.path), list(places))
            if place is not None:
                raise InvalidRequest(
                    f"source {source.path!r} is inside or around the Local Storage of project "
                    f"{places[place]!r} ({str(place)!r}); give a folder apart from it",
                    project=project.project_id,
                    path=source.path,
                    storage=str(place),
                    reason="overlaps_storage",
                )

    def list_projects(self) -> list[ProjectInfo]:
        """Every project with its current generation (``None`` before the first index)."""
        return [ProjectInfo(p, self.catalog.current_generation(p.project_id)) for p in self.catalog.list_projects()]

    def warm_revision(self, project_id: str) -> str | None:
        """The index revision this engine holds open (warm) for the project, or ``None``."""
        return self._open.warm_revision(project_id)

    def show_project(self, name: str) -> ProjectInfo:
        """One project and its current generation; raises ``ProjectNotFound``."""
        project = self.catalog.get_project(name)
        return ProjectInfo(project, self.catalog.current_generation(name))

    def remove_project(self, name: str, *, purge: bool = False) -> ProjectRemoval:
        """Delete the project, its unpinned Runs and its Local Storage; its Evaluation Cases and
        their pinned Runs stay unless ``purge`` (brief §6). Database rows go first, files after:
        an interruption leaves rows to retry, never a project pointing at deleted files."""
        self.catalog.get_project(name)
        deleted_cases = 0
        if purge:
            service = self.evaluations()
            for case in service.list_cases(name):
                service.delete_case(case.case_id)  # unpins its Run when no other case uses it
                deleted_cases += 1
        self._close_generation(name)
        runs, pinned, blobs = 0, 0, 0
        if self.history is not None:
            first = self.history.clear(name)  # before the catalog row: a failure leaves it to retry
            runs, pinned, blobs = first.deleted_runs, first.kept_pinned, first.deleted_blobs
        location = self.generations.location(name)  # read while the catalog still knows it
        self.catalog.remove_project(name)
        self.generations.remove_project(name, location)
        if self.history is not None:
            # The generations no longer hold their blobs: collect them as Clear History does.
            blobs += self.history.clear(name).deleted_blobs
        return ProjectRemoval(name, purge, runs, pinned, deleted_cases, blobs)

    # -- Project Local Storage (brief §6: never touches Runs, Cases or blobs) -----------------
    def project_storage(self, name: str) -> ProjectStorage:
        """Where the project's generations are stored and their sizes; raises ``ProjectNotFound``."""
        self.catalog.get_project(name)
        pointed = ((PREVIOUS, self.catalog.previous_generation(name)), (CURRENT, self.catalog.current_generation(name)))
        roles = {g.index_revision: role for role, g in pointed if g is not None}
        location = self.generations.location(name)
        total, per = self.generations.usage(name)
        stored = tuple(
            StoredGeneration(rev, roles.get(rev, UNREFERENCED), str(location / "generations" / rev), size)
            for rev, size in sorted(per.items())
        )
        default = location == self.generations.default_location(name)
        return ProjectStorage(name, str(location), default, total, stored)

    def move_project_storage(
        self, name: str, destination: str | Path, progress: Progress = no_progress
    ) -> ProjectStorage:
        """Copy the current and previous generations into ``destination`` (empty or new; made
        owner-only), switch the catalog to them in one transaction, then delete the old copy.
        Any failure before the switch removes the new copies (and the folders made for them)
        and leaves the old ones serving. One move or clear at a time in the home, none while
        the project indexes (``storage_unavailable``, reason ``busy``); a pointed generation
        whose folder is gone is forgotten, not carried (it would block every later move)."""
        self.catalog.get_project(name)
        with self.generations.relocating(name):
            projects = self.catalog.list_projects()
            # Not inside another project's storage (removing one would delete the other), nor in
            # or around a memory source (the generations would become memory, and watched).
            others = [self.generations.location(p.project_id) for p in projects if p.project_id != name]
            others += [Path(s.path) for p in projects for s in p.sources]
            old = self.generations.location(name)
            dest = self.generations.prepare_location(name, Path(destination), others)
            pointed, gone = self._pointed_generations(name)
            recorded = None if dest == self.generations.default_location(name) else str(dest)
            try:
                progress("copying", 0, 1)
                moved = self.generations.copy_generations(name, pointed, dest)
                progress("copying", 1, 1)
                directories = {rev: str(d) for rev, d in moved.items()}
                self.catalog.set_storage_location(name, recorded, directories, forget=gone)
            except BaseException:
                self.generations.abandon_location(name, dest)
                raise
            self._close_generation(name)  # the next activation opens the moved copy
            self.generations.remove_project(name, old)
        return self.project_storage(name)

    def _pointed_generations(self, name: str) -> tuple[dict[str, Path], list[str]]:
        """The current and previous generations to carry (index revision -> directory), and
        the revisions of those whose folder is gone (deleted by hand, say), to forget."""
        pointed: dict[str, Path] = {}
        gone: list[str] = []
        for role, g in (
            (CURRENT, self.catalog.current_generation(name)),
            (PREVIOUS, self.catalog.previous_generation(name)),
        ):
            if g is None:
                continue
            if self.generations.gone(Path(g.directory)):
                log.warning("project %s: the %s generation %s is gone from %s; the move forgets it",
                            name, role, g.index_revision, g.directory)  # fmt: skip
                gone.append(g.index_revision)
            else:
                pointed[g.index_revision] = Path(g.directory)
        return pointed, gone

    def clear_project_storage(self, name: str) -> ProjectStorage:
        """Delete the project's generations; ``memcore index`` rebuilds them (unchanged units
        from the embedding cache). Meanwhile an activation is ``project_not_indexed``, a failed
        Run, as for a project never indexed. Refused while a move or an index of it runs."""
        self.catalog.get_project(name)
        with self.generations.relocating(name):
            self.catalog.clear_generations(name)  # rows first: no pointer to a deleted directory
            self._close_generation(name)
            self.generations.prune(name, keep=set())
        return self.project_storage(name)

    def _close_generation(self, name: str) -> None:
        self._open.close(name)

    def index(self, name: str, *, force: bool = False, progress: Progress | None = None) -> IndexReport:
        """Index the project's sources into a new generation (``force``: even when nothing changed)
        and return the ``IndexReport``; raises ``ProjectNotFound``, ``SourceUnavailable``, ``EmptyProject``."""
        if progress is None:
            return self.indexer.index(name, force=force)
        return self.indexer.index(name, force=force, progress=progress)

    # -- models (services/models.py, issue 33) -------------------------------------------------
    def _models(self) -> ModelRegistry:
        if self.models is None:
            raise InvalidRequest("this engine has no model registry: only its own embedder serves")
        return self.models

    def add_model(self, name: str, path: str, overrides: ModelOverrides | None = None, *,
                  replace: bool = False) -> ModelView:  # fmt: skip
        """Register the model directory ``path`` as ``name`` (``replace``: in place of the model of
        that name; its users re-embed); raises ``ModelUnavailable`` (naming what is missing),
        ``ModelExists``, ``ModelNotFound``, ``InvalidRequest``; nothing is stored then."""
        return self._models().add(name, path, overrides, replace=replace)

    def list_models(self) -> list[ModelView]:
        """The built-in minilm, then every registered model."""
        return self._models().views()

    def show_model(self, name: str) -> ModelView:
        return self._models().show(name)

    def remove_model(self, name: str) -> ModelView:
        """Forget a model; ``ModelInUse`` while a project (or the home default) chose it."""
        return self._models().remove(name)

    def project_models(self, name: str | None) -> ProjectModels:
        """The project's (None: the home default's) models in effect, and whether its current
        generation still serves another model's vectors (re-embedding)."""
        if name is None:
            return self._models().project_models(None)
        self.catalog.get_project(name)
        current = self.catalog.current_generation(name)
        return self._models().project_models(name, current.revisions.embedding_model if current else None)

    def set_project_models(self, name: str | None, *, embedding: str | None = None,
                           reranker: str | None = None) -> ProjectModels:  # fmt: skip
        """Choose the project's (None: the home default's) embedding model and cross-encoder
        (``none``: no cross-encoder). A new embedding model re-embeds in the background (the
        daemon's watcher) or at the next ``memcore index``; the current generation serves meanwhile."""
        if name is not None:
            self.catalog.get_project(name)
        models = self._models()
        if reranker is not None and reranker != NO_RERANKER:
            models.check_choice(ModelChoice(embedding, reranker))  # an unknown model is named as such first
            # The home default's cross-encoder reaches every project that chose none of its own.
            reached = [name] if name is not None else [
                p.project_id for p in self.catalog.list_projects() if models.chosen(p.project_id).reranker is None
            ]  # fmt: skip
            for project_id in reached:
                digest = self._profiles.learned_model_of(project_id)
                if digest is not None:
                    raise two_window_rerankers(project_id, digest, reranker)
        models.set_choice(name, embedding=embedding, reranker=reranker)
        return self.project_models(name)

    def query_embedder(self, generation: Generation) -> Embedder:
        """The embedder that reads queries for ``generation``: the model its vectors are of, so
        a generation keeps serving while its project re-embeds with a new model; else the
        project's model now (an activation then asks for an index if the revisions differ)."""
        revision = generation.revisions.embedding_model
        if self.models is None or revision == self.embedder.revision:
            return self.embedder
        models = self.models
        return models.embedder_of_revision(revision) or models.embedder_for(generation.project_id) or self.embedder

    # -- ranking profiles (services/profiles.py) and tuning (services/tuning.py) -------------
    def profile_ranking(self, project_id: str) -> Ranking:
        """The profile and reranker of ``project_id``'s ranking profile alone (no cross-encoder)."""
        return self._profiles.ranking_for(project_id)

    def ranking_for(self, project_id: str) -> Ranking:
        """The profile and reranker ``project_id`` ranks with: its own profile, else the defaults;
        a cross-encoder the project chose (issue 33) rescores the profile's rerank window."""
        return self._profiles.in_use(project_id)

    def _cross_encoder(self, project_id: str, profile: RankingProfile) -> Reranker | None:
        """The project's cross-encoder (None: none) with its profile's batch and maximum length."""
        if self.models is None:
            return None
        return self.models.reranker_for(project_id, batch=profile.rerank_batch, max_tokens=profile.rerank_max_tokens)

    def project_profile(self, name: str) -> ProfileView:
        """The project's ranking settings in effect and their history; raises ``ProjectNotFound``."""
        self.catalog.get_project(name)
        return self._profiles.show(name)

    def set_project_profile(
        self, name: str, settings: Mapping[str, Any] | None = None, *, from_tune: str | None = None
    ) -> ProfileView:
        """Give the project its own settings (a document, or a tuning's proposal: exactly one);
        raises ``ProjectNotFound``, ``InvalidRequest`` (unknown key, bad value), ``TuningNotFound``."""
        self.catalog.get_project(name)
        if (settings is None) == (from_tune is None):
            raise InvalidRequest("give either the settings or a tuning id, not both or neither")
        if from_tune is not None:
            return self._profiles.set_from_tune(name, from_tune)
        return self._profiles.set(name, settings)

    def restore_project_profile(self, name: str, version: int | None = None) -> ProfileView:
        """Put an earlier profile version back in use (None: the one before, 0: the defaults)."""
        self.catalog.get_project(name)
        return self._profiles.restore(name, version)

    def tune_project(self, name: str, **options: Any) -> TuneResult:
        """Search the project's fusion settings on its judged cases, cross-validated, and keep the
        result (``services/tuning.py`` lists the options); raises ``EvaluationSetEmpty``."""
        self.catalog.get_project(name)
        return tune_project(self.evaluations(), self._profiles, name, now=self.now, **options)

    def learn_project(self, name: str, **options: Any) -> LearnResult:
        """Learn a ranker from the project's judged cases, cross-validated against its ranking now,
        and keep the result and model (``services/learning.py`` lists the options); raises
        ``EvaluationSetEmpty``, ``InvalidRequest``."""
        self.catalog.get_project(name)
        return learn_project(self.evaluations(), self._profiles, self.learner, name, now=self.now, **options)

    def learnings(self, name: str) -> list[LearnResult]:
        """The project's learnings, newest first."""
        self.catalog.get_project(name)
        return self._profiles.store.learnings(name) if self._profiles.store is not None else []

    def set_profile_from_learning(self, name: str, learn_id: str) -> ProfileView:
        """Put a learning's model in use (a new profile version); refused unless it was proposed;
        raises ``LearningNotFound``, ``InvalidRequest``."""
        self.catalog.get_project(name)
        return self._profiles.set_from_learning(name, learn_id)

    def tunings(self, name: str) -> list[TuneResult]:
        """The project's tunings, newest first."""
        self.catalog.get_project(name)
        return self._profiles.store.tunings(name) if self._profiles.store is not None else []

    # -- activation (services/activation.py) ----------------------------------------------
    def revisions(self, generation: Generation | None) -> dict[str, str]:
        """The revisions (models, profile, index) an activation over ``generation`` answers with."""
        return revisions(generation, self.reranker, self.profile)

    def activate(
        self,
        project_id: str,
        query: str,
        *,
        budget: int | None = None,
        state: ActivationState | Mapping[str, Any] | None = None,
        ranking: Ranking | None = None,
    ) -> Activation:
        """Rank the project's memory for ``query`` within ``budget`` tokens and return the Activation
        (its ``response`` for the agent); raises ``InvalidQuery``, ``InvalidBudget``,
        ``InvalidActivationState``, ``ProjectNotFound``, ``ProjectNotIndexed``, ``RetrievalFailed``."""
        return activate(self, self._open, project_id, query, budget, state, ranking)

    # -- Retrieval Runs -------------------------------------------------------------------
    def _runs(self) -> RunStore:
        if self.history is None:
            raise StorageUnavailable("retrieval history is not enabled for this engine")
        return self.history

    def list_runs(self, run_filter: RunFilter | None = None, *, limit: int = 50, cursor: str | None = None) -> RunPage:
        """A page of Retrieval Run summaries, newest first; raises ``StorageUnavailable`` without history."""
        return self._runs().list_runs(run_filter or RunFilter(), limit=limit, cursor=cursor)

    def get_run(self, run_id: str, *, manifest: bool = False) -> RunDetail:
        """A Run's trace; ``manifest``: with the Effective Memory manifest it saw (the sources at
        activation), so a reader can tell which candidates were stale or gone when the index lagged."""
        detail = self._runs().get_run(run_id)
        if manifest and detail.summary.effective_memory_hash is not None:
            entries = self._runs().run_manifest(detail.summary.effective_memory_hash)
            detail = attrs.evolve(detail, manifest=entries)
        return detail

    def clear_runs(self, project_id: str | None = None) -> ClearReport:
        """Delete the Runs (of ``project_id``, or all) no Evaluation Case pins; raises
        ``ProjectNotFound``, ``StorageUnavailable``."""
        if project_id is not None:
            self.catalog.get_project(project_id)
        return self._runs().clear(project_id)

    # -- Evaluation Sets (the seed's method names; the rest is on ``engine.evaluation``) ------
    def evaluations(self) -> EvaluationService:
        """The evaluation service; raises ``StorageUnavailable`` when evaluation is not enabled."""
        if self.evaluation is None:
            raise StorageUnavailable("evaluation is not enabled for this engine")
        return self.evaluation

    def create_evaluation_case(self, run_id: str) -> Case:
        """Freeze succeeded Run ``run_id`` as an Evaluation Case and return it; raises ``RunNotFound``,
        ``EvaluationRunNotSucceeded``, ``EvaluationCaseExists``."""
        return self.evaluations().create_case(run_id)

    def replace_evaluation_judgments(
        self, case_id: str, expected_judgment_version: int, judgments: object
    ) -> JudgmentSet:
        """Replace a case's judgments if its version is still ``expected_judgment_version``; returns
        the new set; raises ``EvaluationCaseNotFound``, ``EvaluationJudgmentConflict``, ``InvalidJudgments``."""
        return self.evaluations().replace_judgments(case_id, expected_judgment_version, judgments)

    def evaluation_report(self, project_id: str | None = None, case_ids: Sequence[str] | None = None) -> Report:
        """The metrics report over the project's (or the named) cases; raises ``StorageUnavailable``."""
        return self.evaluations().report(project_id, case_ids)

    def export_evaluation_document(self, **scope: Unpack[ExportScope]) -> Mapping[str, Any]:
        """The self-contained fixture of a project's (or the named) cases, as a document. A
        project with no case exports an empty set; a project that neither exists nor has cases
        (a removed project's cases still export) is ``project_not_found``, for every transport."""
        service = self.evaluations()
        project_id = scope.get("project_id")
        if project_id is not None and not service.list_cases(project_id, scope.get("case_ids")):
            self.catalog.get_project(project_id)
        return export_document(service, **scope)

    def export_evaluation_set(self, **scope: Unpack[ExportScope]) -> bytes:
        """The fixture file ``memcore eval export`` writes (canonical JSON) of
        ``export_evaluation_document``."""
        return dump(self.export_evaluation_document(**scope))

    def import_evaluation_set(
        self, data: bytes | str | Mapping[str, Any], progress: Progress = no_progress
    ) -> ImportResult:
        """Import a fixture (bytes, text or document) and return what it added; raises
        ``InvalidFixture``, ``FixtureHashMismatch``, ``EvaluationImportConflict``."""
        return self.evaluations().import_fixture(data, progress)

    def close(self) -> None:
        """Release the open indexes and let pending Run writes land; the engine is unusable after."""
        self._open.close_all()
        if self.history is not None:
            self.history.close()  # pending Run writes land before the caller lets go

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
