"""Long jobs never stall agents (issue 30, item 2): a tuning, an import and a storage move run in
a child process of the real daemon, off its engine lock; activations answer while one runs, and
SIGTERM cancels it and stops the daemon at once, keeping nothing the job had started.

``MEMORY_CORE_JOB_PAUSE`` makes a job's process stop itself (SIGSTOP) as it starts, so "a job is
in flight" is a fact the test sees in /proc, not a race against the clock."""

from __future__ import annotations

import io
import json
import os
import pickle
import signal
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from memory_core.domain import errors as err
from memory_core.domain.evaluation_errors import EvaluationSetEmpty, InvalidFixture
from memory_core.domain.model import Layer, Source
from memory_core.entrypoints.daemon import cli as daemon_cli
from memory_core.entrypoints.daemon import jobs
from tests.daemon.process import alive
from tests.daemon.test_server import Daemon, memory_folder, running_daemon

WAIT_S = 60.0
QUERY = "how do I roll back a deploy?"


def children(pid: int) -> list[int]:
    """The live processes whose parent is ``pid`` (from /proc: no psutil)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue  # gone meanwhile
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def process_state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]


def paused_job(daemon: Daemon) -> int:
    """The pid of the daemon's job process once it has stopped itself."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        for pid in children(daemon.proc.pid):
            try:
                if process_state(pid) == "T":
                    return pid
            except OSError:
                continue
        time.sleep(0.05)
    raise AssertionError(f"no job process stopped within {WAIT_S} s:\n{daemon.log.read_text()}")


def in_thread(call: Any) -> tuple[threading.Thread, dict[str, Any]]:
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = call()
        except Exception as exc:  # the assertions read it
            outcome["error"] = exc

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    return worker, outcome


def paused_daemon(tmp_path: Path, operation: str, env: dict[str, str] | None = None) -> Daemon:
    """A daemon serving ``ledger`` (indexed) whose job process for ``operation`` stops itself as
    it starts, so a test sees the job in flight (``paused_job``); ``env``: more of its environment."""
    daemon = Daemon(tmp_path / "home", tmp_path / "daemon.log", env={jobs.PAUSE_POINT_ENV: operation, **(env or {})})
    try:
        daemon.client.add_project("ledger", [Source(str(memory_folder(tmp_path / "memory")))])
        daemon.client.index_project("ledger")
    except BaseException:
        daemon.stop()
        raise
    return daemon


@pytest.mark.slow
@pytest.mark.parametrize("operation", ["tune_project", "move_project_storage", "import_evaluation_set"])
def test_a_job_in_flight_holds_no_activation_and_sigterm_cancels_it(tmp_path: Path, operation: str) -> None:
    daemon = paused_daemon(tmp_path, operation)
    client = daemon.client
    first = client.activate_memory("ledger", QUERY)
    fixture = client.export_evaluation_set(case_ids=[client.create_evaluation_case(first.run_id).case_id])
    destination = tmp_path / "elsewhere"
    start = {
        "tune_project": lambda: client.tune_project("ledger", include_unreviewed=True),
        "move_project_storage": lambda: client.move_project_storage("ledger", destination),
        "import_evaluation_set": lambda: client.import_evaluation_set(fixture),
    }[operation]
    worker, outcome = in_thread(start)
    child = paused_job(daemon)

    answer = client.activate_memory("ledger", QUERY)  # the job holds nothing an activation needs
    assert answer.fragments and answer.fragments[0].resource_id == "runbooks/deploy.md"
    assert client.runtime_status().engine_busy is False
    assert worker.is_alive() and not outcome, "the job answered while its process was stopped"

    daemon.proc.send_signal(signal.SIGTERM)
    assert daemon.proc.wait(timeout=WAIT_S) == 0  # before: it waited as long as the job ran
    worker.join(timeout=WAIT_S)
    error = outcome.get("error")
    assert isinstance(error, err.JobInterrupted), outcome
    assert error.details["reason"] == "stopping"
    assert not alive(child) or process_state(child) == "Z"
    daemon.client.close()

    restarted = Daemon(tmp_path / "home", tmp_path / "daemon.log")
    try:  # nothing the job started was kept, and the project serves from where it was
        assert restarted.client.list_tunings("ledger") == []
        storage = restarted.client.show_project_storage("ledger")
        assert not destination.exists() or not any(destination.iterdir())
        assert Path(storage.location) != destination
        assert restarted.client.activate_memory("ledger", QUERY).fragments
    finally:
        assert restarted.stop() == 0


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Any:
    yield from running_daemon(tmp_path_factory, "jobs", indexed_project="ledger")


