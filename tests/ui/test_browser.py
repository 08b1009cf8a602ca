"""The Diagnostics UI in a real browser: Debian's Chromium driven by Playwright against a real
daemon (subprocess, real adapters) on a temp home.

Every test starts from the launch address, checks the page against what the daemon recorded
(through the same dispatch table, over the Unix socket) and fails on any console error.
"""

from __future__ import annotations

import http.server
import os
import re
import stat
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest
from playwright.sync_api import expect

from memory_core.entrypoints.ui.launch import ui_file
from memory_core.retrieval.fusion import FUSIONS

from .conftest import (
    NARROW,
    PROJECT,
    ROOT,
    UNINDEXED,
    WIDE,
    Console,
    UiDaemon,
    fits_width,
    load_json,
    new_page,
    shoot,
)

pytestmark = pytest.mark.slow
CONFLICT_409 = r"status of 409"  # Chromium logs every failed fetch; the conflict flow expects one


def dash(value: object) -> str:
    return "—" if value is None else str(value)


def js_number(value: float | None) -> str:
    """What the page's fmtNum shows: integers plainly, other numbers with three decimals."""
    if value is None:
        return "—"
    return str(int(value)) if float(value).is_integer() else f"{value:.3f}"


def make_case(ui_daemon: UiDaemon, query: str) -> tuple[str, Any]:
    """A case from a fresh Run, through the dispatch table (not the page under test)."""
    run_id = ui_daemon.activate(query)
    case = ui_daemon.call("create_evaluation_case", run_id=run_id)
    return case.case_id, ui_daemon.call("get_evaluation_case", case_id=case.case_id)


def test_the_launch_address_leaves_the_token_in_this_tab_only(page: Any, ui_daemon: UiDaemon) -> None:
    assert page.url == ui_daemon.url("/")  # the token left the address bar (and the history)
    assert "token" not in page.evaluate("location.href")
    assert page.context.cookies() == [] and page.evaluate("document.cookie") == ""  # no cookie at all
    assert page.evaluate("sessionStorage.getItem('memcore-ui-token')") == ui_daemon.info.token
    expect(page.get_by_role("heading", name="Runtime", level=1)).to_be_visible()
    page.reload()  # sessionStorage outlives a reload
    expect(page.locator("main")).to_contain_text(str(ui_daemon.proc.pid))


def test_runtime_page(page: Any, ui_daemon: UiDaemon) -> None:
    ui_daemon.activate("how do we roll back a deploy?")
    ui_daemon.activate("advisory locks")
    status = ui_daemon.client.runtime_status()
    generation = ui_daemon.client.show_project(PROJECT).generation
    assert generation is not None
    page.goto(ui_daemon.url("/runtime"))
    main = page.locator("main")
    expect(main).to_contain_text(f"{status.version} (API {status.api_version})")
    expect(main).to_contain_text(str(status.pid))
    expect(main).to_contain_text(str(ui_daemon.home))
    expect(main.locator("dd", has_text="local.db")).to_contain_text(re.compile(r"\d+(\.\d)? (KiB|MiB)"))
    expect(main.locator("dt:has-text('Schema version') + dd")).to_have_text(re.compile(r"^\d+$"))
    expect(main.locator("dt:has-text('Blob store') + dd")).to_contain_text("blob(s)")
    row = page.get_by_role("table", name="Projects").locator("tr", has_text=PROJECT)
    expect(row).to_contain_text(generation.index_revision[:16])
    expect(row).to_contain_text(str(generation.unit_count))
    expect(row).to_contain_text(re.compile(r"\d+(\.\d)? KiB"))
    expect(page.get_by_role("table", name="Projects").locator("tr", has_text=UNINDEXED)).to_contain_text("not indexed")
    models = page.get_by_role("table", name="Models")
    expect(models).to_contain_text("all-MiniLM-L6-v2")
    expect(models.locator("tr", has_text="embedding model")).to_contain_text("warm")  # it just ranked
    chart = page.get_by_role("img", name=re.compile("Stage latency"))
    expect(chart).to_be_visible()
    assert chart.locator("rect").count() >= 2 * 5  # several stages of each of several Runs
    percentiles = page.get_by_role("table", name="Stage latency percentiles")
    for stage in ("bm25", "embed_query", "dense", "rerank", "total"):
        expect(percentiles.locator("th", has_text=stage).first).to_be_visible()
    shoot(page, "runtime")


