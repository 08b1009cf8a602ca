// Retrieval: recent Runs (filters, query search, paging) and one Run's full trace.

import { hbars } from "./charts.js";
import {
  actionPanel, ApiError, call, clear, fill, confirmDialog, errorBox, facts, fmtMs, fmtNum, fmtTime, h, link, say, short,
  statusBadge, table,
} from "./lib.js";
import { STAGES } from "./runtime.js";

const PAGE_SIZE = 25;
const go = (href) => window.memcoreNavigate(href);

function filtersFromUrl() {
  const q = new URLSearchParams(location.search);
  const limit = Math.min(500, Math.max(1, Number.parseInt(q.get("limit"), 10) || PAGE_SIZE));
  return { project: q.get("project") || "", status: q.get("status") || "", text: q.get("q") || "", limit };
}

function urlFor(f) {
  const q = new URLSearchParams();
  if (f.project) q.set("project", f.project);
  if (f.status) q.set("status", f.status);
  if (f.text) q.set("q", f.text);
  if (f.limit && f.limit !== PAGE_SIZE) q.set("limit", String(f.limit));
  const qs = q.toString();
  return `/retrieval${qs ? `?${qs}` : ""}`;
}

function select(id, label, options, value) {
  return h("label", { for: id }, label, h("select", { id, name: id },
    options.map(([v, text]) => h("option", { value: v, selected: v === value }, text))));
}

function runRow(r) {
  const failed = r.status === "failed";
  return h("tr", { "data-run-id": r.run_id },
    h("td", { class: "nowrap" }, fmtTime(r.started_at)),
    h("td", null, r.project_id),
    h("td", { class: "wrap-any" }, link(`/retrieval/runs/${encodeURIComponent(r.run_id)}`, r.query),
      failed ? h("span", { class: "sub" }, `${r.error_stage}: ${r.error_code}`) : null),
    h("td", null, statusBadge(r.status), r.pinned ? [" ", h("span", { class: "badge info", title: "referenced by an Evaluation Case" }, "pinned")] : null),
    h("td", { class: "num" }, `${r.fragment_count} / ${r.candidate_count}`),
    h("td", { class: "num hide-narrow" }, String(r.token_count)),
    h("td", { class: "num" }, fmtMs(r.total_ms)),
    h("td", { class: "hide-narrow" }, r.warm === null ? "—" : r.warm ? "warm" : "cold"));
}

export async function retrievalPage(main) {
  const f = filtersFromUrl();
  const { projects } = await call("list_projects");
  const cursors = [null]; // cursors[i] opens page i
  let pageIndex = 0;

  const listBox = h("div", { "aria-live": "polite" });
  const older = h("button", { type: "button", class: "secondary", onclick: () => load(pageIndex + 1) }, "Older Runs →");
  const newer = h("button", { type: "button", class: "secondary", onclick: () => load(pageIndex - 1) }, "← Newer");
  const pageLabel = h("span", { class: "muted small" });

  async function load(index) {
    const request = { limit: f.limit, cursor: cursors[index] };
    if (f.project) request.project_id = f.project;
    if (f.status) request.status = f.status;
    if (f.text) request.query = f.text;
    let page;
    try {
      page = await call("list_retrieval_runs", request);
    } catch (error) {
      fill(listBox, errorBox(error));
      return;
    }
    pageIndex = index;
    cursors[index + 1] = page.next_cursor;
    clear(listBox);
    if (!page.runs.length) {
      listBox.append(h("p", { class: "muted" }, index === 0 ? "No Runs match." : "No older Runs."));
    } else {
      listBox.append(table(["Started", "Project", "Query", "Status", { text: "Fragments / candidates", num: true },
        { text: "Tokens", num: true, class: "hide-narrow" }, { text: "Total", num: true }, { text: "Models", class: "hide-narrow" }],
      page.runs.map(runRow), { "aria-label": "Retrieval Runs", id: "runs" }));
    }
    newer.disabled = index === 0;
    older.disabled = !page.next_cursor;
    pageLabel.textContent = `Page ${index + 1}`;
  }

  const form = h("form", { class: "filters", role: "search", "aria-label": "Filter Runs", onsubmit: (e) => {
    e.preventDefault();
    const data = new FormData(e.target);
    go(urlFor({ project: data.get("project"), status: data.get("status"), text: String(data.get("q") || "").trim(), limit: f.limit }));
  } },
  select("project", "Project", [["", "All projects"], ...projects.map((p) => [p.project.project_id, p.project.project_id])], f.project),
  select("status", "Status", [["", "Any status"], ["succeeded", "succeeded"], ["failed", "failed"], ["running", "running"]], f.status),
  h("label", { for: "q" }, "Query contains", h("input", { id: "q", name: "q", type: "search", value: f.text, placeholder: "text in the query" })),
  h("button", { type: "submit" }, "Apply"),
  f.project || f.status || f.text ? link("/retrieval", "Reset") : null);

  const scope = f.project || null;
  const clearButton = h("button", { type: "button", class: "danger", onclick: async () => {
    const ok = await confirmDialog({
      title: "Clear unpinned history?",
      body: [h("p", null, scope ? `Delete every unpinned Retrieval Run of project ${scope}.` : "Delete every unpinned Retrieval Run of every project."),
        h("p", null, "Runs referenced by an Evaluation Case are pinned and kept. Content blobs no longer referenced are garbage-collected. This cannot be undone.")],
      ok: "Clear history",
    });
    if (!ok) return;
    try {
      const report = await call("clear_retrieval_runs", scope ? { project_id: scope } : { all: true });
      say(`Cleared ${report.deleted_runs} Run(s); kept ${report.kept_pinned} pinned; removed ${report.deleted_blobs} blob(s).`);
      cursors.length = 1;
      await load(0);
    } catch (error) {
      say(`Clear History failed: ${error.message}`, "error");
    }
  } }, scope ? `Clear unpinned history of ${scope}…` : "Clear unpinned history…");

  fill(main, 
    h("div", { class: "row spread" }, h("h1", null, "Retrieval Runs"), clearButton),
    h("section", { class: "panel" }, form),
    listBox,
    h("div", { class: "pager" }, newer, pageLabel, older));
  await load(0);
}

