// Runtime: the daemon, its jobs, its storage, projects and their generations, models warm or cold,
// and recent activation latency per stage.

import { stackedBars } from "./charts.js";
import {
  call, clear, fill, facts, fmtBytes, fmtDuration, fmtMs, fmtTime, h, link, short, table, view,
} from "./lib.js";

export const STAGES = ["validate", "load", "exact", "bm25", "embed_query", "dense", "fusion", "rerank", "select"];

function percentile(values, p) {
  if (!values.length) return null;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.max(0, Math.ceil((p / 100) * sorted.length) - 1)]; // nearest rank
}

function stateBadge(state) {
  const kind = state === "warm" ? "ok" : state === "cold" ? "info" : "muted";
  return h("span", { class: `badge ${kind}` }, state);
}

function latencyPanel(recent) {
  const panel = h("section", { class: "panel", "aria-labelledby": "latency-h" },
    h("h2", { id: "latency-h" }, "Recent activation latency per stage"));
  if (!recent || !recent.length) {
    panel.append(h("p", { class: "muted" }, "No succeeded Runs yet: activate a project to see its stage latency."));
    return panel;
  }
  const stages = STAGES.filter((st) => recent.some((r) => st in r.latency_ms));
  const extra = [...new Set(recent.flatMap((r) => Object.keys(r.latency_ms)))]
    .filter((st) => st !== "total" && !stages.includes(st));
  const keys = [...stages, ...extra];
  const columns = recent.map((r, i) => ({
    label: String(i + 1),
    title: `#${i + 1} ${r.project_id} ${fmtTime(r.started_at)}${r.warm ? " (warm)" : " (cold)"}`,
    values: r.latency_ms,
  }));
  panel.append(stackedBars({
    title: "Stage latency of the most recent succeeded Runs",
    desc: `${recent.length} Runs, oldest first; each bar stacks the time spent in each stage, in milliseconds.`,
    keys, columns,
    caption: `The last ${recent.length} succeeded Runs, oldest (1) to newest (${recent.length}). Hover a segment for its value.`,
  }));
  const warm = recent.filter((r) => r.warm);
  const rows = [...keys, "total"].map((st) => {
    const all = recent.map((r) => r.latency_ms[st]).filter((v) => v !== undefined);
    const hot = warm.map((r) => r.latency_ms[st]).filter((v) => v !== undefined);
    return h("tr", null, h("th", { scope: "row" }, st),
      h("td", { class: "num" }, fmtMs(percentile(hot, 50))), h("td", { class: "num" }, fmtMs(percentile(hot, 95))),
      h("td", { class: "num" }, fmtMs(percentile(all, 50))), h("td", { class: "num" }, fmtMs(all.length ? Math.max(...all) : null)));
  });
  panel.append(h("h3", null, "Percentiles (nearest rank)"),
    table(["Stage", { text: `Warm p50 (${warm.length})`, num: true }, { text: "Warm p95", num: true },
      { text: `All p50 (${recent.length})`, num: true }, { text: "All max", num: true }], rows,
    { "aria-label": "Stage latency percentiles" }));
  return panel;
}

function projectsPanel(projects) {
  const panel = h("section", { class: "panel", "aria-labelledby": "projects-h" }, h("h2", { id: "projects-h" }, "Projects"));
  if (projects === null) {
    panel.append(h("p", { class: "muted" }, "The engine is busy (indexing?); refresh in a moment."));
    return panel;
  }
  if (!projects.length) {
    panel.append(h("p", { class: "muted" }, "No projects yet: ", h("code", null, "memcore project add NAME --source PATH")));
    return panel;
  }
  const rows = projects.map((p) => {
    const g = p.generation;
    return h("tr", null,
      h("th", { scope: "row" }, link(`/retrieval?project=${encodeURIComponent(p.project_id)}`, p.project_id),
        h("span", { class: "sub" }, p.sources.map((src) => `${src.layer}: ${src.path}`).join(" · "))),
      h("td", null, g ? short(g.index_revision, 16) : h("span", { class: "badge muted" }, "not indexed")),
      h("td", { class: "num" }, g ? String(g.units) : "—"),
      h("td", { class: "num" }, g ? String(g.resources) : "—"),
      h("td", { class: "num" }, g && g.size ? fmtBytes(g.size.bytes) : "—"),
      h("td", { class: "hide-narrow" }, g ? fmtTime(g.created_at) : "—"),
      h("td", null, g ? stateBadge(g.state) : "—"));
  });
  panel.append(table(["Project", "Index Revision", { text: "Units", num: true }, { text: "Resources", num: true },
    { text: "Generation size", num: true }, { text: "Built", class: "hide-narrow" }, "Index"], rows,
  { "aria-label": "Projects" }));
  return panel;
}

