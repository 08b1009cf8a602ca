"""The one table of operations: every use case any transport serves, declared once.

An ``Operation`` says what a use case is (name, ``Trait``: read-only or writing, allowed on the
UI port, exposed over MCP, a job or a quick call), what it takes (an attrs request type whose
validators enforce every bound it declares, ``bounds.py``), what it answers, its typical errors
and the handler that runs it over an ``Engine``. Handlers register themselves with
:func:`operation`, as cosmicpython's ``COMMAND_HANDLERS`` or ir_measures' measures do, in the
area modules of this package (``projects``, ``runs``, ``evaluation``, ``profiles``, ``jobs``).

Derived from ``OPERATIONS``: the daemon's routes and dispatch, the OpenAPI document, the typed
client's methods, the UI and MCP allow-lists (``names(UI)``, ``names(MCP)``) and the CLI's calls
(``executor.Operations``, in process or over the socket). Adding an operation is one decorated
handler with its request type, in the module of its area, and its test.
"""

from __future__ import annotations

import contextlib
import contextvars
import enum
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import attrs

from memory_core.domain.errors import MemoryCoreError
from memory_core.domain.progress import Progress, no_progress

if TYPE_CHECKING:
    from memory_core.services.engine import Engine

Q = TypeVar("Q")
R = TypeVar("R")


class Trait(enum.Flag):
    """What an operation is; ``READ`` (no flag) is a read-only quick call."""

    READ = 0
    WRITE = enum.auto()  # changes stored state (a Run recorded counts)
    UI = enum.auto()  # allowed on the UI port (a page in the user's browser may call it)
    MCP = enum.auto()  # what an MCP tool forwards to
    JOB = enum.auto()  # long: runs as a job beside activations (list_jobs shows it)


READ, WRITE, UI, MCP, JOB = Trait.READ, Trait.WRITE, Trait.UI, Trait.MCP, Trait.JOB


@attrs.frozen
class Operation(Generic[Q, R]):
    """One use case: ``handler`` runs it on an engine in the caller's process; a runtime may run
    it elsewhere (the daemon: as a job, on its watcher's worker) with the same request and answer."""

    name: str
    traits: Trait
    request: type[Q]
    response: type[R]
    handler: Callable[[Engine, Q], R]
    summary: str
    errors: tuple[type[MemoryCoreError], ...] = ()  # typical errors, for the contract
    allow_get: bool = False  # read-only and input-free: ``curl`` without ``-X POST`` works too
    max_body_bytes: int | None = None  # its own request size limit (None: the transport's)


OPERATIONS: list[Operation[Any, Any]] = []


def register(op: Operation[Q, R]) -> Operation[Q, R]:
    if any(o.name == op.name for o in OPERATIONS):
        raise ValueError(f"operation {op.name!r} is declared twice")
    OPERATIONS.append(op)
    return op


def operation(
    traits: Trait,
    request: type[Q],
    response: type[R],
    summary: str,
    errors: tuple[type[MemoryCoreError], ...] = (),
    *,
    allow_get: bool = False,
    max_body_bytes: int | None = None,
) -> Callable[[Callable[[Engine, Q], R]], Operation[Q, R]]:
    """Declare the decorated handler as the operation of its name (the function's)."""

    def declare(handler: Callable[[Engine, Q], R]) -> Operation[Q, R]:
        return register(Operation(handler.__name__, traits, request, response, handler, summary, errors,
                                  allow_get, max_body_bytes))  # fmt: skip

    return declare


def names(trait: Trait) -> frozenset[str]:
    """The operations that are ``trait`` (e.g. ``names(UI)``: the UI port's allow-list)."""
    return frozenset(o.name for o in OPERATIONS if trait in o.traits)


# A caller in the same process may watch a long operation's stages (the CLI's progress bar over
# an index): the request stays the wire's, the callback rides beside it for this call only.
_PROGRESS: contextvars.ContextVar[Progress | None] = contextvars.ContextVar("operation_progress", default=None)


@contextlib.contextmanager
def reporting(progress: Progress | None) -> Iterator[None]:
    """Within the block, an operation that reports progress (``index_project``) calls ``progress``."""
    token = _PROGRESS.set(progress)
    try:
        yield
    finally:
        _PROGRESS.reset(token)


def current_progress() -> Progress | None:
    return _PROGRESS.get()


def reported() -> Progress:
    """What a job's handler reports its stages to: the caller's ``reporting`` callback, else nothing."""
    return _PROGRESS.get() or no_progress