def test_an_activation_appears_on_the_retrieval_page_with_its_stage_ranks(page: Any, ui_daemon: UiDaemon) -> None:
    query = "how do we roll back the ledger deploy?"
    run_id = ui_daemon.activate(query)
    detail = ui_daemon.client.get_retrieval_run(run_id)
    page.goto(ui_daemon.url("/retrieval"))
    page.get_by_label("Project").select_option(PROJECT)
    page.get_by_label("Query contains").fill("roll back the ledger")
    page.get_by_role("button", name="Apply").click()
    expect(page).to_have_url(re.compile(r"/retrieval\?project=ledger&q=roll"))
    row = page.locator(f"#runs tr[data-run-id='{run_id}']")
    expect(row).to_contain_text("succeeded")
    expect(page.locator("#runs tbody tr")).to_have_count(1)
    shoot(page, "retrieval")

    row.get_by_role("link", name=query).click()
    expect(page).to_have_url(ui_daemon.url(f"/retrieval/runs/{run_id}"))
    rows = page.locator("#candidates tbody tr")
    expect(rows).to_have_count(len(detail.candidates))
    for i, c in enumerate(detail.candidates):
        cells = rows.nth(i).locator("td")
        assert cells.nth(0).inner_text() == str(c.final_rank)
        assert cells.nth(1).inner_text().startswith(c.unit_id)
        # Each stage cell: the rank, then the score below it.
        assert cells.nth(3).inner_text().split("\n")[0] == dash(c.bm25_rank)
        assert cells.nth(4).inner_text().split("\n")[0] == dash(c.lexical_rank)
        assert cells.nth(5).inner_text().split("\n")[0] == dash(c.dense_rank)
        assert cells.nth(6).inner_text().split("\n") == [str(c.rrf_rank), f"{c.rrf_score:.5f}"]
        assert cells.nth(7).inner_text().split("\n")[0] == dash(c.rerank_rank)
        assert cells.nth(9).inner_text() == c.disposition
        assert cells.nth(10).inner_text() == (c.delta_action if c.disposition == "selected" else c.exclusion_code)
    chart = page.get_by_role("img", name="Latency per stage")
    for stage in ("bm25", "dense", "rerank", "select"):
        expect(chart).to_contain_text(stage)
    page.get_by_label("Show").select_option("selected")
    selected = sum(c.disposition == "selected" for c in detail.candidates)
    expect(rows).to_have_count(selected)
    page.get_by_label("Show").select_option("")
    shoot(page, "run")


def test_runs_page_a_few_at_a_time(page: Any, ui_daemon: UiDaemon) -> None:
    for query in ("first paged query", "second paged query", "third paged query"):
        ui_daemon.activate(query)
    page.goto(ui_daemon.url(f"/retrieval?project={PROJECT}&q=paged&limit=2"))
    rows = page.locator("#runs tbody tr")
    expect(rows).to_have_count(2)
    expect(rows.first).to_contain_text("third paged query")  # newest first
    expect(page.get_by_role("button", name="← Newer")).to_be_disabled()
    page.get_by_role("button", name="Older Runs →").click()
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("first paged query")
    expect(page.get_by_role("button", name="Older Runs →")).to_be_disabled()
    page.get_by_role("button", name="← Newer").click()
    expect(rows.first).to_contain_text("third paged query")


def test_a_failed_run_shows_its_error(page: Any, ui_daemon: UiDaemon) -> None:
    from memory_core.domain.errors import ProjectNotIndexed

    with pytest.raises(ProjectNotIndexed) as raised:
        ui_daemon.client.activate_memory(UNINDEXED, "where is the runbook?")
    run_id = raised.value.details["run_id"]
    page.goto(ui_daemon.url(f"/retrieval?status=failed&project={UNINDEXED}"))
    page.locator(f"#runs tr[data-run-id='{run_id}'] a").click()
    error = page.locator("#run-error")
    expect(error).to_contain_text("This Run failed")
    expect(error.locator("dt:has-text('Stage') + dd")).to_have_text("load")
    expect(error.locator("dt:has-text('Code') + dd")).to_have_text("project_not_indexed")
    expect(error.locator("dt:has-text('Summary') + dd")).to_contain_text("has no index yet")
    expect(page.get_by_role("button", name="Add to Evaluation Set")).to_be_disabled()
    shoot(page, "run-failed")


