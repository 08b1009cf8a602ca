"""The composition root: wires adapters into the engine. Every part is an overridable argument.

Heavy libraries (torch, transformers, the JVM) load lazily inside the adapters, so building an
engine is cheap and commands that never rank or embed never pay for them.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import attrs

from memory_core.adapters.files.evaluation_sources import FolderSources
from memory_core.adapters.files.filesystem_sources import source_root
from memory_core.adapters.files.watcher import (
    DEBOUNCE_MS,
    STEP_MS,
    HealthError,
    ProjectHealth,
    ReindexRecord,
    WatchedMemory,
    Watcher,
    parse_progress,
)
from memory_core.adapters.system.home import DIR_MODE, FILE_MODE, HomeLayout, prepare_home, resolve_home
from memory_core.domain.models import ModelOverrides, ModelSpec
from memory_core.ports import (
    BlobStore,
    Catalog,
    Chunker,
    Embedder,
    EmbeddingCache,
    GenerationStore,
    LexicalIndexFactory,
    LiveMemory,
    ManifestStore,
    Reranker,
    SourceScanner,
    VectorIndexFactory,
)
from memory_core.ports.evaluation import EvaluationStore
from memory_core.ports.learning import RankLearner
from memory_core.ports.profiles import ProfileStore
from memory_core.ports.runs import RunRecorder, RunStore
from memory_core.retrieval.profile import RankingProfile
from memory_core.retrieval.rerankers import ConvexFusionReranker
from memory_core.services.engine import Engine
from memory_core.services.evaluation import EvaluationService
from memory_core.services.indexing import Indexer
from memory_core.services.models import ModelRegistry


def utc_now() -> str:
    """One timestamp format everywhere: Runs are listed and filtered by comparing these strings."""
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def limit_blas_threads() -> None:
    """OpenBLAS threads spin after a call and starve torch on two cores (brief §11)."""
    try:
        from threadpoolctl import threadpool_limits

        threadpool_limits(1, user_api="blas")
    except Exception:  # threadpoolctl is an optimisation, never a reason to fail
        pass


def bootstrap(
    home: str | os.PathLike[str] | None = None,
    *,
    catalog: Catalog | None = None,
    manifests: ManifestStore | None = None,
    scanner: SourceScanner | None = None,
    blobs: BlobStore | None = None,
    generations: GenerationStore | None = None,
    chunker: Chunker | None = None,
    embedder: Embedder | None = None,
    embedding_cache: EmbeddingCache | None = None,
    lexical: LexicalIndexFactory | None = None,
    vectors: VectorIndexFactory | None = None,
    reranker: Reranker | None = None,
    recorder: RunRecorder | None = None,
    history: RunStore | None = None,
    evaluation: EvaluationService | None = None,
    profile: RankingProfile | None = None,
    live_memory: LiveMemory | None = None,
    profile_store: ProfileStore | None = None,
    learner: RankLearner | None = None,
    models: ModelRegistry | None = None,
    recover: bool = True,
    sync_history: bool = False,
    inference: str | None = None,
) -> Engine:
    """The engine over ``home`` with the real adapters; any part may be passed in instead.

    ``inference``: the MiniLM inference path of the default embedder (``adapters/models/inference.py``),
    else ``$MEMORY_CORE_INFERENCE``, else ONNX Runtime int8; a name it does not know is an
    InvalidRequest before anything is opened.

    ``sync_history``: commit each Run's trace before ``activate`` returns (an answered Run is
    ``succeeded`` even if the process dies the next instant), instead of right behind the
    answer (the default: about 10% less activation latency at 10,000 units; a crash in that
    millisecond leaves the Run to recovery, ``failed`` with ``retrieval_interrupted``).
    """
    from memory_core.adapters.models.inference import chosen_inference
    from memory_core.adapters.system.home import HomeLayout

    choice = chosen_inference(inference) if embedder is None else None
    layout = HomeLayout.prepared(home)
    if catalog is None:
        from memory_core.adapters.sqlite.catalog import SqliteCatalog
        from memory_core.adapters.sqlite.database import open_database

        catalog = SqliteCatalog(open_database(layout.db_path))
    if manifests is None:
        manifests = catalog
    if scanner is None:
        from memory_core.adapters.files.filesystem_sources import FileHashCache, FileSystemScanner

        # The catalogs (SqliteCatalog, InMemoryCatalog) are the scanner's file hash cache; the
        # Catalog port leaves it out, since its FileStamp belongs to the files adapter.
        scanner = FileSystemScanner(hash_cache=cast(FileHashCache, catalog))
        if live_memory is None:
            from memory_core.adapters.files.live_memory import FileSystemLiveMemory

            # Real directories: a stat walk proves most reads unchanged without a scan.
            live_memory = FileSystemLiveMemory(scanner)
    if blobs is None:
        from memory_core.adapters.files.blob_store import FileBlobStore

        blobs = FileBlobStore(layout.blobs_dir)
    if generations is None:
        from memory_core.adapters.files.generation_store import FileGenerationStore
        from memory_core.adapters.sqlite.catalog import SqliteCatalog, StorageLocations

        # Where each project's Local Storage is, as the catalog records it (project storage
        # move); on a connection of its own, since the daemon's re-index worker asks too.
        locate = StorageLocations.beside(catalog) if isinstance(catalog, SqliteCatalog) else catalog.storage_location
        # ``home``: no project's Local Storage may be moved into the home's own folders.
        generations = FileGenerationStore(layout.projects_dir, locate=locate, home=layout)
    if embedder is None:
        from memory_core.adapters.models.inference import minilm_embedder

        # By default ONNX Runtime int8: nDCG@10 within noise of fp32's on both collections, at about
        # 2.5x its indexing throughput (docs/performance.md, "MiniLM inference paths").
        assert choice is not None
        embedder = minilm_embedder(choice, layout.models_dir)
    if chunker is None:
        from memory_core.adapters.models.minilm import MiniLMTokenCounter
        from memory_core.retrieval.chunking import MarkdownChunker

        chunker = MarkdownChunker(MiniLMTokenCounter())
    if embedding_cache is None:
        from memory_core.adapters.sqlite.embedding_cache import SqliteEmbeddingCache

        embedding_cache = SqliteEmbeddingCache(layout.projects_dir / "embedding-cache.db")
    if lexical is None:
        from memory_core.adapters.search.lucene_index import LuceneIndexFactory

        lexical = LuceneIndexFactory()
    if vectors is None:
        from memory_core.adapters.search.usearch_index import UsearchIndexFactory

        vectors = UsearchIndexFactory()
    if history is None:
        from memory_core.adapters.files.blob_store import FileBlobStore
        from memory_core.adapters.sqlite.database import open_database
        from memory_core.adapters.sqlite.runs import SqliteRunStore

        # Its own connection: the run store serialises its transactions, the catalog does not.
        history = SqliteRunStore(
            open_database(layout.db_path), FileBlobStore(layout.blobs_dir), write_behind=not sync_history
        )
    if evaluation is None:
        from memory_core.adapters.files.blob_store import FileBlobStore
        from memory_core.adapters.sqlite.database import open_database
        from memory_core.adapters.sqlite.evaluation import SqliteEvaluationStore

        evaluation = EvaluationService(
            SqliteEvaluationStore(open_database(layout.db_path)), history, FileBlobStore(layout.blobs_dir), now=utc_now
        )
    if profile_store is None:
        from memory_core.adapters.sqlite.database import open_database
        from memory_core.adapters.sqlite.profiles import SqliteProfileStore

        profile_store = SqliteProfileStore(open_database(layout.db_path), now=utc_now)
    if models is None:
        from memory_core.adapters.sqlite.database import open_database
        from memory_core.adapters.sqlite.models import SqliteModelStore

        # Its own connection: every thread resolving a project's embedder goes through its lock.
        models = ModelRegistry(SqliteModelStore(open_database(layout.db_path)), LocalModels(layout.models_dir),
                               embedder, utc_now)  # fmt: skip
    if recover:
        history.recover_interrupted()  # Runs left `running` by a process that is gone
    limit_blas_threads()
    return assemble(
        catalog=catalog,
        manifests=manifests,
        scanner=scanner,
        blobs=blobs,
        generations=generations,
        chunker=chunker,
        embedder=embedder,
        embedding_cache=embedding_cache,
        lexical=lexical,
        vectors=vectors,
        reranker=reranker or ConvexFusionReranker(),
        profile=profile or RankingProfile(),
        recorder=recorder or history,
        history=history,
        evaluation=evaluation,
        live_memory=live_memory,
        profile_store=profile_store,
        learner=learner or _default_learner(),
        models=models,
    )


@attrs.frozen
class LocalModels:
    """The ModelLoader port over ``adapters/models`` (ONNX Runtime): a directory's spec, and its
    embedder or cross-encoder, whose ONNX graph is built from the weights once into ``cache_dir``.
    Their modules load on first use (onnx and the tokenizer are not paid for otherwise)."""

    cache_dir: Path

    def read(self, path: str, overrides: ModelOverrides) -> ModelSpec:
        from memory_core.adapters.models.model_dir import read_model_dir

        return read_model_dir(Path(path), overrides)

    def embedder(self, spec: ModelSpec) -> Embedder:
        from memory_core.adapters.models.encoder_onnx import open_embedder

        return open_embedder(spec, self.cache_dir)

    def reranker(self, spec: ModelSpec, batch: int, max_tokens: int | None) -> Reranker:
        from memory_core.adapters.models.encoder_onnx import open_cross_encoder

        return open_cross_encoder(spec, self.cache_dir, batch=batch, max_tokens=max_tokens)


def _default_learner() -> RankLearner:
    """LightGBM's lambdarank (``adapters/learning``); it imports LightGBM only when used."""
    from memory_core.adapters.learning.lightgbm_ranker import LightGBMRanker

    return LightGBMRanker()