// -- one Run ---------------------------------------------------------------------------------
function rankCell(rank, score, digits = 4) {
  if (rank === null || rank === undefined) return h("td", { class: "num muted" }, "—");
  return h("td", { class: "num" }, String(rank), score === null || score === undefined ? null
    : h("span", { class: "sub" }, fmtNum(score, digits)));
}

function candidateRow(c) {
  const selected = c.disposition === "selected";
  const [resource, ordinal] = [c.resource_id, c.unit_id.slice(c.resource_id.length)];
  return h("tr", { class: selected ? "selected" : null, "data-unit-id": c.unit_id },
    h("td", { class: "num" }, String(c.final_rank)),
    h("td", { class: "wrap-any" }, h("code", null, resource), h("code", { class: "muted" }, ordinal),
      c.heading_path.length ? h("span", { class: "sub" }, c.heading_path.join(" › ")) : null),
    rankCell(c.exact_rank, c.exact_score, 2),
    rankCell(c.bm25_rank, c.bm25_score),
    rankCell(c.lexical_rank, null),
    rankCell(c.dense_rank, c.dense_score ?? c.dense_similarity),
    rankCell(c.rrf_rank, c.rrf_score, 5),
    rankCell(c.rerank_rank, c.rerank_score),
    h("td", { class: "num" }, fmtNum(c.final_score, 4)),
    h("td", null, h("span", { class: `badge ${selected ? "ok" : "muted"}` }, c.disposition)),
    h("td", null, selected ? h("span", { class: "badge info" }, c.delta_action) : h("code", null, c.exclusion_code)));
}

export const CANDIDATE_HEADERS = [
  { text: "Final", num: true }, "Unit",
  { text: "Exact", num: true, title: "exact identity rank and score" },
  { text: "BM25", num: true, title: "BM25 rank and score" },
  { text: "Lexical", num: true, title: "lexical list rank: exact matches, then BM25 (B1)" },
  { text: "Dense", num: true, title: "dense-vector rank and cosine score" },
  { text: "RRF", num: true, title: "reciprocal-rank fusion rank and score" },
  { text: "Rerank", num: true, title: "reranker rank and score (inside the rerank window)" },
  { text: "Final score", num: true }, "Disposition",
  { text: "Delta / exclusion", title: "delta action of a selected unit, exclusion code of an unselected one" },
];

function latencyChart(latency) {
  const keys = [...STAGES.filter((st) => st in latency),
    ...Object.keys(latency).filter((st) => st !== "total" && !STAGES.includes(st))];
  return hbars({
    title: "Latency per stage", desc: `Time spent in each stage of this Run, in milliseconds; total ${fmtMs(latency.total)}.`,
    rows: keys.map((k) => ({ label: k, value: latency[k] })), unit: "ms",
    caption: `Total ${fmtMs(latency.total)}.`,
  });
}

// Which candidates' resources had changed (stale) or gone (missing) in the sources when the Run
// ran: the manifest is the live Effective Memory it recorded, a candidate's resource hash is the
// one of the generation that ranked it.
function indexLag(run) {
  if (!run.manifest) return null;
  const live = new Map(run.manifest.map((e) => [e.resource_id, e.resource_hash]));
  const stale = new Set(), missing = new Set();
  for (const c of run.candidates) {
    if (!live.has(c.resource_id)) missing.add(c.resource_id);
    else if (live.get(c.resource_id) !== c.resource_hash) stale.add(c.resource_id);
  }
  return { stale: [...stale].sort(), missing: [...missing].sort() };
}

