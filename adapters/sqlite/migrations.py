"""Ordered, numbered schema migrations for ``local.db``.

To add one, append a function named ``mNNN_what(conn)`` decorated with ``@migration`` at the end
of this module, numbered one past the last. Each runs inside its own transaction together with
its ``_migrations`` row and ``PRAGMA user_version``; never edit a migration once released.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import apsw

Migration = Callable[[apsw.Connection], None]

MIGRATIONS: list[Migration] = []

_NAME = re.compile(r"^m(\d{3})_[a-z0-9_]+$")


def migration(fn: Migration) -> Migration:
    """Register ``fn``; its name carries its number, which must be the next one."""
    match = _NAME.match(fn.__name__)
    if match is None or int(match.group(1)) != len(MIGRATIONS) + 1:
        raise RuntimeError(f"migration {fn.__name__} must be named m{len(MIGRATIONS) + 1:03d}_<what>")
    MIGRATIONS.append(fn)
    return fn


def migration_number(fn: Migration) -> int:
    return int(fn.__name__[1:4])


@migration
def m001_projects(conn: apsw.Connection) -> None:
    conn.execute(
        """
        CREATE TABLE projects (
            project_id TEXT PRIMARY KEY,
            created_at TEXT NOT NULL
        );
        CREATE TABLE project_sources (
            project_id TEXT NOT NULL REFERENCES projects(project_id) ON DELETE CASCADE,
            ordinal INTEGER NOT NULL,
            path TEXT NOT NULL,
            layer TEXT NOT NULL,
            PRIMARY KEY (project_id, ordinal)
        );
        CREATE TABLE generations (
            project_id TEXT NOT NULL REFERENCES projects(project_id) ON DELETE CASCADE,
            index_revision TEXT NOT NULL,
            effective_memory_hash TEXT NOT NULL,
            unit_count INTEGER NOT NULL,
            resource_count INTEGER NOT NULL,
            revisions_json TEXT NOT NULL,
            created_at TEXT NOT NULL,
            directory TEXT NOT NULL,
            PRIMARY KEY (project_id, index_revision)
        );
        CREATE TABLE project_generation_pointers (
            project_id TEXT PRIMARY KEY REFERENCES projects(project_id) ON DELETE CASCADE,
            current_revision TEXT,
            previous_revision TEXT
        );
        CREATE TABLE file_hash_cache (
            path TEXT PRIMARY KEY,
            size INTEGER NOT NULL,
            mtime_ns INTEGER NOT NULL,
            sha256 TEXT NOT NULL
        );
        """
    )


@migration
def m002_manifests(conn: apsw.Connection) -> None:
    # Effective Memory manifests, stored once per hash and shared by everything that saw them.
    conn.execute(
        """
        CREATE TABLE manifests (
            manifest_hash TEXT PRIMARY KEY,
            entries_json TEXT NOT NULL,
            created_at TEXT NOT NULL
        );
        ALTER TABLE generations ADD COLUMN manifest_hash TEXT;
        -- The manifest hash is the Effective Memory hash by definition (brief §3).
        UPDATE generations SET manifest_hash = effective_memory_hash WHERE manifest_hash IS NULL;
        CREATE INDEX generations_manifest_hash ON generations(manifest_hash);
        """
    )


@migration
def m003_retrieval_runs(conn: apsw.Connection) -> None:
    # No foreign key to projects: Runs are history, not catalog state. `project remove` deletes
    # a project's unpinned Runs explicitly and keeps its Cases' pinned Runs (brief §6).
    conn.execute(
        """
        CREATE TABLE retrieval_runs (
            run_id TEXT PRIMARY KEY,
            project_id TEXT NOT NULL,
            query TEXT NOT NULL,
            state_fingerprint TEXT NOT NULL,
            token_budget INTEGER NOT NULL,
            status TEXT NOT NULL CHECK (status IN ('running', 'succeeded', 'failed')),
            started_at TEXT NOT NULL,
            finished_at TEXT,
            effective_memory_hash TEXT,
            index_revision TEXT,
            revisions_json TEXT NOT NULL DEFAULT '{}',
            latency_json TEXT NOT NULL DEFAULT '{}',
            warm INTEGER CHECK (warm IN (0, 1)),
            candidate_count INTEGER NOT NULL DEFAULT 0,
            fragment_count INTEGER NOT NULL DEFAULT 0,
            token_count INTEGER NOT NULL DEFAULT 0,
            total_ms REAL,
            error_stage TEXT,
            error_code TEXT,
            error_summary TEXT CHECK (error_summary IS NULL OR length(error_summary) <= 500),
            owner_pid INTEGER,
            owner_started_at TEXT,
            owner_boot_id TEXT,
            pinned INTEGER NOT NULL DEFAULT 0 CHECK (pinned IN (0, 1)),
            CHECK ((status = 'failed') = (error_code IS NOT NULL))
        );
        CREATE INDEX retrieval_runs_project_started
            ON retrieval_runs(project_id, started_at DESC, run_id DESC);
        CREATE INDEX retrieval_runs_started ON retrieval_runs(started_at DESC, run_id DESC);
        CREATE INDEX retrieval_runs_status ON retrieval_runs(status);
        CREATE INDEX retrieval_runs_manifest ON retrieval_runs(effective_memory_hash);

        CREATE TABLE retrieval_run_candidates (
            run_id TEXT NOT NULL REFERENCES retrieval_runs(run_id) ON DELETE CASCADE,
            final_rank INTEGER NOT NULL CHECK (final_rank >= 1),
            unit_id TEXT NOT NULL,
            resource_id TEXT NOT NULL,
            unit_hash TEXT NOT NULL,
            resource_hash TEXT NOT NULL,
            heading_path_json TEXT NOT NULL,
            token_count INTEGER NOT NULL,
            exact_rank INTEGER,
            exact_score REAL,
            bm25_rank INTEGER,
            bm25_score REAL,
            lexical_rank INTEGER,
            dense_rank INTEGER,
            dense_score REAL,
            dense_similarity REAL,
            rrf_rank INTEGER NOT NULL,
            rrf_score REAL NOT NULL,
            rerank_rank INTEGER,
            rerank_score REAL,
            final_score REAL,
            disposition TEXT NOT NULL CHECK (disposition IN ('selected', 'excluded')),
            exclusion_code TEXT,
            delta_action TEXT CHECK (delta_action IS NULL OR delta_action IN ('add', 'replace', 'reuse')),
            -- Exactly one of them: a selected unit has a delta action, an excluded one a code.
            CHECK ((disposition = 'selected') = (delta_action IS NOT NULL AND exclusion_code IS NULL)),
            CHECK ((disposition = 'excluded') = (exclusion_code IS NOT NULL AND delta_action IS NULL)),
            PRIMARY KEY (run_id, final_rank)
        ) WITHOUT ROWID;

        -- Each ordered Effective Memory manifest once, keyed by its hash, shared by every Run
        -- that saw it: recording a Run costs its candidates, not its corpus.
        CREATE TABLE retrieval_run_resources (
            manifest_hash TEXT NOT NULL,
            ordinal INTEGER NOT NULL,
            resource_id TEXT NOT NULL,
            layer TEXT NOT NULL,
            uri TEXT NOT NULL,
            resource_hash TEXT NOT NULL,
            byte_size INTEGER NOT NULL,
            media_type TEXT NOT NULL,
            PRIMARY KEY (manifest_hash, ordinal)
        ) WITHOUT ROWID;

        CREATE TABLE retrieval_corpus_blobs (
            sha256 TEXT PRIMARY KEY,
            byte_size INTEGER NOT NULL,
            media_type TEXT NOT NULL,
            first_seen_at TEXT NOT NULL
        ) WITHOUT ROWID;
        """
    )


@migration
def m004_evaluation(conn: apsw.Connection) -> None:
    # Evaluation Sets (seed "Storage"). Corpora are immutable and keyed by their manifest hash; a
    # case keeps a frozen copy of its source trace, so it outlives its Run and travels in
    # fixtures: no foreign key to retrieval_runs (an imported case's Run may not exist here).
    # Judgment versions are rows of evaluation_judgment_sets (an empty set is a version too);
    # evaluation_judgments holds their judgments. Every version is kept.
    conn.execute(
        """
        CREATE TABLE evaluation_corpora (
            corpus_id TEXT PRIMARY KEY,
            resource_count INTEGER NOT NULL,
            created_at TEXT NOT NULL
        ) WITHOUT ROWID;

        CREATE TABLE evaluation_corpus_resources (
            corpus_id TEXT NOT NULL REFERENCES evaluation_corpora(corpus_id) ON DELETE CASCADE,
            ordinal INTEGER NOT NULL,
            resource_id TEXT NOT NULL,
            layer TEXT NOT NULL,
            uri TEXT NOT NULL,
            resource_hash TEXT NOT NULL,
            byte_size INTEGER NOT NULL,
            media_type TEXT NOT NULL,
            PRIMARY KEY (corpus_id, ordinal),
            UNIQUE (corpus_id, resource_id)
        ) WITHOUT ROWID;
        CREATE INDEX evaluation_corpus_resources_hash ON evaluation_corpus_resources(resource_hash);

        CREATE TABLE evaluation_cases (
            case_id TEXT PRIMARY KEY,
            project_id TEXT NOT NULL,
            query TEXT NOT NULL,
            corpus_id TEXT NOT NULL REFERENCES evaluation_corpora(corpus_id),
            source_run_id TEXT NOT NULL,
            provenance TEXT NOT NULL CHECK (provenance IN ('run', 'beir_import', 'fixture_import')),
            original_provenance TEXT NOT NULL
                CHECK (original_provenance IN ('run', 'beir_import', 'fixture_import')),
            judgment_version INTEGER NOT NULL DEFAULT 0 CHECK (judgment_version >= 0),
            reviewed_version INTEGER
                CHECK (reviewed_version IS NULL OR reviewed_version BETWEEN 0 AND judgment_version),
            created_at TEXT NOT NULL,
            trace_hash TEXT NOT NULL,
            trace_json TEXT NOT NULL
        );
        CREATE INDEX evaluation_cases_project ON evaluation_cases(project_id, created_at, case_id);
        CREATE INDEX evaluation_cases_created ON evaluation_cases(created_at, case_id);
        CREATE INDEX evaluation_cases_run ON evaluation_cases(source_run_id);
        CREATE INDEX evaluation_cases_corpus ON evaluation_cases(corpus_id);

        CREATE TABLE evaluation_judgment_sets (
            case_id TEXT NOT NULL REFERENCES evaluation_cases(case_id) ON DELETE CASCADE,
            version INTEGER NOT NULL CHECK (version >= 1),
            created_at TEXT NOT NULL,
            PRIMARY KEY (case_id, version)
        ) WITHOUT ROWID;

        CREATE TABLE evaluation_judgments (
            case_id TEXT NOT NULL,
            version INTEGER NOT NULL,
            ordinal INTEGER NOT NULL,
            unit_id TEXT,
            resource_id TEXT,
            relevance INTEGER NOT NULL CHECK (typeof(relevance) = 'integer' AND relevance BETWEEN 0 AND 3),
            note TEXT,
            -- A judgment targets a unit of the source trace or a resource of the corpus, never both.
            CHECK ((unit_id IS NULL) != (resource_id IS NULL)),
            PRIMARY KEY (case_id, version, ordinal),
            FOREIGN KEY (case_id, version)
                REFERENCES evaluation_judgment_sets(case_id, version) ON DELETE CASCADE
        ) WITHOUT ROWID;
        """
    )


@migration
def m005_project_storage(conn: apsw.Connection) -> None:
    # Where a project keeps its Local Storage when `memcore project storage move` chose a
    # directory; NULL is the default, <home>/projects/<project_id>/.
    conn.execute("ALTER TABLE projects ADD COLUMN storage_dir TEXT")


@migration
def m006_file_stamp(conn: apsw.Connection) -> None:
    # The file-hash cache also keys on ctime and inode: an edit that restores size and mtime
    # (cp -p, rsync -t, touch -r) still changes the ctime, which nothing can set back. Old rows
    # keep NULL there, never match, and are replaced by the next scan of their file.
    conn.execute(
        """
        ALTER TABLE file_hash_cache ADD COLUMN ctime_ns INTEGER;
        ALTER TABLE file_hash_cache ADD COLUMN inode INTEGER;
        """
    )


@migration
def m007_candidate_spans(conn: apsw.Connection) -> None:
    # Each candidate keeps its unit's [start, end) span, so a judge is shown the unit's text cut
    # from the frozen corpus. Candidates recorded before keep NULL: their Runs still load, and
    # their text is shown as unknown rather than guessed. Both or neither, and never reversed.
    conn.execute(
        """
        ALTER TABLE retrieval_run_candidates ADD COLUMN span_start INTEGER
            CHECK (span_start IS NULL OR span_start >= 0);
        ALTER TABLE retrieval_run_candidates ADD COLUMN span_end INTEGER
            CHECK ((span_end IS NULL) = (span_start IS NULL) AND (span_end IS NULL OR span_end >= span_start));
        """
    )


@migration
def m008_project_profiles(conn: apsw.Connection) -> None:
    # A project's own ranking settings (issue 18), every version kept so one can be restored; the
    # highest version is the one in use (none: the engine's defaults). Tunings are kept whole so
    # `project profile set --from-tune` applies exactly what was measured.
    conn.execute(
        """
        CREATE TABLE project_profiles (
            project_id TEXT NOT NULL REFERENCES projects(project_id) ON DELETE CASCADE,
            version INTEGER NOT NULL CHECK (version >= 1),
            settings_json TEXT NOT NULL,
            source TEXT NOT NULL,
            created_at TEXT NOT NULL,
            PRIMARY KEY (project_id, version)
        ) WITHOUT ROWID;
        CREATE TABLE project_tunings (
            tune_id TEXT PRIMARY KEY,
            project_id TEXT NOT NULL REFERENCES projects(project_id) ON DELETE CASCADE,
            created_at TEXT NOT NULL,
            result_json TEXT NOT NULL
        );
        CREATE INDEX project_tunings_by_project ON project_tunings(project_id, created_at);
        """
    )


@migration
def m009_project_learnings(conn: apsw.Connection) -> None:
    # Learned ranking models (issue 32, item 2) and the learnings that made them: each model's
    # bytes once, by their SHA-256 (a profile names a model by it); a learning's result whole.
    conn.execute(
        """
        CREATE TABLE learned_models (
            model_digest TEXT PRIMARY KEY,
            project_id TEXT NOT NULL REFERENCES projects(project_id) ON DELETE CASCADE,
            model BLOB NOT NULL,
            created_at TEXT NOT NULL
        );
        CREATE TABLE project_learnings (
            learn_id TEXT PRIMARY KEY,
            project_id TEXT NOT NULL REFERENCES projects(project_id) ON DELETE CASCADE,
            created_at TEXT NOT NULL,
            result_json TEXT NOT NULL
        );
        CREATE INDEX project_learnings_by_project ON project_learnings(project_id, created_at);
        CREATE INDEX learned_models_by_project ON learned_models(project_id);
        """
    )


@migration
def m010_models(conn: apsw.Connection) -> None:
    # The home's model registry (issue 33): models added by path, each with the spec read when it
    # was added (its revision hashes the weights, tokenizer, config and pooling) and the
    # overrides it was added with; and the models each project (and, under '', the home default)
    # chose. A choice names a model by name, or a reserved one ('minilm', the packaged model;
    # 'none', no cross-encoder), so no foreign key: removing a model checks its users itself.
    conn.execute(
        """
        CREATE TABLE models (
            name TEXT PRIMARY KEY,
            kind TEXT NOT NULL CHECK (kind IN ('embedding', 'reranker')),
            spec_json TEXT NOT NULL,
            overrides_json TEXT NOT NULL,
            added_at TEXT NOT NULL
        ) WITHOUT ROWID;
        CREATE TABLE home_model_choice (
            scope TEXT PRIMARY KEY CHECK (scope = ''),
            embedding TEXT,
            reranker TEXT
        ) WITHOUT ROWID;
        CREATE TABLE project_model_choice (
            project_id TEXT PRIMARY KEY REFERENCES projects(project_id) ON DELETE CASCADE,
            embedding TEXT,
            reranker TEXT
        ) WITHOUT ROWID;
        """
    )
