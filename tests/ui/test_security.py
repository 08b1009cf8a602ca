"""The UI app in process (no browser, no subprocess): who may call it, what it answers, and the
pieces the daemon wires it with (listener routing, the UI port, ``ui.json``, ``memcore ui``).

An in-memory engine behind the real daemon app and the real UI app, over Starlette's test client.
"""

from __future__ import annotations

import json
import os
import re
import socket
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
from starlette.testclient import TestClient

from memory_core.adapters.in_memory.storage import InMemoryScanner
from memory_core.domain.errors import InvalidRequest
from memory_core.domain.model import Source
from memory_core.entrypoints.bootstrap import bootstrap_in_memory
from memory_core.entrypoints.daemon import cli as daemon_cli
from memory_core.entrypoints.daemon.app import create_app
from memory_core.entrypoints.daemon.dispatch import Context
from memory_core.entrypoints.daemon.sockets import bind_ui_socket
from memory_core.entrypoints.ui import launch
from memory_core.entrypoints.ui.app import STATIC, UI_METHODS, by_listener, content_disposition, create_ui_app
from memory_core.entrypoints.ui.security import CSP, Secrets
from memory_core.evaluation.fixture import dump

PORT = 8765
ORIGIN = f"http://127.0.0.1:{PORT}"
DOCS = {
    "/proj": {
        "runbooks/deploy.md": b"# Deploy runbook\n\nDeploy with helm upgrade.\n\n## Rollback\n\nhelm rollback.\n",
        "notes.txt": b"Coffee is on the second floor.\n",
    }
}


@pytest.fixture
def context(tmp_path: Path) -> Iterator[Context]:
    engine = bootstrap_in_memory(scanner=InMemoryScanner(DOCS))
    engine.add_project("proj", [Source("/proj")])
    engine.index("proj")
    engine.activate("proj", "how do we roll back?")
    yield Context(engine, home=str(tmp_path / "home"), socket=None, started_at="2026-01-01T00:00:00.000Z")
    engine.close()


@pytest.fixture
def ui() -> Secrets:
    return Secrets.fresh(PORT)


@pytest.fixture
def http(context: Context, ui: Secrets) -> Iterator[TestClient]:
    app = create_ui_app(context, create_app(context), ui)
    with TestClient(app, base_url=ORIGIN, follow_redirects=False) as client:
        yield client


def bearer(ui: Secrets) -> dict[str, str]:
    return {"authorization": f"Bearer {ui.token}"}


def signed_in(http: TestClient, ui: Secrets) -> TestClient:
    """What the page does: the token as a header on every call (never a cookie)."""
    http.headers.update(bearer(ui))
    return http


# -- the token: a header, never a cookie ------------------------------------------------------------
def test_the_launch_address_carries_the_token_in_its_fragment(http: TestClient, ui: Secrets) -> None:
    assert ui.launch_url == f"http://127.0.0.1:{PORT}/#token={ui.token}"  # a fragment never reaches a server
    page = http.get("/")
    assert page.status_code == 200 and "set-cookie" not in page.headers


def test_pages_and_assets_are_served_without_the_token_and_carry_no_secret(http: TestClient, ui: Secrets) -> None:
    for path in (
        "/",
        "/runtime",
        "/evaluation/cases/x",
        "/retrieval/runs/r",
        "/static/app.js",
        "/static/lib.js",
        "/static/app.css",
        "/static/favicon.svg",
    ):
        reply = http.get(path)
        assert reply.status_code == 200, path
        assert ui.token not in reply.text and "set-cookie" not in reply.headers, path
    assert http.get("/static/../app.py").status_code == 404  # never a file outside static/
    assert http.get("/no/such/page").status_code == 404


def test_an_api_call_without_the_header_is_refused(http: TestClient, ui: Secrets) -> None:
    for path in ("/ui/api/runtime", "/ui/api/export", "/v1/list_projects", "/v1/openapi.json", "/v1", "/ui/api"):
        reply = http.get(path)
        assert reply.status_code == 401 and reply.json()["error"]["code"] == "ui_unauthorized", path
    assert http.post("/v1/list_projects", json={}).status_code == 401
    wrong = http.get("/v1/list_projects", headers={"authorization": "Bearer not-the-token"})
    assert wrong.status_code == 401 and wrong.json()["error"]["code"] == "ui_token_invalid"
    assert http.get("/v1/list_projects", headers={"authorization": f"Basic {ui.token}"}).status_code == 401
    assert (
        http.get("/v1/list_projects", headers={"authorization": f"Bearer {Secrets.fresh(PORT).token}"}).status_code
        == 401
    )  # another start's token


