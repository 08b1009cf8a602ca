"""The home's model registry and each project's models (issue 33): which embedding model indexes
and serves a project, and which cross-encoder (if any) reranks it.

Models are added by path (``ModelLoader.read`` checks the directory; a broken one is
``model_unavailable`` and nothing is stored), listed, shown and removed (refused while chosen).
The packaged MiniLM (the engine's own embedder) is always there as ``minilm``, the default.

The indexer asks ``embedder_for(project)``: the model the project chose now. An activation asks
``embedder_of_revision(generation's)``: the model its current generation was built with, so the
current generation keeps serving while a new model re-embeds into the next one; vectors of two
revisions never meet (the embedding cache and every generation key on the revision).
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import attrs

from memory_core.domain.errors import InvalidRequest
from memory_core.domain.model_registry_errors import HOME, ModelNotFound
from memory_core.domain.models import ModelOverrides, ModelSpec
from memory_core.ports import Embedder, Reranker
from memory_core.ports.models import (
    BUILTIN_MODEL,
    NO_RERANKER,
    RESERVED_NAMES,
    ModelChoice,
    ModelLoader,
    ModelStore,
    RegisteredModel,
)

log = logging.getLogger(__name__)

EMBEDDING, RERANKER = "embedding", "reranker"
_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")
# A cross-encoder's batch when the profile does not say (the pairs scored per ONNX Runtime call).
RERANK_BATCH = 16


def validate_model_name(name: object) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise InvalidRequest("a model name is a lowercase slug: 1-63 of a-z, 0-9, '.', '_', '-', starting with a "
                             "letter or digit", model=name)  # fmt: skip
    if name in RESERVED_NAMES:
        raise InvalidRequest(f"{name!r} is reserved (minilm: the packaged model; none: no cross-encoder)", model=name)
    return name


@attrs.frozen
class ModelView:
    """What ``memcore model list|show`` prints of a model: its spec, and who chose it."""

    name: str
    kind: str
    builtin: bool
    revision: str
    dimensions: int
    family: str
    architecture: str
    pooling: str
    normalize: bool
    max_tokens: int
    query_prefix: str
    document_prefix: str
    path: str
    added_at: str | None
    overrides: ModelOverrides
    # Project ids whose own choice names it; "" for the home default.
    used_by: tuple[str, ...]

    @classmethod
    def of(cls, model: RegisteredModel, used_by: Sequence[str]) -> ModelView:
        s = model.spec
        return cls(model.name, s.kind, False, s.revision, s.dimensions, s.family, s.architecture, s.pooling,
                   s.normalize, s.max_tokens, s.query_prefix, s.document_prefix, s.path, model.added_at,
                   model.overrides, tuple(used_by))  # fmt: skip


@attrs.frozen
class ProjectModels:
    """A project's (``project_id`` None: the home default's) models in effect, what it set itself,
    and whether its current generation was built with another embedding model (re-embedding)."""

    project_id: str | None
    embedding: str
    embedding_revision: str
    dimensions: int
    reranker: str  # a model's name, or "none"
    reranker_revision: str | None
    chosen: ModelChoice
    serving_revision: str | None = None  # the current generation's embedding model, if indexed
    # Its current generation serves with another model's vectors until the new one is built.
    reembedding: bool = False


def _builtin_view(embedder: Embedder, used_by: Sequence[str]) -> ModelView:
    """The engine's own embedder as the ``minilm`` entry (its settings are the packaged model's)."""
    path = str(getattr(embedder, "model_dir", "(packaged with memory-core)"))
    return ModelView(BUILTIN_MODEL, EMBEDDING, True, embedder.revision, embedder.dimensions, "bert", "BertModel",
                     "mean", True, 256, "", "", path, None, ModelOverrides(), tuple(used_by))  # fmt: skip


@attrs.define
class ModelRegistry:
    """The registry over ``store`` (None: only the built-in model, nothing can be added) with
    ``loader`` opening models; ``builtin`` is the engine's default embedder (``minilm``)."""

    store: ModelStore | None
    loader: ModelLoader | None
    builtin: Embedder
    now: Callable[[], str]
    # Called with the project ids whose models changed (None: every project following the home
    # default): the daemon's watcher re-embeds them in the background.
    on_change: list[Callable[[list[str] | None], None]] = attrs.field(factory=list)
    _embedders: dict[str, Embedder] = attrs.field(factory=dict, init=False)  # by revision, shared
    _rerankers: dict[tuple[str, int, int | None], Reranker] = attrs.field(factory=dict, init=False)
    _lock: threading.Lock = attrs.field(factory=threading.Lock, init=False)

    def _store(self) -> ModelStore:
        if self.store is None or self.loader is None:
            raise InvalidRequest("this engine keeps no model registry: only the built-in minilm serves")
        return self.store

    def _loader(self) -> ModelLoader:
        self._store()
        assert self.loader is not None
        return self.loader

    # -- the registry --------------------------------------------------------------------------
    def add(self, name: str, path: str | Path, overrides: ModelOverrides | None = None, *,
            replace: bool = False) -> ModelView:  # fmt: skip
        """Read and check the directory, then register it; ``ModelUnavailable`` (the directory),
        ``ModelExists`` or ``InvalidRequest`` store nothing. ``replace``: in place of the model of
        that name (its files changed, say); the projects that chose it re-embed when its revision
        changed, and it must stay of its kind while chosen."""
        name = validate_model_name(name)
        store = self._store()
        overrides = overrides or ModelOverrides()
        spec = self._loader().read(str(Path(path).expanduser().absolute()), overrides)
        old = store.get_model(name) if replace else None
        users = store.model_users(name) if old is not None else []
        if old is not None and users and old.spec.kind != spec.kind:
            raise InvalidRequest(f"model {name!r} is chosen as a{'n' if old.spec.kind == EMBEDDING else ''} "
                                 f"{old.spec.kind} model and {path} holds a {spec.kind} model", model=name)  # fmt: skip
        store.add_model(RegisteredModel(name, spec, overrides, self.now()), replace=replace)
        if old is not None and old.spec.revision != spec.revision and spec.kind == EMBEDDING and users:
            self._changed(None if HOME in users else users)
        return self.show(name)

    def views(self) -> list[ModelView]:
        """The built-in model first, then every registered one by name."""
        views = [self._builtin()]
        if self.store is not None:
            views += [ModelView.of(m, self.store.model_users(m.name)) for m in self.store.list_models()]
        return views

    def show(self, name: str) -> ModelView:
        if name == BUILTIN_MODEL:
            return self._builtin()
        model = self._registered(name)
        return ModelView.of(model, self._store().model_users(name))

    def remove(self, name: str) -> ModelView:
        """Forget a model (its files and cached vectors stay); ``ModelInUse`` while chosen."""
        if name == BUILTIN_MODEL:
            raise InvalidRequest("the built-in minilm cannot be removed", model=name)
        view = self.show(name)
        self._store().remove_model(name)
        return view

    def _builtin(self) -> ModelView:
        users = self.store.model_users(BUILTIN_MODEL) if self.store is not None else []
        return _builtin_view(self.builtin, users)

    def _registered(self, name: str) -> RegisteredModel:
        if self.store is None:
            raise ModelNotFound(f"unknown model {name!r}; this engine has only the built-in minilm", model=name)
        return self.store.get_model(name)

    # -- choices -------------------------------------------------------------------------------
    def chosen(self, project_id: str | None) -> ModelChoice:
        """What the project (None: the home) set itself."""
        return self.store.model_choice(project_id) if self.store is not None else ModelChoice()

    def effective(self, project_id: str | None) -> ModelChoice:
        """The models in effect: the project's own, else the home default's, else the built-in."""
        own = self.chosen(project_id)
        home = self.chosen(None) if project_id is not None else ModelChoice()
        return ModelChoice(own.embedding or home.embedding or BUILTIN_MODEL,
                           own.reranker or home.reranker or NO_RERANKER)  # fmt: skip

    def set_choice(self, project_id: str | None, *, embedding: str | None = None,
                   reranker: str | None = None) -> ModelChoice:  # fmt: skip
        """Choose the project's (None: the home default's) models; a None keeps what is set.
        The embedding must be an embedding model (or minilm), the reranker a cross-encoder (or
        none); otherwise ``InvalidRequest``/``ModelNotFound`` and nothing changes. Tells
        ``on_change`` who must re-embed."""
        if embedding is None and reranker is None:
            raise InvalidRequest("give --embedding MODEL, --reranker MODEL|none, or both")
        if embedding is not None:
            self._require_kind(embedding, EMBEDDING)
        if reranker is not None and reranker != NO_RERANKER:
            self._require_kind(reranker, RERANKER)
        store = self._store()
        before = store.model_choice(project_id)
        after = ModelChoice(embedding if embedding is not None else before.embedding,
                            reranker if reranker is not None else before.reranker)  # fmt: skip
        store.set_model_choice(project_id, after)
        if after.embedding != before.embedding:
            self._changed(None if project_id is None else [project_id])
        return after

    def _changed(self, project_ids: list[str] | None) -> None:
        """Tell ``on_change`` whose embedding model changed (None: every project)."""
        for listener in list(self.on_change):
            try:
                listener(project_ids)
            except Exception:  # a listener (the watcher) failing never undoes the change
                log.exception("a model-change listener failed")

    def check_choice(self, choice: ModelChoice) -> None:
        """``set_choice``'s checks of a choice, without storing it (a comparison's variants)."""
        if choice.embedding is not None:
            self._require_kind(choice.embedding, EMBEDDING)
        if choice.reranker is not None and choice.reranker != NO_RERANKER:
            self._require_kind(choice.reranker, RERANKER)

    def _require_kind(self, name: str, kind: str) -> None:
        actual = EMBEDDING if name == BUILTIN_MODEL else self._registered(name).spec.kind
        if actual != kind:
            raise InvalidRequest(f"model {name!r} is a {actual} model, not a{'n' if kind == EMBEDDING else ''} {kind} "
                                 "model", model=name, kind=actual)  # fmt: skip

    # -- what indexes and serves ---------------------------------------------------------------
    def embedder_for(self, project_id: str) -> Embedder | None:
        """The embedder of the registered model that indexes ``project_id`` now (its choice, else
        the home's); None: the built-in, which is the engine's own embedder (its caller's)."""
        name = self.effective(project_id).embedding
        assert name is not None
        if name == BUILTIN_MODEL or self.store is None:
            return None
        return self._open(self._registered(name).spec)

    def embedder_of_revision(self, revision: str) -> Embedder | None:
        """The embedder of a registered model whose vectors are of ``revision`` (a generation's),
        or None when no registered model has it (the built-in is the caller's own)."""
        with self._lock:
            found = self._embedders.get(revision)
        if found is not None or self.store is None or self.loader is None:
            return found
        # Opening is cheap (a model loads when it first embeds); an embedder's revision may say
        # more than its spec's (the inference path), so the embedder is asked.
        for model in self.store.list_models():
            if model.spec.kind == EMBEDDING and (embedder := self._open(model.spec)).revision == revision:
                return embedder
        return None

    def _open(self, spec: ModelSpec) -> Embedder:
        with self._lock:
            found = self._embedders.get(spec.revision)
            if found is None:
                found = self._embedders[spec.revision] = self._loader().embedder(spec)
            return found

    def reranker_for(
        self, project_id: str, *, batch: int | None = None, max_tokens: int | None = None
    ) -> Reranker | None:
        """The cross-encoder the project chose (None: none), opened once per settings: the
        profile's ``rerank_batch`` and ``rerank_max_tokens`` (None: ``RERANK_BATCH`` and the
        model's own length). A length past the model's own is the model's own (the profile is
        checked once, without knowing which model the project will choose)."""
        name = self.effective(project_id).reranker
        if name is None or name == NO_RERANKER or self.store is None:
            return None
        spec = self._registered(name).spec
        batch = RERANK_BATCH if batch is None else batch
        if max_tokens is not None and max_tokens >= spec.max_tokens:
            max_tokens = None  # the same scores, the same revision, the same cached session
        key = (spec.revision, batch, max_tokens)
        with self._lock:
            found = self._rerankers.get(key)
            if found is None:
                found = self._rerankers[key] = self._loader().reranker(spec, batch, max_tokens)
            return found

    def project_models(self, project_id: str | None, serving_revision: str | None = None) -> ProjectModels:
        """The models in effect for the project (None: the home default) and whether its current
        generation (``serving_revision``) still serves another model's vectors."""
        effective = self.effective(project_id)
        assert effective.embedding is not None and effective.reranker is not None
        embedder = (
            self.builtin
            if effective.embedding == BUILTIN_MODEL
            else self._open(self._registered(effective.embedding).spec)
        )
        revision, dimensions = embedder.revision, embedder.dimensions
        reranker_revision = None
        if effective.reranker != NO_RERANKER:
            reranker_revision = self._registered(effective.reranker).spec.revision
        reembedding = serving_revision is not None and serving_revision != revision
        return ProjectModels(project_id, effective.embedding, revision, dimensions, effective.reranker,
                             reranker_revision, self.chosen(project_id), serving_revision, reembedding)  # fmt: skip


__all__ = ["HOME", "ModelRegistry", "ModelView", "ProjectModels", "validate_model_name"]