// The watcher's health per project (runtime_status.projects): is it followed, is the index current,
// what went wrong. Answers even while the engine is busy re-indexing.
function watchBadge(p) {
  if (!p.healthy) return h("span", { class: "badge bad" }, p.state === "source_unavailable" ? "source missing" : "error");
  if (p.state === "watching") return h("span", { class: "badge ok" }, "watching");
  if (p.state === "polling") return h("span", { class: "badge warn" }, "polling");
  return h("span", { class: "badge muted" }, p.state.replace("_", " "));
}

function reindexCell(r) {
  if (!r) return "—";
  const what = r.status === "built" ? `built, ${r.embedded} of ${r.units} unit(s) embedded`
    : r.status === "unchanged" ? "unchanged" : `failed (${r.error_code})`;
  return h("span", null, `${fmtTime(r.finished_at)} · ${r.seconds.toFixed(2)} s`,
    h("span", { class: "sub" }, `${what} · ${r.trigger}`));
}

function pendingCell(p) {
  if (p.indexing) return h("span", null, "re-indexing", h("span", { class: "sub" }, p.progress || "starting"));
  if (p.reindex_pending) return `${p.pending_changes} change(s), queued`;
  if (!p.indexed) return h("span", { class: "muted" }, "not indexed yet");
  return p.pending_changes ? `${p.pending_changes} change(s)` : "none";
}

function errorCell(p) {
  const e = p.error || p.last_error;
  if (!e) return "—";
  return h("span", { class: p.error ? "" : "muted" }, h("code", null, e.code), " ", e.message,
    h("span", { class: "sub" }, p.error ? `since ${fmtTime(e.at)}` : `resolved; seen ${fmtTime(e.at)}`));
}

export function watcherPanel(status) {
  const panel = h("section", { class: "panel", "aria-labelledby": "watcher-h" },
    h("h2", { id: "watcher-h" }, "Sources and re-indexing"));
  if (!status.watching) {
    panel.append(h("p", { class: "muted" }, "This daemon does not watch sources (", h("code", null, "--no-watch"),
      "): re-index with ", h("code", null, "memcore index NAME"), "."));
  }
  const projects = status.projects || [];
  if (!projects.length) {
    if (status.watching) panel.append(h("p", { class: "muted" }, "No projects to watch yet."));
    return panel;
  }
  const rows = projects.map((p) => h("tr", null,
    h("th", { scope: "row" }, p.project_id),
    h("td", null, watchBadge(p)),
    h("td", null, p.last_change_at ? h("span", null, fmtTime(p.last_change_at),
      h("span", { class: "sub wrap-any" }, p.last_change_paths.join(" · "))) : "—"),
    h("td", null, reindexCell(p.last_reindex)),
    h("td", null, pendingCell(p)),
    h("td", { class: "wrap-any" }, errorCell(p))));
  panel.append(table(["Project", "Watch", "Last change seen", "Last re-index", "Pending", "Error"], rows,
    { "aria-label": "Watcher health" }));
  return panel;
}

// The jobs running beside activations (list_jobs): tunings, imports and storage moves, each
// cancellable, and re-indexes on the watcher's worker; then those ended lately.
export function jobsPanel(jobs, refresh) {
  const panel = h("section", { class: "panel", "aria-labelledby": "jobs-h" }, h("h2", { id: "jobs-h" }, "Jobs"));
  if (!jobs.length) {
    panel.append(h("p", { class: "muted" }, "No job is running, and none ended lately."));
    return panel;
  }
  const cancel = (job) => h("button", { class: "secondary", type: "button", onclick: async () => {
    await call("cancel_job", { job_id: job.job_id });
    refresh();
  } }, "Cancel");
  panel.append(table(["Job", "Project", "State", "Started", "Progress", ""], jobs.map((job) => h("tr", null,
    h("th", { scope: "row" }, job.operation, h("span", { class: "sub" }, job.job_id)),
    h("td", null, job.project_id || "—"),
    h("td", null, job.error_code ? `${job.state} (${job.error_code})` : job.state),
    h("td", null, job.started_at ? fmtTime(job.started_at) : "—"),
    h("td", null, job.progress || "—"),
    h("td", null, job.cancellable ? cancel(job) : ""))), { "aria-label": "Jobs" }));
  return panel;
}