def test_a_cookie_never_authorizes_not_even_with_the_token(http: TestClient, ui: Secrets) -> None:
    """Browsers send 127.0.0.1's cookies to every port: a cookie must carry no authority."""
    for name in (f"memcore_ui_{PORT}", "token", "memcore_ui_token", "session"):
        http.cookies.set(name, ui.token)
    for path in ("/v1/list_projects", "/ui/api/runtime", "/ui/api/export"):
        reply = http.get(path)
        assert reply.status_code == 401 and reply.json()["error"]["code"] == "ui_unauthorized", path
    origin = {"origin": ORIGIN}
    assert http.post("/v1/clear_retrieval_runs", json={"all": True}, headers=origin).status_code == 401


def test_the_token_in_a_query_string_never_authorizes(http: TestClient, ui: Secrets) -> None:
    assert http.get(f"/v1/list_projects?token={ui.token}").status_code == 401
    assert http.get(f"/ui/api/runtime?token={ui.token}").status_code == 401
    page = http.get(f"/runtime?token={ui.token}")  # the page reads it itself; the server sets nothing
    assert page.status_code == 200 and "set-cookie" not in page.headers


def test_the_bearer_token_opens_the_api(http: TestClient, ui: Secrets) -> None:
    signed_in(http, ui)
    assert http.get("/v1/list_projects").json()["projects"][0]["project"]["project_id"] == "proj"
    assert http.get("/ui/api/runtime").status_code == 200


# -- Host and Origin --------------------------------------------------------------------------------
@pytest.mark.parametrize("host", [f"127.0.0.1:{PORT}", f"localhost:{PORT}"])
def test_loopback_names_are_served(http: TestClient, ui: Secrets, host: str) -> None:
    signed_in(http, ui)
    assert http.get("/v1/list_projects", headers={"host": host}).status_code == 200
    assert http.get("/runtime", headers={"host": host}).status_code == 200


@pytest.mark.parametrize(
    "host",
    [
        "attacker.example",
        f"attacker.example:{PORT}",
        "127.0.0.1",
        f"127.0.0.1:{PORT + 1}",
        f"[::1]:{PORT}",
        f"0.0.0.0:{PORT}",
        "",
    ],
)
def test_other_host_names_are_refused_dns_rebinding(http: TestClient, ui: Secrets, host: str) -> None:
    signed_in(http, ui)
    reply = http.get("/v1/list_projects", headers={"host": host})
    assert reply.status_code == 403 and reply.json()["error"]["code"] == "ui_host_not_allowed"
    page = http.get("/runtime", headers={"host": host})  # the pages too
    assert page.status_code == 403 and "ui_host_not_allowed" in page.text


def test_a_foreign_origin_is_refused_even_with_the_token(http: TestClient, ui: Secrets) -> None:
    signed_in(http, ui)
    body = {"project_id": "proj"}
    for origin in (
        "http://attacker.example",
        f"http://localhost:{PORT}",
        f"https://127.0.0.1:{PORT}",
        "null",
        "http://127.0.0.1:1",
    ):
        foreign = http.post("/v1/clear_retrieval_runs", json=body, headers={"origin": origin})
        assert foreign.status_code == 403 and foreign.json()["error"]["code"] == "ui_origin_not_allowed", origin
    assert http.get("/ui/api/runtime", headers={"origin": "http://attacker.example"}).status_code == 403
    assert http.get("/runtime", headers={"origin": "http://attacker.example"}).status_code == 403
    # The page's own calls (same origin, the header) and a script's (no Origin) change state.
    ok = http.post("/v1/clear_retrieval_runs", json=body, headers={"origin": ORIGIN})
    assert ok.status_code == 200 and ok.json()["deleted_runs"] == 1
    assert http.post("/v1/clear_retrieval_runs", json={"all": True}).status_code == 200


def test_websockets_are_refused(http: TestClient, ui: Secrets) -> None:
    from starlette.websockets import WebSocketDisconnect

    signed_in(http, ui)
    with pytest.raises(WebSocketDisconnect), http.websocket_connect("/v1/anything") as ws:
        ws.receive_text()


