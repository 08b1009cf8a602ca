"""Where the CLI's operations run: the table's operations (``memory_core.operations``) over an
executor, the home's daemon when one answers (``DaemonClient``), else an engine in this process
(``InProcess``). The command handlers call ``ops.<operation>(...)`` and cannot tell which, so
every command behaves the same in both modes; nothing here copies an operation.

What the CLI adds to an operation is the same in both modes too: an activation's candidates are
read back from the Run it recorded (``get_retrieval_run``), and an index's progress comes from
the daemon's health while the request waits, or from the engine in process.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from memory_core.domain.errors import MemoryCoreError
from memory_core.domain.progress import Progress, parse_progress
from memory_core.entrypoints.daemon.client import DaemonClient
from memory_core.operations.executor import InProcess, Operations
from memory_core.operations.registry import reporting
from memory_core.retrieval.activation_state import ActivationState
from memory_core.services.activation import Activation
from memory_core.services.engine import Engine

JOB_POLL_S = 0.25  # how often a job's bar reads list_jobs
CANCEL_LOOK_S = 2.0  # how long Ctrl-C looks for its job in list_jobs (the daemon lists it as it starts it)


def connect(home: str | os.PathLike[str] | None, engine: Any = None) -> Operations:
    """The operations over the daemon serving ``home`` if one answers, else over an engine here
    (``engine``: a callable that builds it)."""
    client = DaemonClient.running(home)
    return Operations(client if client is not None else InProcess(engine(home)))


def operations(engine: Engine | Operations) -> Operations:
    """The operations over ``engine`` in this process (already operations: as they are)."""
    return engine if isinstance(engine, Operations) else Operations(InProcess(engine))


@contextlib.contextmanager
def index_progress(ops: Operations, project_id: str, progress: Progress | None) -> Iterator[None]:
    """``progress`` called while ``index_project`` runs: from the daemon's health (how many
    re-indexes the request waits behind, then its build's stages), or the engine's own calls."""
    from memory_core.entrypoints.cli.watch_commands import daemon_of, daemon_progress

    client = daemon_of(ops)
    if client is None or progress is None:
        with reporting(progress):
            yield
        return
    with daemon_progress(client, project_id, progress):
        yield


@contextlib.contextmanager
def job_progress(ops: Operations, operation: str, project_id: str | None, progress: Progress | None) -> Iterator[None]:
    """``progress`` called while a job (tune, learn, import, move) runs: through a daemon from
    the job's ``list_jobs`` record, polled on another connection; in process from the engine's own
    calls."""
    from memory_core.entrypoints.cli.watch_commands import daemon_of, polling

    client = daemon_of(ops)
    if client is None:
        with reporting(progress):
            yield
        return
    before = {j.job_id for j in client.list_jobs().jobs}

    def ours() -> list[Any]:
        return [j for j in client.list_jobs().jobs if j.job_id not in before and j.operation == operation
                and j.project_id == project_id]  # fmt: skip

    def draw() -> bool:
        try:
            found = ours()
        except MemoryCoreError:
            return False  # only the drawing stops: the call itself says what went wrong
        if found and progress is not None and (stage := parse_progress(found[0].progress)) is not None:
            progress(*stage)
        return True

    def follow(stop: threading.Event) -> None:
        while not stop.wait(JOB_POLL_S) and draw():
            pass

    try:
        with polling(follow, "job-progress", JOB_POLL_S) if progress is not None else contextlib.nullcontext():
            yield
    except KeyboardInterrupt:
        _cancel(client, ours)  # Ctrl-C stops the job too: it was the daemon's, running on
        raise
    draw()  # the stage it ended at (a job quicker than a poll is drawn too)


def _cancel(client: Any, ours: Callable[[], list[Any]]) -> None:
    """Cancel the caller's job, and say what became of it. Its job is the one job of its operation
    and project that started after the call (the daemon may list it a moment after the request,
    so it is looked for up to ``CANCEL_LOOK_S``); with another such job started meanwhile (another
    client's), which is the caller's cannot be told, and neither is cancelled."""
    deadline = time.monotonic() + CANCEL_LOOK_S
    try:
        while not (found := [j for j in ours() if j.state in ("queued", "running")]) and time.monotonic() < deadline:
            time.sleep(JOB_POLL_S / 4)
        if len(found) == 1 and found[0].cancellable:
            client.cancel_job(found[0].job_id)
            print(f"cancelled job {found[0].job_id} ({found[0].operation})", file=sys.stderr)
            return
        said = ("no job of this call is listed (it may have ended)" if not found
                else f"job {found[0].job_id} cannot be cancelled" if len(found) == 1
                else f"{len(found)} jobs of this kind started meanwhile, not only this call's")  # fmt: skip
    except MemoryCoreError as exc:
        said = f"the daemon could not be asked ({exc.code})"
    print(f"the daemon's job was not cancelled: {said}; `memcore status` lists its jobs", file=sys.stderr)


def activate(
    ops: Operations, project_id: str, query: str, *, budget: int | None = None,
    state: ActivationState | Mapping[str, Any] | None = None,
) -> Activation:  # fmt: skip
    """``activate_memory``, with the ranked candidates the Run recorded (``CandidateRecord``
    values in final order: what the stage table and ``--json`` show)."""
    held = state if state is None or isinstance(state, ActivationState) else ActivationState.from_json(state)
    response = ops.activate_memory(project_id, query, budget=budget, activation_state=held)
    candidates: tuple[Any, ...] = ()
    if response.run_id is not None:  # None only when the Run could not be written
        candidates = ops.get_retrieval_run(response.run_id).candidates
    return Activation(response, candidates)
