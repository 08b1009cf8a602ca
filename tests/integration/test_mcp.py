"""``memcore mcp`` driven by the official MCP stdio client, against real components: the MCP
server subprocess starts the home's daemon on demand, forwards ``activate_memory`` to it, and
every answer is a Run the daemon serves back through ``get_retrieval_run``."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memory_core.domain.model import Source
from memory_core.entrypoints.daemon import api, paths
from memory_core.entrypoints.daemon.client import DaemonClient
from memory_core.entrypoints.mcp import replies as mcp_replies
from memory_core.entrypoints.mcp import server as mcp_server
from memory_core.entrypoints.mcp import tools as mcp_tools
from tests.daemon.test_launcher import stop_daemon
from tests.daemon.test_server import memory_folder

ROOT = Path(__file__).resolve().parents[2]
QUESTION = "how do I roll back a deploy?"


# -- the committed schema ---------------------------------------------------------------------
@pytest.mark.parametrize("tool", ["activate_memory", "list_projects"])
def test_the_committed_tool_schema_is_current(tool: str) -> None:
    path = ROOT / "contracts" / f"mcp-{tool}.schema.json"
    assert mcp_tools.default_schema_path(tool) == path
    assert path in [target for target, _, _ in mcp_tools.schema_targets()]
    assert path.read_text(encoding="utf-8") == mcp_tools.render_schema(tool), (
        f"contracts/mcp-{tool}.schema.json drifted: run `memcore contracts generate`"
    )


def _type_arrays(value: Any, at: str = "$") -> list[str]:
    if isinstance(value, dict):
        found = [at] if isinstance(value.get("type"), list) else []
        return found + [p for k, v in value.items() for p in _type_arrays(v, f"{at}.{k}")]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _type_arrays(v, f"{at}[{i}]")]
    return []


def test_nullable_types_are_anyof_branches_that_keep_their_constraints() -> None:
    """The Inspector's portability lint: a type array is lost on single-``type`` dialects."""
    for tool, (_, _, input_schema, output_schema) in mcp_tools.tool_definitions().items():
        assert _type_arrays(input_schema) == [] and _type_arrays(output_schema) == [], tool
    input_schema, _ = mcp_tools.tool_schemas()
    budget = input_schema["properties"]["budget"]
    assert budget["anyOf"] == [{"type": "integer", "minimum": 1, "maximum": 100000}, {"type": "null"}]
    assert budget["default"] is None and "description" in budget and "minimum" not in budget
    before = {"type": ["string", "null"], "maxLength": 3, "description": "d", "items": {"type": ["integer", "null"]}}
    assert mcp_tools.portable(before) == {"description": "d", "anyOf": [
        {"type": "string", "maxLength": 3, "items": {"anyOf": [{"type": "integer"}, {"type": "null"}]}},
        {"type": "null"}]}  # fmt: skip
    # A property may be named like a keyword: it is a schema all the same.
    assert mcp_tools.portable({"properties": {"type": {"type": ["boolean", "null"]}}}) == {
        "properties": {"type": {"anyOf": [{"type": "boolean"}, {"type": "null"}]}}}  # fmt: skip


