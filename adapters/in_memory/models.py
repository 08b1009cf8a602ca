"""In-memory twin of ``SqliteModelStore`` (the same contract: ``tests/contracts/test_model_store.py``)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

import attrs

from memory_core.adapters.in_memory.vectors import HashingEmbedder
from memory_core.domain.errors import ModelUnavailable
from memory_core.domain.model_registry_errors import HOME, ModelExists, model_in_use, model_not_found
from memory_core.domain.models import ModelOverrides, ModelSpec
from memory_core.ports import Embedder, Reranker
from memory_core.ports.models import RESERVED_NAMES, ModelChoice, RegisteredModel
from memory_core.retrieval.pipeline import RerankInput


class InMemoryModelStore:
    """``ModelStore`` over dicts; ``require_project(project_id)`` raises ``ProjectNotFound`` (give it
    a catalog's ``get_project``), as the SQLite store's foreign key does. Choices of a project
    removed from the catalog are ignored (the SQLite rows go with it, by cascade)."""

    def __init__(self, require_project: Callable[[str], object]) -> None:
        self._require = require_project
        self._models: dict[str, RegisteredModel] = {}
        self._choices: dict[str, ModelChoice] = {}
        self._lock = threading.Lock()

    def add_model(self, model: RegisteredModel, *, replace: bool = False) -> None:
        with self._lock:
            if replace and model.name not in self._models:
                raise model_not_found(model.name, sorted(self._models))
            if (model.name in self._models and not replace) or model.name in RESERVED_NAMES:
                raise ModelExists(f"a model named {model.name!r} is already registered (--replace puts new files "
                                  "in its place)", model=model.name)  # fmt: skip
            self._models[model.name] = model

    def get_model(self, name: str) -> RegisteredModel:
        with self._lock:
            if name not in self._models:
                raise model_not_found(name, sorted(self._models))
            return self._models[name]

    def list_models(self) -> list[RegisteredModel]:
        with self._lock:
            return [self._models[n] for n in sorted(self._models)]

    def remove_model(self, name: str) -> None:
        with self._lock:
            if name not in self._models:
                raise model_not_found(name, sorted(self._models))
            users = self._users(name)
            if users:
                raise model_in_use(name, users)
            del self._models[name]

    def model_users(self, name: str) -> list[str]:
        with self._lock:
            return self._users(name)

    def _users(self, name: str) -> list[str]:
        live = []
        for scope, choice in sorted(self._choices.items()):
            if name not in (choice.embedding, choice.reranker):
                continue
            if scope != HOME:
                try:
                    self._require(scope)
                except Exception:
                    continue  # the project is gone: its choice went with it
            live.append(scope)
        return live

    def model_choice(self, project_id: str | None) -> ModelChoice:
        with self._lock:
            return self._choices.get(project_id or HOME, ModelChoice())

    def set_model_choice(self, project_id: str | None, choice: ModelChoice) -> None:
        if project_id is not None:
            self._require(project_id)
        with self._lock:
            for name in (choice.embedding, choice.reranker):
                if name is not None and name not in RESERVED_NAMES and name not in self._models:
                    raise model_not_found(name, sorted(self._models))
            self._choices[project_id or HOME] = choice


class SpecEmbedder(HashingEmbedder):
    """A hashing embedder standing in for a registered model in core tests: its revision and
    dimensions are the spec's, and its vectors are salted by the revision, so two models give
    different vectors for the same text (a mix would show)."""

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__(max(spec.dimensions, 2))
        self.spec = spec
        self.revision = f"fake:{spec.revision[:16]}"

    def _embed(self, text: str) -> list[float]:
        return super()._embed(f"{self.spec.revision[:8]}{text}".replace(" ", f" {self.spec.revision[:8]}"))


class SpecReranker:
    """A cross-encoder standing in for a registered one in core tests: each candidate's score is
    the share of the query's words in its text (no model, no score range: as a real cross-encoder's,
    its scores are not what a trace records); its revision names the spec and the pair cut."""

    def __init__(self, spec: ModelSpec, max_tokens: int | None) -> None:
        self.revision = f"cross-encoder:fake@{spec.revision[:12]}" + (f"+max{max_tokens}" if max_tokens else "")

    def rerank(self, query: str, candidates: Sequence[RerankInput]) -> list[float]:
        words = set(query.lower().split())
        return [len(words & set(c.text.lower().split())) / max(1, len(words)) for c in candidates]


class InMemoryModelLoader:
    """``ModelLoader`` over specs registered by path (``put``); any other path is
    ``ModelUnavailable``, as a directory without a model is."""

    def __init__(self) -> None:
        self._specs: dict[str, ModelSpec] = {}

    def put(self, spec: ModelSpec) -> None:
        self._specs[spec.path] = spec

    def read(self, path: str, overrides: ModelOverrides) -> ModelSpec:
        spec = self._specs.get(path)
        if spec is None:
            raise ModelUnavailable(f"no model in {path!r}: config.json is missing", path=path, missing="config.json")
        changed = {k: v for k, v in attrs.asdict(overrides).items() if v is not None}
        return attrs.evolve(spec, **changed) if changed else spec

    def embedder(self, spec: ModelSpec) -> Embedder:
        return SpecEmbedder(spec)

    def reranker(self, spec: ModelSpec, batch: int, max_tokens: int | None) -> Reranker:
        return SpecReranker(spec, max_tokens)