def assemble(
    *,
    catalog: Catalog,
    manifests: ManifestStore,
    scanner: SourceScanner,
    blobs: BlobStore,
    generations: GenerationStore,
    chunker: Chunker,
    embedder: Embedder,
    embedding_cache: EmbeddingCache,
    lexical: LexicalIndexFactory,
    vectors: VectorIndexFactory,
    reranker: Reranker,
    profile: RankingProfile,
    recorder: RunRecorder,
    history: RunStore,
    evaluation: EvaluationService,
    live_memory: LiveMemory | None = None,
    profile_store: ProfileStore | None = None,
    learner: RankLearner | None = None,
    models: ModelRegistry | None = None,
) -> Engine:
    """The one place the indexer and the engine are put together from their parts.

    ``live_memory`` defaults to scanning the sources through ``scanner`` (its hash cache makes
    that a walk plus a stat per file); the daemon passes its watcher-backed one.
    """
    if live_memory is None:
        from memory_core.services.live_memory import ScanningLiveMemory

        live_memory = ScanningLiveMemory(scanner)
    indexer = Indexer(
        catalog=catalog,
        manifests=manifests,
        scanner=scanner,
        blobs=blobs,
        generations=generations,
        chunker=chunker,
        embedder=embedder,
        embedding_cache=embedding_cache,
        lexical=lexical,
        vectors=vectors,
        now=utc_now,
        corpus=history,
        embedder_for=models.embedder_for if models is not None else None,
    )
    return Engine(
        catalog=catalog,
        manifests=manifests,
        generations=generations,
        indexer=indexer,
        embedder=embedder,
        lexical=lexical,
        vectors=vectors,
        reranker=reranker,
        now=utc_now,
        profile=profile,
        recorder=recorder,
        history=history,
        evaluation=evaluation,
        live_memory=live_memory,
        profile_store=profile_store,
        learner=learner,
        models=models,
    )