def served_from(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder the module's daemon may move ``ledger`` into: it serves it from there after the
    test that moved it, so not the test's ``tmp_path``, removed as a passing test ends
    (``tmp_path_retention_policy``)."""
    return tmp_path_factory.mktemp("served-from")


def test_a_jobs_result_and_its_typed_error_cross_the_process(
    daemon: Daemon, tmp_path_factory: pytest.TempPathFactory
) -> None:
    client = daemon.client
    served = served_from(tmp_path_factory)
    with pytest.raises(EvaluationSetEmpty) as empty:
        client.tune_project("ledger")
    assert empty.value.details == {"project": "ledger"}
    with pytest.raises(InvalidFixture):
        client.import_evaluation_set({"format": "memory-core/evaluation-set", "format_version": 999})
    _, fixture = exported_case(client)
    again = client.import_evaluation_set(fixture)
    assert again.cases_added == () and len(again.cases_unchanged) == 1

    moved = client.move_project_storage("ledger", served / "moved")
    assert Path(moved.location) == served / "moved"
    answer = client.activate_memory("ledger", QUERY)  # the daemon opens the moved copy
    assert answer.fragments[0].resource_id == "runbooks/deploy.md"
    # Each job's progress crossed from its process: the last stage it said stays on its record.
    ended = {j.operation: j for j in client.list_jobs().jobs if j.state == "succeeded"}
    assert ended["move_project_storage"].progress == "copying 1/1"
    assert ended["import_evaluation_set"].progress == "importing 3/3"
    records = daemon.log_records()
    assert all(r["message"] != "job ended without an answer" for r in records)
    # One child served these jobs one after another: a job pays no interpreter start-up.
    pids = [r["pid"] for r in records if r["message"] == "job started"]
    assert len(pids) == 4 and len(set(pids)) == 1, pids


@pytest.mark.parametrize(
    "error",
    [
        err.ProjectNotFound.among("nope", ["a", "b"]),
        err.RetrievalFailed("boom", stage="bm25", error_code="x", run_id="r"),
        EvaluationSetEmpty("none", project="p"),
        err.JobInterrupted("stop", reason="stopping"),
    ],
)
def test_a_domain_error_pickles_whole(error: err.MemoryCoreError) -> None:
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is type(error)
    assert (back.code, back.message, back.details, back.args) == (error.code, error.message, error.details, error.args)
    assert back.__dict__ == error.__dict__


@pytest.mark.slow
def test_a_running_job_is_listed_and_cancel_job_stops_it_keeping_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 31, item 2: a job has an id, shows in list_jobs while it runs, and cancel_job stops
    it: its caller gets job_interrupted (reason cancelled), it stays listed as cancelled, and the
    daemon serves on with nothing of the job kept."""
    daemon = paused_daemon(tmp_path, "move_project_storage")
    client = daemon.client
    try:
        assert client.list_jobs().jobs == ()
        destination = tmp_path / "elsewhere"
        worker, outcome = in_thread(lambda: client.move_project_storage("ledger", destination))
        child = paused_job(daemon)

        (running,) = client.list_jobs().jobs
        assert (running.operation, running.project_id, running.state) == ("move_project_storage", "ledger", "running")
        assert running.cancellable and running.ended_at is None and running.started_at
        assert daemon_cli._status(str(tmp_path / "home"), as_json=True) == 0  # memcore status names it
        assert [job["job_id"] for job in json.loads(capsys.readouterr().out)["jobs"]] == [running.job_id]

        cancelled = client.cancel_job(running.job_id)
        assert cancelled.job_id == running.job_id
        worker.join(timeout=WAIT_S)
        error = outcome.get("error")
        assert isinstance(error, err.JobInterrupted), outcome
        assert error.details["reason"] == "cancelled"
        assert not alive(child) or process_state(child) == "Z"

        (ended,) = client.list_jobs().jobs
        assert (ended.job_id, ended.state, ended.error_code) == (running.job_id, "cancelled", "job_interrupted")
        assert not ended.cancellable and ended.ended_at is not None
        assert Path(client.show_project_storage("ledger").location) != destination
        assert not destination.exists() or not any(destination.iterdir())
        assert client.activate_memory("ledger", QUERY).fragments

        with pytest.raises(err.JobNotFound):
            client.cancel_job("no-such-job")
        with pytest.raises(err.InvalidRequest, match="re-index"):
            client.cancel_job("index:ledger")
    finally:
        assert daemon.stop() == 0


def test_a_jobs_progress_is_sent_at_most_each_interval_and_its_end_always(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [100.0]
    monkeypatch.setattr(jobs.time, "monotonic", lambda: clock[0])
    out = io.BytesIO()
    report = jobs._Reporter(out)
    for done in range(10):  # ten steps within one interval: the first is sent
        report("grading", done, 10)
    clock[0] += jobs.PROGRESS_EVERY_S
    report("grading", 7, 10)  # an interval later: sent
    report("grading", 10, 10)  # the end: sent however soon
    frames = io.BytesIO(out.getvalue())
    sent = []
    while (frame := jobs._read_frame(frames)) is not None:
        sent.append(pickle.loads(frame))
    assert sent == [("progress", "grading 0/10"), ("progress", "grading 7/10"), ("progress", "grading 10/10")]


def test_the_cli_draws_a_jobs_progress_from_its_record_or_from_the_engine(
    daemon: Daemon, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Issue 31 item 2: ``memcore eval tune|learn|import`` and ``project storage move`` draw their
    bar from the job's ``list_jobs`` record through a daemon, and from the engine's own calls in
    process; the same stages either way."""
    from memory_core.entrypoints.cli.executor import job_progress
    from memory_core.operations.executor import InProcess, Operations
    from tests.reliability.harness import engine_for, write_memory

    remote: list[tuple[str, int, int]] = []
    ops = Operations(daemon.client)
    with job_progress(ops, "move_project_storage", "ledger", lambda *step: remote.append(step)):
        ops.move_project_storage("ledger", str(served_from(tmp_path_factory) / "through-the-daemon"))
    assert remote and remote[-1] == ("copying", 1, 1), remote

    engine = engine_for(tmp_path / "home")
    try:
        engine.add_project("here", [Source(str(write_memory(tmp_path / "memory", 0)))])
        engine.index("here")
        local: list[tuple[str, int, int]] = []
        here = Operations(InProcess(engine))
        with job_progress(here, "move_project_storage", "here", lambda *step: local.append(step)):
            here.move_project_storage("here", str(tmp_path / "in-process"))
        assert local == [("copying", 0, 1), ("copying", 1, 1)]
    finally:
        engine.close()


# -- an import's body is decoded in its job (issue 31) -----------------------------------------
MALFORMED_IMPORTS = {
    "not JSON": b'{"fixture": {"format": ',
    "not UTF-8": b'{"fixture": "\xff"}',
    "a duplicate key": b'{"fixture": {}, "fixture": {}}',
    "no body": b"",
    "not an object": b'{"fixture": [1]}',
    "an unknown field": b'{"fixture": {}, "extra": 1}',
}


# Bodies that decode to a request whose fixture is bad: the import (in its job) refuses them.
BAD_FIXTURES = [b'{"fixture": {}}']
FIXTURE_CODES = ("invalid_evaluation_fixture", "evaluation_fixture_hash_mismatch")


def exported_case(client: Any) -> tuple[str, Any]:
    """An Evaluation Case frozen from an activation of ``ledger``, and its exported fixture (what
    an import takes)."""
    run_id = client.activate_memory("ledger", QUERY).run_id
    assert run_id is not None
    case_id = client.create_evaluation_case(run_id).case_id
    return case_id, client.export_evaluation_set(case_ids=[case_id])


def post_body(daemon: Daemon, method: str, body: bytes) -> tuple[int, Any]:
    """POST ``body`` as it is (no client encodes it); the status and the JSON answer."""
    from memory_core.entrypoints.daemon.transport import UnixSocketHTTP

    http = UnixSocketHTTP(daemon.socket, timeout=WAIT_S, connect_timeout=5.0)
    try:
        reply = http.post(f"/v1/{method}", content=body, headers={"content-type": "application/json"})
        return reply.status_code, reply.json()
    finally:
        http.close()


def refused_by_the_app(body: bytes) -> tuple[int, Any]:
    """The answer the daemon's app gave such a body when it decoded it itself, before it handed
    the request to the job: the boundary decoder, then the strict converter, then the envelope."""
    from memory_core.entrypoints.daemon import api
    from memory_core.entrypoints.daemon.app import error_response
    from memory_core.entrypoints.wire_input import decode_json

    try:
        api.structure(api.make_converter(), decode_json(body) if body else {}, api.ImportEvaluationSetRequest)
    except err.MemoryCoreError as exc:
        response = error_response(exc)
        return response.status_code, json.loads(bytes(response.body))
    raise AssertionError(f"{body!r} is a valid request")


def continued(daemon: Daemon, call: Any) -> Any:
    """``call``'s outcome, once the job it started has been seen stopped in its own process
    (``PAUSE_POINT_ENV``: before it reads its request) and let go; it must not answer before."""
    worker, outcome = in_thread(call)
    child = paused_job(daemon)
    assert worker.is_alive() and not outcome, f"answered before its job's process ran: {outcome}"
    os.kill(child, signal.SIGCONT)
    worker.join(timeout=WAIT_S)
    assert not worker.is_alive()
    return outcome


@pytest.mark.slow
def test_an_imports_body_is_decoded_in_its_job_not_in_the_daemon(tmp_path: Path) -> None:
    """Issue 31, item 2: the daemon hands an import's body to the job's process undecoded (a
    fixture of hundreds of MiB cost its event loop and GIL seconds of parsing beside every
    activation). A malformed body reaches the job's process, seen there stopped with no answer
    given, and comes back refused with the very answer the daemon's own decoding gave (code,
    message, details, status); a valid one imports as before."""
    from memory_core.evaluation.fixture import ImportResult

    daemon = paused_daemon(tmp_path, "import_evaluation_set")
    client = daemon.client
    try:
        case_id, fixture = exported_case(client)
        bodies = {**MALFORMED_IMPORTS, "the fixture unwrapped": fixture.to_bytes()}
        answers = {}
        for what, body in bodies.items():
            outcome = continued(daemon, lambda b=body: post_body(daemon, "import_evaluation_set", b))
            assert outcome["value"] == refused_by_the_app(body), what
            status, answers[what] = outcome["value"]
            assert status == 400, what
        codes = [answer["error"]["code"] for answer in answers.values()]
        assert codes == ["invalid_json", "invalid_json"] + ["invalid_request"] * 5
        assert answers["a duplicate key"]["error"]["details"]["reason"] == "duplicate_key"

        outcome = continued(daemon, lambda: client.import_evaluation_set(fixture))
        assert outcome["value"] == ImportResult((), (case_id,), 0, 0)  # the case is there already
        # Each body was its job's: refused there, listed failed with its code (newest first).
        imports = [j for j in client.list_jobs().jobs if j.operation == "import_evaluation_set"]
        assert [(j.state, j.error_code) for j in imports] == [("succeeded", None)] + [
            ("failed", code) for code in reversed(codes)
        ]
        ended = [r for r in daemon.log_records() if r["message"] == "job ended"]
        assert [r["status"] for r in ended] == ["error"] * len(codes) + ["ok"]
    finally:
        assert daemon.stop() == 0


def test_bad_input_never_pushes_a_real_jobs_end_out_of_the_listing(daemon: Daemon) -> None:
    """Issue 31, item 2 (review): a body that does not decode fails its job on its input alone.
    It is listed, failed with its code, but among at most ``REFUSED_KEPT`` of its kind, apart
    from the last ``ENDED_KEPT`` jobs that ran: before, a client's bad requests pushed every
    real job's end out of ``list_jobs``."""
    client = daemon.client
    _, fixture = exported_case(client)
    client.import_evaluation_set(fixture)  # decoded in its job, which ran: a real job
    real = next(j for j in client.list_jobs().jobs if j.operation == "import_evaluation_set")
    assert (real.state, real.error_code) == ("succeeded", None)

    bodies = list(MALFORMED_IMPORTS.values())
    sent = [bodies[i % len(bodies)] for i in range(jobs.ENDED_KEPT + 1)]
    for body in sent:
        status, answer = post_body(daemon, "import_evaluation_set", body)
        assert (status, answer) == refused_by_the_app(body)  # the same answer as before
    # A body that decodes but whose fixture is bad fails in the import itself, which writes nothing:
    # refused on its input alone too (before, these were kept as real failed jobs).
    document = json.loads(fixture.to_bytes())
    document["bodies"][0]["sha256"] = "0" * 64  # a body that does not hash to what it claims
    mismatched = json.dumps({"fixture": document}).encode()
    fixture_codes = []
    for body in (BAD_FIXTURES + [mismatched]) * (jobs.ENDED_KEPT + 1):
        status, answer = post_body(daemon, "import_evaluation_set", body)
        assert status == 400 and answer["error"]["code"] in FIXTURE_CODES, answer
        fixture_codes.append(answer["error"]["code"])
    assert set(fixture_codes) == set(FIXTURE_CODES)

    listed = client.list_jobs().jobs
    assert real.job_id in [j.job_id for j in listed], "bad input pushed a real job out"
    refused = listed[: listed.index(next(j for j in listed if j.job_id == real.job_id))]
    # The newest refused ones, newest first, each failed with its own code.
    codes = [refused_by_the_app(body)[1]["error"]["code"] for body in sent] + fixture_codes
    expected = codes[::-1][: jobs.REFUSED_KEPT]
    assert [(j.operation, j.state, j.error_code) for j in refused] == [
        ("import_evaluation_set", "failed", code) for code in expected
    ]
    assert len(listed) <= jobs.ENDED_KEPT + jobs.REFUSED_KEPT


def unix_post_chunked(path: Path, method: str, chunks: list[bytes]) -> tuple[int, Any]:
    """POST a body without a Content-Length (chunked), as a streaming client does."""
    import http.client
    import socket

    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(WAIT_S)
        sock.connect(str(path))
        head = f"POST /v1/{method} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
        sock.sendall(head.encode() + b"Transfer-Encoding: chunked\r\n\r\n")
        for chunk in chunks:
            sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        sock.sendall(b"0\r\n\r\n")
        reply = http.client.HTTPResponse(sock)
        reply.begin()
        return reply.status, json.loads(reply.read())


def answered(call: Any) -> Any:
    """``call``'s outcome; it must come while the jobs in flight are stopped (none can end first)."""
    worker, outcome = in_thread(call)
    worker.join(timeout=WAIT_S)
    assert not worker.is_alive(), "no answer while the held jobs were stopped: it waited for them"
    return outcome


def paused_jobs(daemon: Daemon, count: int) -> list[int]:
    """The pids of ``count`` job processes of the daemon once each has stopped itself."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        stopped = []
        for pid in children(daemon.proc.pid):
            try:
                if process_state(pid) == "T":
                    stopped.append(pid)
            except OSError:
                continue
        if len(stopped) >= count:
            return stopped
        time.sleep(0.05)
    raise AssertionError(f"fewer than {count} job processes stopped within {WAIT_S} s:\n{daemon.log.read_text()}")


@pytest.mark.slow
def test_imports_past_the_daemons_bound_are_answered_busy_at_once_and_lose_nothing(tmp_path: Path) -> None:
    """Issue 31, item 2 (review): the daemon holds an import's body from its first byte to its
    job's answer, so it holds at most so many at once (``jobs.BODIES_HELD``) and so many of their
    bytes (``jobs.BODY_BYTES_HELD``; lowered here through ``jobs.BODIES_ENV``). One past either
    is answered daemon_busy (503) at once, while the held jobs' processes are stopped, whether
    its body announces its length or not; it starts no job and is not listed, and the held ones
    end as they would have. Before, every body was kept and every import started a job process."""
    from memory_core.entrypoints.daemon import api
    from memory_core.evaluation.fixture import ImportResult

    bound = 1 << 20
    daemon = paused_daemon(tmp_path, "import_evaluation_set", env={jobs.BODIES_ENV: f"2,{bound}"})
    client = daemon.client
    try:
        case_id, fixture = exported_case(client)
        half = b" " * (bound // 2)  # held while its job runs: then refused there, invalid_json
        first, first_outcome = in_thread(lambda: post_body(daemon, "import_evaluation_set", half))
        paused_jobs(daemon, 1)

        def busy(outcome: dict[str, Any], reason: str) -> dict[str, Any]:
            status, answer = outcome["value"]
            assert (status, answer["error"]["code"]) == (503, "daemon_busy"), answer
            details: dict[str, Any] = answer["error"]["details"]
            assert (details["operation"], details["reason"]) == ("import_evaluation_set", reason)
            assert (details["max_bodies"], details["max_bytes"]) == (2, bound)
            return details

        # Past the bytes: refused with its length announced, and as a body without one grows past.
        over = answered(lambda: post_body(daemon, "import_evaluation_set", b" " * (bound // 2 + 1)))
        assert busy(over, "bytes")["held_bytes"] == bound // 2
        streamed = answered(lambda: unix_post_chunked(daemon.socket, "import_evaluation_set",
                                                      [b" " * (bound // 16)] * 8 + [b" "]))  # fmt: skip
        busy(streamed, "bytes")

        second, second_outcome = in_thread(lambda: client.import_evaluation_set(fixture))  # room for it
        paused_jobs(daemon, 2)
        # Past the count: refused at once, raw or through the typed client.
        details = busy(answered(lambda: post_body(daemon, "import_evaluation_set", b"{}")), "bodies")
        assert details["held_bodies"] == 2 and details["held_bytes"] > bound // 2
        typed = answered(lambda: client.import_evaluation_set(fixture))
        assert isinstance(typed.get("error"), api.DaemonBusy), typed
        assert typed["error"].details["reason"] == "bodies"

        # The refused ones started no job and are not listed; the held ones end as they would have.
        assert [j.state for j in client.list_jobs().jobs] == ["running", "running"]
        for pid in paused_jobs(daemon, 2):
            os.kill(pid, signal.SIGCONT)
        first.join(timeout=WAIT_S)
        second.join(timeout=WAIT_S)
        assert first_outcome["value"] == refused_by_the_app(half)
        assert second_outcome["value"] == ImportResult((), (case_id,), 0, 0)
        # Their bodies are let go: the next import is taken again.
        again = continued(daemon, lambda: client.import_evaluation_set(fixture))
        assert again["value"] == ImportResult((), (case_id,), 0, 0)
        imports = [(j.state, j.error_code) for j in client.list_jobs().jobs]
        assert sorted(imports, key=str) == sorted([("succeeded", None)] * 2 + [("failed", "invalid_json")], key=str)
        started = [r for r in daemon.log_records() if r["message"] == "job started"]
        assert len(started) == 3
    finally:
        assert daemon.stop() == 0


def stalled_upload(path: Path, method: str, length: int) -> Any:
    """A connection that announces a body of ``length`` bytes and sends none of it."""
    import socket

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(WAIT_S)
    sock.connect(str(path))
    sock.sendall(f"POST /v1/{method} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                 f"Content-Length: {length}\r\n\r\n".encode())  # fmt: skip
    return sock


@pytest.mark.slow
def test_a_stalled_upload_lets_its_place_go_at_its_deadline(tmp_path: Path) -> None:
    """Issue 31, item 2 (review): an import's place among the bodies the daemon holds is taken by
    its Content-Length, before any byte. Two clients announcing bodies and sending nothing had
    every import answered daemon_busy for ever, with nothing in list_jobs. Now a held body must
    arrive whole within a deadline (``jobs.BODY_DEADLINE_S``, lowered here through
    ``jobs.BODY_DEADLINE_ENV``): the stalled clients are answered invalid_request (reason
    body_deadline), their places are let go, and the next import is taken; meanwhile daemon_busy
    says how many held bodies are still arriving."""
    import http.client

    from memory_core.evaluation.fixture import ImportResult

    bound, deadline_s = 1 << 20, 5
    daemon = Daemon(tmp_path / "home", tmp_path / "daemon.log",
                    env={jobs.BODIES_ENV: f"4,{bound}", jobs.BODY_DEADLINE_ENV: str(deadline_s)})  # fmt: skip
    client = daemon.client
    stalled = []
    try:
        fixture = client.export_evaluation_set()
        stalled = [stalled_upload(daemon.socket, "import_evaluation_set", bound // 2) for _ in range(2)]
        # Busy once both are held (each counted as its head arrives): no room for a byte more.
        busy_until = time.monotonic() + WAIT_S
        while (answer := post_body(daemon, "import_evaluation_set", b"{}"))[0] != 503:
            assert time.monotonic() < busy_until, f"the stalled uploads were never held: {answer}"
        status, busy = answer
        assert busy["error"]["code"] == "daemon_busy"
        assert busy["error"]["details"]["reason"] == "bytes"
        assert busy["error"]["details"]["held_bodies"] == 2
        assert "2 of them still arriving" in busy["error"]["message"], busy
        assert client.list_jobs().jobs == ()

        # Each stalled client hears why at its deadline; nothing of it ran or is listed.
        for sock in stalled:
            reply = http.client.HTTPResponse(sock)
            reply.begin()
            answer = json.loads(reply.read())
            assert (reply.status, answer["error"]["code"]) == (400, "invalid_request"), answer
            assert answer["error"]["details"]["reason"] == "body_deadline"
            assert answer["error"]["details"]["received"] == 0
        assert client.list_jobs().jobs == ()
        # Their places are let go: an import is taken and runs.
        assert client.import_evaluation_set(fixture) == ImportResult((), (), 0, 0)
        assert [(j.operation, j.state) for j in client.list_jobs().jobs] == [("import_evaluation_set", "succeeded")]
    finally:
        for sock in stalled:
            sock.close()
        assert daemon.stop() == 0


def trickled_until_answered(sock: Any, chunk: bytes) -> tuple[int, str | None, Any, bytes]:
    """Send ``chunk`` each 0.1 s on ``sock`` (a request whose body the daemon refused) until the
    daemon answers: its status, its Connection header, its JSON answer, and what the connection
    gives after it (``b""``: closed by the daemon, or reset: on Linux a Unix socket closed with
    bytes unread, as the trickled ones may be, fails its peer's next read with ECONNRESET)."""
    import contextlib
    import http.client
    import select

    until = time.monotonic() + WAIT_S
    while not select.select([sock], [], [], 0.1)[0]:
        assert time.monotonic() < until, "no answer while the refused body trickled in"
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # closed meanwhile: read why
            sock.sendall(chunk)
    reply = http.client.HTTPResponse(sock)
    reply.begin()
    answer = json.loads(reply.read())
    try:
        after = sock.recv(1)
    except ConnectionResetError:  # closed too, with bytes it had not read
        after = b""
    return reply.status, reply.getheader("connection"), answer, after


@pytest.mark.slow
def test_a_refused_body_trickling_in_is_answered_at_its_deadline_and_its_connection_closed(tmp_path: Path) -> None:
    """Before-stop review (issue 31, item 2): a body refused daemon_busy is read through before
    its answer (an HTTP/1.1 client sends all of it before it reads), but that reading had no
    deadline: a client trickling bytes held its request, and with it the daemon's stop, for ever.
    Now it is read no longer than a held body may take (``jobs.BODY_DEADLINE_S``, lowered here
    through ``jobs.BODY_DEADLINE_ENV``), then answered daemon_busy and its connection closed,
    whether it was refused for the length it announced or as it grew past the bound (no length
    announced); nothing of it is held after."""
    import socket

    from memory_core.evaluation.fixture import ImportResult

    bound, deadline_s = 1 << 20, 3
    daemon = Daemon(tmp_path / "home", tmp_path / "daemon.log",
                    env={jobs.BODIES_ENV: f"4,{bound}", jobs.BODY_DEADLINE_ENV: str(deadline_s)})  # fmt: skip
    client = daemon.client
    announced = stalled_upload(daemon.socket, "import_evaluation_set", bound + 1)  # refused as it came
    grown = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)  # refused once past the bound
    try:
        fixture = client.export_evaluation_set()
        grown.settimeout(WAIT_S)
        grown.connect(str(daemon.socket))
        grown.sendall(b"POST /v1/import_evaluation_set HTTP/1.1\r\nHost: localhost\r\n"
                      b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
                      b"%x\r\n%s\r\n" % (bound + 1, b" " * (bound + 1)))  # fmt: skip
        for sock, chunk in ((announced, b" "), (grown, b"1\r\n \r\n")):
            status, connection, answer, after = trickled_until_answered(sock, chunk)
            assert (status, answer["error"]["code"]) == (503, "daemon_busy"), answer
            assert answer["error"]["details"]["reason"] == "bytes"
            assert (connection, after) == ("close", b"")
        # Nothing of them ran, is listed or is held: an import is taken and runs.
        assert client.list_jobs().jobs == ()
        assert client.import_evaluation_set(fixture) == ImportResult((), (), 0, 0)
    finally:
        announced.close()
        grown.close()
        assert daemon.stop() == 0


def test_an_engine_of_other_parts_keeps_bad_input_apart_too(tmp_path: Path) -> None:
    """Without a job runner (an engine of other parts) an import's body is decoded in process,
    on the same board: a body that does not decode, or whose fixture the import refuses, is
    listed failed, kept apart as in a job's process, and pushes no real job's end out."""
    from memory_core.entrypoints.bootstrap import bootstrap
    from memory_core.entrypoints.daemon.dispatch import Context

    context = Context(engine=Any, home="unused")  # type: ignore[arg-type]  # bad input reaches no engine
    with context.board.job("tune_project", ("ledger",)):
        pass
    for _ in range(jobs.ENDED_KEPT + 1):
        with pytest.raises(err.MemoryCoreError) as refused:
            context.run_job_from_body("import_evaluation_set", MALFORMED_IMPORTS["not JSON"])
        assert refused.value.code == "invalid_json"
    listed = context.board.jobs()
    assert [(j.operation, j.state, j.error_code) for j in listed] == [
        ("import_evaluation_set", "failed", "invalid_json")
    ] * jobs.REFUSED_KEPT + [("tune_project", "succeeded", None)]

    # A bad fixture reaches the engine (a real one), whose import refuses it, writing nothing.
    with bootstrap(tmp_path / "home") as engine:
        context = Context(engine=engine, home=str(tmp_path / "home"))
        with context.board.job("tune_project", ("ledger",)):
            pass
        for body in BAD_FIXTURES * (jobs.ENDED_KEPT + 1):
            with pytest.raises(InvalidFixture):
                context.run_job_from_body("import_evaluation_set", body)
        listed = context.board.jobs()
    assert [(j.operation, j.state, j.error_code) for j in listed] == [
        ("import_evaluation_set", "failed", "invalid_evaluation_fixture")
    ] * jobs.REFUSED_KEPT + [("tune_project", "succeeded", None)]


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        (jobs.SLOTS_ENV, "two"), (jobs.SLOTS_ENV, "0"), (jobs.SLOTS_ENV, "-1"), (jobs.SLOTS_ENV, "1.5"),
        (jobs.BODIES_ENV, "4"), (jobs.BODIES_ENV, "4,"), (jobs.BODIES_ENV, "0,1048576"), (jobs.BODIES_ENV, "4,-1"),
        (jobs.BODIES_ENV, "4,1,2"), (jobs.BODY_DEADLINE_ENV, "soon"), (jobs.BODY_DEADLINE_ENV, "0"),
        (jobs.BODY_DEADLINE_ENV, "nan"), (jobs.BODY_DEADLINE_ENV, "inf"),
    ],
)  # fmt: skip
def test_a_malformed_bound_in_the_environment_is_a_typed_error_naming_it(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str
) -> None:
    """Issue 31, item 2 (review): the daemon reads its job slots and its held bodies' bound and
    deadline from the environment as it starts; a malformed value failed its start with a bare
    ValueError (or was taken: 0 slots, a negative bound). Now each must be a positive number,
    else ``invalid_request`` naming the variable; well-formed ones are taken as they are."""
    from memory_core.entrypoints.daemon.dispatch import HeldBodies, job_slots_from_env

    monkeypatch.setenv(variable, value)
    with pytest.raises(err.InvalidRequest) as refused:
        job_slots_from_env() if variable == jobs.SLOTS_ENV else HeldBodies.from_env()
    assert type(refused.value) is err.InvalidRequest
    assert refused.value.details == {"variable": variable, "value": value}
    assert variable in str(refused.value)


