"""Deterministic benchmark corpora: Cranfield as markdown, and synthetic memories of a target size.

A synthetic memory is ``units / sections`` markdown files, each an H1 title then ``sections``
H2 sections of a few Cranfield sentences (a seeded word list when Cranfield is absent). Every
section stays well under the chunker's 256-token limit and the bare H1 merges into its first
section, so the chunker yields exactly one unit per section: ``units`` units in all.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import attrs

from benchmarks.common import CRANFIELD

SECTIONS_PER_FILE = 10
# ~4 characters a MiniLM token on this text: 700 characters keeps a section near 180 tokens.
MAX_SECTION_CHARS = 700
_FALLBACK_TEXT = (
    "boundary layer shock wave pressure distribution wing flutter heat transfer nozzle flow "
    "supersonic subsonic laminar turbulent viscous inviscid buckling shell plate panel stress "
    "temperature velocity cone cylinder jet mach number reynolds skin friction separation "
    "stagnation point slender body lift drag moment theory experiment solution equation"
)
_FALLBACK_WORDS = _FALLBACK_TEXT.split()


@attrs.frozen
class SyntheticMemory:
    folder: Path
    files: tuple[Path, ...]
    units: int  # expected chunker units: one per section

    def edit_one(self) -> Path:
        """Append a sentence to the first section of the middle file: a realistic small edit that
        shifts the spans, so the file's later units change hash too."""
        path = self.files[len(self.files) // 2]
        text = path.read_text(encoding="utf-8")
        head, sep, rest = text.partition("\n\n## ")
        path.write_text(head.rstrip("\n") + " an edited sentence about wing flutter .\n" + sep + rest, "utf-8")
        return path


def _cranfield_docs() -> list[dict[str, str]]:
    path = CRANFIELD / "corpus.jsonl"
    if not path.exists():
        return []
    with path.open(encoding="utf-8") as lines:
        return [json.loads(line) for line in lines]


def write_cranfield_markdown(target: Path) -> Path:
    """One markdown resource per Cranfield document (as ``tests/conftest.py`` writes them)."""
    target.mkdir(parents=True, exist_ok=True)
    for doc in _cranfield_docs():
        title = " ".join(doc["title"].split()) or f"Document {doc['_id']}"
        (target / f"{doc['_id']}.md").write_text(f"# {title}\n\n{doc['text'].strip()}\n", encoding="utf-8")
    return target


def cranfield_queries(limit: int | None = None) -> list[str]:
    path = CRANFIELD / "queries.jsonl"
    if not path.exists():
        rng = random.Random(7)
        return [" ".join(rng.choices(_FALLBACK_WORDS, k=8)) for _ in range(limit or 100)]
    with path.open(encoding="utf-8") as lines:
        queries = [" ".join(json.loads(line)["text"].split()) for line in lines]
    return queries[:limit] if limit is not None else queries


def _sentence_pool(rng: random.Random) -> tuple[list[str], list[str]]:
    """(sentences, titles): Cranfield's, or seeded word salad when the data is missing."""
    docs = _cranfield_docs()
    if not docs:
        sentences = [" ".join(rng.choices(_FALLBACK_WORDS, k=rng.randint(8, 24))) + " ." for _ in range(5000)]
        titles = [" ".join(rng.choices(_FALLBACK_WORDS, k=5)) for _ in range(1000)]
        return sentences, titles
    sentences = []
    for doc in docs:
        for part in doc["text"].split(" . "):
            words = part.strip(" .").split()
            if len(words) >= 4:
                sentences.append(" ".join(words[:100]) + " .")
    titles = [" ".join(doc["title"].strip(" .").split()[:8]) for doc in docs if doc["title"].strip(" .")]
    return sentences, titles


def _section_body(rng: random.Random, sentences: list[str]) -> str:
    body: list[str] = []
    size = 0
    for _ in range(rng.randint(2, 5)):
        sentence = rng.choice(sentences)
        if body and size + len(sentence) > MAX_SECTION_CHARS:
            break
        body.append(sentence[:MAX_SECTION_CHARS])
        size += len(sentence) + 1
    return " ".join(body)


def write_synthetic_memory(
    target: Path, units: int, *, sections_per_file: int = SECTIONS_PER_FILE, seed: int = 0
) -> SyntheticMemory:
    """Write ``units`` sections (one unit each) into ``target``; same inputs, same bytes."""
    if units < 1 or sections_per_file < 1:
        raise ValueError("units and sections_per_file must be positive")
    rng = random.Random(seed)
    sentences, titles = _sentence_pool(rng)
    target.mkdir(parents=True, exist_ok=True)
    files: list[Path] = []
    remaining = units
    number = 0
    while remaining > 0:
        count = min(sections_per_file, remaining)
        number += 1
        parts = [f"# Note {number:05d}: {rng.choice(titles)}"]
        for s in range(1, count + 1):
            parts.append(f"## {s}. {rng.choice(titles)}\n\n{_section_body(rng, sentences)}")
        path = target / f"note-{number:05d}.md"
        path.write_text("\n\n".join(parts) + "\n", encoding="utf-8")
        files.append(path)
        remaining -= count
    return SyntheticMemory(target, tuple(files), units)


def count_units(folder: Path) -> int:
    """Units the real chunker makes of a folder's markdown files (to check the generator)."""
    from memory_core.adapters.models.minilm import MiniLMTokenCounter
    from memory_core.retrieval.chunking import MarkdownChunker

    chunker = MarkdownChunker(MiniLMTokenCounter())
    total = 0
    for path in sorted(folder.glob("*.md")):
        total += len(chunker.chunk(path.name, "h", path.read_text(encoding="utf-8"), "text/markdown"))
    return total