def test_add_a_run_to_the_evaluation_set_and_judge_it_from_the_keyboard(page: Any, ui_daemon: UiDaemon) -> None:
    query = "replay the outbox after a rollback"
    run_id = ui_daemon.activate(query)
    detail = ui_daemon.client.get_retrieval_run(run_id)
    selected = {c.resource_id for c in detail.candidates if c.disposition == "selected"}
    missed = next(c.resource_id for c in detail.candidates if c.resource_id not in selected)
    first, second = detail.candidates[0].unit_id, detail.candidates[1].unit_id

    page.goto(ui_daemon.url(f"/retrieval/runs/{run_id}"))
    page.get_by_role("button", name="Add to Evaluation Set").click()
    page.wait_for_url(re.compile(r"/evaluation/cases/[^/]+$"))
    case_id = page.url.rsplit("/", 1)[1]
    expect(page.locator("#notice")).to_contain_text(f"Added to the Evaluation Set as case {case_id}")
    expect(page.locator("#units tbody tr")).to_have_count(len(detail.candidates))
    assert ui_daemon.client.get_retrieval_run(run_id).summary.pinned

    # Keyboard only: the first unit is current; grade it 3, move down with j, grade the next 2.
    page.keyboard.press("3")
    page.keyboard.press("j")
    page.keyboard.press("2")
    expect(page.locator(f"#units tr[data-unit-id='{second}']")).to_be_focused()
    expect(page.locator(f"#units tr[data-unit-id='{first}'] input[value='3']")).to_be_checked()
    expect(page.locator(f"#units tr[data-unit-id='{second}'] input[value='2']")).to_be_checked()
    expect(page.locator("#dirty")).to_have_text("2 unsaved change(s)")

    # Missed evidence: "/" jumps to the picker, which searches the frozen corpus.
    page.keyboard.press("/")
    expect(page.locator("#corpus-search")).to_be_focused()
    page.keyboard.type(missed)
    page.keyboard.press("Enter")
    hit = page.locator(f"#corpus-results li[data-resource-id='{missed}']")
    expect(hit).to_contain_text("retrieved")
    page.get_by_label("Relevance for added resources").select_option("3")
    hit.get_by_role("button", name="Add as evidence").click()
    expect(page.locator(f"#resource-judgments tr[data-resource-id='{missed}'] input[value='3']")).to_be_checked()
    shoot(page, "case")

    page.locator("main").focus()
    page.keyboard.press("s")
    expect(page.locator("#notice")).to_contain_text("Saved judgments as version 1")
    expect(page.locator("#dirty")).to_have_text("no unsaved changes")
    stored = ui_daemon.call("get_evaluation_case", case_id=case_id)
    assert stored.case.source_run_id == run_id
    assert stored.judgments.version == 1
    assert sorted((j.unit_id or j.resource_id, j.relevance) for j in stored.judgments.judgments) == sorted(
        [(first, 3), (second, 2), (missed, 3)]
    )
    assert [m.resource_id for m in stored.missed_evidence] == [missed]
    expect(page.locator("#case-metrics")).to_contain_text("B4 reranked")

    page.get_by_role("button", name="Mark reviewed").click()
    expect(page.locator("#notice")).to_contain_text("Marked version 1 reviewed")
    assert ui_daemon.call("get_evaluation_case", case_id=case_id).case.reviewed