def test_the_tool_schemas_are_valid_and_self_contained() -> None:
    import jsonschema
    from referencing import Registry

    input_schema, output_schema = mcp_tools.tool_schemas()
    for schema in (input_schema, output_schema):
        jsonschema.Draft202012Validator.check_schema(schema)
        assert schema["type"] == "object"
        assert "#/components/" not in json.dumps(schema)
    inputs = jsonschema.Draft202012Validator(input_schema, registry=Registry())
    assert inputs.is_valid({"project": "notes", "query": "rollback"})
    assert inputs.is_valid({"project": "notes", "query": "rollback", "budget": None})
    assert inputs.is_valid({"project": "notes", "query": "q", "budget": 500, "activation_state": {"units": []}})
    for bad in ({"query": "q"}, {"project": "notes"}, {"project": "notes", "query": "q", "project_id": "x"},
                {"project": "notes", "query": "q", "budget": "many"}, {"project": "notes", "query": "q", "budget": 0},
                {"project": "notes", "query": "q", "activation_state": {"units": [{"unit_id": "a"}]}}):
        assert not inputs.is_valid(bad), bad
    assert set(input_schema["required"]) == {"project", "query"}
    example = json.loads((ROOT / "contracts" / "examples" / "activate_memory.response.json").read_text())
    jsonschema.Draft202012Validator(output_schema, registry=Registry()).validate(example)
    fragment = output_schema["$defs"]["Fragment"]["properties"]
    assert {"unit_id", "resource_id", "uri", "heading_path", "text", "token_count", "delta_action",
            "final_score"} <= set(fragment)
    assert {"fragments", "activation_state", "run_id", "revisions", "totals"} <= set(output_schema["required"])
    list_input, list_output = mcp_tools.list_tool_schemas()
    for schema in (list_input, list_output):
        jsonschema.Draft202012Validator.check_schema(schema)
    assert jsonschema.Draft202012Validator(list_input).is_valid({})
    assert not jsonschema.Draft202012Validator(list_input).is_valid({"project": "x"})
    listing = {"projects": [{"project_id": "a", "indexed": False, "resource_count": None, "unit_count": None,
                             "indexed_at": None}]}  # fmt: skip
    jsonschema.Draft202012Validator(list_output).validate(listing)


def test_bad_arguments_are_refused_before_any_daemon_is_started(tmp_path: Path) -> None:
    forwarder = mcp_server.Forwarder(tmp_path / "home", start_timeout_s=1)
    with pytest.raises(api.InvalidRequest, match=r"'query' is a required property"):
        forwarder.activate({"project": "notes"})
    # A nullable value's problem in its typed branch's words, not "not valid under any of the given schemas".
    with pytest.raises(api.InvalidRequest, match=r"0 is less than the minimum of 1 @ \$\.budget"):
        forwarder.activate({"project": "notes", "query": "q", "budget": 0})
    with pytest.raises(api.InvalidRequest, match=r"'many' is not of type 'integer' or 'null' @ \$\.budget"):
        forwarder.activate({"project": "notes", "query": "q", "budget": "many"})
    with pytest.raises(api.InvalidRequest, match=r"invalid list_projects arguments: .*'x' was unexpected"):
        forwarder.list_projects({"x": 1})
    assert not (tmp_path / "home").exists()


# -- the real thing ---------------------------------------------------------------------------
async def drive(home: Path, memory: Path, stderr: Path) -> dict[str, Any]:
    from mcp import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    seen: dict[str, Any] = {"stray": []}

    async def on_message(message: Any) -> None:
        if isinstance(message, Exception):  # a line on stdout that is not JSON-RPC
            seen["stray"].append(repr(message))

    server = StdioServerParameters(
        command=sys.executable,
        args=["-m", "memory_core", "--home", str(home), "mcp", "--log-level", "info"],
        cwd=str(ROOT),
        env={"TMPDIR": str(home.parent / "tmp"), "PYTHONUNBUFFERED": "1"},
    )
    with stderr.open("w") as errlog:
        async with stdio_client(server, errlog=errlog) as (read, write), \
                ClientSession(read, write, message_handler=on_message) as session:
            await session.initialize()
            seen["tools"] = (await session.list_tools()).tools
            assert paths.read_info(home) is None, "listing tools must not start the daemon"
            seen["no_projects"] = await session.call_tool("list_projects", {})

            # The first call starts the daemon; the project does not exist yet.
            started = time.perf_counter()
            seen["missing"] = await session.call_tool("activate_memory", {"project": "notes", "query": QUESTION})
            seen["start_s"] = time.perf_counter() - started
            with DaemonClient.for_home(home) as client:  # a person adds and indexes the project
                client.add_project("notes", [Source(str(memory))])
                client.index_project("notes")
                client.add_project("later", [Source(str(memory))])

            seen["first"] = await session.call_tool("activate_memory", {"project": "notes", "query": QUESTION})
            state = seen["first"].structured_content["activation_state"]
            seen["second"] = await session.call_tool(
                "activate_memory", {"project": "notes", "query": QUESTION, "activation_state": state}
            )
            seen["invalid"] = await session.call_tool("activate_memory", {"project": "notes", "budget": "x"})
            seen["not_indexed"] = await session.call_tool("activate_memory", {"project": "later", "query": "q"})
            seen["projects"] = await session.call_tool("list_projects", {})
            seen["unknown"] = await session.call_tool("activate_memory", {"project": "note", "query": "q"})
    return seen


