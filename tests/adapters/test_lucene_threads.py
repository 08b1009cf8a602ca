"""Searchers of two real Lucene indexes opened, searched and closed from several threads at once
(a daemon's activations of two projects, its warm-up beside the watcher): every search answers
what it answers alone, no Java error, no crashed JVM. pyjnius shares a Java method's object
among the instances of a class (kivy/pyjnius#287): without ``lucene_index._SHARED`` this failed
with NullPointerException and WrongMethodTypeException from the hit reader's MethodHandles, and
crashed the JVM (SIGSEGV in GetStaticMethodID) in two of three runs."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import memory_core
from memory_core.domain.model import Source
from memory_core.services.indexing import LEXICAL_DIR

QUERIES = ("rollback helm deploy", "coffee advisory idempotency", "outbox replay ledger locks")
MEMORIES = {
    "a": ("alpha rollback helm", "beta deploy ledger", "gamma outbox replay"),
    "b": ("delta coffee printer", "epsilon advisory locks", "zeta idempotency keys"),
}


def test_searchers_opened_and_searched_from_many_threads_at_once_answer_as_alone(tmp_path: Path) -> None:
    with memory_core.open(tmp_path / "home") as engine:
        directories = []
        for name, lines in MEMORIES.items():
            memory = tmp_path / name
            memory.mkdir()
            for i, line in enumerate(lines):
                (memory / f"{name}{i}.md").write_text(f"# {name} {i}\n\n{line} {line}\n", encoding="utf-8")
            engine.add_project(name, [Source(str(memory))])
            engine.index(name)
            generation = engine.show_project(name).generation
            assert generation is not None
            directories.append(Path(generation.directory) / LEXICAL_DIR)
        alone = {}
        for directory in directories:
            searcher = engine.lexical.open(directory)
            alone.update({(directory, q): searcher.search(q, 10) for q in QUERIES})
            searcher.close()
        assert alone[(directories[0], QUERIES[0])] != alone[(directories[1], QUERIES[0])]

        wrong: list[tuple[int, str]] = []
        errors: list[str] = []
        searches = [0]

        def work(i: int) -> None:
            directory = directories[i % 2]
            until = time.monotonic() + 4
            while time.monotonic() < until:
                try:
                    searcher = engine.lexical.open(directory)  # each open builds its hit reader
                    try:
                        for query in QUERIES * 3:
                            searches[0] += 1
                            if searcher.search(query, 10) != alone[(directory, query)]:
                                wrong.append((i, query))
                    finally:
                        searcher.close()
                except Exception as exc:
                    errors.append(repr(exc)[:200])

        threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert (wrong, errors) == ([], []), (len(wrong), errors[:3])
        assert searches[0] > 100
