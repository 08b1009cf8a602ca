"""What every request type of an operation shares: its bounds enforced where they are declared.

Field metadata ``{"schema": {...}}`` adds JSON Schema keywords to the OpenAPI document; the
daemon's converter enforces the types, and every request type is
``attrs.frozen(field_transformer=bounded)``, whose validators enforce each bound the schema
declares (``minimum``/``maximum``, ``minLength``/``maxLength``, ``minItems``/``maxItems``) as an
``InvalidRequest`` naming the field, whoever builds the request (the daemon decoding a body, a
client before sending, the CLI in process). A field whose check is a rule of the core (the
query, the budget) is given that check as its validator instead (:func:`core_check`), so there
is one check of each bound and its typed error (``InvalidQuery``, ``InvalidBudget``) is the engine's.
"""

from __future__ import annotations

from collections.abc import Callable, Sized
from typing import Any

import attrs

from memory_core.domain.errors import InvalidRequest


def _check_bounds(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    """The bounds ``attribute``'s schema declares, enforced (None is left to the types)."""
    bounds = attribute.metadata.get("schema", {})
    name = attribute.name
    if value is None:
        return
    if isinstance(value, int) and not isinstance(value, bool):
        low, high = bounds.get("minimum"), bounds.get("maximum")
        if (low is not None and value < low) or (high is not None and value > high):
            said = f"from {low} to {high}" if low is not None and high is not None else (
                f"of at least {low}" if low is not None else f"of at most {high}")
            raise InvalidRequest(f"{name} must be an integer {said}", **{name: value})
    elif isinstance(value, Sized):
        unit = "characters" if isinstance(value, str) else "items"
        low = bounds.get("minLength" if unit == "characters" else "minItems")
        high = bounds.get("maxLength" if unit == "characters" else "maxItems")
        if low is not None and len(value) < low:
            raise InvalidRequest(f"{name} must have at least {low} {unit}", **{name: len(value)})
        if high is not None and len(value) > high:  # the core's wording ("query is longer than ...")
            said = "is longer than" if unit == "characters" else "has more than"
            raise InvalidRequest(f"{name} {said} {high} {unit}", **{name: len(value)})


_BOUNDS = frozenset({"minimum", "maximum", "minLength", "maxLength", "minItems", "maxItems"})


def bounded(cls: type, fields: list[attrs.Attribute[Any]]) -> list[attrs.Attribute[Any]]:
    """Each field that declares a bound and has no check of its own gets :func:`_check_bounds`."""
    return [f.evolve(validator=_check_bounds)
            if f.validator is None and _BOUNDS & set(f.metadata.get("schema", {})) else f
            for f in fields]  # fmt: skip


def core_check(check: Callable[[Any], Any]) -> Callable[[Any, Any, Any], None]:
    """A rule of the core as a field validator (its typed error, its message)."""

    def validate(_instance: Any, _attribute: Any, value: Any) -> None:
        if value is not None:
            check(value)

    return validate


def described(text: str, default: Any = attrs.NOTHING) -> Any:
    """A field whose schema is only its description (as ``services.freshness`` writes its fields)."""
    return attrs.field(default=default, metadata={"schema": {"description": text}})
