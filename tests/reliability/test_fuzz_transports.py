"""Every string field of every request type of the dispatch table, fuzzed on all three
transports (issue 14 items 3 and 4): the daemon's Unix socket, the UI port (the same ``/v1`` app
behind its guard) and the MCP server's stdin, against one real daemon (apsw, Lucene, the models)
and a real ``memcore mcp`` process.

Values are hypothesis strings with lone surrogates, NUL, bidi controls and other edge characters,
sent both escaped (``\\ud800``) and as raw bytes (surrogates as CESU-8, which is not UTF-8), and
raw JSON fragments spliced in: 100,000-deep nesting, huge and non-finite numbers, duplicate keys.
Whatever the input: no 5xx, never an ``internal_error``, always the JSON error envelope (valid
UTF-8), an answer within the timeout (no hang), and no traceback in any log. Request bases are
built from the request types themselves, so a new method or field is fuzzed without an edit here
(and a field type the builder does not know fails loudly).
"""

from __future__ import annotations

import collections.abc
import copy
import enum
import itertools
import json
import os
import queue
import subprocess
import sys
import threading
import time
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memory_core.entrypoints.daemon import api, dispatch, paths
from memory_core.entrypoints.ui.app import UI_METHODS
from memory_core.entrypoints.wire_input import MAX_DEPTH
from memory_core.retrieval.activation_state import ActivationState
from tests.ui.conftest import UiDaemon

pytestmark = pytest.mark.slow  # a daemon with the models, and an MCP subprocess
ROOT = Path(__file__).resolve().parents[2]
PROJECT, SPARE = "ledger", "spare"
# Examples per transport (docs/reliability.md says these numbers); derandomized, so CI tries the
# same inputs every run. Raise them locally to explore.
EXAMPLES = {"socket": 300, "ui": 200, "mcp": 200}
TIMEOUT_S = 60  # an answer later than this is a hang
FUZZ = settings(
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)

DEEP = "[" * 100_000 + "]" * 100_000
RAW_FRAGMENTS = (
    DEEP,
    '{"a":' * 100_000 + "1" + "}" * 100_000,
    "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1),  # just past the bound
    "1" * 5_000,  # past Python's int-from-text limit
    "-" + "9" * 400,
    "18446744073709551616",
    "1e999",
    "-1e400",
    "1e-999",
    "NaN",
    "-Infinity",
    '{"a":1,"a":2}',
    '"\\ud800"',
    '"\\udfff\\ud800 tail"',
    '"\\ud83d\\ude00"',  # a paired escape: an emoji, valid
    '"\\u0000"',
    "[]",
    "{}",
    "null",
)
EDGE = st.characters(categories=["Cs", "Cc", "Cf", "Zs", "Zl", "Zp", "Mn", "Co"])
BIDI = ("\u202e", "\u202d", "\u2066", "\u2067", "\u2068", "\u2069", "\u200f", "\u061c")
STRINGS = st.one_of(
    st.text(EDGE, min_size=1, max_size=6),
    st.text(max_size=20),
    st.lists(st.sampled_from(("\ud800", "\udfff", "\x00", *BIDI, "a", "../", "é", "\U0010ffff")), min_size=1,
             max_size=6).map("".join),
    st.sampled_from(("", " ", "\x00", "nul\x00byte", "\ud800", "\udc80.md", "../../etc/passwd", "x" * 3_000,
                     "ledger\u202e", "ledger\x00", "LEDGER", "2026-01-01T00:00:00\ud800Z", "a" * 70)),
)  # fmt: skip
VALUES = st.one_of(STRINGS.map(lambda s: ("string", s)), st.sampled_from(RAW_FRAGMENTS).map(lambda r: ("raw", r)))
MARK = "\x00@@fuzz@@\x00"


