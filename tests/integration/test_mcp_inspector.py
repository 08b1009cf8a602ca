"""``memcore mcp`` driven by a client this project did not write: the official MCP Inspector's
CLI, pinned, installed by the test itself (npm, into test-output/) so CI on a fresh machine runs
it too. The Inspector validates a result's structured content against the tool's outputSchema
and lints the schemas for portability; every answer here must pass both with the useful message
in the text a model reads (issue 19)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from memory_core.entrypoints.daemon import paths
from tests.daemon.test_launcher import stop_daemon
from tests.daemon.test_server import memory_folder

ROOT = Path(__file__).resolve().parents[2]
INSPECTOR = "@modelcontextprotocol/inspector@2.12.0"
CACHE = ROOT / "test-output" / "npm" / INSPECTOR.replace("/", "_").replace("@", "")
TOOL_IS_ERROR = 5  # the Inspector's exit status for a result it accepted with isError: true


def inspector_bin() -> Path:
    """The pinned Inspector CLI, installed once into test-output/ (an atomic rename, so a run cut
    short never leaves a half-installed copy that later runs trust)."""
    binary = CACHE / "node_modules" / ".bin" / "mcp-inspector"
    if binary.exists():
        return binary
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        pytest.fail("this test needs Node.js (20 or later) and npm on PATH to install the MCP Inspector")
    staging = CACHE.with_name(CACHE.name + f".tmp{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    done = subprocess.run(
        [npm, "install", "--no-audit", "--no-fund", "--no-save", "--prefix", str(staging), INSPECTOR],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, f"npm install {INSPECTOR} failed:\n{done.stderr[-4000:]}"
    if not binary.exists():
        staging.rename(CACHE)
    return binary


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A real home: ``notes`` indexed, ``later`` added but not indexed."""
    base = tmp_path_factory.mktemp("inspector")
    home, memory = base / "home", memory_folder(base / "memory")
    memcore = [sys.executable, "-m", "memory_core", "--home", str(home)]
    for args in (["project", "add", "notes", "--source", str(memory)], ["index", "notes"],
                 ["project", "add", "later", "--source", str(memory)]):  # fmt: skip
        subprocess.run([*memcore, *args], cwd=ROOT, check=True, capture_output=True, timeout=300)
    (base / "tmp").mkdir()
    yield home
    if paths.read_info(home) is not None:  # started on demand by the first tools/call
        stop_daemon(home)


def inspect(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    server = [sys.executable, "-m", "memory_core", "--home", str(home), "mcp"]
    return subprocess.run(
        [str(inspector_bin()), "--cli", "-e", f"TMPDIR={home.parent / 'tmp'}", "--cwd", str(ROOT), *server, *args],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def call(home: Path, tool: str, **arguments: str) -> tuple[int, dict[str, Any], str]:
    tool_args = [a for k, v in arguments.items() for a in ("--tool-arg", f"{k}={v}")]
    done = inspect(home, "--method", "tools/call", "--tool-name", tool, *tool_args)
    assert done.stdout.strip(), f"the Inspector printed no result (it refused it): {done.stderr[-2000:]}"
    return done.returncode, json.loads(done.stdout), done.stderr


@pytest.mark.slow
def test_the_inspector_lists_both_tools_without_a_portability_warning(home: Path) -> None:
    done = inspect(home, "--method", "tools/list", "--strict")
    assert done.returncode == 0, done.stderr
    assert "Warning" not in done.stderr and "Error" not in done.stderr, done.stderr
    tools = {t["name"]: t for t in json.loads(done.stdout)["tools"]}
    assert set(tools) == {"activate_memory", "list_projects"}
    for name, tool in tools.items():
        committed = json.loads((ROOT / "contracts" / f"mcp-{name}.schema.json").read_text())
        assert tool["inputSchema"] == committed["inputSchema"] and tool["outputSchema"] == committed["outputSchema"]
    assert "list_projects" in tools["activate_memory"]["description"]
    assert paths.read_info(home) is None, "listing tools must not start the daemon"


@pytest.mark.slow
def test_the_inspector_accepts_an_answer_whose_text_is_the_fragments(home: Path) -> None:
    rc, result, stderr = call(home, "activate_memory", project="notes", query="how do I roll back a deploy?")
    assert rc == 0 and not result["isError"], stderr  # the structured content matched the outputSchema
    structured, (text,) = result["structuredContent"], [c["text"] for c in result["content"]]
    assert structured["fragments"][0]["resource_id"] == "runbooks/deploy.md"
    for fragment in structured["fragments"]:
        assert f"[add] {fragment['unit_id']}" in text and fragment["text"] in text
    state_line = text.splitlines()[-1]
    assert json.loads(state_line.split(": ", 1)[1]) == structured["activation_state"]
    assert structured["run_id"] in text
    assert len(text) < len(json.dumps(structured, ensure_ascii=False)) * 0.75, "the text repeats the JSON"
    assert '"final_score"' not in text and "latency" not in text


@pytest.mark.slow
def test_the_inspector_lists_the_projects(home: Path) -> None:
    rc, result, stderr = call(home, "list_projects")
    assert rc == 0 and not result["isError"], stderr
    assert [(p["project_id"], p["indexed"]) for p in result["structuredContent"]["projects"]] == [
        ("later", False), ("notes", True)]  # fmt: skip
    assert "memcore index later" in result["content"][0]["text"]


@pytest.mark.parametrize(
    ("arguments", "code", "said"),
    [
        ({"project": "nope", "query": "rollback"}, "project_not_found", "known projects: later, notes"),
        ({"project": "later", "query": "rollback"}, "project_not_indexed", "run `memcore index later`"),
        ({"project": "notes", "query": "rollback", "budget": "0"}, "invalid_request",
         "0 is less than the minimum of 1 @ $.budget"),
        ({"project": "notes", "query": "rollback", "extra": "1"}, "invalid_request", "'extra' was unexpected"),
    ],
    ids=["unknown project", "not indexed", "budget 0", "extra argument"],
)  # fmt: skip
@pytest.mark.slow
def test_the_inspector_accepts_each_error_with_its_message(home: Path, arguments: dict[str, str], code: str,
                                                           said: str) -> None:  # fmt: skip
    rc, result, stderr = call(home, "activate_memory", **arguments)
    # Accepted as a tool error: before, the Inspector refused the result (structured content not
    # matching the outputSchema) and printed only its own validation message.
    assert rc == TOOL_IS_ERROR and result["isError"] is True, stderr
    assert "structuredContent" not in result
    (text,) = [c["text"] for c in result["content"]]
    assert text.startswith(f"error[{code}]: ") and said in text, text
    assert "next: " in text  # what the model can do about it
    assert result["_meta"]["memory-core/error"]["code"] == code
