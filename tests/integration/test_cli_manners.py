"""The CLI's manners (issue 19 item 4), through the real ``memcore`` subprocess: ``--version``,
global options after the command, hints that keep ``--home``, the JSON error envelope under
``--json``, the README's commands against the parser, ``runs clear --all``, a missing source,
``contracts generate`` outside a checkout, help on every argument, and a piped ``index``."""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest

from memory_core.entrypoints.cli.main import _subparsers, build_parser
from tests.daemon.test_server import memory_folder

ROOT = Path(__file__).resolve().parents[2]


def memcore(*args: str, home: Path | None = None, cwd: Path = ROOT, env: dict[str, str] | None = None,
            ) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k != "MEMORY_CORE_HOME"}
    environ.update(env or {})
    prefix = ["--home", str(home)] if home is not None else []
    return subprocess.run([sys.executable, "-m", "memory_core", *prefix, *args],
                          capture_output=True, text=True, cwd=cwd, env=environ, timeout=600)


def envelope(result: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """The JSON error envelope on stdout: exactly {"error": {"code", "message", "details"}}."""
    body = json.loads(result.stdout)
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message", "details"}, body
    return body["error"]  # type: ignore[no-any-return]


def test_version() -> None:
    result = memcore("--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"memcore {version('memory-core')}"


def test_home_and_json_are_accepted_before_or_after_the_command(tmp_path: Path) -> None:
    home, memory = tmp_path / "home", memory_folder(tmp_path / "memory")
    added = memcore("project", "add", "notes", "--source", str(memory), "--home", str(home), "--json")
    assert added.returncode == 0, added.stderr
    assert json.loads(added.stdout)["project"]["project_id"] == "notes"
    before = memcore("--home", str(home), "--json", "project", "list")
    after = memcore("project", "list", "--home", str(home), "--json")
    between = memcore("project", "--home", str(home), "list", "--json")
    assert before.returncode == after.returncode == between.returncode == 0
    assert json.loads(before.stdout) == json.loads(after.stdout) == json.loads(between.stdout)
    assert [p["project"]["project_id"] for p in json.loads(after.stdout)] == ["notes"]
    # Nested two levels down, and a command whose own --json has its own help.
    nested = memcore("--json", "project", "storage", "show", "notes", "--home", str(home))
    assert nested.returncode == 0, nested.stderr
    assert json.loads(nested.stdout)["project_id"] == "notes"
    # Given after the command, --home wins over the environment's home.
    other = tmp_path / "other"
    listed = memcore("project", "list", "--json", "--home", str(home), env={"MEMORY_CORE_HOME": str(other)})
    assert [p["project"]["project_id"] for p in json.loads(listed.stdout)] == ["notes"]


def test_hints_repeat_the_home_that_was_given(tmp_path: Path) -> None:
    home = tmp_path / "my home"  # a space: the hint must still be one shell word
    memory = memory_folder(tmp_path / "memory")
    missing = memcore("activate", "nope", "rollback", "--home", str(home))
    assert missing.returncode == 1
    assert f"memcore --home {shlex.quote(str(home))} project add" in missing.stderr
    added = memcore("project", "add", "notes", "--source", str(memory), home=home)
    assert added.returncode == 0, added.stderr
    assert f"next: memcore --home {shlex.quote(str(home))} index notes" in " ".join(added.stdout.split())
    unindexed = memcore("activate", "notes", "rollback", home=home)  # the engine's message, rewritten
    assert unindexed.returncode == 1
    assert f"`memcore --home {shlex.quote(str(home))} index notes`" in unindexed.stderr
    # No --home given (the environment chose it): the hint stays as short as it was.
    plain = memcore("activate", "notes", "rollback", env={"MEMORY_CORE_HOME": str(home)})
    assert "`memcore index notes`" in plain.stderr and "--home" not in plain.stderr


def test_errors_under_json_are_the_error_envelope(tmp_path: Path) -> None:
    home = tmp_path / "home"
    unknown = memcore("activate", "nope", "rollback", "--json", home=home)
    assert unknown.returncode == 1
    error = envelope(unknown)
    assert error["code"] == "project_not_found" and error["details"]["project"] == "nope"
    assert "error[" not in unknown.stderr
    # argparse's own refusals too, before or after the command (exit 2, the usage in details).
    for args in (["--json", "activate"], ["runs", "list", "--limit", "many", "--json"]):
        usage = memcore(*args, home=home)
        assert usage.returncode == 2
        error = envelope(usage)
        assert error["code"] == "invalid_request" and error["details"]["usage"].startswith("usage: memcore")
    # Without --json, the text form on stderr and nothing on stdout.
    text = memcore("activate", "nope", "rollback", home=home)
    assert text.stdout == "" and text.stderr.startswith("error[project_not_found]: ")


def test_project_add_refuses_a_source_that_does_not_exist(tmp_path: Path) -> None:
    home, memory = tmp_path / "home", memory_folder(tmp_path / "memory")
    for bad in (tmp_path / "nowhere", memory / "decisions.md"):  # missing; a file, not a folder
        refused = memcore("project", "add", "notes", "--source", str(memory), "--source", f"local={bad}",
                          "--json", home=home)
        assert refused.returncode == 1
        error = envelope(refused)
        assert error["code"] == "source_unavailable" and error["details"]["path"] == str(bad)
    listed = memcore("project", "list", "--json", home=home)
    assert json.loads(listed.stdout) == []  # nothing stored


def test_runs_clear_all_as_the_readme_says(tmp_path: Path) -> None:
    home = tmp_path / "home"
    cleared = memcore("runs", "clear", "--all", "--yes", "--json", home=home)
    assert cleared.returncode == 0, cleared.stderr
    assert json.loads(cleared.stdout)["deleted_runs"] == 0
    both = memcore("runs", "clear", "--all", "--project", "notes", "--yes", home=home)
    assert both.returncode == 2 and "not allowed with" in both.stderr


def test_contracts_generate_refuses_outside_a_checkout(tmp_path: Path) -> None:
    """An installed package (a copy of it on PYTHONPATH, no pyproject.toml, no contracts/ beside
    it): the default targets would be in site-packages, so it refuses; --output still writes."""
    site = tmp_path / "site"
    shutil.copytree(ROOT / "memory_core", site / "memory_core", symlinks=False,
                    ignore=shutil.ignore_patterns("__pycache__", "demo_memory"))
    env = {"PYTHONPATH": str(site)}
    where = "import memory_core.entrypoints.daemon.openapi as o; print(o.__file__)"
    located = subprocess.run([sys.executable, "-c", where], capture_output=True, text=True, cwd=tmp_path,
                             env={**os.environ, **env}, timeout=60)
    assert located.stdout.startswith(str(site)), located  # the copy is what runs
    for args in (["contracts", "generate"], ["contracts", "generate", "--check"]):
        refused = memcore(*args, cwd=tmp_path, env=env)
        assert refused.returncode == 2, refused.stderr
        assert "error[invalid_request]" in refused.stderr and "--output" in refused.stderr
    assert not (site / "memory_core" / "contracts").exists()
    out = tmp_path / "openapi.json"
    written = memcore("contracts", "generate", "--output", str(out), cwd=tmp_path, env=env)
    assert written.returncode == 0, written.stderr
    assert json.loads(out.read_text())["openapi"].startswith("3.")


def every_parser() -> list[argparse.ArgumentParser]:
    parser = build_parser()
    return [parser, *_subparsers(parser)]


def test_every_argument_has_help() -> None:
    missing = []
    for parser in every_parser():
        for action in parser._actions:
            if not action.help or action.help == argparse.SUPPRESS:
                missing.append(f"{parser.prog}: {'/'.join(action.option_strings) or action.dest}")
            if isinstance(action, argparse._SubParsersAction):
                missing += [f"{parser.prog} {c.dest}" for c in action._choices_actions if not c.help]
    assert missing == []
    assert len(every_parser()) > 30  # the walk reaches the nested commands


def test_hints_know_the_commands() -> None:
    from memory_core.entrypoints.cli.main import COMMAND_NAMES, hint

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert sorted(sub.choices) == sorted(COMMAND_NAMES)
    said = hint("a memcore daemon is already running; run `memcore index notes`", "/h h")
    assert said == "a memcore daemon is already running; run `memcore --home '/h h' index notes`"


def readme_commands() -> list[list[str]]:
    """Every ``memcore`` command line in the README's code blocks, alternatives (``a | b``) spelled
    out and ``[optional]`` brackets dropped."""
    commands = []
    for line in (ROOT / "README.md").read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line.startswith(".venv/bin/memcore "):
            continue
        line = re.sub(r"\s+#.*$", "", line).rstrip("&").strip()
        alternatives = [shlex.split(part.replace("[", " ").replace("]", " ")) for part in line.split(" | ")]
        first = alternatives[0][1:]
        commands.append(first)
        words = [w for w in first if not w.startswith("-")]
        for alt in alternatives[1:]:
            commands.append(words[: max(1, len(words) - 1 - sum(1 for w in words if w.isupper()))] + alt)
    return commands


def test_every_readme_command_is_what_the_parser_accepts() -> None:
    parser = build_parser()
    checked = 0
    for words in readme_commands():
        current, options = parser, []
        for word in words:
            if word.startswith("--"):
                options.append(word.split("=")[0])
                continue
            sub = next((a for a in current._actions if isinstance(a, argparse._SubParsersAction)), None)
            if sub is not None and word in sub.choices:
                current = sub.choices[word]
        unknown = [o for o in options if o not in current._option_string_actions]
        assert unknown == [], f"README: memcore {' '.join(words)}: {current.prog} has no {unknown}"
        assert not any(isinstance(a, argparse._SubParsersAction) for a in current._actions), (
            f"README: memcore {' '.join(words)} stops at {current.prog}, which needs a subcommand")
        checked += 1
    assert checked >= 30


@pytest.mark.slow
def test_index_piped_starts_without_a_blank_line(tmp_path: Path) -> None:
    home, memory = tmp_path / "home", memory_folder(tmp_path / "memory")
    assert memcore("project", "add", "notes", "--source", str(memory), home=home).returncode == 0
    indexed = memcore("index", "notes", home=home)
    assert indexed.returncode == 0, indexed.stderr
    assert indexed.stdout.strip() and not indexed.stdout.startswith("\n"), repr(indexed.stdout[:80])