# -- one daemon with its UI, a project, a Run, a case ------------------------------------------------
@attrs.define
class Served:
    daemon: UiDaemon
    sandbox: Path
    strings: dict[str, str]
    fixture: dict[str, Any]
    state: dict[str, Any]

    def sandboxed(self, value: str) -> str:
        """A fuzzed path, kept inside the sandbox: relative ones stay relative (refused unread),
        absolute ones are re-rooted with their ``..`` defused, so nothing walks the real disk."""
        if not value.startswith("/"):
            return value
        return str(self.sandbox / value.lstrip("/").replace("..", "_."))


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    base = tmp_path_factory.mktemp("fuzz-transports")
    daemon = UiDaemon(base)
    try:
        from memory_core.domain.model import Source

        daemon.client.add_project(PROJECT, [Source(str(daemon.memory))])
        daemon.client.index_project(PROJECT)
        daemon.client.add_project(SPARE, [Source(str(daemon.memory))])
        response = daemon.client.activate_memory(PROJECT, "how do I roll back a deploy?")
        assert response.run_id is not None
        case = daemon.client.create_evaluation_case(response.run_id)
        fixture = dict(daemon.client.export_evaluation_set(PROJECT).document)
        held = response.activation_state.units[0]
        sandbox = base / "sandbox"
        (sandbox / "src").mkdir(parents=True)
        (sandbox / "src" / "a.md").write_text("# A\n\nsandboxed\n", encoding="utf-8")
        strings = {
            "project_id": PROJECT, "run_id": response.run_id, "case_id": case.case_id, "case_ids": case.case_id,
            "path": str(sandbox / "src"), "destination": str(sandbox / "moved"), "query": "rollback",
            "text": "helm", "since": "2026-01-01", "until": "2999-01-01", "status": "succeeded",
            "unit_id": held.unit_id, "unit_hash": held.unit_hash, "resource_id": response.fragments[0].resource_id,
            "note": "fine",
        }  # fmt: skip
        state = {"units": [{"unit_id": held.unit_id, "unit_hash": held.unit_hash}]}
        yield Served(daemon, sandbox, strings, fixture, state)
    finally:
        assert daemon.stop() == 0, daemon.log.read_text()
        log = daemon.log.read_text(errors="replace")
        assert "Traceback" not in log, log[-5_000:]
        assert '"code": "internal_error"' not in log, log[-5_000:]


# -- request bases from the request types ---------------------------------------------------------------
# Free-form documents (a ranking profile's settings, a tuning grid): a valid one each, so the
# fuzz reaches past them to the method.
MAPPING_BASES: dict[str, Any] = {"settings": {"rrf_k": 60}, "grid": {"rrf_k": [60]}}


