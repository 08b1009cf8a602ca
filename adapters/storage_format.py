"""The storage format: the JSON this home's stores write (the sqlite JSON columns: frozen traces,
manifests, index revisions; a generation's ``units.jsonl``), read back through one converter.

It writes what the core's ``plain`` writes (the identity hashes are over that form, and
tests/core/test_plain_identity.py keeps them equal) and reads values back exactly as written: a
stored ``0`` stays ``0`` where the type says ``float`` (cattrs would make it ``0.0``, which
changes the canonical JSON and so a recorded trace hash). Stored data was valid when written, so
reading only builds the values; a missing field with a default takes it (``Unit.resource_hash``
predates some stored units).
"""

from __future__ import annotations

from typing import Any

import attrs
import cattrs
from cattrs.gen import make_dict_unstructure_fn, override

from memory_core.domain.canonical import omit_none_fields


def _as_stored(value: Any, _: Any) -> Any:
    return value


def make_converter() -> cattrs.Converter:
    conv = cattrs.Converter()

    def omitting(cls: type) -> Any:
        overrides: dict[str, Any] = {name: override(omit_if_default=True) for name in omit_none_fields(cls)}
        return make_dict_unstructure_fn(cls, conv, **overrides)

    conv.register_unstructure_hook(tuple, lambda t: [conv.unstructure(x) for x in t])  # JSON arrays
    for kind in (str, int, float, bool):
        conv.register_structure_hook(kind, _as_stored)
    # Fields ``plain`` leaves out while None (a candidate's span in a Run recorded before spans
    # were kept) are left out here too, so a stored trace is still the one its hash was taken of.
    # Each defaults to None, so cattrs' omit-if-default leaves it out exactly while None.
    conv.register_unstructure_hook_factory(lambda t: attrs.has(t) and bool(omit_none_fields(t)), omitting)
    return conv


CONVERTER = make_converter()  # stateless once built; the stores share it
