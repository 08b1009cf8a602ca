"""Per-project ranking profiles (issue 18): which profile and reranker a project ranks with,
and setting, restoring or applying a tuning's proposal. Every version is kept (restoring
appends a copy), so a Run's recorded ``ranking_profile`` revision can always be traced back."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from memory_core.domain.errors import InvalidRequest
from memory_core.domain.evaluation_errors import LearnedModelRefused
from memory_core.evaluation.learning import LearnedReranker, RefusedModelFallback, read_model
from memory_core.ports import Reranker
from memory_core.ports.learning import RankLearner
from memory_core.ports.profiles import ProfileStore
from memory_core.retrieval.fusion import fusion_from_settings, is_fusion
from memory_core.retrieval.profile import (
    FROM_FILE,
    LEARNED_MODEL,
    PROFILE_KEYS,
    RankingProfile,
    StoredProfile,
    ranking_from_settings,
)
from memory_core.services.activation import Ranking

log = logging.getLogger(__name__)


@attrs.frozen
class ProfileView:
    """What ``memcore project profile show`` prints: the version in use (None: the engine's
    defaults), every setting in effect with the revisions a Run records, and the history."""

    project_id: str
    in_use: StoredProfile | None
    settings: Mapping[str, Any]
    ranking_profile: str
    reranker: str
    history: tuple[StoredProfile, ...]


@attrs.define
class ProjectProfiles:
    """The engine's defaults, and each project's own settings from ``store`` (None: defaults only)."""

    store: ProfileStore | None
    default_profile: RankingProfile
    default_reranker: Reranker
    learner: RankLearner | None = None  # loads a profile's learned model (issue 32); None: none load
    # The cross-encoder a project chose (issue 33), built with its profile's rerank_batch and
    # rerank_max_tokens: it reranks in place of the profile's reranker, so the view shows its
    # revision (the one a Run records). None: no model registry.
    cross_encoder: Callable[[str, RankingProfile], Reranker | None] | None = None
    _parsed: dict[str, tuple[tuple[int, str], Ranking]] = attrs.field(factory=dict, init=False)

    def ranking_of(self, settings: Mapping[str, Any]) -> Ranking:
        """The ranking a settings document gives; ``InvalidRequest`` names a bad key or value."""
        reranker = self.default_reranker
        fusing = is_fusion(reranker)  # a registered fusion: the profile's fusion keys apply to it
        scores = (lambda **fusion: fusion_from_settings(fusion, reranker).score_range) if fusing else None
        parsed = ranking_from_settings(settings, self.default_profile, scores)
        if parsed.fusion:
            if not fusing:
                raise InvalidRequest(
                    f"this engine reranks with {reranker.revision}: the fusion settings "
                    f"({', '.join(sorted(parsed.fusion))}) apply only to the registered fusion functions"
                )
            reranker = fusion_from_settings(parsed.fusion, reranker)
        return Ranking(parsed.profile if settings else self.default_profile, reranker)

    def ranking_for(self, project_id: str) -> Ranking:
        stored = self._latest(project_id)
        if stored is None:
            return Ranking(self.default_profile, self.default_reranker)
        key = (stored.version, stored.created_at)
        hit = self._parsed.get(project_id)
        if hit is not None and hit[0] == key:
            return hit[1]
        try:
            ranking = self.ranking_of(stored.settings)
        except InvalidRequest as exc:
            # Stored before a check of today refused it (a floor above every score, issue 30):
            # say which version it is and the way out, rather than rank with something else.
            raise InvalidRequest(
                f"project {project_id}'s ranking profile version {stored.version} is no longer accepted: "
                f"{exc.message}; set new settings or restore another version (0: the defaults)",
                **{**exc.details, "project": project_id, "version": stored.version},
            ) from exc
        ranking = self._with_learned_model(project_id, stored.settings, ranking, strict=False)
        self._parsed[project_id] = (key, ranking)
        return ranking

    def in_use(self, project_id: str) -> Ranking:
        """What ``project_id`` ranks with: its profile, its cross-encoder (if it chose one, issue 33)
        rescoring the rerank window in place of the profile's reranker. A learned model and a
        cross-encoder never both apply: ``set`` and a model choice refuse the pair
        (``two_window_rerankers``); a home that had both from before ranks with the cross-encoder."""
        ranking = self.ranking_for(project_id)
        cross_encoder = self.cross_encoder(project_id, ranking.profile) if self.cross_encoder is not None else None
        return ranking if cross_encoder is None else attrs.evolve(ranking, reranker=cross_encoder)

    def fusion_for(self, project_id: str) -> Ranking:
        """The project's profile without its learned model: the fusion its settings give."""
        stored = self._latest(project_id)
        return self.ranking_of(stored.settings) if stored is not None else Ranking(self.default_profile,
                                                                                     self.default_reranker)  # fmt: skip

    def learned_model_of(self, project_id: str) -> str | None:
        """The digest of the learned model the project's profile in use names (None: none)."""
        stored = self._latest(project_id)
        digest = stored.settings.get(LEARNED_MODEL) if stored is not None else None
        return str(digest) if digest is not None else None

    def _latest(self, project_id: str) -> StoredProfile | None:
        """The project's profile in use (None: the engine's defaults, or no store)."""
        return self.store.latest_profile(project_id) if self.store is not None else None

    def _store(self) -> ProfileStore:
        if self.store is None:
            raise InvalidRequest("this engine keeps no project profiles (it has no profile store)")
        return self.store

    def show(self, project_id: str) -> ProfileView:
        history = tuple(self._store().profile_history(project_id))
        ranking = self.ranking_for(project_id)
        settings: dict[str, Any] = {"name": ranking.profile.name}
        settings.update({k: getattr(ranking.profile, k) for k in PROFILE_KEYS})
        if is_fusion(ranking.reranker):
            settings.update(ranking.reranker.settings())  # type: ignore[attr-defined]
        return ProfileView(project_id, history[-1] if history else None, settings, ranking.profile.revision,
                           self.in_use(project_id).reranker.revision, history)  # fmt: skip

    def set(self, project_id: str, settings: object, source: str = FROM_FILE) -> ProfileView:
        """Check ``settings`` whole, then store them as the project's next version."""
        if not isinstance(settings, Mapping):
            raise InvalidRequest("a ranking profile is a JSON object of settings")
        ranking = self._with_learned_model(project_id, settings, self.ranking_of(settings), strict=True)  # raises
        if settings.get(LEARNED_MODEL) is not None and self.cross_encoder is not None:  # no model opened otherwise
            cross_encoder = self.cross_encoder(project_id, ranking.profile)
            if cross_encoder is not None:
                raise two_window_rerankers(project_id, str(settings[LEARNED_MODEL]), cross_encoder.revision)
        self._store().add_profile(project_id, settings, source)
        return self.show(project_id)

    def restore(self, project_id: str, version: int | None = None) -> ProfileView:
        """Put an earlier version back in use (appended as a copy); ``version`` None: the one
        before the current, 0: the engine's defaults."""
        history = self._store().profile_history(project_id)
        if version is None:
            if not history:
                raise InvalidRequest(f"project {project_id!r} has no profile of its own to restore from")
            version = history[-2].version if len(history) > 1 else 0
        if version == 0:
            return self.set(project_id, {}, source="restore:0")
        chosen = next((p for p in history if p.version == version), None)
        if chosen is None:
            known = ", ".join(str(p.version) for p in history) or "none"
            raise InvalidRequest(f"project {project_id!r} has no profile version {version} (versions: {known}; 0: "
                                 "the defaults)", version=version)  # fmt: skip
        return self.set(project_id, chosen.settings, source=f"restore:{version}")

    def set_from_tune(self, project_id: str, tune_id: str) -> ProfileView:
        """Apply a tuning's proposal over the settings in use; refused when it proposed nothing."""
        tuning = self._store().get_tuning(tune_id)
        if tuning.project_id != project_id:
            raise InvalidRequest(
                f"tuning {tune_id!r} was measured on project {tuning.project_id!r}, not {project_id!r}", tune_id=tune_id
            )
        if not tuning.proposed or tuning.proposal is None:
            raise InvalidRequest(f"tuning {tune_id!r} proposed nothing: {tuning.verdict}", tune_id=tune_id)
        stored = self._store().latest_profile(project_id)
        settings = {**(stored.settings if stored is not None else {}), **tuning.proposal,
                    "name": f"tuned-{tune_id[-8:].lower()}"}  # fmt: skip
        return self.set(project_id, settings, source=f"tune:{tune_id}")

    # -- learned models (issue 32, item 2) -----------------------------------------------------
    def load_model(self, project_id: str, digest: str) -> LearnedReranker:
        """The project's learned model ``digest`` as a reranker; ``LearnedModelRefused`` when it
        is missing, corrupt, of another feature revision, or this engine has no learner."""
        if self.learner is None:
            raise LearnedModelRefused("this engine has no learner to load a learned model with", model=digest[:12],
                                      reason="no_learner")  # fmt: skip
        data = self._store().learned_model(project_id, digest)
        if data is None:
            raise LearnedModelRefused(f"project {project_id!r} has no learned model {digest[:12]} (a model is kept "
                                      "with the project that learned it: `memcore eval learn` this project)",
                                      model=digest[:12], reason="missing")  # fmt: skip
        model = read_model(data, digest)
        try:
            scorer = self.learner.load(model.model)
        except LearnedModelRefused:
            raise
        except Exception as exc:  # the library missing or failing: refused, never a crash
            raise LearnedModelRefused(f"learned model {digest[:12]} cannot be loaded: {type(exc).__name__}: {exc}",
                                      model=digest[:12], reason="load_failed") from exc  # fmt: skip
        return LearnedReranker(digest, scorer)

    def _with_learned_model(self, project_id: str, settings: Mapping[str, Any], ranking: Ranking, *,
                            strict: bool) -> Ranking:  # fmt: skip
        """``ranking`` with the model its settings name reranking the window. A model that cannot
        be applied raises when ``strict`` (setting a profile), else the ranking keeps its fusion
        under a revision naming the refusal (the Run records it): never a crash, never a mix."""
        digest = settings.get(LEARNED_MODEL)
        if digest is None:
            return ranking
        try:
            learned = self.load_model(project_id, digest)
        except LearnedModelRefused as exc:
            if strict:
                raise
            log.warning("project %s: %s; ranking with its fusion instead", project_id, exc.message)
            reason = str(exc.details.get("reason", exc.code))
            return attrs.evolve(ranking, reranker=RefusedModelFallback(ranking.reranker, digest, reason))
        if strict and ranking.profile.min_final_score > learned.score_range[1]:
            raise InvalidRequest(f"min_final_score must be at most {learned.score_range[1]:g} with a learned model "
                                 "(its scores lie in (0, 1))", key="min_final_score")  # fmt: skip
        return attrs.evolve(ranking, reranker=learned)

    def set_from_learning(self, project_id: str, learn_id: str) -> ProfileView:
        """Put a learning's model in use over the settings in use; refused when it was not proposed."""
        learning = self._store().get_learning(learn_id)
        if learning.project_id != project_id:
            raise InvalidRequest(f"learning {learn_id!r} was measured on project {learning.project_id!r}, not "
                                 f"{project_id!r}", learn_id=learn_id)  # fmt: skip
        if not learning.proposed or learning.model_digest is None:
            raise InvalidRequest(f"learning {learn_id!r} proposed nothing: {learning.verdict}", learn_id=learn_id)
        stored = self._store().latest_profile(project_id)
        settings = {**(stored.settings if stored is not None else {}), LEARNED_MODEL: learning.model_digest,
                    "name": f"learned-{learn_id[-8:].lower()}"}  # fmt: skip
        return self.set(project_id, settings, source=f"learn:{learn_id}")


def two_window_rerankers(project_id: str, digest: str, cross_encoder: str) -> InvalidRequest:
    """The refusal of a learned model and a cross-encoder for one project: both rescore its whole
    rerank window, so it ranks with one or the other (what a learning compared with is the fusion)."""
    return InvalidRequest(
        f"project {project_id!r} would rank with learned model {digest[:12]} and cross-encoder {cross_encoder}: "
        f"both rescore the rerank window, so a project ranks with one. Choose no cross-encoder for it "
        f"(`memcore project set {project_id} --reranker none`) or a profile without the learned model first",
        project=project_id,
        learned_model=digest[:12],
        reranker=cross_encoder,
    )
