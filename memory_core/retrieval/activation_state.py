"""Activation state: what the agent already holds (brief §3)."""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from memory_core.domain.canonical import hash_json, is_sha256_hex, is_utf8_text, plain
from memory_core.domain.errors import InvalidActivationState

MAX_STATE_UNITS = 10_000
MAX_UNIT_ID_CHARS = 1_024


@attrs.frozen
class HeldUnit:
    unit_id: str
    unit_hash: str


@attrs.frozen
class ActivationState:
    units: tuple[HeldUnit, ...] = ()

    @classmethod
    def empty(cls) -> ActivationState:
        return cls(())

    @classmethod
    def from_json(cls, raw: object) -> ActivationState:
        """Validate a wire value ``{"units": [{"unit_id", "unit_hash"}]}``; reject anything else."""
        if raw is None:
            return cls.empty()
        if not isinstance(raw, Mapping):
            raise InvalidActivationState("activation state must be an object with a 'units' list")
        unknown = set(raw) - {"units"}
        if unknown:
            raise InvalidActivationState(f"unknown activation state fields: {sorted(unknown)}")
        units = raw.get("units", [])
        if not isinstance(units, list):
            raise InvalidActivationState("activation state 'units' must be a list")
        if len(units) > MAX_STATE_UNITS:
            raise InvalidActivationState(f"activation state holds more than {MAX_STATE_UNITS} units")
        held: dict[str, HeldUnit] = {}
        for index, item in enumerate(units):
            if not isinstance(item, Mapping) or set(item) != {"unit_id", "unit_hash"}:
                raise InvalidActivationState(f"units[{index}] must have exactly 'unit_id' and 'unit_hash'", index=index)
            unit_id, unit_hash = item["unit_id"], item["unit_hash"]
            if (
                not isinstance(unit_id, str)
                or not unit_id
                or len(unit_id) > MAX_UNIT_ID_CHARS
                or not is_utf8_text(unit_id)
            ):
                raise InvalidActivationState(f"units[{index}].unit_id is not a valid unit id", index=index)
            if not is_sha256_hex(unit_hash):
                raise InvalidActivationState(
                    f"units[{index}].unit_hash must be 64 lowercase hex characters", index=index
                )
            if unit_id in held and held[unit_id].unit_hash != unit_hash:
                raise InvalidActivationState(f"unit {unit_id!r} is held twice with different hashes")
            held[unit_id] = HeldUnit(unit_id, unit_hash)
        return cls(tuple(sorted(held.values(), key=lambda h: h.unit_id)))

    @property
    def fingerprint(self) -> str:
        """Hash of the canonical, sorted form (``plain``: ``{"units": [{unit_id, unit_hash}]}``,
        the wire form ``from_json`` reads)."""
        return hash_json(plain(self))

    def hash_of(self, unit_id: str) -> str | None:
        for held in self.units:
            if held.unit_id == unit_id:
                return held.unit_hash
        return None

    def as_dict(self) -> dict[str, str]:
        return {h.unit_id: h.unit_hash for h in self.units}

    def updated(self, delivered: Mapping[str, str]) -> ActivationState:
        """The next state: what the agent held, with delivered units added or replaced."""
        merged = self.as_dict()
        merged.update(delivered)
        return ActivationState(tuple(HeldUnit(k, v) for k, v in sorted(merged.items())))
