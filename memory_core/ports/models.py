"""The model registry's ports (issue 33): the home's registered models with each project's (and
the home's default) choice of embedding model and cross-encoder, and the loader that reads a
model directory and opens it (ONNX Runtime in ``adapters/models``)."""

from __future__ import annotations

from typing import Protocol

import attrs

from memory_core.domain.models import ModelOverrides, ModelSpec
from memory_core.ports import Embedder, Reranker

# The packaged all-MiniLM-L6-v2: always registered, the embedding model of a home that chose none.
BUILTIN_MODEL = "minilm"
# A choice of reranker meaning "no cross-encoder": the profile's fusion ranks alone.
NO_RERANKER = "none"
RESERVED_NAMES = frozenset({BUILTIN_MODEL, NO_RERANKER})


@attrs.frozen
class RegisteredModel:
    """A model added by ``memcore model add``: its spec as read when added (the revision names
    the weights, tokenizer, config and pooling then), and the overrides it was added with."""

    name: str
    spec: ModelSpec
    overrides: ModelOverrides
    added_at: str


@attrs.frozen
class ModelChoice:
    """A project's (or the home's default) models; None inherits: a project's from the home
    default, the home default's from the built-in (MiniLM, no cross-encoder)."""

    embedding: str | None = None
    reranker: str | None = None  # a reranker model's name, NO_RERANKER, or None


class ModelStore(Protocol):
    """Registered models and choices; a choice names a model by its name (or a reserved one)."""

    def add_model(self, model: RegisteredModel, *, replace: bool = False) -> None:
        """Register ``model``; raises ``ModelExists`` (nothing changed) unless ``replace``, which
        puts it in place of the model of that name (``ModelNotFound`` when there is none)."""
        ...

    def get_model(self, name: str) -> RegisteredModel:
        """Raises ``ModelNotFound`` naming the registered ones."""
        ...

    def list_models(self) -> list[RegisteredModel]:
        """Every registered model, by name."""
        ...

    def remove_model(self, name: str) -> None:
        """Forget ``name``; raises ``ModelNotFound``, or ``ModelInUse`` naming who chose it (checked
        in the same transaction: a choice made meanwhile cannot be left naming nothing)."""
        ...

    def model_users(self, name: str) -> list[str]:
        """The projects whose own choice names ``name`` (and ``""`` for the home default)."""
        ...

    def model_choice(self, project_id: str | None) -> ModelChoice:
        """The project's own choice (``None``: the home default's); nothing set is ``ModelChoice()``."""
        ...

    def set_model_choice(self, project_id: str | None, choice: ModelChoice) -> None:
        """Record it; raises ``ProjectNotFound``, ``ModelNotFound`` for a name not registered (the
        reserved names excepted), in one transaction with the check."""
        ...


class ModelLoader(Protocol):
    """Reads model directories and opens them; nothing heavy is imported before the first call."""

    def read(self, path: str, overrides: ModelOverrides) -> ModelSpec:
        """The directory's spec (revision included); raises ``ModelUnavailable`` naming what is
        missing or broken."""
        ...

    def embedder(self, spec: ModelSpec) -> Embedder:
        """An embedder of ``spec`` (its ``revision`` is the spec's); loads on first use."""
        ...

    def reranker(self, spec: ModelSpec, batch: int, max_tokens: int | None) -> Reranker:
        """A cross-encoder of ``spec`` scoring in batches of ``batch`` pairs cut at ``max_tokens``
        (None: the spec's); the pipeline gives it the profile's ``rerank_depth`` candidates."""
        ...