def test_every_answer_carries_the_security_headers(http: TestClient, ui: Secrets) -> None:
    refused = http.get("/v1/list_projects")
    signed_in(http, ui)
    for reply in (
        refused,
        http.get("/runtime"),
        http.get("/static/app.js"),
        http.get("/v1/list_projects"),
        http.post("/v1/add_project", json={}),
        http.get("/ui/api/export?project_id=nope"),
    ):
        assert reply.headers["content-security-policy"] == CSP
        assert reply.headers["x-content-type-options"] == "nosniff"
        assert reply.headers["referrer-policy"] == "no-referrer"
        assert reply.headers["x-frame-options"] == "DENY"
        assert reply.headers["cache-control"] == "no-store"


# -- what the UI port serves of the dispatch table --------------------------------------------------
def test_the_ui_calls_the_same_dispatch_table(http: TestClient, ui: Secrets, context: Context) -> None:
    signed_in(http, ui)
    page = http.post("/v1/list_retrieval_runs", json={"project_id": "proj"}).json()
    assert [r["run_id"] for r in page["runs"]] == [r.run_id for r in context.engine.list_runs().runs]


def test_the_page_carries_the_metric_registry_as_data(monkeypatch: pytest.MonkeyPatch) -> None:
    """The shell lists every registered metric (static/metrics.js reads it); a definition holding
    markup cannot end the script element it is in."""
    from memory_core.entrypoints.ui.app import page_shell
    from memory_core.evaluation import metric_registry as registry

    odd = attrs.evolve(registry.NDCG, name="odd@1", definition="</script><script>alert(1)</script> & <b>")
    monkeypatch.setitem(registry.REGISTRY, odd.name, odd)
    shell = page_shell().decode()
    found = re.search(r'<script type="application/json" id="metric-registry">(.*?)</script>', shell, re.S)
    assert found is not None and shell.count("</script>") == (STATIC / "index.html").read_text().count("</script>") + 1
    listed = json.loads(found.group(1))
    assert [m["name"] for m in listed] == list(registry.REGISTRY)
    assert listed[-1]["definition"] == odd.definition and listed[-1]["digits"] == odd.digits


def page_methods() -> set[str]:
    """The dispatch methods the page's scripts call (``call("…")`` and ``callText("…")``)."""
    found: set[str] = set()
    for path in STATIC.glob("*.js"):
        found |= set(re.findall(r"\bcall(?:Text)?\(\s*\"([a-z_]+)\"", path.read_text(encoding="utf-8")))
    return found


def test_the_ui_port_serves_exactly_the_methods_the_page_calls() -> None:
    from memory_core.entrypoints.daemon import dispatch

    assert page_methods() == UI_METHODS
    assert UI_METHODS.issubset(dispatch.TABLE)
    # What reads files or changes sources is the Unix socket's alone.
    assert not UI_METHODS & {"add_project", "remove_project", "index_project", "activate_memory"}


@pytest.mark.parametrize(
    "method",
    [
        "add_project",
        "index_project",
        "activate_memory",
        "remove_project",
        "show_project",
        "export_evaluation_set",
        "openapi.json",
        "no_such_method",
        "",
    ],
)
def test_methods_the_page_does_not_use_are_refused_on_the_ui_port(
    http: TestClient, ui: Secrets, context: Context, tmp_path: Path, method: str
) -> None:
    signed_in(http, ui)
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "key.md").write_text("# private\n")
    bodies = {
        "add_project": {"project_id": "stolen", "sources": [{"path": str(secret)}]},
        "index_project": {"project_id": "proj"},
        "remove_project": {"project_id": "proj"},
        "activate_memory": {"project_id": "proj", "query": "roll back"},
        "show_project": {"project_id": "proj"},
    }
    runs = len(context.engine.list_runs().runs)
    for reply in (http.post(f"/v1/{method}", json=bodies.get(method, {})), http.get(f"/v1/{method}")):
        assert reply.status_code == 403 and reply.json()["error"]["code"] == "ui_method_not_allowed", method
    assert [p.project.project_id for p in context.engine.list_projects()] == ["proj"]  # nothing added or removed
    assert len(context.engine.list_runs().runs) == runs  # nothing activated


def test_runtime_view(http: TestClient, ui: Secrets, context: Context) -> None:
    signed_in(http, ui)
    facts = http.get("/ui/api/runtime").json()
    assert facts["engine_busy"] is False
    [project] = facts["projects"]
    generation = context.engine.show_project("proj").generation
    assert generation is not None
    assert project["generation"]["index_revision"] == generation.index_revision
    assert project["generation"]["state"] == "warm"  # it ranked a query above
    assert {m["name"] for m in facts["models"]} == {"embedding model", "reranker", "Lucene (JVM)"}
    [recent] = facts["recent_latency"]
    assert {"bm25", "dense", "rerank", "total"} <= set(recent["latency_ms"])
    assert facts["database"]["bytes"] is None  # an in-memory engine: no local.db


