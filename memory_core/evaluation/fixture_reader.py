"""Reading an evaluation fixture: ``load_fixture`` parses and verifies a whole document and
writes nothing.

It checks the structure (``fixture_format``: unknown fields rejected), every body against its
SHA-256 and size, every manifest against its ``corpus_id``, every trace against its
``trace_hash``, every judgment against its case, and every unit hash against its text and span:
a candidate with a span whose resource the fixture holds under the candidate's resource hash
(the very body it was cut from) must hash, with the text cut from that body, to its
``unit_hash`` (``passages.cut_unit``, the check the case page makes). A candidate without a span
(recorded before Runs kept spans) or whose resource the corpus holds with another body or not at
all (edited or deleted after the index) has no text here to rehash. Ids against this home are the
import's check (``services/fixtures``), which then writes blobs, then one database transaction.
Each corpus must also be one a replay can reproduce: resources the scanner would index exactly so
(``resource_rules``: no hidden or over-long name, an extension it reads, a text body within its
size limit, no id that would have to be another's folder, in resource_id order).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from memory_core.domain.canonical import canonical_json, sha256_hex
from memory_core.domain.errors import InvalidRequest, MemoryCoreError
from memory_core.domain.evaluation_errors import FixtureHashMismatch, InvalidFixture
from memory_core.domain.model import ManifestEntry, validate_project_id
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
    Case,
    CaseRecord,
    Corpus,
    JudgmentSet,
    SourceTrace,
    parse_judgments,
    target_problems,
    validate_case_id,
)
from memory_core.evaluation.fixture_format import DOCUMENT, FORMAT, FORMAT_VERSION, FREE_FORM, UTF8, checked
from memory_core.evaluation.passages import cut_unit
from memory_core.retrieval.profile import MAX_QUERY_CHARS
from memory_core.runs.records import CandidateRecord


def _fail(place: str, message: str) -> InvalidFixture:
    return InvalidFixture(message, place=place)


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
    doc = checked(DOCUMENT, raw)
    bodies = _bodies(doc["bodies"])
    corpora = _corpora(doc["corpora"], bodies)
    used = {d for c in corpora.values() for d in c.digests()}
    for i, body in enumerate(doc["bodies"]):
        if body["sha256"] not in used:
            raise _fail(f"/bodies/{i}", "body is used by no corpus")
    records = _records(doc["cases"], corpora, _BodyTexts(bodies))
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
        entries: list[ManifestEntry] = c["resources"]
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


def _records(raw: list[dict[str, Any]], corpora: Mapping[str, Corpus], texts: _BodyTexts) -> tuple[CaseRecord, ...]:
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
        _unit_hashes(trace, corpus, texts, f"{place}/trace")
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


def _trace(trace: SourceTrace, place: str) -> SourceTrace:
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
        if (c.start is None) != (c.end is None):
            raise _fail(f"{place}/candidates/{k}", "a span has both start and end, or neither")
        if c.start is not None and c.end is not None and c.start > c.end:
            raise _fail(f"{place}/candidates/{k}/end", "the span ends before it starts")
    return trace


class _BodyTexts:
    """The fixture's bodies decoded once each, for the unit-hash checks of every case."""

    def __init__(self, bodies: Mapping[str, bytes]) -> None:
        self._bodies = bodies
        self._texts: dict[str, str] = {}

    def __call__(self, digest: str) -> str:
        text = self._texts.get(digest)
        if text is None:
            # A corpus's bodies are UTF-8 text (``_replayable`` checked them already).
            text = self._texts[digest] = self._bodies[digest].decode("utf-8")
        return text


def _unit_hashes(trace: SourceTrace, corpus: Corpus, texts: _BodyTexts, place: str) -> None:
    """Every candidate whose body the fixture holds is the unit its hash names (module docstring)."""
    frozen = corpus.hashes()
    for k, c in enumerate(trace.candidates):
        if c.start is None or c.end is None or frozen.get(c.resource_id) != c.resource_hash:
            continue
        text = texts(c.resource_hash)
        shown = c.unit_id[:200]  # a 1 MB id must not make a 1 MB message
        if c.end > len(text):
            raise InvalidFixture(
                f"unit {shown!r} ends at {c.end}, past the {len(text)} characters of resource {c.resource_id[:200]!r}",
                place=f"{place}/candidates/{k}/end",
                unit_id=shown,
            )
        if cut_unit(text, c.start, c.end, c.unit_hash) is None:
            raise FixtureHashMismatch(
                f"unit {shown!r}: its text at [{c.start}, {c.end}) of resource {c.resource_id[:200]!r} does not "
                "hash to its unit_hash",
                place=f"{place}/candidates/{k}/unit_hash",
                unit_id=shown,
            )


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
