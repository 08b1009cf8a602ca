"""BEIR-layout collections as Evaluation Sets (``memcore eval import-beir``).

A BEIR folder holds ``corpus.jsonl`` (``_id``, ``title``, ``text``), ``queries.jsonl`` (``_id``,
``text``) and ``qrels/<split>.tsv`` (``query-id``, ``corpus-id``, ``score``, with a header). The
import reads and checks all of it first (a malformed line or an unknown id is an
``InvalidBeirCollection`` naming file and line; nothing is written), then:

1. writes one markdown resource per document, ``<doc id>.md`` = ``# <title>\\n\\n<text>`` (the
   title's whitespace collapsed; the text alone when the title is empty; the same files as
   ``benchmarks/cranfield_quality.py``), as the only source of the project, and indexes it (a
   no-op when unchanged);
2. runs every query of the split through the real pipeline (one Run each) and freezes each Run as
   a case with provenance ``beir_import`` and resource judgments from the qrels (version 1).

Case ids are ``beir-<project>-<query id>``, so an interrupted import resumes where it stopped:
existing cases are kept, the rest are made.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from memory_core.domain.canonical import is_utf8_text
from memory_core.domain.evaluation_errors import InvalidBeirCollection
from memory_core.evaluation.cases import CASE_ID_RE
from memory_core.evaluation.metrics import MAX_RELEVANCE
from memory_core.retrieval.profile import MAX_QUERY_CHARS

SUFFIX = ".md"
MAX_DOC_ID_CHARS = 200


# -- workspaces: where the pipeline runs ----------------------------------------------------------


@attrs.frozen
class Prepared:
    """What a Workspace indexed: its Effective Memory (resource_id -> resource_hash) and the
    scan's warnings (why a file was left out)."""

    resources: Mapping[str, str]
    warnings: tuple[str, ...] = ()


# -- reading a collection -------------------------------------------------------------------------


@attrs.frozen
class BeirDocument:
    doc_id: str
    title: str
    text: str

    @property
    def resource_id(self) -> str:
        return resource_id_for(self.doc_id)

    def markdown(self) -> bytes:
        title = " ".join(self.title.split())
        return (f"# {title}\n\n{self.text}" if title else self.text).encode("utf-8")


def resource_id_for(doc_id: str) -> str:
    return f"{doc_id}{SUFFIX}"


def _doc_id_problem(doc_id: str) -> str | None:
    if not doc_id or len(doc_id) > MAX_DOC_ID_CHARS:
        return f"must be 1-{MAX_DOC_ID_CHARS} characters"
    if doc_id.startswith(".") or any(ch in doc_id for ch in "/\\\0") or not doc_id.isprintable():
        return "must be a plain file name (no '/', '\\', leading '.' or control characters)"
    return None


@attrs.frozen
class BeirCollection:
    documents: tuple[BeirDocument, ...]
    queries: Mapping[str, str]  # in queries.jsonl order
    qrels: Mapping[str, Mapping[str, int]]  # query id -> doc id -> relevance
    split: str
    # The split's judged queries longer than an activation takes (MAX_QUERY_CHARS), in file order:
    # never a case, their judgments left out, named in the import's result (CISI's query 90 is
    # 2,023 characters).
    too_long: tuple[str, ...] = ()

    @classmethod
    def read(cls, folder: str | Path, split: str = "test") -> BeirCollection:
        root = Path(folder)
        if not split or not all(ch.isalnum() or ch in "-_." for ch in split) or split.startswith("."):
            raise InvalidBeirCollection(f"invalid split name {split!r}", place=str(root))
        documents = _read_corpus(root / "corpus.jsonl")
        queries, too_long = _read_queries(root / "queries.jsonl")
        doc_ids = {d.doc_id for d in documents}
        qrels, judged_too_long = _read_qrels(root / "qrels" / f"{split}.tsv", set(queries), doc_ids, set(too_long))
        return cls(documents, queries, qrels, split, tuple(q for q in too_long if q in judged_too_long))

    def files(self) -> dict[str, bytes]:
        return {d.resource_id: d.markdown() for d in self.documents}

    def split_queries(self) -> list[tuple[str, str]]:
        """(query id, text) of the queries the split judges, in queries.jsonl order."""
        return [(q, text) for q, text in self.queries.items() if q in self.qrels]


def _lines(path: Path) -> list[tuple[int, str]]:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise InvalidBeirCollection("file is missing", place=str(path)) from None
    except OSError as exc:
        raise InvalidBeirCollection(f"cannot read: {exc.strerror or exc}", place=str(path)) from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InvalidBeirCollection(f"not UTF-8 (byte {exc.start})", place=str(path)) from None
    return [(n, line) for n, line in enumerate(text.splitlines(), start=1) if line.strip()]


