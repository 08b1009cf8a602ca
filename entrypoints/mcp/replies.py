"""What a model reads: the text of each tool's answer, and a tool error any client accepts
(``isError`` with text that says how to recover; the daemon's envelope in ``_meta``)."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from memory_core.domain.errors import MemoryCoreError
from memory_core.entrypoints.wire_input import encodable

META_ERROR = "memory-core/error"  # the _meta key of a tool error's envelope (the spec's prefix/name form)


def error_body(exc: MemoryCoreError) -> dict[str, Any]:
    """The daemon's error envelope, every string encodable (a message may echo what was sent)."""
    return encodable({"error": {"code": exc.code, "message": exc.message, "details": exc.details}})  # type: ignore[no-any-return]


# What the model can do next, by error code (the message says what went wrong).
_RETRY_ARGUMENTS = "correct the arguments (the tool's inputSchema) and call again"
_UNAVAILABLE = "project memory is unavailable right now: go on without it (the MCP server's log says why)"
RECOVERY = {
    "project_not_found": "call list_projects for the ids, then call again with one of them",
    "project_not_indexed": "a person has to index it first; until then read the project's files directly",
    "invalid_activation_state": "send the previous answer's activation_state unchanged, or none",
    **dict.fromkeys(("invalid_request", "invalid_query", "invalid_budget", "invalid_json", "request_too_large"),
                    _RETRY_ARGUMENTS),
    **dict.fromkeys(("daemon_unavailable", "storage_unavailable", "internal_error", "retrieval_failed",
                     "generation_corrupted", "blob_corrupted", "blob_not_found"), _UNAVAILABLE),
}  # fmt: skip


def error_result(exc: MemoryCoreError) -> Any:
    """A tool error any client accepts: ``isError`` with text only. Structured content would have
    to match the tool's outputSchema (MCP 2025-06-18), which an error cannot; the envelope (code,
    message, details such as a failed Run's run_id) is in ``_meta`` for programs."""
    import mcp_types as types

    error = error_body(exc)["error"]
    lines = [f"error[{error['code']}]: {error['message']}"]
    if error["details"].get("run_id"):
        lines.append(f"recorded as failed Run {error['details']['run_id']}")
    if error["code"] in RECOVERY:
        lines.append(f"next: {RECOVERY[error['code']]}")
    return types.CallToolResult(content=[types.TextContent(text="\n".join(lines))], is_error=True,
                                _meta={META_ERROR: error})  # fmt: skip


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _freshness_lines(freshness: dict[str, Any] | None) -> list[str]:
    if not freshness:
        return []
    if not freshness.get("live"):
        return [f"freshness unknown: {freshness.get('error') or 'the live memory could not be read'}"]
    lines = []
    if freshness.get("index_behind"):
        pending = "; a re-index is under way: ask again shortly" if freshness.get("reindex_pending") else ""
        lines.append(f"the index is behind the project's files ({freshness.get('changed_resources')} changed){pending}")
    if freshness.get("stale_resources"):
        lines.append("edited since indexed, read the file instead: " + ", ".join(freshness["stale_resources"]))
    if freshness.get("missing_resources"):
        lines.append("deleted since indexed, do not rely on: " + ", ".join(freshness["missing_resources"]))
    return lines


def activation_text(result: dict[str, Any]) -> str:
    """What a model reads of an answer: a summary line, why it is empty when a ranking setting
    emptied it (its notices), how fresh it is, each fragment's text
    under its id (whose prefix is the file's resource id) and headings, and the activation_state
    to send back. Uris, scores, revisions and latencies stay in the structured content."""
    fragments, totals = result["fragments"], result["totals"]
    actions = Counter(f["delta_action"] for f in fragments)
    said = ", ".join(f"{actions[a]} {a}" for a in ("add", "replace", "reuse") if actions[a]) or "none"
    run = f"run {result['run_id']}" if result.get("run_id") else "not recorded"
    lines = [f"{len(fragments)} fragments of project {result['project_id']} ({said}; "
             f"{totals['tokens']} of {totals['budget']} tokens; {run})"]  # fmt: skip
    lines += [f"notice[{n['code']}]: {n['message']}" for n in result.get("notices") or ()]
    lines += _freshness_lines(result.get("freshness"))
    for f in fragments:
        where = " > ".join(f["heading_path"])
        head = f"--- [{f['delta_action']}] {f['unit_id']}" + (f" · {where}" if where else "")
        lines += ["", head, f["text"] if f["text"] is not None else "(you hold it: no text sent)"]
    lines += ["", "activation_state (send it back unchanged next call): " + _compact(result["activation_state"])]
    return "\n".join(lines)


def projects_text(listing: dict[str, Any]) -> str:
    projects = listing["projects"]
    if not projects:
        return "no project yet: a person adds one with `memcore project add NAME --source PATH`"
    lines = [f"{len(projects)} projects (the id is activate_memory's project):"]
    for p in projects:
        state = (f"indexed: {p['resource_count']} files, {p['unit_count']} fragments, at {p['indexed_at']}"
                 if p["indexed"] else f"not indexed: a person runs `memcore index {p['project_id']}`")  # fmt: skip
        lines.append(f"- {p['project_id']} ({state})")
    return "\n".join(lines)