def test_a_stale_editor_is_told_keeps_its_edits_and_can_rebase(
    session: Any, page: Any, console: Console, ui_daemon: UiDaemon
) -> None:
    console.allow(CONFLICT_409)
    case_id, detail = make_case(ui_daemon, "promote the replica during a database failover")
    first, second = detail.trace.candidates[0].unit_id, detail.trace.candidates[1].unit_id
    address = ui_daemon.url(f"/evaluation/cases/{case_id}")
    page.goto(address)
    other = new_page(session, console, ui_daemon)
    other.goto(address)
    expect(other.locator("#version")).to_have_text("v0")

    # The first editor saves version 1.
    page.locator(f"#units tr[data-unit-id='{first}'] label:has(input[value='2'])").click()
    page.get_by_role("button", name="Save judgments").click()
    expect(page.locator("#notice")).to_contain_text("version 1")

    # The second, still on version 0, grades another unit and saves: refused, edits kept.
    other.locator(f"#units tr[data-unit-id='{second}'] label:has(input[value='1'])").click()
    other.get_by_role("button", name="Save judgments").click()
    alert = other.locator("#conflict [role=alert]")
    expect(alert).to_contain_text("Someone else saved these judgments first")
    expect(alert).to_contain_text("You edited version 0; version 1 is saved now")
    mine = other.locator(f"#units tr[data-unit-id='{second}']")
    expect(mine.locator("input[value='1']")).to_be_checked()
    expect(mine.locator(".changed")).to_have_text("changed (saved: unjudged)")
    shoot(other, "conflict")

    other.get_by_role("button", name="Load version 1 and keep my edits").click()
    expect(alert).to_have_count(0)
    expect(other.locator("#version")).to_have_text("v1")
    expect(other.locator(f"#units tr[data-unit-id='{first}'] input[value='2']")).to_be_checked()  # theirs
    expect(mine.locator("input[value='1']")).to_be_checked()  # mine, still pending
    expect(mine.locator(".changed")).to_have_text("changed (saved: unjudged)")
    other.get_by_role("button", name="Save judgments").click()
    expect(other.locator("#notice")).to_contain_text("version 2")
    stored = ui_daemon.call("get_evaluation_case", case_id=case_id)
    assert stored.judgments.version == 2
    assert sorted((j.unit_id, j.relevance) for j in stored.judgments.judgments) == sorted([(first, 2), (second, 1)])
    assert [e for e in console.errors if re.search(CONFLICT_409, e)], "the refused save was a real 409"


def test_evaluation_page_report_and_export(page: Any, ui_daemon: UiDaemon, tmp_path: Path) -> None:
    case_id, detail = make_case(ui_daemon, "idempotency keys and advisory locks")
    unselected = next(c.resource_id for c in detail.trace.candidates if c.disposition != "selected")
    ui_daemon.call(
        "replace_evaluation_judgments", case_id=case_id, expected_judgment_version=0,
        judgments=[{"unit_id": detail.trace.candidates[0].unit_id, "relevance": 3},
                   {"resource_id": unselected, "relevance": 2}],
    )
    report = ui_daemon.call("evaluation_report", project_id=PROJECT)
    page.goto(ui_daemon.url(f"/evaluation?project={PROJECT}"))
    expect(page.locator(f"#cases tr[data-case-id='{case_id}']")).to_be_visible()
    bench = page.locator("#benchmark")
    for name in ("b1_bm25", "b2_dense_vector", "b3_hybrid_rrf", "b4_reranked"):
        mean = report.levels["unit"].variants[name]["ndcg@10"].mean
        expect(bench.locator(f"tr[data-variant='{name}'] td").nth(1)).to_have_text(js_number(mean))
    expect(page.get_by_role("img", name=re.compile("B1–B4 at unit level"))).to_be_visible()
    # B4 against B1-B3 and against each registered fusion's variant (issue 32).
    expect(page.locator("#significance tbody tr")).to_have_count(len(comparisons := report.levels["unit"].comparisons))
    assert len(comparisons) == 3 + len(FUSIONS)
    # A case or two: each row says why there is no interval instead of a zero-width one and p 1.
    assert all(c.interval_reason and c.ci95_low is None for c in comparisons), comparisons
    for i, c in enumerate(comparisons):
        row = page.locator("#significance tbody tr").nth(i)
        expect(row).to_contain_text(c.interval_reason)
        expect(row).not_to_contain_text("1.0000")
    expect(page.get_by_role("img", name=re.compile("B4 minus each baseline"))).to_be_visible()
    expect(page.locator("#missed")).to_contain_text(unselected)
    page.locator("#level").select_option("resource")
    expect(page.get_by_role("img", name=re.compile("B1–B4 at resource level"))).to_be_visible()
    page.locator("#level").select_option("unit")
    shoot(page, "evaluation")

    with page.expect_download() as pending:
        page.get_by_role("button", name="Export fixture").click()
    saved = tmp_path / "fixture.json"
    pending.value.save_as(saved)
    assert pending.value.suggested_filename.startswith(f"evaluation-set-{PROJECT}-")
    fixture = load_json(saved)
    schema = load_json(ROOT / "contracts" / "evaluation-fixture.schema.json")
    jsonschema.validators.validator_for(schema)(schema).validate(fixture)
    assert case_id in {c["case_id"] for c in fixture["cases"]}
    assert saved.read_bytes().endswith(b"\n") and b"\n" not in saved.read_bytes()[:-1]  # canonical JSON

    # Importing the same fixture again is accepted (ids kept, same records): all hashes verify.
    page.locator("#import-file").set_input_files(str(saved))
    expect(page.locator("#notice")).to_contain_text("Imported")


