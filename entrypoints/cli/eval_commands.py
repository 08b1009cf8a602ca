"""``memcore eval ...``: Evaluation Cases, judgments, the B1-B4 report, fixtures, BEIR, replay."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from rich.table import Table

from memory_core.entrypoints.cli import render
from memory_core.entrypoints.cli.common import emit_json, progress_bar, read_json
from memory_core.entrypoints.cli.executor import job_progress
from memory_core.entrypoints.cli.wire import to_json
from memory_core.evaluation.cases import CaseDetail, parse_judgments
from memory_core.evaluation.report import Report
from memory_core.operations.evaluation import EvaluationFixture, JudgmentInput
from memory_core.retrieval.profile import MAX_QUERY_CHARS
from memory_core.services.engine import Engine


def add_parser(sub: Any) -> None:
    ev = sub.add_parser("eval", help="Evaluation Sets: cases, judgments, report, export/import").add_subparsers(
        dest="action", required=True, help="what to do with the Evaluation Set"
    )
    from memory_core.entrypoints.cli import profile_commands

    profile_commands.add_tune_parser(ev)
    profile_commands.add_learn_parser(ev)
    case = ev.add_parser("case", help="Evaluation Cases: create from a Run, list, show").add_subparsers(
        dest="case_action", required=True, help="what to do with cases"
    )
    p = case.add_parser("create", help="freeze a succeeded Run into an Evaluation Case (pins the Run)")
    p.add_argument("run_id", help="a succeeded Run's id (runs list shows them)")
    p.add_argument("--json", action="store_true")
    p = case.add_parser("list", help="list Evaluation Cases")
    p.add_argument("--project", help="only this project's cases")
    p.add_argument("--json", action="store_true")
    _one_case(case, "show", "one case: query, corpus, trace and current judgments")
    p = _one_case(
        ev,
        "judge",
        'replace a case\'s judgments (a file {"judgments": [...]}, - for stdin)',
        expected_version="the version you edited (0 = none)",
    )
    p.add_argument("--file", required=True, help='the judgments: a JSON file {"judgments": [...]}, - for stdin')
    _one_case(
        ev,
        "review",
        "mark a case's current judgments as reviewed by a person",
        expected_version="the judgment version you reviewed",
    )
    p = _case_filter(ev.add_parser("report", help="B1-B4 benchmark report"))
    p.add_argument("--json", action="store_true")
    p = _case_filter(ev.add_parser("export", help="write the set as one self-contained JSON fixture"))
    p.add_argument("--with-history", action="store_true", help="include earlier judgment versions")
    p.add_argument(
        "--with-uris",
        action="store_true",
        help="keep each resource's file:/// URI, which names local folders (default: its resource id)",
    )
    p.add_argument("--out", required=True, help="file to write (- for stdout)")
    p = ev.add_parser("import", help="import a fixture (every hash verified; all or nothing)")
    p.add_argument("file", help="a fixture written by eval export")
    p.add_argument("--json", action="store_true")
    p = ev.add_parser("import-beir", help="import a BEIR collection as a project and one case per query")
    p.add_argument("folder", help="a BEIR collection (corpus.jsonl, queries.jsonl, qrels/)")
    p.add_argument("--project", required=True, help="the project to create for its corpus")
    p.add_argument("--split", default="test", help="the qrels split to import (default: test)")
    p.add_argument("--reviewed", action="store_true", help="the qrels were reviewed by a person")
    p.add_argument("--json", action="store_true")
    p = ev.add_parser("replay", help="replay cases through the current engine: a regression gate")
    p.add_argument("--fixture", help="an exported fixture (default: this home's Evaluation Set)")
    p.add_argument("--baseline", help="a report (eval report --json) to compare with (default: the set's B4)")
    p.add_argument("--max-drop", type=float, default=0.0, help="largest allowed absolute nDCG@10 drop")
    p.add_argument("--include-unreviewed", action="store_true", help="also gate on cases no person has reviewed")
    p.add_argument("--json", action="store_true")


def _one_case(sub: Any, name: str, help: str, *, expected_version: str | None = None) -> Any:
    """A command on one case: the case's id, --json and, for a command that edits the case,
    --expected-version (the version it edits; ``expected_version`` is that option's help)."""
    p = sub.add_parser(name, help=help)
    p.add_argument("case_id", help="the case's id (eval case list shows them)")
    if expected_version is not None:
        p.add_argument("--expected-version", type=int, required=True, help=expected_version)
    p.add_argument("--json", action="store_true")
    return p


def _case_filter(p: Any) -> Any:
    """The cases a report or an export takes: a project's, chosen ones, or (neither) all."""
    p.add_argument("--project", help="only this project's cases")
    p.add_argument("--case", action="append", dest="cases", help="only this case (repeatable)")
    return p


def _answer(out: Any, as_json: bool, value: Any, lines: Callable[[Any], Iterable[Any]]) -> None:
    """``value`` as JSON (--json), else printed item by item as ``lines`` lays it out."""
    if as_json:
        emit_json(to_json(value))
    else:
        for item in lines(value):
            out.print(item)


def _workspace(engine: Engine, home: Path) -> Any:
    from memory_core.entrypoints.bootstrap import FolderSources, HomeLayout
    from memory_core.services.beir_import import EngineWorkspace

    return EngineWorkspace(engine, FolderSources(HomeLayout.at(home).evaluation_sources_dir))


def _tuple(ids: Iterable[str] | None) -> tuple[str, ...] | None:
    return None if ids is None else tuple(ids)


def report_tables(report: Report) -> list[Any]:
    out: list[Any] = [f"{report.cases} cases ({report.reviewed_cases} reviewed); project {report.project_id or 'all'}"]
    for level_name, level in report.levels.items():
        judged = f"{level.judged_cases} judged cases, {level.unjudged_cases} without relevant items"
        table = Table(title=f"{level_name} level: {judged}")
        metrics = list(next(iter(level.variants.values())).keys()) if level.variants else []
        table.add_column("variant")
        for m in metrics:
            table.add_column(m)
        for variant, values in level.variants.items():
            table.add_row(variant, *("-" if values[m].mean is None else f"{values[m].mean:.3f}" for m in metrics))
        out.append(table)
        for c in level.comparisons:
            if c.mean_diff is None:
                continue
            if c.interval_reason is not None:  # too few cases: the difference, and why no interval
                said = c.interval_reason
            else:
                said = f"95% CI {c.ci95_low:+.4f} .. {c.ci95_high:+.4f}, p {c.p_value:.3f}, {c.cases} cases"
            out.append(f"  {c.variant} - {c.other} {c.metric}: {c.mean_diff:+.4f} ({said})")
    counts = report.missed_evidence.counts
    out.append("missed evidence: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    lat = report.latency_ms
    out.append(
        f"warm latency ({lat.warm_runs} warm Runs): "
        + ", ".join(f"{v} p50 {p.p50:.1f} ms" for v, p in lat.variants.items() if p.p50 is not None)
    )
    return out


def _ids(ids: Any, shown: int = 10) -> str:
    listed = ", ".join(ids[:shown])
    return listed + (f" and {len(ids) - shown} more" if len(ids) > shown else "")


def import_summary(result: Any) -> list[str]:
    """``eval import`` for a person: what was added, what was already here."""
    added, unchanged = result.cases_added, result.cases_unchanged
    out = [
        f"imported {len(added)} case{'s' * (len(added) != 1)}, {len(unchanged)} already here unchanged; "
        f"{result.corpora_added} new corpus{'es' * (result.corpora_added != 1)}, "
        f"{result.blobs_written} bod{'ies' if result.blobs_written != 1 else 'y'} written"
    ]
    if added:
        out.append(f"  added: {_ids(added)}")
    if unchanged:
        out.append(f"  unchanged: {_ids(unchanged)}")
    return out


def _score(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def replay_summary(result: Any) -> list[Any]:
    """``eval replay`` for a person: the verdict, the means, the corpora, then each failed case."""
    verdict = "PASSED" if result.passed else "FAILED"
    out: list[Any] = [f"replay gate {verdict}: {result.metric} ({result.level} level), {result.variant} vs "
                      f"{result.baseline_variant}, max drop {result.max_drop:.3f}"]  # fmt: skip
    if result.mean_drop is None:
        out.append(f"no case has a relevant item to compare ({result.excluded} excluded)")
    else:
        out.append(
            f"mean {_score(result.baseline_mean)} -> {_score(result.current_mean)} (drop {result.mean_drop:+.4f}) "
            f"over {result.compared} cases; {result.excluded} without a relevant item excluded"
        )
    for corpus in result.corpora:
        out.append(f"corpus {corpus.corpus_id[:12]}: {corpus.resources} resources indexed as {corpus.project_id}, "
                   "checked equal to the frozen corpus")  # fmt: skip
    failed = [c for c in result.cases if c.passed is False]
    if failed:
        table = Table(title=f"{len(failed)} cases dropped more than {result.max_drop:.3f}")
        for col in ("case", "baseline", "current", "drop"):
            table.add_column(col, overflow="fold")
        for c in failed:
            table.add_row(c.case_id, _score(c.baseline), _score(c.current), f"{c.drop:+.4f}")
        out.append(table)
    return out


def handle(engine: Any, args: argparse.Namespace, home: Path) -> int:
    """``engine``: the table's operations (``cli/executor.py``), or the Engine for ``import-beir``
    and ``replay``, which run embedded only (``commands.EMBEDDED_ONLY``)."""
    out = render.console()
    action = args.action if args.action != "case" else f"case {args.case_action}"
    if action not in ("import-beir", "replay"):
        from memory_core.entrypoints.cli.executor import operations

        engine = operations(engine)
    if action == "case create":
        case = engine.create_evaluation_case(args.run_id)
        if args.json:
            emit_json(to_json(case))
        else:
            out.print(f"case {case.case_id} from run {case.source_run_id} (corpus {case.corpus_id[:12]}); run pinned")
    elif action == "case list":
        cases = list(engine.list_evaluation_cases(args.project).cases)
        if args.json:
            emit_json(to_json(cases))
        else:
            table = Table(title="Evaluation Cases")
            for col in ("case", "project", "query", "judgment version", "reviewed", "provenance"):
                table.add_column(col, overflow="fold")
            for c in cases:
                table.add_row(
                    c.case_id,
                    c.project_id,
                    c.query[:60],
                    str(c.judgment_version),
                    "yes" if c.reviewed else "",
                    c.provenance,
                )
            out.print(table)
    elif action == "case show":
        d = engine.get_evaluation_case(args.case_id)
        detail = CaseDetail(d.case, d.trace, d.judgments, len(d.corpus.resources), d.metrics, d.missed_evidence,
                            d.passages)  # fmt: skip
        if args.json:
            emit_json(to_json(detail))
        else:  # what a judge reads: every candidate's text from the frozen corpus
            for item in render.case_detail(detail):
                out.print(item, highlight=False)
    elif action == "judge":
        judgments = parse_judgments(read_json(args.file, "judgment file"))  # invalid_judgments before any call
        inputs = tuple(JudgmentInput.of(j) for j in judgments)
        judged = engine.replace_evaluation_judgments(args.case_id, args.expected_version, inputs)
        if args.json:
            emit_json(to_json(judged))
        else:
            out.print(f"case {args.case_id}: judgments version {judged.version} ({len(judged.judgments)} judgments)")
    elif action == "review":
        case = engine.mark_evaluation_reviewed(args.case_id, args.expected_version)
        emit_json(to_json(case)) if args.json else out.print(f"case {case.case_id} reviewed")
    elif action == "report":
        report = engine.evaluation_report(args.project, _tuple(args.cases)).to_report()
        _answer(out, args.json, report, report_tables)
    elif action == "export":
        data = engine.export_evaluation_set(
            project_id=args.project, case_ids=_tuple(args.cases), with_history=args.with_history,
            with_uris=args.with_uris,
        ).to_bytes()  # the file's bytes, as written in either mode
        if args.out == "-":
            sys.stdout.buffer.write(data)
        else:
            Path(args.out).write_bytes(data)
            out.print(f"wrote {args.out} ({len(data):,} bytes)")
    elif action == "import":
        to_import = EvaluationFixture(read_json(args.file, "fixture", document=True))
        bar, progress = progress_bar(not args.json)
        with bar, job_progress(engine, "import_evaluation_set", None, progress):
            result = engine.import_evaluation_set(to_import)
        _answer(out, args.json, result, import_summary)
    elif action == "import-beir":
        from memory_core.services.beir_import import import_beir

        beir = import_beir(
            engine.evaluations(), _workspace(engine, home), args.folder, args.project, split=args.split,
            reviewed=args.reviewed,
        )
        if args.json:
            emit_json(to_json(beir))
        else:
            out.print(f"imported {beir.created} cases ({beir.resumed} resumed) into project {beir.project_id}")
            if beir.marked_reviewed or beir.left_unreviewed:
                out.print(f"marked {beir.marked_reviewed} resumed cases reviewed; left {beir.left_unreviewed} "
                          "whose judgments a person changed since the import")  # fmt: skip
            if beir.too_long_queries:
                out.print(f"left out {len(beir.too_long_queries)} judged queries longer than "
                          f"{MAX_QUERY_CHARS:,} characters (an activation refuses them): "
                          + ", ".join(beir.too_long_queries))  # fmt: skip
            for item in report_tables(beir.report):
                out.print(item)
    elif action == "replay":
        from memory_core.evaluation.fixture import load_fixture
        from memory_core.services.fixtures import evaluation_set
        from memory_core.services.replay import baseline_from_report, replay

        fixture = read_json(args.fixture, "fixture", document=True) if args.fixture else None
        if fixture is not None:
            replay_cases = load_fixture(fixture)
        else:  # only the cases it replays are exported, each with its corpus and bodies
            service = engine.evaluations()
            reviewed = None if args.include_unreviewed else [c.case_id for c in service.list_cases() if c.reviewed]
            replay_cases = evaluation_set(service, case_ids=reviewed or None)
        baseline_report = read_json(args.baseline, "baseline report", document=True) if args.baseline else None
        baseline = baseline_from_report(baseline_report) if baseline_report is not None else None
        replayed = replay(
            replay_cases,
            _workspace(engine, home),
            max_drop=args.max_drop,
            include_unreviewed=args.include_unreviewed,
            baseline=baseline,
        )
        _answer(out, args.json, replayed, replay_summary)
        return 0 if replayed.passed else 1
    return 0