def test_runtime_view_answers_while_the_engine_is_busy(http: TestClient, ui: Secrets, context: Context) -> None:
    signed_in(http, ui)
    with context.engine_lock:  # an index run holds it for minutes
        started = time.monotonic()
        facts = http.get("/ui/api/runtime").json()
        assert time.monotonic() - started < 10
    assert facts["engine_busy"] is True and facts["projects"] is None


def test_export_downloads_the_canonical_fixture(http: TestClient, ui: Secrets, context: Context) -> None:
    run_id = context.engine.list_runs().runs[0].run_id
    context.engine.create_evaluation_case(run_id)
    signed_in(http, ui)
    reply = http.get("/ui/api/export?project_id=proj")
    assert reply.status_code == 200
    assert re.fullmatch(
        r'attachment; filename="(evaluation-set-proj-\d{8}T\d{6}Z\.json)"; '
        r"filename\*=UTF-8''\1",
        reply.headers["content-disposition"],
    )
    assert reply.content == dump(reply.json())  # canonical JSON and a newline, as `memcore eval export` writes
    document, expected = reply.json(), json.loads(context.engine.export_evaluation_set(project_id="proj"))
    document.pop("exported_at"), expected.pop("exported_at")
    assert document == expected
    context.engine.add_project("other", [Source("/proj")])
    assert http.get("/ui/api/export?project_id=other").json()["cases"] == []  # scoped to the project
    everything = http.get("/ui/api/export")
    assert everything.status_code == 200 and len(everything.json()["cases"]) == 1
    assert re.fullmatch(
        r'attachment; filename="evaluation-set-\d{8}T\d{6}Z\.json"; filename\*=.*',
        everything.headers["content-disposition"],
    )


@pytest.mark.parametrize(
    "project_id",
    [
        'a";filename=evil.exe',
        "a\r\nset-cookie: x=1",
        "Proj",
        "caf\u00e9",
        "\u6f22\u5b57",
        "\u202egpj.exe",
        "a/../b",
        "x" * 64,
        "-a",
    ],
)
def test_export_refuses_a_project_id_that_is_not_one(http: TestClient, ui: Secrets, project_id: str) -> None:
    signed_in(http, ui)
    reply = http.get("/ui/api/export", params={"project_id": project_id})
    assert reply.status_code == 400, reply.text
    assert reply.json()["error"]["code"] == "invalid_project_name"  # the envelope, never a plain-text 500
    assert "content-disposition" not in reply.headers


def test_export_of_an_unknown_project_is_404_and_a_removed_ones_cases_still_export(
    http: TestClient, ui: Secrets, context: Context
) -> None:
    signed_in(http, ui)
    unknown = http.get("/ui/api/export?project_id=nope")
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "project_not_found"
    assert "content-disposition" not in unknown.headers
    context.engine.create_evaluation_case(context.engine.list_runs().runs[0].run_id)
    context.engine.remove_project("proj")  # its cases (and their pinned Runs) stay
    kept = http.get("/ui/api/export?project_id=proj")
    assert kept.status_code == 200 and len(kept.json()["cases"]) == 1


@pytest.mark.parametrize(
    "name",
    [
        "evaluation-set-proj.json",
        'a";filename=evil.exe',
        "caf\u00e9 \u6f22.json",
        "back\\slash%20.json",
        "line\r\nbreak",
    ],
)
def test_content_disposition_has_one_filename_and_its_exact_name(name: str) -> None:
    from urllib.parse import unquote

    header = content_disposition(name)
    assert header.isascii() and "\r" not in header and "\n" not in header  # a header Starlette can send
    # RFC 6266's grammar: a type, then `; token=(token | quoted-string)` parameters, nothing else.
    param = r';\s*([!#$%&\'*+.^_`|~0-9A-Za-z-]+)=("(?:[^"\\]|\\.)*"|[!#$%&\'*+.^_`|~0-9A-Za-z-]+)'
    assert re.fullmatch(rf"attachment(?:{param})*", header), header
    found = re.findall(param, header)
    assert [key for key, _ in found] == ["filename", "filename*"]  # nothing the name could add
    params = dict(found)
    assert params["filename"].strip('"').isascii()
    assert params["filename*"].startswith("UTF-8''") and unquote(params["filename*"][7:]) == name