def test_well_formed_bounds_in_the_environment_are_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    from memory_core.entrypoints.daemon.dispatch import HeldBodies, job_slots_from_env

    for variable in (jobs.SLOTS_ENV, jobs.BODIES_ENV, jobs.BODY_DEADLINE_ENV):
        monkeypatch.delenv(variable, raising=False)
    default = HeldBodies.from_env()
    assert (job_slots_from_env(), default.max_bodies, default.max_bytes, default.deadline_s) == (
        jobs.JOB_SLOTS, jobs.BODIES_HELD, jobs.BODY_BYTES_HELD, jobs.BODY_DEADLINE_S)  # fmt: skip
    monkeypatch.setenv(jobs.SLOTS_ENV, "1")
    monkeypatch.setenv(jobs.BODIES_ENV, "2,1048576")
    monkeypatch.setenv(jobs.BODY_DEADLINE_ENV, "2.5")
    bound = HeldBodies.from_env()
    assert (job_slots_from_env(), bound.max_bodies, bound.max_bytes, bound.deadline_s) == (1, 2, 1 << 20, 2.5)


# -- job slots: jobs wait their turn apart from quick calls (issue 31, item 2, review) -----------
def job_processes(daemon: Daemon) -> list[int]:
    """The daemon's job processes (``python -m ...daemon.jobs``), stopped or not."""
    found = []
    for pid in children(daemon.proc.pid):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue  # gone meanwhile
        if jobs.__name__.encode() in argv:
            found.append(pid)
    return found