@pytest.mark.slow
def test_an_agent_activates_memory_through_mcp(tmp_path: Path) -> None:
    home, memory = tmp_path / "home", memory_folder(tmp_path / "memory")
    (tmp_path / "tmp").mkdir()
    try:
        seen = anyio.run(drive, home, memory, tmp_path / "mcp.stderr")
        info = paths.read_info(home)
        assert info is not None, "the MCP server did not start a daemon"
        log = (tmp_path / "mcp.stderr").read_text()

        # Two tools, with the committed schemas.
        assert [t.name for t in seen["tools"]] == ["activate_memory", "list_projects"]
        for tool in seen["tools"]:
            committed = json.loads((ROOT / "contracts" / f"mcp-{tool.name}.schema.json").read_text())
            assert tool.description == committed["toolDescription"]
            assert tool.input_schema == committed["inputSchema"] and tool.output_schema == committed["outputSchema"]

        # Errors are tool results with the daemon's stable code, not protocol failures: text for
        # the model (what failed, what to do), no structured content (it could not match the
        # outputSchema), the envelope in _meta.
        errors = {}
        for name in ("missing", "invalid", "not_indexed", "unknown"):
            assert seen[name].is_error and seen[name].structured_content is None, name
            errors[name] = seen[name].meta[mcp_replies.META_ERROR]
        assert errors["missing"]["code"] == "project_not_found"
        assert "no project exists yet" in seen["missing"].content[0].text
        assert errors["invalid"]["code"] == "invalid_request"
        assert "'query' is a required property" in seen["invalid"].content[0].text
        not_indexed = errors["not_indexed"]
        assert not_indexed["code"] == "project_not_indexed" and not_indexed["details"]["run_id"]
        assert f"recorded as failed Run {not_indexed['details']['run_id']}" in seen["not_indexed"].content[0].text
        assert errors["unknown"]["details"]["known_projects"] == ["later", "notes"]
        assert "known projects: later, notes" in seen["unknown"].content[0].text

        # list_projects: none at first, then both, with which one is indexed.
        assert seen["no_projects"].structured_content == {"projects": []}
        listed = seen["projects"].structured_content["projects"]
        assert [(p["project_id"], p["indexed"], p["unit_count"]) for p in listed] == [
            ("later", False, None), ("notes", True, 5)]  # fmt: skip
        assert "- later (not indexed" in seen["projects"].content[0].text

        # Fragments, delta actions and run ids; the second call reuses what the first sent. The
        # text is each fragment under its id and the state to send back, not the JSON again.
        first, second = seen["first"].structured_content, seen["second"].structured_content
        text = seen["first"].content[0].text
        assert not seen["first"].is_error and all(f["text"] in text for f in first["fragments"])
        assert json.loads(text.splitlines()[-1].split(": ", 1)[1]) == first["activation_state"]
        assert "(you hold it: no text sent)" in seen["second"].content[0].text
        assert first["fragments"] and {f["delta_action"] for f in first["fragments"]} == {"add"}
        assert first["fragments"][0]["resource_id"] == "runbooks/deploy.md"
        assert first["freshness"]["live"] and first["freshness"]["index_behind"] is False  # the files did not change
        assert all(f["text"] for f in first["fragments"])
        assert {f["delta_action"] for f in second["fragments"]} == {"reuse"}
        assert all(f["text"] is None for f in second["fragments"])
        assert first["run_id"] and second["run_id"] and first["run_id"] != second["run_id"]

        # Both Runs are the daemon's, and their selected candidates are the fragments returned.
        with DaemonClient.for_home(home) as client:
            status = client.runtime_status()
            assert status.pid == info.pid and status.home == str(home)
            failed = client.get_retrieval_run(not_indexed["details"]["run_id"]).summary
            assert failed.status == "failed" and failed.error_code == "project_not_indexed"
            for answer in (first, second):
                detail = client.get_retrieval_run(answer["run_id"])
                assert detail.summary.status == "succeeded" and detail.summary.query == QUESTION
                selected = [c for c in detail.candidates if c.disposition == "selected"]
                assert [(c.unit_id, c.unit_hash, c.delta_action, c.final_rank) for c in selected] == [
                    (f["unit_id"], f["unit_hash"], f["delta_action"], f["final_rank"]) for f in answer["fragments"]
                ]

        # Stdout carried the protocol only; the logs went to stderr.
        assert seen["stray"] == []
        calls = [json.loads(line) for line in log.splitlines() if line.startswith("{") and '"call"' in line]
        assert [(c["tool"], c["code"]) for c in calls] == [
            ("list_projects", "ok"), ("activate_memory", "project_not_found"), ("activate_memory", "ok"),
            ("activate_memory", "ok"), ("activate_memory", "invalid_request"),
            ("activate_memory", "project_not_indexed"), ("list_projects", "ok"),
            ("activate_memory", "project_not_found")]
        # The daemon outlives the MCP server (detached, its own session and log).
        assert (home / "run" / "daemon.log").exists()
        assert oct((home / "run" / "daemon.log").stat().st_mode & 0o777) == "0o600"
    finally:
        if paths.read_info(home) is not None:
            stop_daemon(home)
    assert not paths.default_socket_path(home).exists()