def test_static_assets_reach_no_other_host() -> None:
    """No CDN, no external font or script: the only URL in the assets is SVG's namespace."""
    for path in STATIC.iterdir():
        text = path.read_text(encoding="utf-8")
        urls = set(re.findall(r"(?:https?:)?//[\w.-]+\.[a-z]{2,}[^\s\"'`)]*", text))
        assert urls <= {"http://www.w3.org/2000/svg"}, (path.name, urls)
        assert "innerHTML" not in text and "eval(" not in text, path.name


# -- wiring: listeners, the port, ui.json, the command --------------------------------------------
async def _noop(scope: Any = None, receive: Any = None, send: Any = None) -> None:
    return None


def drive(coroutine: Any) -> None:
    """Run a coroutine that never suspends, without an event loop (Playwright's sync API may
    already own this thread's loop)."""
    try:
        coroutine.send(None)
    except StopIteration:
        return
    raise AssertionError("the coroutine suspended")


def test_each_listener_gets_its_own_app() -> None:
    seen: list[str] = []

    def app(name: str) -> Any:
        async def handle(scope: Any, receive: Any, send: Any) -> None:
            seen.append(name)

        return handle

    routed = by_listener(app("daemon"), app("ui"), PORT)
    drive(routed({"type": "http", "server": ("/home/run/memcore.sock", None)}, _noop, _noop))
    drive(routed({"type": "http", "server": ("127.0.0.1", PORT)}, _noop, _noop))
    assert seen == ["daemon", "ui"]
    with pytest.raises(RuntimeError):
        drive(routed({"type": "http", "server": ("10.0.0.1", PORT)}, _noop, _noop))


def test_the_ui_port_is_loopback_only_and_a_taken_one_is_a_clear_error() -> None:
    sock = bind_ui_socket(0)
    try:
        host, port = sock.getsockname()
        assert host == "127.0.0.1" and port > 0
        with pytest.raises(InvalidRequest, match=f"cannot listen on 127.0.0.1:{port}"):
            bind_ui_socket(port)
    finally:
        sock.close()
    with pytest.raises(InvalidRequest):
        bind_ui_socket(70000)


def test_ui_json_is_private_and_removed_only_by_its_daemon(tmp_path: Path) -> None:
    home = tmp_path / "home"
    info = launch.UiInfo(
        url="http://127.0.0.1:1/?token=secret-token",
        base_url="http://127.0.0.1:1/",
        port=1,
        token="secret-token",
        pid=os.getpid(),
        started_at="now",
    )
    path = launch.write_ui_info(home, info)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(path.parent).st_mode) == 0o700
    assert launch.read_ui_info(home) == info
    assert "secret-token" not in repr(info)  # the token stays out of reprs and logs
    launch.remove_ui_info(home, os.getpid() + 1)  # a successor's file is not ours to remove
    assert path.exists()
    launch.remove_ui_info(home, os.getpid())
    assert not path.exists() and launch.read_ui_info(home) is None
    path.write_text("{not json")
    assert launch.read_ui_info(home) is None


def test_the_cli_has_serve_ui_options_and_the_ui_command() -> None:
    from memory_core.entrypoints.cli.main import build_parser

    parser = build_parser()
    args = parser.parse_args(["serve", "--ui-port", "8123"])
    assert (args.ui_port, args.no_ui) == (8123, False)
    assert parser.parse_args(["serve", "--no-ui"]).no_ui
    assert parser.parse_args(["serve"]).ui_port == 0
    with pytest.raises(SystemExit):
        parser.parse_args(["serve", "--ui-port", "70000"])
    args = parser.parse_args(["ui", "--no-open"])
    assert args.command in daemon_cli.COMMANDS and args.no_open


def test_a_browser_is_opened_only_where_one_can_show(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    assert not launch.display_available()
    monkeypatch.setenv("DISPLAY", ":0")
    assert launch.display_available()


def test_memcore_ui_without_a_ui_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A daemon started with --no-ui (here: a stand-in answering runtime_status) has no ui.json."""
    import uvicorn

    from memory_core.entrypoints.daemon import paths

    engine = bootstrap_in_memory()
    home = tmp_path / "h"
    sock_path = paths.default_socket_path(home)
    paths.ensure_private_dir(sock_path.parent)
    context = Context(engine, home=str(home), socket=str(sock_path), started_at="now")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(sock_path))
    server = uvicorn.Server(uvicorn.Config(create_app(context), lifespan="off", log_config=None))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.02)
        assert launch.main(str(home), open_browser=False, start_timeout_s=5) == 1
        assert "serves no UI" in capsys.readouterr().err
    finally:
        server.should_exit = True
        thread.join(10)
        listener.close()
        engine.close()
