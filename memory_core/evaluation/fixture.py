"""Evaluation fixtures: one self-contained, versioned JSON document (brief §7; JSON Schema in
``contracts/evaluation-fixture.schema.json``).

``{"format": "memory-core-evaluation-set", "format_version": 1, "exported_at", "metric_conventions",
"corpora": [{corpus_id, resources}], "bodies": [{sha256, byte_size, encoding, content}],
"cases": [{..., trace, trace_hash, judgment_version, judgments, judgment_history?}], "report"}``

Bodies are UTF-8 text when they decode as such, base64 otherwise. A resource's ``uri`` is its
``resource_id`` unless the export asks ``with_uris`` (a ``file:///`` URI names local folders);
the corpus id, the trace's ``effective_memory_hash`` and the trace hash are then those of that
portable manifest, so every check below holds for both forms. A case carries its original
provenance (an imported case records ``fixture_import`` here and keeps the original). The file is
canonical JSON (sorted keys, no spaces) plus a newline, so export → import → export is
byte-identical apart from ``exported_at``.

Import checks the structure (unknown fields rejected), every body against its SHA-256 and size,
every manifest against its ``corpus_id``, every trace against its ``trace_hash``, every judgment
against its case, and ids against this home (a different record under an existing id is a
conflict) before writing anything; then blobs, then one database transaction. Unit hashes are
format-checked only: a trace records no unit text to rehash. Each corpus must also be one a
replay can reproduce: resources the scanner would index exactly so (``resource_rules``: no hidden
or over-long name, an extension it reads, a text body within its size limit, no id that would
have to be another's folder, in resource_id order).
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from memory_core.domain.canonical import canonical_json, is_sha256_hex, is_utf8_text, sha256_hex
from memory_core.domain.errors import InvalidRequest, MemoryCoreError
from memory_core.domain.evaluation_errors import (
    FixtureHashMismatch,
    InvalidFixture,
)
from memory_core.domain.model import Layer, ManifestEntry, validate_project_id
from memory_core.domain.resource_rules import (
    DEFAULT_MAX_BYTES,
    media_type_for,
    path_collisions,
    resource_id_problem,
    text_problem,
    too_large,
)
from memory_core.evaluation.cases import (
    FIXTURE_IMPORT,
    PROVENANCES,
    Case,
    CaseRecord,
    Corpus,
    JudgmentSet,
    SourceTrace,
    parse_judgments,
    target_problems,
    validate_case_id,
)
from memory_core.retrieval.profile import MAX_QUERY_CHARS
from memory_core.runs.records import CandidateRecord

FORMAT = "memory-core-evaluation-set"
FORMAT_VERSION = 1
UTF8, BASE64 = "utf-8", "base64"
BLOB_WRITERS = 8
# SQLite stores integers as signed 64 bits: a larger one is an OverflowError at insert time, after
# the bodies were written. Every integer a fixture carries must fit.
MIN_STORED_INT, MAX_STORED_INT = -(2**63), 2**63 - 1
FREE_FORM = ("metric_conventions", "report")  # informative only: never stored, the report is recomputed


# -- export ---------------------------------------------------------------------------------------


def _body_dict(digest: str, data: bytes) -> dict[str, Any]:
    try:
        return {"sha256": digest, "byte_size": len(data), "encoding": UTF8, "content": data.decode("utf-8")}
    except UnicodeDecodeError:
        return {
            "sha256": digest,
            "byte_size": len(data),
            "encoding": BASE64,
            "content": base64.b64encode(data).decode(),
        }


def case_dict(record: CaseRecord, with_history: bool) -> dict[str, Any]:
    """A case as a fixture carries it (original provenance, current judgments, trace)."""
    c = record.case
    current = record.judgment_sets[-1] if record.judgment_sets else JudgmentSet(c.case_id, 0, (), None)
    out: dict[str, Any] = {
        "case_id": c.case_id,
        "project_id": c.project_id,
        "query": c.query,
        "corpus_id": c.corpus_id,
        "source_run_id": c.source_run_id,
        "provenance": c.original_provenance,
        "created_at": c.created_at,
        "judgment_version": c.judgment_version,
        "reviewed_version": c.reviewed_version,
        "judgments": [j.to_dict() for j in current.judgments],
        "judgments_created_at": current.created_at,
        "trace_hash": c.trace_hash,
        "trace": record.trace.to_dict(),
    }
    if with_history:
        out["judgment_history"] = [
            {"version": s.version, "created_at": s.created_at, "judgments": [j.to_dict() for j in s.judgments]}
            for s in record.judgment_sets
        ]
    return out


def portable_corpus(corpus: Corpus) -> Corpus:
    """The corpus with each ``uri`` (``file:///`` plus the source's absolute path) replaced by its
    resource id, so that no local directory name travels; ``corpus_id`` is that manifest's hash."""
    return Corpus.of(attrs.evolve(e, uri=e.resource_id) for e in corpus.resources)


def _portable_record(record: CaseRecord, corpus: Corpus) -> CaseRecord:
    """The record pointing at ``corpus`` (its portable copy): the case's corpus_id and the trace's
    effective_memory_hash name it, and the trace hash is recomputed, so every check holds."""
    trace = attrs.evolve(record.trace, effective_memory_hash=corpus.corpus_id)
    case = attrs.evolve(record.case, corpus_id=corpus.corpus_id, trace_hash=trace.trace_hash)
    return CaseRecord(case, trace, record.judgment_sets)


def dump(document: Mapping[str, Any]) -> bytes:
    """Canonical JSON plus a newline: the same document always gives the same bytes."""
    return canonical_json(document) + b"\n"


# -- structure checks -----------------------------------------------------------------------------
# Checkers take a value and return it checked. A problem raises ``_Bad``, which collects the path
# on its way up (no place string is built while everything is fine: fixtures hold ~10^5 objects).

Check = Callable[[Any], Any]


class _Bad(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message
        self.path: list[str | int] = []


def _escape(key: str | int) -> str:
    text = str(key)
    if not is_utf8_text(text):  # the place goes into an error message, which must stay printable
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text.replace("~", "~0").replace("/", "~1")


def _pointer(path: Sequence[str | int]) -> str:
    return "".join(f"/{_escape(k)}" for k in path)


def _at(bad: _Bad, key: str | int) -> _Bad:
    bad.path.append(key)
    return bad


def _fail(place: str, message: str) -> InvalidFixture:
    return InvalidFixture(message, place=place)


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise _Bad("must be a string")
    if not is_utf8_text(value):  # a lone surrogate: valid JSON, but neither storable nor hashable
        raise _Bad("must be valid Unicode text (it holds a lone surrogate)")
    return value


def _nonempty(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise _Bad("must be a non-empty string")
    return _str(value)


def _hex(value: Any) -> str:
    if not is_sha256_hex(value):
        raise _Bad("must be a lowercase hex SHA-256")
    return str(value)


def _count(value: Any) -> int:
    if type(value) is not int or not 0 <= value <= MAX_STORED_INT:
        raise _Bad(f"must be an integer from 0 to {MAX_STORED_INT}")
    return value


def _rank(value: Any) -> int:
    if type(value) is not int or not 1 <= value <= MAX_STORED_INT:
        raise _Bad(f"must be an integer from 1 to {MAX_STORED_INT}")
    return value


def _num(value: Any) -> float | int:
    # NaN and infinities reach here from a mapping (or ``1e400`` in bytes); canonical JSON, and so
    # every hash, refuses them.
    if type(value) is float and math.isfinite(value):
        return value
    if type(value) is int and MIN_STORED_INT <= value <= MAX_STORED_INT:
        return value
    raise _Bad("must be a finite number within 64 bits")


def _bool(value: Any) -> bool:
    if type(value) is not bool:
        raise _Bad("must be true or false")
    return value


def _any(value: Any) -> Any:
    return value


def _opt(check: Check) -> Check:
    return lambda value: None if value is None else check(value)


def _enum(*allowed: str) -> Check:
    def check(value: Any) -> str:
        if value not in allowed:
            raise _Bad(f"must be one of {', '.join(allowed)}")
        return str(value)

    return check


def _list(item: Check) -> Check:
    def check(value: Any) -> list[Any]:
        if not isinstance(value, list):
            raise _Bad("must be a list")
        out = []
        for i, v in enumerate(value):
            try:
                out.append(item(v))
            except _Bad as bad:
                bad.path.append(i)
                raise
        return out

    return check


def _map(item: Check) -> Check:
    def check(value: Any) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise _Bad("must be an object")
        out = {}
        for k, v in value.items():
            # A non-string key can only come in a mapping; a lone surrogate also in bytes ("\ud800").
            if not isinstance(k, str) or not is_utf8_text(k):
                raise _at(_Bad("keys must be valid Unicode strings"), str(k))
            try:
                out[k] = item(v)
            except _Bad as bad:
                bad.path.append(k)
                raise
        return out

    return check


def _obj(required: Mapping[str, Check], optional: Mapping[str, Check] | None = None) -> Check:
    fields = {**required, **(optional or {})}
    known = frozenset(fields)

    def check(value: Any) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise _Bad("must be an object")
        if not known.issuperset(value):
            raise _at(_Bad("unknown field"), next(k for k in value if k not in known))
        out = {}
        for key, sub in fields.items():
            if key not in value:
                if key in required:
                    raise _at(_Bad("missing"), key)
                continue
            try:
                out[key] = sub(value[key])
            except _Bad as bad:
                bad.path.append(key)
                raise
        return out

    return check


def _checked(check: Check, value: Any) -> Any:
    try:
        return check(value)
    except _Bad as bad:
        raise _fail(_pointer(bad.path[::-1]), bad.message) from None


# Each record's fields and their checks; tests/contracts/test_fixture_format.py keeps these equal to
# the attrs classes, the JSON Schema and the OpenAPI types.
RESOURCE_FIELDS: dict[str, Check] = {
    "ordinal": _count,
    "resource_id": _nonempty,
    "layer": _enum(*(layer.value for layer in Layer)),
    "uri": _str,
    "resource_hash": _hex,
    "byte_size": _count,
    "media_type": _nonempty,
}
_RESOURCE = _obj(RESOURCE_FIELDS)
_CORPUS = _obj({"corpus_id": _hex, "resources": _list(_RESOURCE)})
_BODY = _obj({"sha256": _hex, "byte_size": _count, "encoding": _enum(UTF8, BASE64), "content": _str})
CANDIDATE_FIELDS: dict[str, Check] = {
    "unit_id": _nonempty,
    "resource_id": _nonempty,
    "unit_hash": _hex,
    "resource_hash": _hex,
    "heading_path": _list(_str),
    "token_count": _count,
    "exact_rank": _opt(_rank),
    "exact_score": _opt(_num),
    "bm25_rank": _opt(_rank),
    "bm25_score": _opt(_num),
    "lexical_rank": _opt(_rank),
    "dense_rank": _opt(_rank),
    "dense_score": _opt(_num),
    "dense_similarity": _opt(_num),
    "rrf_rank": _rank,
    "rrf_score": _num,
    "rerank_rank": _opt(_rank),
    "rerank_score": _opt(_num),
    "final_rank": _rank,
    "final_score": _opt(_num),
    "disposition": _enum("selected", "excluded"),
    "exclusion_code": _opt(_nonempty),
    "delta_action": _opt(_enum("add", "replace", "reuse")),
}
_CANDIDATE = _obj(CANDIDATE_FIELDS)
TRACE_FIELDS: dict[str, Check] = {
    "run_id": _nonempty,
    "project_id": _nonempty,
    "query": _nonempty,
    "started_at": _str,
    "finished_at": _opt(_str),
    "state_fingerprint": _str,
    "token_budget": _count,
    "effective_memory_hash": _hex,
    "index_revision": _opt(_str),
    "revisions": _map(_str),
    "latency_ms": _map(_num),
    "warm": _bool,
    "fragment_count": _count,
    "token_count": _count,
    "candidates": _list(_CANDIDATE),
}
_TRACE = _obj(TRACE_FIELDS)
_JUDGMENT = _any  # parse_judgments checks each judgment and names the problem
_HISTORY = _obj({"version": _rank, "created_at": _opt(_str), "judgments": _list(_JUDGMENT)})
_CASE = _obj(
    {
        "case_id": _nonempty,
        "project_id": _nonempty,
        "query": _nonempty,
        "corpus_id": _hex,
        "source_run_id": _nonempty,
        "provenance": _enum(*PROVENANCES),
        "created_at": _str,
        "judgment_version": _count,
        "reviewed_version": _opt(_count),
        "judgments": _list(_JUDGMENT),
        "judgments_created_at": _opt(_str),
        "trace_hash": _hex,
        "trace": _TRACE,
    },
    {"judgment_history": _list(_HISTORY)},
)
_DOCUMENT = _obj(
    {
        "format": _str,
        "format_version": _any,
        "exported_at": _str,
        "metric_conventions": _map(_any),
        "corpora": _list(_CORPUS),
        "bodies": _list(_BODY),
        "cases": _list(_CASE),
        "report": _opt(_map(_any)),
    }
)


# -- loading --------------------------------------------------------------------------------------


@attrs.frozen
class EvaluationSet:
    """A verified fixture in memory: corpora, bodies by SHA-256, case records, the report."""

    exported_at: str
    corpora: Mapping[str, Corpus]
    bodies: Mapping[str, bytes]
    records: tuple[CaseRecord, ...]
    report: Mapping[str, Any] | None

    def files(self, corpus_id: str) -> dict[str, bytes]:
        """resource_id -> body of one corpus (what a replay indexes)."""
        return {e.resource_id: self.bodies[e.resource_hash] for e in self.corpora[corpus_id].resources}


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key!r}")
        out[key] = value
    return out


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def parse_document(data: bytes | str) -> dict[str, Any]:
    try:
        raw = json.loads(data, object_pairs_hook=_no_duplicate_keys, parse_constant=_reject_constant)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise _fail("", f"not a JSON document: {exc}") from None
    if not isinstance(raw, dict):
        raise _fail("", "must be a JSON object")
    return raw


def load_fixture(data: bytes | str | Mapping[str, Any]) -> EvaluationSet:
    """Parse and verify a fixture completely; writes nothing. InvalidFixture (or its
    FixtureHashMismatch) names the place of the first problem as a JSON pointer."""
    raw = dict(data) if isinstance(data, Mapping) else parse_document(data)
    if raw.get("format") != FORMAT:
        raise _fail("/format", f"must be {FORMAT!r}")
    if raw.get("format_version") != FORMAT_VERSION or type(raw.get("format_version")) is not int:
        raise _fail(
            "/format_version", f"unsupported format version {raw.get('format_version')!r} (this reads {FORMAT_VERSION})"
        )
    doc = _checked(_DOCUMENT, raw)
    bodies = _bodies(doc["bodies"])
    corpora = _corpora(doc["corpora"], bodies)
    used = {d for c in corpora.values() for d in c.digests()}
    for i, body in enumerate(doc["bodies"]):
        if body["sha256"] not in used:
            raise _fail(f"/bodies/{i}", "body is used by no corpus")
    records = _records(doc["cases"], corpora)
    for key in FREE_FORM:
        _require_json(raw[key], f"/{key}")
    return EvaluationSet(doc["exported_at"], corpora, bodies, records, doc["report"])


def _require_json(value: Any, place: str) -> None:
    """The field checks refuse NaN, non-string keys and lone surrogates everywhere they look; the
    free-form parts they skip must be canonical JSON too, or the set's report would fail later
    with an untyped error. Only these parts: the whole document costs a third of a load again."""
    try:
        canonical_json(value)
    except (TypeError, ValueError, RecursionError) as exc:  # UnicodeEncodeError is a ValueError
        raise _fail(place, f"not JSON: {exc}") from None


def _bodies(raw: list[dict[str, Any]]) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    for i, b in enumerate(raw):
        place = f"/bodies/{i}"
        if b["encoding"] == UTF8:
            try:
                data = b["content"].encode("utf-8")
            except UnicodeEncodeError:
                raise _fail(f"{place}/content", "is not valid UTF-8 text") from None
        else:
            try:
                data = base64.b64decode(b["content"], validate=True)
            except (binascii.Error, ValueError):
                raise _fail(f"{place}/content", "is not valid base64") from None
        actual = sha256_hex(data)
        if actual != b["sha256"]:
            raise FixtureHashMismatch(
                f"body hashes to {actual}, not {b['sha256']}", place=f"{place}/content", expected=b["sha256"]
            )
        if len(data) != b["byte_size"]:
            raise FixtureHashMismatch(f"body has {len(data)} bytes, not {b['byte_size']}", place=f"{place}/byte_size")
        if actual in out:
            raise _fail(f"{place}/sha256", "duplicate body")
        out[actual] = data
    return out


def _corpora(raw: list[dict[str, Any]], bodies: Mapping[str, bytes]) -> dict[str, Corpus]:
    out: dict[str, Corpus] = {}
    for i, c in enumerate(raw):
        place = f"/corpora/{i}"
        entries = [ManifestEntry.from_dict(r) for r in c["resources"]]
        # The store returns a corpus ordered by ordinal, and every Effective Memory manifest lists
        # ordinals 0..n-1 in order: any other listing would no longer hash to its corpus_id once stored.
        for k, e in enumerate(entries):
            if e.ordinal != k:
                raise _fail(f"{place}/resources/{k}/ordinal", f"must be {k}: ordinals are 0..n-1 in list order")
        resource_ids = [e.resource_id for e in entries]
        if len(set(resource_ids)) != len(resource_ids):
            raise _fail(f"{place}/resources", "duplicate resource_id")
        corpus = Corpus.of(entries)
        if corpus.corpus_id != c["corpus_id"]:
            raise FixtureHashMismatch(
                f"manifest hashes to {corpus.corpus_id}, not its corpus_id", place=f"{place}/corpus_id"
            )
        if corpus.corpus_id in out:
            raise _fail(f"{place}/corpus_id", "duplicate corpus")
        for k, e in enumerate(entries):
            data = bodies.get(e.resource_hash)
            if data is None:
                raise _fail(f"{place}/resources/{k}/resource_hash", f"no body for resource {e.resource_id!r}")
            if len(data) != e.byte_size:
                raise FixtureHashMismatch(
                    f"resource {e.resource_id!r} has {len(data)} bytes, not {e.byte_size}",
                    place=f"{place}/resources/{k}/byte_size",
                )
        _replayable(entries, bodies, place)
        out[corpus.corpus_id] = corpus
    return out


def _unreplayable(place: str, resource_id: str, field: str, reason: str) -> InvalidFixture:
    shown = resource_id[:200]  # a 1 MB id must not make a 1 MB message
    return InvalidFixture(
        f"resource {shown!r} {reason}; a replay could not index it as frozen",
        place=f"{place}/{field}",
        resource_id=shown,
        reason=reason,
    )


def _replayable(entries: Sequence[ManifestEntry], bodies: Mapping[str, bytes], place: str) -> None:
    """A replay writes each resource as a file and scans the folder again: every resource must be
    one the scanner yields exactly as frozen (same id, media type and body), or the replay would
    crash or index another memory. The scanner's own rules decide (``resource_rules``)."""
    for k, e in enumerate(entries):
        at = f"{place}/resources/{k}"
        problem = resource_id_problem(e.resource_id)
        if problem:
            raise _unreplayable(at, e.resource_id, "resource_id", problem)
        if k and entries[k - 1].resource_id >= e.resource_id:
            # An Effective Memory manifest is sorted by resource id; a scan sorts it again.
            raise _unreplayable(at, e.resource_id, "resource_id", "is out of resource_id order")
        expected = media_type_for(e.resource_id)
        if e.media_type != expected:
            raise _unreplayable(
                at, e.resource_id, "media_type", f"has media type {e.media_type!r}; its name makes it {expected!r}"
            )
        data = bodies[e.resource_hash]
        body_problem = too_large(len(data), DEFAULT_MAX_BYTES) if len(data) > DEFAULT_MAX_BYTES else text_problem(data)
        if body_problem:
            raise _unreplayable(at, e.resource_id, "resource_hash", f"has a body the scanner skips ({body_problem})")
    collisions = path_collisions(e.resource_id for e in entries)
    for k, e in enumerate(entries):
        if e.resource_id in collisions:
            parent = collisions[e.resource_id]
            reason = f"needs {parent[:200]!r} to be a folder, but that is a resource too"
            raise _unreplayable(f"{place}/resources/{k}", e.resource_id, "resource_id", reason)


def _records(raw: list[dict[str, Any]], corpora: Mapping[str, Corpus]) -> tuple[CaseRecord, ...]:
    records: list[CaseRecord] = []
    seen: set[str] = set()
    for i, c in enumerate(raw):
        place = f"/cases/{i}"
        try:
            case_id = validate_case_id(c["case_id"])
        except InvalidRequest as exc:
            raise _fail(f"{place}/case_id", exc.message) from None
        if case_id in seen:
            raise _fail(f"{place}/case_id", "duplicate case")
        seen.add(case_id)
        _activation_fields(c, place)
        corpus = corpora.get(c["corpus_id"])
        if corpus is None:
            raise _fail(f"{place}/corpus_id", "names no corpus of this fixture")
        trace = _trace(c["trace"], f"{place}/trace")
        trace_hash = trace.trace_hash
        if trace_hash != c["trace_hash"]:
            raise FixtureHashMismatch(f"trace hashes to {trace_hash}, not its trace_hash", place=f"{place}/trace")
        for key, expected in (
            ("source_run_id", trace.run_id),
            ("query", trace.query),
            ("project_id", trace.project_id),
        ):
            if c[key] != expected:
                raise _fail(f"{place}/{key}", "differs from the trace")
        if trace.effective_memory_hash != corpus.corpus_id:
            raise _fail(f"{place}/corpus_id", "differs from the trace's effective_memory_hash")
        sets = _judgment_sets(c, case_id, trace, corpus, place)
        version = c["judgment_version"]
        reviewed = c["reviewed_version"]
        if reviewed is not None and reviewed > version:
            raise _fail(f"{place}/reviewed_version", "is newer than judgment_version")
        case = Case(
            case_id=case_id,
            project_id=c["project_id"],
            query=c["query"],
            corpus_id=corpus.corpus_id,
            source_run_id=c["source_run_id"],
            provenance=FIXTURE_IMPORT,
            original_provenance=c["provenance"],
            judgment_version=version,
            reviewed_version=reviewed,
            created_at=c["created_at"],
            trace_hash=trace_hash,
        )
        records.append(CaseRecord(case, trace, sets))
    return tuple(records)


def _activation_fields(c: Mapping[str, Any], place: str) -> None:
    """A case comes from an activation: a query or project id no activation accepts is not one."""
    if len(c["query"]) > MAX_QUERY_CHARS:
        raise _fail(f"{place}/query", f"is longer than the {MAX_QUERY_CHARS} characters a query may have")
    try:
        validate_project_id(c["project_id"])
    except InvalidRequest as exc:
        raise _fail(f"{place}/project_id", exc.message) from None


def _trace(raw: dict[str, Any], place: str) -> SourceTrace:
    trace = SourceTrace.from_dict(raw)
    ranks = [c.final_rank for c in trace.candidates]
    if sorted(ranks) != list(range(1, len(ranks) + 1)):
        raise _fail(f"{place}/candidates", "final ranks must be 1..n, each once")
    units = [c.unit_id for c in trace.candidates]
    if len(set(units)) != len(units):
        raise _fail(f"{place}/candidates", "duplicate unit_id")
    for k, c in enumerate(trace.candidates):
        if not _disposition_ok(c):
            raise _fail(
                f"{place}/candidates/{k}/disposition", "a selected unit has a delta action, an excluded one a code"
            )
    return trace


def _disposition_ok(c: CandidateRecord) -> bool:
    if c.disposition == "selected":
        return c.delta_action is not None and c.exclusion_code is None
    return c.exclusion_code is not None and c.delta_action is None


def _judgments(raw: list[Any], place: str, trace: SourceTrace, corpus: Corpus) -> tuple[Any, ...]:
    try:
        parsed = parse_judgments(raw)
    except MemoryCoreError as exc:
        problems = exc.details.get("problems") or [{}]
        first = problems[0]
        where = f"{place}/{first['index']}" if first.get("index") is not None else place
        raise _fail(where, f"{first.get('field')}: {first.get('reason')}") from None
    problems = target_problems(parsed, trace, corpus)
    if problems:
        first = problems[0]
        raise _fail(f"{place}/{first['index']}/{first['field']}", str(first["reason"]))
    return parsed


def _judgment_sets(
    c: dict[str, Any], case_id: str, trace: SourceTrace, corpus: Corpus, place: str
) -> tuple[JudgmentSet, ...]:
    version = c["judgment_version"]
    current = _judgments(c["judgments"], f"{place}/judgments", trace, corpus)
    if version == 0:
        if current or c.get("judgment_history"):
            raise _fail(f"{place}/judgments", "a case at judgment version 0 has no judgments")
        return ()
    latest = JudgmentSet(case_id, version, current, c["judgments_created_at"])
    history = c.get("judgment_history")
    if history is None:
        return (latest,)
    sets = []
    for k, h in enumerate(history):
        judgments = _judgments(h["judgments"], f"{place}/judgment_history/{k}/judgments", trace, corpus)
        sets.append(JudgmentSet(case_id, h["version"], judgments, h["created_at"]))
    versions = [s.version for s in sets]
    if versions != sorted(set(versions)) or not sets or sets[-1] != latest:
        raise _fail(f"{place}/judgment_history", "versions must ascend and end with the current judgments")
    return tuple(sets)


# -- import ---------------------------------------------------------------------------------------




@attrs.frozen
class ImportResult:
    cases_added: tuple[str, ...]
    cases_unchanged: tuple[str, ...]
    corpora_added: int
    blobs_written: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "cases_added": list(self.cases_added),
            "cases_unchanged": list(self.cases_unchanged),
            "corpora_added": self.corpora_added,
            "blobs_written": self.blobs_written,
        }