def _json_lines(path: Path, fields: Mapping[str, bool]) -> list[tuple[str, dict[str, Any]]]:
    """(place, object) per line; ``fields``: name -> required (each must be a string)."""
    out = []
    for n, line in _lines(path):
        place = f"{path}:{n}"
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError) as exc:  # RecursionError: a line nested too deep
            raise InvalidBeirCollection(f"malformed JSON line: {exc}", place=place) from None
        if not isinstance(obj, dict):
            raise InvalidBeirCollection("a line must be a JSON object", place=place)
        for name, required in fields.items():
            if name not in obj:
                if required:
                    raise InvalidBeirCollection(f"missing field {name!r}", place=place)
                continue
            if not isinstance(obj[name], str):
                raise InvalidBeirCollection(f"field {name!r} must be a string", place=place)
            if not is_utf8_text(obj[name]):  # "\ud800" is valid JSON, but no file or row can hold it
                raise InvalidBeirCollection(f"field {name!r} holds a lone surrogate, not UTF-8 text", place=place)
        out.append((place, obj))
    return out


def _read_corpus(path: Path) -> tuple[BeirDocument, ...]:
    docs: dict[str, BeirDocument] = {}
    for place, obj in _json_lines(path, {"_id": True, "title": False, "text": True}):
        doc_id = obj["_id"]
        problem = _doc_id_problem(doc_id)
        if problem:
            raise InvalidBeirCollection(f"document id {doc_id!r} {problem}", place=place)
        if doc_id in docs:
            raise InvalidBeirCollection(f"duplicate document id {doc_id!r}", place=place)
        docs[doc_id] = BeirDocument(doc_id, obj.get("title", ""), obj["text"])
    if not docs:
        raise InvalidBeirCollection("no documents", place=str(path))
    return tuple(docs.values())


def _read_queries(path: Path) -> tuple[dict[str, str], list[str]]:
    """The queries by id, and the ids of those too long for an activation (left out, not an error)."""
    queries: dict[str, str] = {}
    too_long: list[str] = []
    for place, obj in _json_lines(path, {"_id": True, "text": True}):
        qid, text = obj["_id"], obj["text"].strip()
        if not qid:
            raise InvalidBeirCollection("empty query id", place=place)
        if qid in queries or qid in too_long:
            raise InvalidBeirCollection(f"duplicate query id {qid!r}", place=place)
        if not text:
            raise InvalidBeirCollection(f"query text must be 1-{MAX_QUERY_CHARS} characters", place=place)
        if len(text) > MAX_QUERY_CHARS:
            too_long.append(qid)
            continue
        queries[qid] = text
    return queries, too_long


def _read_qrels(
    path: Path, query_ids: set[str], doc_ids: set[str], left_out: set[str]
) -> tuple[dict[str, dict[str, int]], set[str]]:
    """The judgments by query and document, checked row by row, and which of the ``left_out``
    queries (too long) the split judges: their rows are checked but not kept."""
    qrels: dict[str, dict[str, int]] = {}
    left_out_rows: dict[str, dict[str, int]] = {}  # checked as the others, never kept
    rows = _lines(path)
    if not rows:
        raise InvalidBeirCollection("no judgments", place=str(path))
    header_n, header = rows[0]
    if [h.strip() for h in header.split("\t")] != ["query-id", "corpus-id", "score"]:
        raise InvalidBeirCollection("header must be 'query-id<TAB>corpus-id<TAB>score'", place=f"{path}:{header_n}")
    for n, line in rows[1:]:
        place = f"{path}:{n}"
        fields = next(csv.reader(io.StringIO(line), delimiter="\t"))
        if len(fields) != 3:
            raise InvalidBeirCollection(f"expected 3 tab-separated fields, got {len(fields)}", place=place)
        qid, doc_id, score = (f.strip() for f in fields)
        if qid not in query_ids and qid not in left_out:
            raise InvalidBeirCollection(f"unknown query id {qid!r}", place=place)
        if doc_id not in doc_ids:
            raise InvalidBeirCollection(f"unknown corpus id {doc_id!r}", place=place)
        try:
            relevance = int(score)
        except ValueError:
            raise InvalidBeirCollection(f"score {score!r} is not an integer", place=place) from None
        if not 0 <= relevance <= MAX_RELEVANCE:
            raise InvalidBeirCollection(f"score {relevance} is outside 0-{MAX_RELEVANCE}", place=place)
        judged = (left_out_rows if qid in left_out else qrels).setdefault(qid, {})
        if doc_id in judged:
            raise InvalidBeirCollection(f"duplicate judgment of {doc_id!r} for query {qid!r}", place=place)
        judged[doc_id] = relevance
    if not qrels:
        raise InvalidBeirCollection(f"no judged query an activation takes (1-{MAX_QUERY_CHARS} characters)",
                                    place=str(path))  # fmt: skip
    return qrels, set(left_out_rows)


# -- importing ------------------------------------------------------------------------------------


def beir_case_id(project_id: str, query_id: str) -> str:
    candidate = f"beir-{project_id}-{query_id}"
    if CASE_ID_RE.match(candidate):
        return candidate
    return f"beir-{project_id}-{hashlib.sha256(query_id.encode()).hexdigest()[:16]}"


__all__ = [
    "BeirCollection",
    "BeirDocument",
    "Prepared",
    "beir_case_id",
    "resource_id_for",
]