def bootstrap_in_memory(**overrides: Any) -> Engine:
    """An engine wired to the in-memory adapters: no disk, no JVM, no model. For fast tests and
    for embedding memory-core where persistence is not wanted; any part can still be overridden."""
    from memory_core.adapters.in_memory.evaluation import InMemoryEvaluationStore
    from memory_core.adapters.in_memory.lexical import InMemoryLexicalIndexFactory
    from memory_core.adapters.in_memory.runs import InMemoryRunStore
    from memory_core.adapters.in_memory.storage import (
        InMemoryBlobStore,
        InMemoryCatalog,
        InMemoryGenerationStore,
        InMemoryScanner,
    )
    from memory_core.adapters.in_memory.vectors import (
        HashingEmbedder,
        InMemoryEmbeddingCache,
        InMemoryVectorIndexFactory,
        WhitespaceTokenCounter,
    )
    from memory_core.retrieval.chunking import MarkdownChunker

    # Each default is held by its port's type, so mypy checks the in-memory adapters against
    # the ports; ``overrides`` (any type) replace them below.
    new_catalog: Callable[[], Catalog] = InMemoryCatalog
    new_embedder: Callable[[], Embedder] = HashingEmbedder
    catalog = overrides.pop("catalog", None) or new_catalog()
    embedder = overrides.pop("embedder", None) or new_embedder()
    scanner: SourceScanner = InMemoryScanner()
    blobs: BlobStore = InMemoryBlobStore()
    generations: GenerationStore = InMemoryGenerationStore(locate=catalog.storage_location)
    chunker: Chunker = MarkdownChunker(WhitespaceTokenCounter(), max_tokens=64)
    embedding_cache: EmbeddingCache = InMemoryEmbeddingCache()
    lexical: LexicalIndexFactory = InMemoryLexicalIndexFactory()
    vectors: VectorIndexFactory = InMemoryVectorIndexFactory()
    reranker: Reranker = ConvexFusionReranker()
    parts: dict[str, Any] = {
        "catalog": catalog,
        "manifests": catalog,
        "scanner": scanner,
        "blobs": blobs,
        "generations": generations,
        "chunker": chunker,
        "embedder": embedder,
        "embedding_cache": embedding_cache,
        "lexical": lexical,
        "vectors": vectors,
        "reranker": reranker,
        "profile": RankingProfile(),
        "learner": _default_learner(),
    }
    parts.update(overrides)
    evaluation_store: EvaluationStore = InMemoryEvaluationStore()
    if parts.get("history") is None:
        default_history: RunStore = InMemoryRunStore(
            parts["blobs"], catalog=parts["catalog"], corpus_references=evaluation_store.referenced_blobs
        )
        parts["history"] = default_history
    for factory in (parts["lexical"], parts["vectors"]):
        if hasattr(factory, "relocate") and hasattr(parts["generations"], "on_publish"):
            parts["generations"].on_publish.append(factory.relocate)
    history = parts.pop("history")
    parts["recorder"] = parts.get("recorder") or history
    evaluation = EvaluationService(evaluation_store, history, parts["blobs"], now=utc_now)
    if parts.get("profile_store") is None:
        from memory_core.adapters.in_memory.profiles import InMemoryProfileStore

        default_profiles: ProfileStore = InMemoryProfileStore(parts["catalog"].get_project, now=utc_now)
        parts["profile_store"] = default_profiles
    if "models" not in parts:
        from memory_core.adapters.in_memory.models import InMemoryModelLoader, InMemoryModelStore

        parts["models"] = ModelRegistry(InMemoryModelStore(parts["catalog"].get_project), InMemoryModelLoader(),
                                        parts["embedder"], utc_now)  # fmt: skip
    return assemble(history=history, evaluation=evaluation, **parts)