# -- every request gets an answer (issue 14 item 4) -------------------------------------------------
def _nested(levels: int) -> list[Any]:
    root: list[Any] = []
    node = root
    for _ in range(levels - 1):
        node.append([])
        node = node[0]
    return root


async def drive_refused(home: Path, stderr: Path) -> dict[str, Any]:
    """The official client sends what it can serialize: activation_state 200 levels deep (past
    the decoder's 64; the SDK's own parser dropped such lines and the call waited forever)."""
    from mcp import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    server = StdioServerParameters(
        command=sys.executable, args=["-m", "memory_core", "--home", str(home), "mcp"], cwd=str(ROOT),
        env={"TMPDIR": str(home.parent / "tmp"), "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    seen: dict[str, Any] = {}
    with stderr.open("w") as errlog:
        async with stdio_client(server, errlog=errlog) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            with anyio.fail_after(60):  # a hang fails here instead of waiting forever
                seen["deep"] = await session.call_tool(
                    "activate_memory", {"project": "notes", "query": "q", "activation_state": {"units": _nested(200)}}
                )
                seen["tools"] = (await session.list_tools()).tools  # still serving
    return seen


@pytest.mark.slow
def test_a_deeply_nested_activation_state_from_the_official_client_is_a_tool_error(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (tmp_path / "tmp").mkdir()
    seen = anyio.run(drive_refused, home, tmp_path / "mcp.stderr")
    deep = seen["deep"]
    assert deep.is_error and deep.structured_content is None
    assert deep.meta[mcp_replies.META_ERROR]["code"] == "invalid_request"
    assert deep.meta[mcp_replies.META_ERROR]["details"]["reason"] == "too_deep"
    assert [t.name for t in seen["tools"]] == ["activate_memory", "list_projects"]
    assert paths.read_info(home) is None, "a refused line must not reach (or start) the daemon"
    assert "Traceback" not in (tmp_path / "mcp.stderr").read_text()


def _call(request_id: int, arguments: str) -> bytes:
    return (f'{{"jsonrpc": "2.0", "id": {request_id}, "method": "tools/call", '
            f'"params": {{"name": "activate_memory", "arguments": {arguments}}}}}').encode()  # fmt: skip


HASH = "ab" * 32
RAW_LINES: dict[int | None, bytes] = {
    1: _call(1, '{"project": "notes", "query": "\\ud800 rollback"}'),
    2: _call(2, '{"project": "notes", "query": "q", "activation_state": {"units": [{"unit_id": "\\udc80", '
                f'"unit_hash": "{HASH}"}}]}}}}'),
    3: _call(3, '{"project": "notes", "query": "q", "activation_state": ' + "[" * 100_000 + "]" * 100_000 + "}"),
    4: _call(4, '{"project": "notes", "query": "q", "query": "r"}'),
    5: _call(5, '{"project": "notes", "query": "q", "budget": NaN}'),
    6: b'{"jsonrpc": "2.0", "id": 6, "method": "tools/list", "params": {"cursor": "\\ud800"}}',
    7: b'{"jsonrpc": "2.1", "id": 7, "method": "ping"}',
}
EXPECTED_TOOL_ERRORS = {1: ("invalid_request", "lone_surrogate"), 2: ("invalid_request", "lone_surrogate"),
                        3: ("invalid_request", "too_deep"), 4: ("invalid_request", "duplicate_key"),
                        5: ("invalid_json", "invalid_json")}  # fmt: skip


@pytest.mark.slow
def test_every_raw_line_gets_an_answer(tmp_path: Path) -> None:
    """Raw lines on ``memcore mcp``'s stdin, as a client with its own JSON writer sends them."""
    home = tmp_path / "home"
    hello = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
    init = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": hello}
    lines = [json.dumps(init).encode(), b'{"jsonrpc": "2.0", "method": "notifications/initialized"}',
             *RAW_LINES.values(),
             b'{"jsonrpc": "2.0", "id": 8, "method": "tools/call"', b"not json", b"\xff\xfe{}", b"",
             b'{"jsonrpc": "2.0", "id": 9, "method": "ping"}']  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "memory_core", "--home", str(home), "mcp"], cwd=ROOT, input=b"\n".join(lines) + b"\n",
        capture_output=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0 and b"Traceback" not in done.stderr, done.stderr.decode(errors="replace")
    replies = [json.loads(line) for line in done.stdout.decode("utf-8").splitlines()]
    by_id: dict[Any, list[dict[str, Any]]] = {}
    for reply in replies:
        by_id.setdefault(reply["id"], []).append(reply)
    for request_id, (code, reason) in EXPECTED_TOOL_ERRORS.items():
        (reply,) = by_id[request_id]
        result = reply["result"]
        assert result["isError"] and "structuredContent" not in result, reply
        assert result["_meta"][mcp_replies.META_ERROR]["code"] == code, reply
        assert result["_meta"][mcp_replies.META_ERROR]["details"]["reason"] == reason, reply
        assert result["content"][0]["text"].startswith(f"error[{code}]: "), reply
    assert by_id[1][0]["result"]["_meta"][mcp_replies.META_ERROR]["details"]["path"] == "$.params.arguments.query"
    assert by_id[2][0]["result"]["_meta"][mcp_replies.META_ERROR]["details"]["path"] == (
        "$.params.arguments.activation_state.units[0].unit_id")
    assert by_id[6][0]["error"]["code"] == -32600 and by_id[6][0]["error"]["data"]["error"]["code"] == "invalid_request"
    assert by_id[7][0]["error"]["code"] == -32600  # JSON, but not a JSON-RPC 2.0 message
    # No id to be read: JSON-RPC's parse error with a null id, one per line (the blank line: none).
    assert [r["error"]["code"] for r in by_id[None]] == [-32700, -32700, -32700]
    assert by_id[9] == [{"jsonrpc": "2.0", "id": 9, "result": {}}]  # and it still serves
    assert paths.read_info(home) is None


# Requests whose id MCP does not allow (an integer or a string only): the SDK's message types
# read each as a notification and dropped it unanswered and unlogged (issue 30 item 6). The
# surrogate one is refused by the decoder first, the others by the id rule.
INVALID_IDS = ["[1]", '{"n": 1}', "1.5", "2.0", "null", "true", '"\\ud800"']


@pytest.mark.slow
def test_a_request_with_an_invalid_id_is_answered_with_a_null_id(tmp_path: Path) -> None:
    home = tmp_path / "home"
    hello = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
    lines = [json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": hello}).encode(),
             b'{"jsonrpc": "2.0", "method": "notifications/initialized"}',
             *(f'{{"jsonrpc": "2.0", "id": {rid}, "method": "ping"}}'.encode() for rid in INVALID_IDS),
             b'{"jsonrpc": "2.0", "id": [2], "method": "tools/call", "params": {"name": "list_projects"}}',
             b'{"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"reason": "\\ud800"}}',
             b'{"jsonrpc": "2.0", "id": 9, "method": "ping"}']  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "memory_core", "--home", str(home), "mcp", "--log-level", "info"], cwd=ROOT,
        input=b"\n".join(lines) + b"\n", capture_output=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0 and b"Traceback" not in done.stderr, done.stderr.decode(errors="replace")
    replies = [json.loads(line) for line in done.stdout.decode("utf-8").splitlines()]
    assert [r["id"] for r in replies] == [0, *[None] * (len(INVALID_IDS) + 1), 9]  # the notification: none
    for reply in replies[1:-1]:
        assert reply["error"]["code"] == -32600, reply
        assert reply["error"]["data"]["error"]["code"] == "invalid_request", reply
    reasons = [r["error"]["data"]["error"]["details"]["reason"] for r in replies[1:-1]]
    assert reasons == [*["invalid_id"] * (len(INVALID_IDS) - 1), "lone_surrogate", "invalid_id"]
    assert replies[3]["error"]["message"] == "a request id must be an integer or a string, not a number with a fraction"
    logged = [json.loads(line) for line in done.stderr.decode().splitlines() if line.startswith("{")]
    refused = [entry for entry in logged if entry["message"] == "refused a line"]
    assert [(e["reason"], e["answered"]) for e in refused] == [(reason, True) for reason in reasons] + [
        ("lone_surrogate", False)]  # each line logged, the notification too
    assert paths.read_info(home) is None, "a refused tools/call must not start the daemon"


# Any JSON value that is not an integer or a string, as it would come from a client's writer.
NOT_AN_ID = st.recursive(
    st.none() | st.booleans() | st.integers().map(float)
    | st.floats(allow_nan=False, allow_infinity=False).filter(lambda f: not f.is_integer()),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=6,
)  # fmt: skip


@pytest.mark.slow
def test_any_id_that_is_not_an_integer_or_a_string_gets_an_answer(tmp_path: Path) -> None:
    """Property: whatever the invalid id, exactly one -32600 with a null id, between two pings."""
    from tests.reliability.test_fuzz_transports import McpLines

    lines = McpLines(tmp_path / "home", tmp_path / "mcp.stderr")
    try:
        lines.initialize()

        @settings(max_examples=100, deadline=None, derandomize=True)
        @given(rid=NOT_AN_ID, method=st.sampled_from(["ping", "tools/list", "tools/call", "initialize"]))
        def answered(rid: Any, method: str) -> None:
            mark = next(lines.ids)
            lines.send(json.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": {}}).encode())
            lines.send(json.dumps({"jsonrpc": "2.0", "id": mark, "method": "ping"}).encode())
            between = []
            while (reply := lines.replies.get(timeout=60))["id"] != mark:
                between.append(reply)
            assert [(r["id"], r["error"]["code"]) for r in between] == [(None, -32600)], (rid, between)

        answered()
    finally:
        assert lines.close() == 0
    assert "Traceback" not in (tmp_path / "mcp.stderr").read_text()


@pytest.mark.slow
def test_requests_in_flight_when_stdin_ends_are_answered(tmp_path: Path) -> None:
    """A client that writes its last request and closes stdin (a pipe) still gets the answer: the
    list_projects call waits on starting the daemon, long after stdin has ended."""
    home = tmp_path / "home"
    hello = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
    lines = [
        {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": hello},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "list_projects", "arguments": {}}},
    ]
    done = subprocess.run(
        [sys.executable, "-m", "memory_core", "--home", str(home), "mcp", "--idle-exit", "1"], cwd=ROOT,
        input="".join(json.dumps(line) + "\n" for line in lines).encode(), capture_output=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    replies = {reply["id"]: reply for reply in map(json.loads, done.stdout.decode().splitlines())}
    assert replies[1]["result"]["structuredContent"]["projects"] == [], replies


# -- what the model reads of an answer's freshness (issue 15 item 3) --------------------------
def _answer(freshness: dict[str, Any] | None) -> dict[str, Any]:
    fragment = {"delta_action": "add", "unit_id": "a.md#0", "heading_path": ["A"], "text": "alpha"}
    return {"fragments": [fragment], "totals": {"tokens": 3, "budget": 100}, "run_id": "r1",
            "project_id": "notes", "activation_state": {"units": []}, "freshness": freshness}  # fmt: skip


def _freshness(**changes: Any) -> dict[str, Any]:
    current = {"live": True, "index_behind": False, "changed_resources": 0, "reindex_pending": False,
               "effective_memory_hash": "h", "stale_resources": [], "missing_resources": [], "error": None}  # fmt: skip
    return {**current, **changes}


def test_a_current_answer_says_nothing_of_freshness() -> None:
    text = mcp_replies.activation_text(_answer(_freshness()))
    assert "behind" not in text and "since indexed" not in text and "freshness" not in text
    assert text.splitlines()[1] == ""  # the summary line is followed by the fragments


def test_a_lagging_answer_names_what_changed_and_what_to_do() -> None:
    lines = mcp_replies.activation_text(_answer(_freshness(
        index_behind=True, changed_resources=2, reindex_pending=True,
        stale_resources=["a.md"], missing_resources=["gone.md"],
    ))).splitlines()  # fmt: skip
    assert lines[1] == "the index is behind the project's files (2 changed); a re-index is under way: ask again shortly"
    assert lines[2] == "edited since indexed, read the file instead: a.md"
    assert lines[3] == "deleted since indexed, do not rely on: gone.md"


def test_a_lag_with_no_pending_reindex_does_not_promise_one() -> None:
    lines = mcp_replies.activation_text(_answer(_freshness(index_behind=True, changed_resources=1))).splitlines()
    assert lines[1] == "the index is behind the project's files (1 changed)"
    assert "since indexed" not in "\n".join(lines)  # no returned fragment's file changed


def test_an_unreadable_live_memory_says_freshness_is_unknown_and_why() -> None:
    unknown = _freshness(live=False, index_behind=None, changed_resources=None,
                         error="source '/m' is unavailable: Permission denied")  # fmt: skip
    assert mcp_replies.activation_text(_answer(unknown)).splitlines()[1] == (
        "freshness unknown: source '/m' is unavailable: Permission denied"
    )
    no_reason = _freshness(live=False, error=None)
    assert mcp_replies.activation_text(_answer(no_reason)).splitlines()[1] == (
        "freshness unknown: the live memory could not be read"
    )


def test_the_tool_says_what_freshness_means_and_how_to_wait() -> None:
    schema = json.loads(mcp_tools.render_schema("activate_memory"))
    for field in ("index_behind", "changed_resources", "reindex_pending", "stale_resources", "missing_resources"):
        assert field in schema["toolDescription"], field
    wait = schema["inputSchema"]["properties"]["wait_for_index_ms"]
    assert wait["default"] == 0 and wait["maximum"] == 60000 and "re-index" in wait["description"]