def test_clear_history_keeps_pinned_runs(page: Any, ui_daemon: UiDaemon) -> None:
    case_id, detail = make_case(ui_daemon, "who do we page for an incident?")
    pinned = detail.case.source_run_id
    loose = ui_daemon.activate("where is the coffee?")
    page.goto(ui_daemon.url(f"/retrieval?project={PROJECT}"))
    expect(page.locator(f"#runs tr[data-run-id='{loose}']")).to_be_visible()

    clear = page.get_by_role("button", name=f"Clear unpinned history of {PROJECT}…")
    clear.click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text(f"Delete every unpinned Retrieval Run of project {PROJECT}")
    shoot(page, "clear-history", full_page=False)
    page.keyboard.press("Escape")  # cancel: nothing happens
    expect(dialog).to_be_hidden()
    assert any(r.run_id == loose for r in ui_daemon.client.list_retrieval_runs(limit=500).runs)

    clear.click()
    dialog.get_by_role("button", name="Clear history").click()
    expect(page.locator("#notice")).to_contain_text(re.compile(r"Cleared \d+ Run\(s\); kept \d+ pinned"))
    expect(page.locator(f"#runs tr[data-run-id='{loose}']")).to_have_count(0)
    expect(page.locator(f"#runs tr[data-run-id='{pinned}']")).to_contain_text("pinned")
    from memory_core.runs.records import RunFilter

    left = ui_daemon.client.list_retrieval_runs(RunFilter(project_id=PROJECT), limit=500).runs
    assert left and all(r.pinned for r in left)
    assert pinned in {r.run_id for r in left}
    assert ui_daemon.call("get_evaluation_case", case_id=case_id).case.source_run_id == pinned


def test_every_page_fits_a_narrow_window_and_the_keyboard_reaches_it(page: Any, ui_daemon: UiDaemon) -> None:
    case_id, detail = make_case(ui_daemon, "helm upgrade atomic")
    pages = ["/runtime", f"/retrieval?project={PROJECT}", f"/retrieval/runs/{detail.case.source_run_id}",
             "/evaluation", f"/evaluation/cases/{case_id}"]
    page.set_viewport_size(NARROW)
    for path in pages:
        page.goto(ui_daemon.url(path))
        page.wait_for_load_state("networkidle")
        expect(page.locator("main h1")).to_be_visible()
        assert fits_width(page), f"{path} scrolls sideways at {NARROW['width']} px"
    shoot(page, "case-narrow")
    page.goto(ui_daemon.url("/runtime"))
    page.wait_for_load_state("networkidle")
    shoot(page, "runtime-narrow")
    page.set_viewport_size(WIDE)

    # Tab order starts with the skip link, which moves focus to the content; nav links follow.
    page.goto(ui_daemon.url("/retrieval"))
    page.keyboard.press("Tab")
    expect(page.get_by_role("link", name="Skip to content")).to_be_focused()
    page.keyboard.press("Tab")
    expect(page.get_by_role("link", name="memory-core Diagnostics")).to_be_focused()
    page.keyboard.press("Tab")
    expect(page.get_by_role("link", name="Runtime", exact=True)).to_be_focused()
    page.keyboard.press("Enter")
    expect(page.get_by_role("heading", name="Runtime", level=1)).to_be_visible()
    expect(page.get_by_role("link", name="Runtime", exact=True)).to_have_attribute("aria-current", "page")


