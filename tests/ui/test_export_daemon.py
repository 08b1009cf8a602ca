"""The UI's export route on the real daemon's UI port (issue 14 item 8): what the in-process tests
in test_security.py check of the route, through uvicorn and the token guard as a browser meets them."""

from __future__ import annotations

import re
from collections.abc import Iterator
from urllib.parse import unquote

import httpx
import pytest

from tests.ui.conftest import PROJECT, UiDaemon

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def page_client(ui_daemon: UiDaemon) -> Iterator[httpx.Client]:
    """What the page sends: the bearer token from its launch address, its own origin, no cookie."""
    info = ui_daemon.info
    headers = {"authorization": f"Bearer {info.token}", "origin": info.base_url.rstrip("/")}
    with httpx.Client(base_url=info.base_url, headers=headers, timeout=60) as client:
        yield client


@pytest.mark.parametrize("project_id", ['a";filename=evil.exe', "caf\u00e9", "a\r\nset-cookie: x=1", "\u202egpj.exe"])
def test_a_project_id_that_is_not_one_is_refused_with_the_envelope(page_client: httpx.Client, project_id: str) -> None:
    reply = page_client.get("/ui/api/export", params={"project_id": project_id})
    assert reply.status_code == 400, reply.text
    assert reply.json()["error"]["code"] == "invalid_project_name"
    assert "content-disposition" not in reply.headers


def test_an_unknown_project_is_404_and_a_known_one_downloads_under_one_filename(page_client: httpx.Client) -> None:
    unknown = page_client.get("/ui/api/export", params={"project_id": "nope"})
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "project_not_found"
    assert "content-disposition" not in unknown.headers

    known = page_client.get("/ui/api/export", params={"project_id": PROJECT})
    assert known.status_code == 200, known.text
    header = known.headers["content-disposition"]
    assert header.count("filename=") == 1 and header.count("filename*=") == 1, header
    plain = re.fullmatch(r'attachment; filename="([^"]+)"; filename\*=UTF-8\'\'(\S+)', header)
    assert plain and plain.group(1) == unquote(plain.group(2)), header
    assert plain.group(1).startswith(f"evaluation-set-{PROJECT}-") and plain.group(1).endswith(".json")
    assert known.json()["format"]  # the fixture document itself


def test_the_export_without_the_token_is_refused(ui_daemon: UiDaemon) -> None:
    with httpx.Client(base_url=ui_daemon.info.base_url, timeout=60) as anonymous:
        reply = anonymous.get("/ui/api/export", params={"project_id": PROJECT})
    assert reply.status_code in (401, 403), reply.text
    assert "content-disposition" not in reply.headers