def listed_waiting(daemon: Daemon, count: int) -> list[Any]:
    """The jobs ``list_jobs`` shows waiting for a slot, once there are ``count`` of them."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        waiting = [j for j in daemon.client.list_jobs().jobs if j.progress == jobs.WAITING]
        if len(waiting) >= count:
            return waiting
        time.sleep(0.05)
    raise AssertionError(f"fewer than {count} jobs listed waiting within {WAIT_S} s: {daemon.client.list_jobs()}")


def with_a_case(daemon: Daemon) -> None:
    run_id = daemon.client.activate_memory("ledger", QUERY).run_id
    assert run_id is not None
    daemon.client.create_evaluation_case(run_id)


@pytest.mark.slow
def test_a_job_past_the_slots_waits_listed_and_runs_once_one_ends(tmp_path: Path) -> None:
    """Issue 31, item 2 (review): jobs run in at most ``JOB_SLOTS`` processes at once (lowered
    to 1 here through ``SLOTS_ENV``). With one job's process stopped, a second job starts no
    process: it is listed waiting (its progress ``WAITING``, cancellable), activations and
    list_jobs answer at once meanwhile, and it runs once the first has ended. Before, each job
    started its own process at once, without a bound."""
    daemon = paused_daemon(tmp_path, "tune_project", env={jobs.SLOTS_ENV: "1"})
    client = daemon.client
    try:
        with_a_case(daemon)
        first, first_outcome = in_thread(lambda: client.tune_project("ledger", include_unreviewed=True))
        (child,) = paused_jobs(daemon, 1)
        second, second_outcome = in_thread(lambda: client.tune_project("ledger", include_unreviewed=True))
        (waiting,) = listed_waiting(daemon, 1)

        running, queued = client.list_jobs().jobs  # oldest first
        assert (running.state, running.progress, running.cancellable) == ("running", None, True)
        assert (queued.job_id, queued.operation, queued.project_id) == (waiting.job_id, "tune_project", "ledger")
        assert (queued.state, queued.progress, queued.cancellable, queued.ended_at) == (
            "queued", jobs.WAITING, True, None)  # fmt: skip
        assert job_processes(daemon) == [child], "the waiting job started a process"
        answer = answered(lambda: client.activate_memory("ledger", QUERY))["value"]
        assert answer.fragments[0].resource_id == "runbooks/deploy.md"
        assert len(answered(client.list_jobs)["value"].jobs) == 2
        assert first.is_alive() and second.is_alive() and not first_outcome and not second_outcome

        os.kill(child, signal.SIGCONT)
        first.join(timeout=WAIT_S)
        assert not first.is_alive() and first_outcome
        (again,) = paused_jobs(daemon, 1)  # the second job's process (the first one's, kept for it)
        (now,) = [j for j in client.list_jobs().jobs if j.job_id == queued.job_id]
        assert (now.state, now.progress, now.cancellable) == ("running", None, True)
        assert second.is_alive() and not second_outcome
        os.kill(again, signal.SIGCONT)
        second.join(timeout=WAIT_S)
        # Both ran to their own answer (the same one: the same tuning), neither was interrupted.
        assert not second.is_alive() and second_outcome
        assert not isinstance(first_outcome.get("error"), err.JobInterrupted), first_outcome
        assert type(first_outcome.get("error")) is type(second_outcome.get("error")), (first_outcome, second_outcome)
        steps = [(r["message"], r["job_id"]) for r in daemon.log_records()
                 if r["message"] in ("job started", "job ended")]  # fmt: skip
        assert steps == [("job started", running.job_id), ("job ended", running.job_id),
                         ("job started", queued.job_id), ("job ended", queued.job_id)]  # fmt: skip
    finally:
        assert daemon.stop() == 0


QUICK_THREADS = 40  # anyio's default thread limiter, which every quick call's handler runs on


@pytest.mark.slow
def test_more_jobs_than_quick_call_threads_leave_quick_calls_answering(tmp_path: Path) -> None:
    """Issue 31, item 2 (review): more jobs at once than the threads quick calls run on. Before,
    each job held one of those threads for as long as it ran, with its own process: forty held
    every activation, list_jobs and cancel_job. Now one job runs (one slot), the rest wait
    holding no thread: quick calls answer at once, a waiting job is cancelled at once (never
    started), and SIGTERM ends every job, waiting or running, and the daemon promptly."""
    daemon = paused_daemon(tmp_path, "tune_project", env={jobs.SLOTS_ENV: "1"})
    client = daemon.client
    count = QUICK_THREADS + 4
    try:
        with_a_case(daemon)
        body = json.dumps({"project_id": "ledger", "include_unreviewed": True}).encode()
        calls = [in_thread(lambda: post_body(daemon, "tune_project", body)) for _ in range(count)]
        (child,) = paused_jobs(daemon, 1)
        waiting = listed_waiting(daemon, count - 1)
        assert job_processes(daemon) == [child]

        answer = answered(lambda: client.activate_memory("ledger", QUERY))["value"]
        assert answer.fragments[0].resource_id == "runbooks/deploy.md"
        assert len(answered(client.list_jobs)["value"].jobs) == count
        cancelled = answered(lambda: client.cancel_job(waiting[-1].job_id))["value"]
        assert (cancelled.job_id, cancelled.cancellable) == (waiting[-1].job_id, True)
        deadline = time.monotonic() + WAIT_S
        while not any(outcome for _, outcome in calls) and time.monotonic() < deadline:
            time.sleep(0.05)
        (ended,) = [outcome["value"] for _, outcome in calls if outcome]  # the cancelled one, at once
        assert ended[0] == 503, ended
        assert (ended[1]["error"]["code"], ended[1]["error"]["details"]["reason"]) == ("job_interrupted", "cancelled")
        (listed,) = [j for j in client.list_jobs().jobs if j.job_id == cancelled.job_id]
        assert (listed.state, listed.error_code, listed.cancellable) == ("cancelled", "job_interrupted", False)
        assert job_processes(daemon) == [child], "the cancelled job started a process"

        started = time.monotonic()
        daemon.proc.send_signal(signal.SIGTERM)
        assert daemon.proc.wait(timeout=WAIT_S) == 0
        stopped_in = time.monotonic() - started
        for worker, _ in calls:
            worker.join(timeout=WAIT_S)
        reasons = sorted(outcome["value"][1]["error"]["details"]["reason"] for _, outcome in calls)
        assert reasons == ["cancelled"] + ["stopping"] * (count - 1)
        assert stopped_in < jobs.CANCEL_GRACE_S + 10, stopped_in  # not a speed target: it used to wait for jobs
        assert not alive(child) or process_state(child) == "Z"
        daemon.client.close()
    finally:
        if daemon.proc.poll() is None:
            assert daemon.stop() == 0


def test_a_job_cancelled_before_its_process_started_is_never_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job is listed from before its process is ready; cancelled then, it is not started (its
    process gets no request) and its caller hears ``cancelled``. Before, cancel_job answered that
    it "runs in the daemon's process: it cannot be cancelled"."""
    runner = jobs.JobRunner(tmp_path / "home")
    real_child = jobs.JobRunner._child
    starting, go = threading.Event(), threading.Event()

    def slow_child(self: jobs.JobRunner) -> Any:  # holds the moment before its process is ready
        starting.set()
        go.wait(WAIT_S)
        return real_child(self)

    monkeypatch.setattr(jobs.JobRunner, "_child", slow_child)
    worker, outcome = in_thread(lambda: runner.run("tune_project", "ledger"))
    try:
        assert starting.wait(WAIT_S)
        (listed,) = runner.board.jobs()
        assert (listed.state, listed.cancellable) == ("running", True)
        assert runner.board.cancel(listed.job_id).job_id == listed.job_id
        go.set()
        worker.join(timeout=WAIT_S)
        error = outcome.get("error")
        assert isinstance(error, err.JobInterrupted), outcome
        assert error.details["reason"] == "cancelled"
        (ended,) = runner.board.jobs()
        assert (ended.job_id, ended.state, ended.error_code) == (listed.job_id, "cancelled", "job_interrupted")
        (kept,) = runner._idle  # it got no request: alive, waiting for the next job
        assert kept.poll() is None
    finally:
        go.set()
        runner.close()


