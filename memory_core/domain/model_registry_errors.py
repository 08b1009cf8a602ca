"""Errors of the home's model registry (issue 33): a name unknown, taken, or still in use.
(A model directory that cannot be read is ``ModelUnavailable`` in ``domain/errors.py``.)"""

from __future__ import annotations

from memory_core.domain.errors import MemoryCoreError


class ModelNotFound(MemoryCoreError):
    """No model of that name is registered in the home (``memcore model list`` names them)."""

    code = "model_not_found"


class ModelExists(MemoryCoreError):
    """A model of that name is already registered (or the name is reserved)."""

    code = "model_exists"


class ModelInUse(MemoryCoreError):
    """The model is chosen by a project or as the home default: remove refused, nothing changed."""

    code = "model_in_use"


HOME = ""  # the home default's place among the users of a model


def model_not_found(name: str, known: list[str]) -> ModelNotFound:
    """The error naming the registered models, so the caller can correct the name."""
    said = ", ".join(known) if known else "none yet (memcore model add NAME PATH)"
    return ModelNotFound(f"unknown model {name!r}; registered: {said}; built in: minilm", model=name,
                         known_models=known)  # fmt: skip


def model_in_use(name: str, users: list[str]) -> ModelInUse:
    """Removal refused: ``users`` are the project ids (``HOME``: the home default) that chose it."""
    who = ", ".join("the home default" if u == HOME else f"project {u!r}" for u in users)
    return ModelInUse(f"model {name!r} is in use by {who}: choose another model there first "
                      "(memcore project set NAME --embedding MODEL)", model=name, used_by=users)  # fmt: skip