function lagPanel(run) {
  const lag = indexLag(run);
  const lagging = run.summary.effective_memory_hash !== run.revisions.effective_memory_hash;
  let body;
  if (!lag) body = h("p", { class: "muted" }, "No Effective Memory was recorded for this Run.");
  else if (!lagging) body = h("p", null, "The index matched the sources when this Run ran.");
  else {
    const names = (ids) => (ids.length ? ids.map((id) => h("code", { class: "wrap-any" }, id)).flatMap((n, i) => (i ? [", ", n] : [n])) : "none");
    body = [
      h("p", { class: "msg warn", role: "status" },
        `The index lagged the sources: ${lag.stale.length} candidate resource(s) had been edited and ${lag.missing.length} deleted since it was built.`),
      facts([["Stale (edited since)", h("span", { id: "lag-stale" }, names(lag.stale))],
        ["Missing (deleted since)", h("span", { id: "lag-missing" }, names(lag.missing))]]),
    ];
  }
  return h("section", { class: "panel", "aria-labelledby": "lag-h", id: "index-lag" }, h("h2", { id: "lag-h" }, "Index freshness"), body);
}

export async function runPage(main, runId) {
  const run = await call("get_retrieval_run", { run_id: runId, manifest: true });
  const r = run.summary;
  const filter = h("select", { id: "disposition", "aria-controls": "candidates" },
    h("option", { value: "" }, "every candidate"), h("option", { value: "selected" }, "selected only"),
    h("option", { value: "excluded" }, "excluded only"));
  const body = h("div");
  const draw = () => {
    const shown = run.candidates.filter((c) => !filter.value || c.disposition === filter.value);
    fill(body, table(CANDIDATE_HEADERS, shown.map(candidateRow), { id: "candidates", "aria-label": "Candidates, in final order" }));
  };
  filter.addEventListener("change", draw);
  draw();

  const add = h("button", { type: "button", id: "add-to-evaluation", onclick: async () => {
    add.disabled = true;
    try {
      const created = await call("create_evaluation_case", { run_id: r.run_id });
      const caseId = (created.case || created).case_id;
      go(`/evaluation/cases/${encodeURIComponent(caseId)}`);
      say(`Added to the Evaluation Set as case ${caseId}.`);
    } catch (error) {
      add.disabled = false;
      say(error instanceof ApiError ? `Could not add this Run: ${error.message}` : String(error), "error");
    }
  } }, "Add to Evaluation Set");
  if (r.status !== "succeeded") {
    add.disabled = true;
    add.title = "only a succeeded Run can become an Evaluation Case";
  }

  const selected = run.candidates.filter((c) => c.disposition === "selected").length;
  fill(main, 
    h("p", null, link("/retrieval", "← Retrieval Runs")),
    h("div", { class: "row spread" }, h("h1", { class: "wrap-any" }, `“${r.query}”`), add),
    r.status === "failed" ? h("div", { class: "msg error", role: "alert", id: "run-error" },
      h("h2", null, "This Run failed"),
      facts([["Stage", h("code", null, r.error_stage)], ["Code", h("code", null, r.error_code)], ["Summary", r.error_summary]])) : null,
    h("div", { class: "grid" },
      h("section", { class: "panel", "aria-labelledby": "run-h" }, h("h2", { id: "run-h" }, "Run"), facts([
        ["Run", h("code", null, r.run_id)],
        ["Project", link(`/retrieval?project=${encodeURIComponent(r.project_id)}`, r.project_id)],
        ["Status", h("span", null, statusBadge(r.status), r.pinned ? [" ", h("span", { class: "badge info" }, "pinned")] : null)],
        ["Started", fmtTime(r.started_at)],
        ["Finished", fmtTime(r.finished_at)],
        ["Models", r.warm === null ? "—" : r.warm ? "warm (already loaded)" : "cold (loaded by this Run)"],
        ["Returned", `${r.fragment_count} fragment(s), ${r.token_count} of ${r.token_budget} tokens; ${selected} selected of ${r.candidate_count} candidates`],
        ["Index Revision", short(r.index_revision, 16)],
        ["Effective Memory", short(r.effective_memory_hash, 16)],
        ["Indexed memory", short(run.revisions.effective_memory_hash, 16)],
        ["State fingerprint", short(r.state_fingerprint, 16)],
      ])),
      h("section", { class: "panel", "aria-labelledby": "lat-h" }, h("h2", { id: "lat-h" }, "Latency"),
        Object.keys(run.latency_ms).length ? latencyChart(run.latency_ms) : h("p", { class: "muted" }, "No stage latency recorded."),
        h("details", null, h("summary", null, "Revisions"),
          facts(Object.entries(run.revisions).sort().map(([k, v]) => [k, h("code", { class: "wrap-any" }, v)]))))),
    r.status === "succeeded" ? lagPanel(run) : null,
    actionPanel("cand", `Candidates (${run.candidates.length})`, h("label", { for: "disposition", class: "inline" }, "Show", filter),
      h("p", { class: "help" }, "Each stage shows the unit's rank, and its score below. Selected units are highlighted."),
      body));
}