# -- the daemon's background parts, and what the other entrypoints use of the adapters -----------
# Entrypoints import adapters only through this module (tests/test_architecture.py): ``__all__``
# names the adapters' values and helpers they need (the home's layout, the watcher's health
# records, a source folder's check, the evaluation sources' folders), imported at the top; none of
# them loads a heavy library.


def schema_version() -> int:
    """The database schema this build expects (loads apsw: call it only to show it)."""
    from memory_core.adapters.sqlite.database import SCHEMA_VERSION

    return SCHEMA_VERSION


def background_indexer(engine: Engine, root: os.PathLike[str] | str) -> tuple[Any, Callable[[], None]]:
    """The engine's indexer with its own catalog, hash cache and embedding-cache connections, for
    the watcher's worker thread (an apsw connection refuses two threads at once), and a closer.

    Models, blob store, generation store and Run store are shared: each is safe across threads.
    An engine of other parts (None here) is indexed under the daemon's engine lock instead."""
    import attrs

    from memory_core.adapters.files.filesystem_sources import FileSystemScanner
    from memory_core.adapters.sqlite.catalog import SqliteCatalog
    from memory_core.adapters.sqlite.database import open_database
    from memory_core.adapters.sqlite.embedding_cache import SqliteEmbeddingCache

    indexer = engine.indexer
    if not isinstance(indexer.catalog, SqliteCatalog) or not isinstance(indexer.scanner, FileSystemScanner):
        return None, lambda: None
    catalog = SqliteCatalog(open_database(HomeLayout.at(root).db_path))
    parts: dict[str, Any] = {
        "catalog": catalog,
        "manifests": catalog,
        "scanner": FileSystemScanner(hash_cache=catalog, max_bytes=indexer.scanner.max_bytes),
    }
    cache = indexer.embedding_cache
    if isinstance(cache, SqliteEmbeddingCache):
        parts["embedding_cache"] = SqliteEmbeddingCache(cache.path)

    def close() -> None:
        catalog.close()
        if "embedding_cache" in parts:
            parts["embedding_cache"].close()

    return attrs.evolve(indexer, **parts), close


def background_watcher(
    engine: Engine, root: os.PathLike[str] | str, *, watch: bool, locked_indexer: Any
) -> tuple[Watcher, Callable[[], None]]:
    """The daemon's re-index worker (and, with ``watch``, its source watches) over ``engine``:
    its own indexer (``background_indexer``), else ``locked_indexer`` (an engine of other parts,
    indexed under the engine lock); with ``watch`` the engine's live memory becomes the watcher's
    cache (``WatchedMemory``). Not started; returns it and the closer of its connections."""
    indexer, close_indexer = background_indexer(engine, root)
    watcher = Watcher(indexer if indexer is not None else locked_indexer, watch=watch)
    if engine.models is not None:
        # A project's new embedding model re-embeds on the worker while its generation serves.
        engine.models.on_change.append(watcher.models_changed)
    if watch and engine.live_memory is not None:
        engine.live_memory = WatchedMemory(watcher, engine.live_memory)

    def close() -> None:
        watcher.close()
        close_indexer()

    return watcher, close


__all__ = [
    "DEBOUNCE_MS", "DIR_MODE", "FILE_MODE", "STEP_MS", "FolderSources", "HealthError", "HomeLayout", "ProjectHealth",
    "ReindexRecord", "WatchedMemory", "Watcher", "assemble", "background_indexer", "background_watcher", "bootstrap",
    "bootstrap_in_memory", "parse_progress", "prepare_home", "resolve_home", "schema_version", "source_root",
]  # fmt: skip
