"""Per-project ranking profiles (issue 18): which profile and reranker a project ranks with,
and setting, restoring or applying a tuning's proposal. Every version is kept (restoring
appends a copy), so a Run's recorded ``ranking_profile`` revision can always be traced back."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from memory_core.domain.errors import InvalidRequest
from memory_core.ports import Reranker
from memory_core.ports.profiles import ProfileStore
from memory_core.retrieval.fusion import fusion_from_settings, is_fusion
from memory_core.retrieval.profile import (
    FROM_FILE,
    PROFILE_KEYS,
    RankingProfile,
    StoredProfile,
    ranking_from_settings,
)
from memory_core.services.activation import Ranking


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
        stored = self.store.latest_profile(project_id) if self.store is not None else None
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
                f"project {project_id!r}'s ranking profile version {stored.version} is no longer accepted: "
                f"{exc.message}; set new settings or restore another version (0: the defaults)",
                **{**exc.details, "project": project_id, "version": stored.version},
            ) from exc
        self._parsed[project_id] = (key, ranking)
        return ranking

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
                           ranking.reranker.revision, history)  # fmt: skip

    def set(self, project_id: str, settings: object, source: str = FROM_FILE) -> ProfileView:
        """Check ``settings`` whole, then store them as the project's next version."""
        if not isinstance(settings, Mapping):
            raise InvalidRequest("a ranking profile is a JSON object of settings")
        self.ranking_of(settings)  # nothing is stored when this raises
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