def test_requests_without_the_token_or_from_elsewhere_are_refused(ui_daemon: UiDaemon) -> None:
    info = ui_daemon.info
    host = f"127.0.0.1:{info.port}"
    token = {"authorization": f"Bearer {info.token}"}
    with httpx.Client(base_url=info.base_url, follow_redirects=False, timeout=30) as client:
        for path in ("/ui/api/runtime", "/ui/api/export", "/v1/list_projects"):
            reply = client.get(path)
            assert reply.status_code == 401, path
        assert client.post("/v1/list_projects", json={}).status_code == 401
        assert client.get(f"/v1/list_projects?token={info.token}").status_code == 401
        assert client.get("/v1/list_projects", headers={"authorization": "Bearer not-the-token"}).status_code == 401
        # The pages and assets need no token and hold none.
        for path in ("/", "/runtime", "/static/app.js", "/static/lib.js"):
            reply = client.get(path)
            assert reply.status_code == 200 and info.token not in reply.text and "set-cookie" not in reply.headers
        # Scripts use the token as a bearer credential.
        scripted = client.post("/v1/list_projects", json={}, headers=token)
        assert scripted.status_code == 200 and PROJECT in scripted.text
        assert "content-security-policy" in scripted.headers and scripted.headers["cache-control"] == "no-store"
        # DNS rebinding: the right secret under a foreign name is still refused.
        rebound = client.get("/v1/list_projects", headers={**token, "host": f"attacker.example:{info.port}"})
        assert rebound.status_code == 403 and rebound.json()["error"]["code"] == "ui_host_not_allowed"
        # Cross-site: a foreign Origin (another port is another origin) is refused even with the token.
        for origin in ("http://attacker.example", "http://127.0.0.1:1", f"http://localhost:{info.port}"):
            foreign = client.post("/v1/clear_retrieval_runs", json={"all": True}, headers={**token, "origin": origin})
            assert foreign.status_code == 403 and foreign.json()["error"]["code"] == "ui_origin_not_allowed"
        # What would read files on the user's behalf is not served here at all, token or not.
        for method, body in (("add_project", {"project_id": "stolen", "sources": [{"path": "/etc"}]}),
                             ("index_project", {"project_id": PROJECT}),
                             ("activate_memory", {"project_id": PROJECT, "query": "deploy"})):
            refused = client.post(f"/v1/{method}", json=body, headers=token)
            assert refused.status_code == 403 and refused.json()["error"]["code"] == "ui_method_not_allowed"
    assert "stolen" not in {p.project.project_id for p in ui_daemon.client.list_projects()}
    # A cookie carries no authority, not even one holding this start's token under the old name.
    cookies = {f"memcore_ui_{info.port}": info.token, "token": info.token}
    with httpx.Client(base_url=info.base_url, follow_redirects=False, timeout=30, cookies=cookies) as browser_like:
        for path in ("/v1/list_projects", "/ui/api/runtime"):
            assert browser_like.get(path).status_code == 401, path
        same_origin = browser_like.post("/v1/clear_retrieval_runs", json={"all": True},
                                        headers={"origin": f"http://{host}"})
        assert same_origin.status_code == 401 and same_origin.json()["error"]["code"] == "ui_unauthorized"
    # Loopback only, and the token's file is the owner's alone.
    assert info.base_url == f"http://127.0.0.1:{info.port}/"
    assert stat.S_IMODE(os.stat(ui_file(ui_daemon.home)).st_mode) == 0o600
    assert listeners(info.port) == {"0100007F"}  # 127.0.0.1, and no IPv6 listener


class Recorder(http.server.BaseHTTPRequestHandler):
    """Another local server (another user's, or one a page sends the browser to): it records
    every request it gets and hops the browser from ``localhost`` to ``127.0.0.1``."""

    seen: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.seen.append(f"{self.requestline}\n{self.headers}")
        port = self.server.server_address[1]
        if self.path.startswith("/hop"):
            self.send_response(302)
            self.send_header("location", f"http://127.0.0.1:{port}/landed")
            self.send_header("content-length", "0")
            self.end_headers()
            return
        body = (b"<!doctype html><title>elsewhere</title><img src=/pixel.gif>"
                b"<script>fetch('/probe', {credentials: 'include'})</script>")
        self.send_response(200 if not self.path.startswith(("/pixel", "/probe")) else 204)
        if self.path.startswith(("/pixel", "/probe")):
            body = b""
        self.send_header("content-type", "text/html")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: Any) -> None:
        pass