def base_value(tp: Any, name: str, served: Served) -> Any:
    """A valid-looking wire value of type ``tp`` for field ``name``."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        (inner,) = [a for a in args if a is not type(None)]
        return base_value(inner, name, served)
    if tp is str:
        return served.strings.get(name, "x")
    if tp is bool:
        return False
    if tp is int:
        return {"budget": 500, "limit": 5, "expected_judgment_version": 0}.get(name, 1)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return next(iter(tp)).value
    if origin is tuple:
        return [base_value(args[0], name, served)]
    if origin in (collections.abc.Mapping, dict) and name in MAPPING_BASES:
        return copy.deepcopy(MAPPING_BASES[name])
    if tp is ActivationState:
        return copy.deepcopy(served.state)
    if tp is api.EvaluationFixture:
        return copy.deepcopy(served.fixture)
    if attrs.has(tp):
        hints = typing.get_type_hints(tp)
        return {f.name: base_value(hints[f.name], f.name, served) for f in attrs.fields(tp)}
    raise AssertionError(f"the fuzz base builder does not know {tp!r} (field {name}): teach base_value")


def string_leaves(value: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if isinstance(value, str):
        return [at]
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in string_leaves(v, (*at, k))]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in string_leaves(v, (*at, i))]
    return []


def with_value(base: Any, leaf: tuple[Any, ...], value: Any) -> Any:
    doc = copy.deepcopy(base)
    node = doc
    for key in leaf[:-1]:
        node = node[key]
    node[leaf[-1]] = value
    return doc


def encode(doc: Any, drawn: tuple[str, str], escaped: bool) -> bytes:
    """``doc`` as request bytes with the drawn value at ``MARK``: a string JSON-escaped, or raw
    (lone surrogates then become CESU-8 bytes, which are not UTF-8), or a raw JSON fragment."""
    kind, value = drawn
    text = json.dumps(doc, ensure_ascii=escaped)
    fragment = value if kind == "raw" else json.dumps(value, ensure_ascii=escaped)
    return text.replace(json.dumps(MARK, ensure_ascii=escaped), fragment).encode("utf-8", "surrogatepass")


def methods_with_strings(served: Served, names: frozenset[str] | None = None) -> list[tuple[str, Any, list[Any]]]:
    out = []
    for method in dispatch.METHODS:
        if names is not None and method.name not in names:
            continue
        base = base_value(method.request, method.name, served)
        leaves = string_leaves(base)
        if leaves:
            out.append((method.name, base, leaves))
    return out


@st.composite
def requests(draw: st.DrawFn, served: Served, names: frozenset[str] | None = None) -> tuple[str, bytes]:
    name, base, leaves = draw(st.sampled_from(methods_with_strings(served, names)))
    leaf = draw(st.sampled_from(leaves))
    drawn = draw(VALUES)
    if drawn[0] == "string" and leaf[-1] in ("path", "destination"):
        drawn = ("string", served.sandboxed(drawn[1]))
    return name, encode(with_value(base, leaf, MARK), drawn, draw(st.booleans()))


# -- the HTTP transports ----------------------------------------------------------------------------
def socket_client(served: Served) -> httpx.Client:
    transport = httpx.HTTPTransport(uds=str(paths.default_socket_path(served.daemon.home)))
    return httpx.Client(transport=transport, base_url="http://localhost", timeout=TIMEOUT_S)


def ui_client(served: Served) -> httpx.Client:
    info = served.daemon.info
    headers = {"authorization": f"Bearer {info.token}", "origin": info.base_url.rstrip("/")}
    return httpx.Client(base_url=info.base_url, headers=headers, timeout=TIMEOUT_S)


def assert_enveloped(reply: httpx.Response, what: str) -> None:
    assert reply.status_code < 500, f"{what}: {reply.status_code} {reply.content[:500]!r}"
    assert reply.headers["content-type"].startswith("application/json"), f"{what}: {reply.headers}"
    doc = json.loads(reply.content.decode("utf-8"))  # strict UTF-8, then JSON: always the envelope
    if reply.status_code >= 400:
        assert set(doc) == {"error"}, f"{what}: {doc}"
        error = doc["error"]
        assert isinstance(error["code"], str) and isinstance(error["message"], str), f"{what}: {doc}"
        assert isinstance(error["details"], dict), f"{what}: {doc}"


def post(client: httpx.Client, name: str, body: bytes) -> httpx.Response:
    return client.post(f"/v1/{name}", content=body, headers={"content-type": "application/json"})


@pytest.fixture(scope="module")
def socket(served: Served) -> Iterator[httpx.Client]:
    with socket_client(served) as client:
        yield client


@pytest.fixture(scope="module")
def ui(served: Served) -> Iterator[httpx.Client]:
    with ui_client(served) as client:
        yield client


@settings(FUZZ, max_examples=EXAMPLES["socket"])
@given(data=st.data())
def test_every_string_field_fuzzed_on_the_socket(served: Served, socket: httpx.Client, data: st.DataObject) -> None:
    name, body = data.draw(requests(served), label="request")
    assert_enveloped(post(socket, name, body), name)


@settings(FUZZ, max_examples=EXAMPLES["ui"])
@given(data=st.data())
def test_every_string_field_fuzzed_on_the_ui_port(served: Served, ui: httpx.Client, data: st.DataObject) -> None:
    name, body = data.draw(requests(served, UI_METHODS), label="request")
    assert_enveloped(post(ui, name, body), name)


STRUCTURAL = {
    "deep-array": DEEP.encode(),
    "deep-in-a-field": None,  # spliced into the method's first string field
    "duplicate-key": b'{"project_id": "ledger", "project_id": "ledger"}',
    "nan": b'{"project_id": NaN}',
    "huge-int": b'{"project_id": ' + b"1" * 5_000 + b"}",
    "1e999": b'{"budget": 1e999}',
    "not-utf8": b'{"project_id": "\xed\xa0\x80"}',
    "surrogate-key": b'{"\\ud800": 1}',
    "truncated": b'{"project_id": "led',
}


@pytest.mark.parametrize("transport", ["socket", "ui"])
@pytest.mark.parametrize("shape", sorted(STRUCTURAL))
def test_every_method_refuses_structural_junk_with_the_envelope(
    served: Served, socket: httpx.Client, ui: httpx.Client, transport: str, shape: str
) -> None:
    """Systematic: every method of the table (the UI port: refused ones too) with each shape."""
    client = socket if transport == "socket" else ui
    for method in dispatch.METHODS:
        body = STRUCTURAL[shape]
        if body is None:
            base = base_value(method.request, method.name, served)
            leaves = string_leaves(base)
            if not leaves:
                continue
            body = encode(with_value(base, leaves[0], MARK), ("raw", DEEP), True)
        reply = post(client, method.name, body)
        assert_enveloped(reply, f"{method.name} {shape}")
        if transport == "socket" or method.name in UI_METHODS:
            code = reply.json()["error"]["code"]
            assert reply.status_code == 400 and code in ("invalid_request", "invalid_json"), (method.name, code)


# Every string field of every method gets each of these, on both HTTP transports (the UI port:
# its UI_METHODS): the hypothesis tests above sample (method, field) pairs, so a field of a large
# request (a fixture has over a hundred) may never be drawn there.
HOSTILE = {
    "lone-surrogate": ("string", "\ud800"),
    "cesu8-surrogate": ("raw-bytes", "\udfff tail"),  # sent unescaped: bytes that are not UTF-8
    "nul": ("string", "a\x00b"),
    "bidi": ("string", "ledger\u202e"),
    "one-mebibyte": ("string", "x" * (1 << 20)),
}


def hostile_requests(served: Served, names: frozenset[str] | None = None) -> Iterator[tuple[str, bytes]]:
    for name, base, leaves in methods_with_strings(served, names):
        for leaf in leaves:
            for kind, value in HOSTILE.values():
                if leaf[-1] in ("path", "destination"):
                    value = served.sandboxed(value)
                escaped = kind != "raw-bytes"
                yield f"{name} {leaf}", encode(with_value(base, leaf, MARK), ("string", value), escaped)


@pytest.mark.parametrize("transport", ["socket", "ui"])
def test_every_string_field_of_every_method_gets_each_hostile_value(
    served: Served, socket: httpx.Client, ui: httpx.Client, transport: str
) -> None:
    """Systematic: (method, string field, hostile value) for all of them; each answer is below 500
    and the JSON envelope (a refusal is 4xx; a value a field may hold, say a bidi mark in a note,
    may also succeed)."""
    client, names = (socket, None) if transport == "socket" else (ui, UI_METHODS)
    sent = 0
    for what, body in hostile_requests(served, names):
        assert_enveloped(post(client, what.split()[0], body), what)
        sent += 1
    print(f"{transport}: {sent} hostile requests")  # docs/reliability.md gives the count (-s shows it)
    assert sent >= len(HOSTILE) * len(methods_with_strings(served, names))  # every method, at least one field


# -- MCP: raw lines on the server's stdin -----------------------------------------------------------------
class McpLines:
    """``memcore mcp`` on the served home, spoken to in raw lines; replies are read by a thread."""

    def __init__(self, home: Path, stderr: Path) -> None:
        self.errlog = stderr.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "memory_core", "--home", str(home), "mcp", "--log-level", "info"],
            cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.errlog,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )  # fmt: skip
        self.replies: queue.Queue[dict[str, Any]] = queue.Queue()
        self.stray: list[bytes] = []
        threading.Thread(target=self._read, daemon=True).start()
        self.ids = itertools.count(1)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                self.replies.put(json.loads(line.decode("utf-8")))
            except ValueError:
                self.stray.append(line)

    def send(self, line: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + b"\n")
        self.proc.stdin.flush()

    def reply(self, request_id: int | None) -> dict[str, Any]:
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            left = deadline - time.monotonic()
            assert left > 0, f"no reply to id {request_id}: the agent would wait forever"
            try:
                message = self.replies.get(timeout=left)
            except queue.Empty:
                continue
            if message.get("id") == request_id:
                return message

    def initialize(self) -> None:
        init = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "fuzz", "version": "1"}}
        self.send(json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": init}).encode())
        assert "result" in self.reply(0)
        self.send(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}')

    def close(self) -> int:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            return self.proc.wait(timeout=60)
        finally:
            self.errlog.close()


@pytest.fixture(scope="module")
def mcp(served: Served, tmp_path_factory: pytest.TempPathFactory) -> Iterator[McpLines]:
    stderr = tmp_path_factory.mktemp("mcp") / "mcp.stderr"
    lines = McpLines(served.daemon.home, stderr)
    try:
        lines.initialize()
        yield lines
    finally:
        assert lines.close() == 0
        log = stderr.read_text(errors="replace")
        assert "Traceback" not in log, log[-5_000:]
        assert lines.stray == [], lines.stray[:3]


def tool_call(served: Served, request_id: int) -> dict[str, Any]:
    arguments = {"project": PROJECT, "query": "rollback", "budget": 500, "activation_state": served.state}
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
            "params": {"name": "activate_memory", "arguments": arguments}}  # fmt: skip


def assert_answered(message: dict[str, Any], what: str) -> None:
    """A result (a tool error carries the daemon's envelope, never internal_error) or a JSON-RPC
    error with a standard code (never the catch-all 0 or -32603 of a crashed handler)."""
    if "error" in message:
        assert message["error"]["code"] in (-32700, -32600, -32601, -32602), f"{what}: {message}"
        return
    result = message["result"]
    if result.get("isError"):
        # No structuredContent on an error (it would not match the outputSchema): the daemon's
        # envelope rides in _meta.
        assert "structuredContent" not in result, f"{what}: {message}"
        error = result["_meta"]["memory-core/error"]
        assert error["code"] != "internal_error" and isinstance(error["message"], str), f"{what}: {message}"


@settings(FUZZ, max_examples=EXAMPLES["mcp"])
@given(data=st.data())
def test_every_string_field_fuzzed_on_mcp(served: Served, mcp: McpLines, data: st.DataObject) -> None:
    request_id = next(mcp.ids)
    base = tool_call(served, request_id)
    leaf = data.draw(st.sampled_from([p for p in string_leaves(base) if p != ("jsonrpc",)] + [("jsonrpc",)]))
    drawn = data.draw(VALUES)
    mcp.send(encode(with_value(base, leaf, MARK), drawn, data.draw(st.booleans())))
    assert_answered(mcp.reply(request_id), f"{leaf}={drawn!r}"[:300])
    assert mcp.proc.poll() is None, "the MCP server died"


@pytest.mark.parametrize("line", [b"{", b"not json", b"\xff\xfe", b"[1,", b'{"jsonrpc": "2.0", "id": 1' + b"[" * 10])
def test_a_line_that_is_not_json_gets_a_parse_error(mcp: McpLines, line: bytes) -> None:
    mcp.send(line)
    reply = mcp.reply(None)
    assert reply["error"]["code"] == -32700 and reply["error"]["data"]["error"]["code"] == "invalid_json"
