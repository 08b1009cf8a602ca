"""Embedding throughput measured interleaved: the benchmarks that compare embedders (inference
paths, models) time them the same way."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any


def interleaved_rates(
    embedders: Mapping[str, Any], texts: Sequence[str], start: int, rounds: int, per_round: int
) -> dict[str, list[float]]:
    """Texts a second of each embedder in each round: round r embeds ``per_round`` texts from
    ``start + r * per_round``, disjoint from every other round's, with each embedder in turn, so
    that a change in the machine's load falls on all of them alike."""
    rates: dict[str, list[float]] = {name: [] for name in embedders}
    for r in range(rounds):
        chunk = list(texts[start + r * per_round : start + (r + 1) * per_round])
        for name, embedder in embedders.items():
            t0 = time.perf_counter()
            embedder.embed_documents(chunk)
            rates[name].append(len(chunk) / (time.perf_counter() - t0))
    return rates
