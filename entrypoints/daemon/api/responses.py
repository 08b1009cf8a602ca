"""What the daemon takes and answers of its own: its runtime status. The operations' answers are the
engine's values or types declared beside each operation (``memory_core.operations``)."""

from __future__ import annotations

import attrs

from memory_core.entrypoints.bootstrap import ProjectHealth
from memory_core.operations.bounds import bounded


@attrs.frozen(field_transformer=bounded)
class RuntimeStatusRequest:
    """No inputs."""


@attrs.frozen
class RuntimeStatus:
    service: str
    version: str
    api_version: str
    pid: int
    home: str
    socket: str | None
    started_at: str
    uptime_seconds: float
    engine_busy: bool = attrs.field(metadata={"schema": {"description": "an engine call is running"}})
    in_flight: int = attrs.field(metadata={"schema": {"description": "engine calls running or queued"}})
    watching: bool = attrs.field(
        default=False, metadata={"schema": {"description": "the daemon follows its projects' sources"}}
    )
    projects: tuple[ProjectHealth, ...] = attrs.field(
        default=(), metadata={"schema": {"description": "each project's watch and re-index health"}}
    )
    on_demand: bool = attrs.field(
        default=False,
        metadata={"schema": {"description": "started by a client (memcore mcp, memcore ui), not by memcore serve"}},
    )
    idle_exit_seconds: float | None = attrs.field(
        default=None,
        metadata={"schema": {"description": "it stops after this long idle (no request, client or re-index); "
                             "null: it runs until stopped"}},
    )