def test_a_job_stopped_before_its_process_started_is_never_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The daemon stops (``cancel_all``) once a job's process is ready but before the job has it
    (c64f918: ``started`` refuses a child once the board stops, as ``cancel_all`` signalled the
    children it knew): the job is not started (its process gets no request, and is let go, not
    kept for a next job) and its caller hears ``stopping``."""
    runner = jobs.JobRunner(tmp_path / "home")
    real_child = jobs.JobRunner._child
    made: list[Any] = []
    ready, go = threading.Event(), threading.Event()

    def held_child(self: jobs.JobRunner) -> Any:  # holds the moment its process is ready, not yet the job's
        child = real_child(self)
        made.append(child)
        ready.set()
        go.wait(WAIT_S)
        return child

    monkeypatch.setattr(jobs.JobRunner, "_child", held_child)
    worker, outcome = in_thread(lambda: runner.run("tune_project", "ledger"))
    try:
        assert ready.wait(WAIT_S)
        (listed,) = runner.board.jobs()
        assert (listed.state, listed.cancellable) == ("running", True)
        runner.cancel_all()
        go.set()
        worker.join(timeout=WAIT_S)
        error = outcome.get("error")
        assert isinstance(error, err.JobInterrupted), outcome
        assert error.details["reason"] == "stopping"
        (ended,) = runner.board.jobs()
        assert (ended.job_id, ended.state, ended.error_code) == (listed.job_id, "failed", "job_interrupted")
        assert runner._idle == []  # the daemon stops: no process is kept
        (child,) = made
        assert child.returncode == 0  # let go by closing its stdin: no request, no signal
    finally:
        go.set()
        runner.close()


class WaitEnded(Exception):
    """What the app's cancelled wait for a slot is to a queued job's record: not a typed error."""


@pytest.mark.parametrize("ended_by", ["its wait", "its slot"])
def test_a_queued_job_cancelled_then_stopped_answers_cancelled_as_listed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ended_by: str
) -> None:
    """A job cancelled while it waited for a slot, then stopped with the daemon before its wait
    ended, answers ``cancelled``, as it is listed (c64f918; before, it answered ``stopping``),
    whichever ends it: its wait, woken (the app then raises its record's ``interrupted``), or the
    slot it was given meanwhile (the runner takes its record over and starts no process)."""
    import contextvars

    runner = jobs.JobRunner(tmp_path / "home")
    made: list[Any] = []
    monkeypatch.setattr(jobs.JobRunner, "_child", lambda self: made.append(self))
    woken: list[bool] = []
    try:
        with pytest.raises(err.JobInterrupted) as interrupted:
            try:
                with runner.board.waiting("tune_project", "ledger", lambda: woken.append(True)) as queued:
                    assert runner.board.cancel(queued.job_id).state == "queued"
                    runner.cancel_all()
                    assert woken
                    if ended_by == "its wait":
                        raise WaitEnded
                    slot = contextvars.copy_context()  # as the app's slot thread: its record set there alone
                    slot.run(lambda: (jobs.QUEUED_RECORD.set(queued), runner.run("tune_project", "ledger")))
            except WaitEnded:
                raise queued.interrupted() from None
        assert interrupted.value.details["reason"] == "cancelled"
        assert "was cancelled before it started" in interrupted.value.message
        (listed,) = runner.board.jobs()
        assert (listed.job_id, listed.state, listed.error_code, listed.cancellable) == (
            queued.job_id, "cancelled", "job_interrupted", False)  # fmt: skip
        assert made == []  # no process was asked for
    finally:
        runner.close()


def test_a_cancel_just_after_a_jobs_answer_leaves_its_kept_process_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job's process answered and was kept for the next job while the job's record still named
    it; a ``cancel_job`` landing then SIGTERMed that idle process, which died, and the next job
    that took it failed with "its process exited". The hook cancels the job right there, after
    its process was kept and before its record ends: nothing is signalled now (the process is the
    job's no more once it answered: ``JobBoard.answered``), and the next job runs on the same
    process."""
    runner = jobs.JobRunner(tmp_path / "home")
    real_done_with, real_signal = jobs.JobRunner._done_with, jobs._signal
    kept: list[int] = []
    signalled: list[tuple[int, int]] = []

    def done_with_then_cancelled(self: jobs.JobRunner, child: Any, *, keep: bool) -> None:
        real_done_with(self, child, keep=keep)
        kept.extend(c.pid for c in self._idle)
        if len(kept) == 1:  # the first job, its process kept: cancelled before its record ends
            (running,) = [j for j in self.board.jobs() if j.state == "running"]
            self.board.cancel(running.job_id)

    def recorded_signal(child: Any, sig: int) -> None:
        signalled.append((child.pid, sig))
        real_signal(child, sig)

    monkeypatch.setattr(jobs.JobRunner, "_done_with", done_with_then_cancelled)
    monkeypatch.setattr(jobs, "_signal", recorded_signal)
    try:
        errors = []
        for _ in range(2):  # a body that does not decode: its process answers at once, opening nothing
            with pytest.raises(err.MemoryCoreError) as refused:
                runner.run("import_evaluation_set", b'{"fixture": {"format": ')
            errors.append(refused.value.code)
        assert signalled == []
        assert errors == ["invalid_json"] * 2, errors  # the second job's answer, not "its process exited"
        assert len(kept) == 2 and kept[0] == kept[1], kept  # one process served both
        assert runner._idle[0].poll() is None
    finally:
        runner.close()


class HeldIndexer:
    """The engine's own indexing, held until ``go`` is set: the watcher's worker stays busy."""

    def __init__(self, engine: Any) -> None:
        self.engine, self.catalog = engine, engine.catalog
        self.started, self.go = threading.Event(), threading.Event()

    def index(self, project_id: str, **kwargs: Any) -> Any:
        self.started.set()
        self.go.wait(WAIT_S)
        return self.engine.index(project_id, **kwargs)


def test_many_index_calls_at_once_leave_quick_calls_answering() -> None:
    """An index (``index_project``, a job listed as ``index:<project>``) waits for the watcher's
    one worker in its request's thread. Those threads are a few of their own
    (``app.INDEX_THREADS``): more index calls at once than quick calls have threads, the worker
    held, leave list_jobs and list_projects answering; every index then ends. Before, each took a
    quick call's thread, and forty held every call."""
    import asyncio

    import httpx

    from memory_core.adapters.files.watcher import Watcher
    from memory_core.adapters.in_memory.storage import InMemoryScanner
    from memory_core.entrypoints.bootstrap import bootstrap_in_memory
    from memory_core.entrypoints.daemon.app import create_app
    from memory_core.entrypoints.daemon.dispatch import Context
    from tests.daemon.conftest import ORG, PROJ, docs

    engine = bootstrap_in_memory(scanner=InMemoryScanner(docs()))
    engine.add_project("ledger", [Source(ORG, Layer.ORGANIZATION), Source(PROJ)])
    indexer = HeldIndexer(engine)
    watcher = Watcher(indexer, watch=False).start()
    context = Context(engine, home="/h", watcher=watcher)
    count = QUICK_THREADS + 4

    async def calls() -> tuple[list[int], list[int]]:
        transport = httpx.ASGITransport(app=create_app(context))
        async with httpx.AsyncClient(transport=transport, base_url="http://daemon", timeout=WAIT_S) as client:
            indexes = [asyncio.create_task(client.post("/v1/index_project", json={"project_id": "ledger"}))
                       for _ in range(count)]  # fmt: skip
            assert await asyncio.to_thread(indexer.started.wait, WAIT_S)
            with anyio.fail_after(10):  # not a speed target: before, these waited for the indexes
                quick = [await client.post(f"/v1/{name}", json={}) for name in ("list_jobs", "list_projects")]
            assert not any(task.done() for task in indexes), "an index answered while the worker was held"
            indexer.go.set()
            return [r.status_code for r in quick], [r.status_code for r in await asyncio.gather(*indexes)]

    try:
        quick, indexed = asyncio.run(calls())
    finally:
        indexer.go.set()
        watcher.close()
        engine.close()
    assert quick == [200, 200]
    assert indexed == [200] * count


@pytest.mark.slow
def test_ctrl_c_in_the_cli_cancels_the_daemons_job_it_waits_for(tmp_path: Path) -> None:
    """A person who presses Ctrl-C at `memcore project storage move` (or eval learn, tune, import)
    means the work to stop: the job was the daemon's and ran on to its end (new-user trial)."""
    import subprocess
    import sys

    from tests.daemon.test_server import ROOT

    daemon = paused_daemon(tmp_path, "move_project_storage")
    try:
        cli = subprocess.Popen(
            [sys.executable, "-m", "memory_core", "--home", str(tmp_path / "home"), "project", "storage", "move",
             "ledger", str(tmp_path / "elsewhere"), "--json"],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        paused_job(daemon)
        (running,) = daemon.client.list_jobs().jobs
        assert running.state == "running"
        cli.send_signal(signal.SIGINT)
        _, stderr = cli.communicate(timeout=WAIT_S)
        assert cli.returncode == 130 and f"cancelled job {running.job_id}" in stderr, stderr
        deadline = time.monotonic() + WAIT_S
        while (ended := daemon.client.list_jobs().jobs[0]).state == "running" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert (ended.job_id, ended.state) == (running.job_id, "cancelled")
        assert daemon.client.activate_memory("ledger", QUERY).fragments  # served from where it was
    finally:
        assert daemon.stop() == 0


def test_ctrl_c_cancels_only_a_job_it_can_tell_is_its_own(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Another client's job of the same operation and project, started meanwhile, is never
    cancelled for this one's Ctrl-C (review); a job not listed yet is looked for a moment."""
    from types import SimpleNamespace

    from memory_core.entrypoints.cli import executor

    monkeypatch.setattr(executor, "CANCEL_LOOK_S", 0.2)

    def job(job_id: str, state: str = "running", cancellable: bool = True) -> Any:
        return SimpleNamespace(job_id=job_id, operation="learn_project", state=state, cancellable=cancellable)

    class Client:
        def __init__(self, listings: list[list[Any]]) -> None:
            self.listings, self.cancelled = listings, []

        def ours(self) -> list[Any]:
            return self.listings.pop(0) if len(self.listings) > 1 else self.listings[0]

        def cancel_job(self, job_id: str) -> None:
            self.cancelled.append(job_id)

    listed_late = Client([[], [], [job("mine")]])  # listed on the third look
    executor._cancel(listed_late, listed_late.ours)
    assert listed_late.cancelled == ["mine"] and "cancelled job mine" in capsys.readouterr().err
    two = Client([[job("mine"), job("theirs")]])
    executor._cancel(two, two.ours)
    assert two.cancelled == [] and "2 jobs of this kind started meanwhile" in capsys.readouterr().err
    for listing, said in (([], "no job of this call is listed"), ([job("x", cancellable=False)], "cannot be"),
                          ([job("done", state="succeeded")], "no job of this call is listed")):  # fmt: skip
        client = Client([listing])
        executor._cancel(client, client.ours)
        assert client.cancelled == [] and said in capsys.readouterr().err