def test_another_local_server_the_browser_is_led_to_gets_nothing_usable(
    session: Any, page: Any, ui_daemon: UiDaemon, console: Console
) -> None:
    token = ui_daemon.info.token
    Recorder.seen = []
    other = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    thread = threading.Thread(target=other.serve_forever, name="other-server", daemon=True)
    thread.start()
    try:
        port = other.server_address[1]
        # The UI is in use in this tab (its token in sessionStorage), then the tab is led away:
        # straight to another port, and through a localhost -> 127.0.0.1 hop.
        page.goto(ui_daemon.url("/evaluation"))
        expect(page.get_by_role("heading", name="Evaluation", level=1)).to_be_visible()
        for address in (f"http://127.0.0.1:{port}/", f"http://localhost:{port}/hop"):
            page.goto(address)
            page.wait_for_load_state("networkidle")
            assert page.evaluate("sessionStorage.getItem('memcore-ui-token')") is None  # not this origin's
            assert token not in page.evaluate("document.cookie")
        assert page.url == f"http://127.0.0.1:{port}/landed"
    finally:
        other.shutdown()
        other.server_close()
        thread.join(10)
    assert len(Recorder.seen) >= 6, Recorder.seen  # pages, pixels and probes from both visits
    assert any("/landed" in r for r in Recorder.seen)
    for request in Recorder.seen:
        assert token not in request, request  # no cookie, header or address carried it
    assert all(token not in c["value"] for c in session.cookies()) and session.cookies() == []
    # Back on the UI, the tab still holds its token and the page works.
    page.goto(ui_daemon.url("/runtime"))
    expect(page.locator("main")).to_contain_text(str(ui_daemon.proc.pid))


def test_a_browser_with_cookies_alone_gets_nothing(browser: Any, ui_daemon: UiDaemon, console: Console) -> None:
    """A tab that never saw the launch address, with the token planted as a cookie for the UI's
    host (what the old UI set): the page loads but every call is refused."""
    console.allow(r"status of 401")  # Chromium logs each refused fetch
    context = browser.new_context(viewport=WIDE)
    try:
        context.add_cookies([{"name": f"memcore_ui_{ui_daemon.info.port}", "value": ui_daemon.info.token,
                              "url": ui_daemon.url("/")}])
        fresh = console.watch(context.new_page())
        replies: list[tuple[str, int]] = []
        fresh.on("response", lambda r: replies.append((r.url, r.status)) if "/v1/" in r.url or "/ui/api/" in r.url
                 else None)
        fresh.goto(ui_daemon.url("/runtime"))
        alert = fresh.locator("main [role=alert]")
        expect(alert).to_contain_text("ui_unauthorized")
        expect(alert).to_contain_text("memcore ui")
        assert replies and all(status == 401 for _, status in replies), replies
    finally:
        context.close()
    assert not [e for e in console.unexpected() if "401" not in e]


def listeners(port: int) -> set[str]:
    """Local addresses (hex, as the kernel lists them) of the sockets listening on ``port``."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            address, hex_port = fields[1].split(":")
            if int(hex_port, 16) == port and fields[3] == "0A":  # 0A: LISTEN
                found.add(address)
    return found


def test_memcore_ui_prints_the_launch_address(ui_daemon: UiDaemon) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("MEMORY_CORE_HOME", "DISPLAY", "WAYLAND_DISPLAY")}
    done = subprocess.run([sys.executable, "-m", "memory_core", "--home", str(ui_daemon.home), "ui", "--no-open"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    address = done.stdout.strip()
    assert address == ui_daemon.info.url == ui_daemon.launch("/")  # the token only in the fragment
    with httpx.Client(follow_redirects=False, timeout=30) as http_client:
        reply = http_client.get(address)  # what a browser fetches: the page, without the fragment
        assert reply.status_code == 200 and "set-cookie" not in reply.headers
        assert ui_daemon.info.token not in reply.text
