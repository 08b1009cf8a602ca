"""The home's model registry and each project's models (issue 33): the operations."""

from __future__ import annotations

import os
from typing import Any

import attrs

from memory_core.domain import errors as err
from memory_core.domain.model_registry_errors import ModelExists, ModelInUse, ModelNotFound
from memory_core.domain.models import ModelOverrides
from memory_core.operations.bounds import bounded, described
from memory_core.operations.registry import READ, WRITE, operation
from memory_core.services.engine import Engine
from memory_core.services.models import ModelView, ProjectModels

_NAME = {"schema": {"minLength": 1, "maxLength": 63, "description": "the model's name (minilm: the built-in)"}}


def _absolute(_instance: Any, _attribute: Any, path: str) -> None:
    # The daemon's working directory is not the caller's: a relative path would be wrong.
    if not path or not os.path.isabs(path):
        raise err.InvalidRequest(f"model path {path!r} must be absolute", path=path)


@attrs.frozen(field_transformer=bounded)
class AddModelRequest:
    """Register a local model directory (``config.json``, tokenizer files, safetensors weights)."""

    name: str = attrs.field(metadata={"schema": {"minLength": 1, "maxLength": 63, "description": (
        "a lowercase slug: a-z, 0-9, '.', '_', '-' (minilm and none are reserved)")}})  # fmt: skip
    path: str = attrs.field(validator=_absolute, metadata={"schema": {"description": "the model's absolute directory"}})
    overrides: ModelOverrides = described("settings over the model's own declarations (null: the model's)",
                                          attrs.Factory(ModelOverrides))  # fmt: skip
    replace: bool = described("put it in place of the model of that name (its files changed)", False)


@operation(WRITE, AddModelRequest, ModelView,
           "Register a model directory under a name, after reading and checking it (a broken one is "
           "model_unavailable naming what is missing, and nothing is stored).",
           (err.ModelUnavailable, ModelExists, err.InvalidRequest))  # fmt: skip
def add_model(engine: Engine, req: AddModelRequest) -> ModelView:
    return engine.add_model(req.name, req.path, req.overrides, replace=req.replace)


@attrs.frozen(field_transformer=bounded)
class ListModelsRequest:
    """No inputs."""


@attrs.frozen
class ModelList:
    models: tuple[ModelView, ...]


@operation(READ, ListModelsRequest, ModelList, "Every model: the built-in minilm first, then those added.",
           allow_get=True)  # fmt: skip
def list_models(engine: Engine, req: ListModelsRequest) -> ModelList:
    return ModelList(tuple(engine.list_models()))


@attrs.frozen(field_transformer=bounded)
class ShowModelRequest:
    name: str = attrs.field(metadata=_NAME)


@operation(READ, ShowModelRequest, ModelView, "One model: its settings, revision and who chose it.",
           (ModelNotFound,))  # fmt: skip
def show_model(engine: Engine, req: ShowModelRequest) -> ModelView:
    return engine.show_model(req.name)


@attrs.frozen(field_transformer=bounded)
class RemoveModelRequest:
    name: str = attrs.field(metadata=_NAME)


@operation(WRITE, RemoveModelRequest, ModelView,
           "Forget a model (its files and cached vectors stay); refused while a project or the home default "
           "chose it.", (ModelNotFound, ModelInUse))  # fmt: skip
def remove_model(engine: Engine, req: RemoveModelRequest) -> ModelView:
    return engine.remove_model(req.name)


@attrs.frozen(field_transformer=bounded)
class ShowProjectModelsRequest:
    project_id: str | None = described("the project's id; null: the home default")


@operation(READ, ShowProjectModelsRequest, ProjectModels,
           "A project's (or the home default's) embedding model and cross-encoder in effect, and whether its "
           "current generation still serves another model's vectors while it re-embeds.",
           (err.ProjectNotFound,))  # fmt: skip
def show_project_models(engine: Engine, req: ShowProjectModelsRequest) -> ProjectModels:
    return engine.project_models(req.project_id)


@attrs.frozen(field_transformer=bounded)
class SetProjectModelsRequest:
    project_id: str | None = described("the project's id; null: the home default")
    embedding: str | None = described("an embedding model's name (minilm: the built-in); null: keep", None)
    reranker: str | None = described("a cross-encoder's name, or none; null: keep", None)


@operation(WRITE, SetProjectModelsRequest, ProjectModels,
           "Choose a project's (or the home default's) embedding model and cross-encoder. A new embedding model "
           "re-embeds in the background into a new generation while the current one serves.",
           (err.ProjectNotFound, ModelNotFound, err.InvalidRequest))  # fmt: skip
def set_project_models(engine: Engine, req: SetProjectModelsRequest) -> ProjectModels:
    return engine.set_project_models(req.project_id, embedding=req.embedding, reranker=req.reranker)