// The engine line: whether an engine call holds the engine now, and how many wait.
export function engineLine(status) {
  if (!status.engine_busy) return "idle";
  return status.in_flight > 0 ? `busy (${status.in_flight} call(s) running or queued)` : "busy";
}

function modelsPanel(models) {
  const panel = h("section", { class: "panel", "aria-labelledby": "models-h" }, h("h2", { id: "models-h" }, "Models"));
  if (models === null) {
    panel.append(h("p", { class: "muted" }, "The engine is busy; refresh in a moment."));
    return panel;
  }
  panel.append(table(["Component", "Revision", "State"], models.map((m) => h("tr", null,
    h("th", { scope: "row" }, m.name, h("span", { class: "sub" }, m.kind)),
    h("td", { class: "wrap-any" }, m.revision ? h("code", null, m.revision) : "—"),
    h("td", null, stateBadge(m.state)))), { "aria-label": "Models" }));
  return panel;
}

// Whether this daemon stops by itself (issue 19): one started on demand by `memcore mcp` or
// `memcore ui` stops after its idle limit; `memcore serve` runs until stopped unless given --idle-exit.
export function lifetime(status) {
  const idle = status.idle_exit_seconds;
  const started = status.on_demand ? "started on demand (memcore mcp or ui)" : "started by memcore serve";
  return idle ? `${started}; stops after ${fmtDuration(idle)} idle (no request, open page or MCP client, or re-index)`
    : `${started}; runs until stopped`;
}

// An open page is a client: it keeps an on-demand daemon from stopping idle, with three beats per
// idle limit, at most a minute apart (browsers slow a hidden tab's timers to about once a minute).
export function heartbeat() {
  const beat = async () => {
    let wait = 60_000;
    try {
      const status = await call("runtime_status");
      if (status.idle_exit_seconds) wait = Math.max(200, Math.min(60_000, (status.idle_exit_seconds * 1000) / 3));
    } catch {
      // gone or restarting: try again later
    }
    setTimeout(beat, wait);
  };
  beat();
}

export async function runtimePage(main) {
  const [status, extra, jobs] = await Promise.all([call("runtime_status"), view("/ui/api/runtime"), call("list_jobs")]);
  const db = extra.database;
  const schema = db.schema_version === null ? "—"
    : `${db.schema_version}${db.expected_schema_version && db.expected_schema_version !== db.schema_version
      ? ` (this build expects ${db.expected_schema_version})` : ""}`;
  const blobs = extra.blob_store.size;
  const refresh = h("button", { class: "secondary", type: "button", onclick: () => runtimePage(main) }, "Refresh");
  fill(main, 
    h("div", { class: "row spread" }, h("h1", null, "Runtime"), refresh),
    h("div", { class: "grid" },
      h("section", { class: "panel", "aria-labelledby": "daemon-h" }, h("h2", { id: "daemon-h" }, "Daemon"), facts([
        ["Version", `${status.version} (API ${status.api_version})`],
        ["PID", String(status.pid)],
        ["Uptime", `${fmtDuration(status.uptime_seconds)} — since ${fmtTime(status.started_at)}`],
        ["Home", h("code", null, status.home)],
        ["Socket", status.socket ? h("code", null, status.socket) : "—"],
        ["Engine", engineLine(status)],
        ["Lifetime", lifetime(status)],
      ])),
      h("section", { class: "panel", "aria-labelledby": "storage-h" }, h("h2", { id: "storage-h" }, "Storage"), facts([
        ["Database", h("span", null, fmtBytes(db.bytes), " ", h("code", { class: "small" }, db.path))],
        ["Schema version", schema],
        ["Blob store", h("span", null, blobs ? `${fmtBytes(blobs.bytes)} in ${blobs.files} blob(s)` : "empty", " ",
          h("code", { class: "small" }, extra.blob_store.path))],
      ]))),
    h("div", { class: "stack" }, jobsPanel(jobs.jobs, () => runtimePage(main)), projectsPanel(extra.projects), watcherPanel(status), modelsPanel(extra.models), latencyPanel(extra.recent_latency)),
  );
}
