"""One interface to the operations over an executor: in process (the handler on a local engine)
or over the daemon's socket (``DaemonClient`` is an executor too), as datasette's internal client
calls its own app. A caller writes ``ops.show_project("p")`` or ``executor.call(op, request)``
and cannot tell where it ran; nothing here is a hand-kept copy of an operation."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from memory_core.operations.registry import OPERATIONS, Operation
from memory_core.services.engine import Engine

Q = TypeVar("Q")
R = TypeVar("R")


class Executor(Protocol):
    def call(self, op: Operation[Q, R], request: Q) -> R: ...

    def close(self) -> None: ...


class InProcess:
    """Runs each operation's handler on ``engine`` in this process."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def call(self, op: Operation[Q, R], request: Q) -> R:
        if not isinstance(request, op.request):
            raise TypeError(f"{op.name} takes {op.request.__name__}, not {type(request).__name__}")
        return op.handler(self.engine, request)

    def close(self) -> None:
        self.engine.close()


def caller(executor: Executor, op: Operation[Any, Any]) -> Callable[..., Any]:
    """``op`` as a method: called with its request type's fields (positionally or by name)."""

    def call(*args: Any, **kwargs: Any) -> Any:
        return executor.call(op, op.request(*args, **kwargs))

    call.__name__ = call.__qualname__ = op.name
    call.__doc__ = op.summary
    return call


class Operations:
    """Every operation of the table as a method of its name, over ``executor``."""

    def __init__(self, executor: Executor) -> None:
        self.executor = executor

    def __getattr__(self, name: str) -> Callable[..., Any]:
        op = next((o for o in OPERATIONS if o.name == name), None)
        if op is None:
            raise AttributeError(f"no operation {name!r}")
        return caller(self.executor, op)

    def call(self, op: Operation[Q, R], request: Q) -> R:
        return self.executor.call(op, request)

    def close(self) -> None:
        self.executor.close()
