// Evaluation: the cases, the B1–B4 benchmark report (table, charts, significance, missed
// evidence), Export and Import.

import { groupedBars, hbars, intervals } from "./charts.js";
import { learningPanel } from "./learning.js";
import { METRICS, RETURNED_METRICS } from "./metrics.js";
import { tuningPanel } from "./tuning.js";
import {
  actionPanel, ApiError, call, callText, clear, download, fill, errorBox, fmtMs, fmtNum, fmtTime, h, link, say, table,
} from "./lib.js";

const go = (href) => window.memcoreNavigate(href);

export const VARIANTS = [
  ["b1_bm25", "B1 BM25 (exact + BM25)"],
  ["b2_dense_vector", "B2 dense vector"],
  ["b3_hybrid_rrf", "B3 hybrid RRF"],
  ["b4_reranked", "B4 reranked"],
];
const VARIANT_LABEL = Object.fromEntries(VARIANTS);
const MISSED = {
  never_retrieved: "never retrieved (no unit in the fused recall set)",
  lost_in_fusion: "lost in fusion (ranked, but outside the rerank window)",
  demoted_by_reranker: "demoted by the reranker",
  cut_at_selection: "cut at selection (budget, limits, threshold)",
};

function reviewedBadge(c) {
  return c.reviewed ? h("span", { class: "badge ok" }, "reviewed") : h("span", { class: "badge muted" }, "not reviewed");
}

function casesPanel(cases) {
  const panel = h("section", { class: "panel", "aria-labelledby": "cases-h" }, h("h2", { id: "cases-h" }, `Cases (${cases.length})`));
  if (!cases.length) {
    panel.append(h("p", { class: "muted" }, "No Evaluation Cases yet. Open a succeeded Run on the ",
      link("/retrieval", "Retrieval"), " page and choose “Add to Evaluation Set”."));
    return panel;
  }
  panel.append(table(["Query", "Project", { text: "Judgments", num: true }, "Review", { text: "Created", class: "hide-narrow" },
    { text: "Provenance", class: "hide-narrow" }],
  cases.map((c) => h("tr", { "data-case-id": c.case_id },
    h("td", { class: "wrap-any" }, link(`/evaluation/cases/${encodeURIComponent(c.case_id)}`, c.query),
      h("span", { class: "sub" }, c.case_id)),
    h("td", null, c.project_id),
    h("td", { class: "num" }, `v${c.judgment_version}`),
    h("td", null, reviewedBadge(c)),
    h("td", { class: "hide-narrow nowrap" }, fmtTime(c.created_at)),
    h("td", { class: "hide-narrow" }, c.provenance))), { id: "cases", "aria-label": "Evaluation Cases" }));
  return panel;
}

function metricTable(level, latency) {
  const rows = VARIANTS.map(([v, label]) => {
    const m = level.variants[v] || {};
    const lat = latency && latency.variants ? latency.variants[v] : null;
    return h("tr", { "data-variant": v }, h("th", { scope: "row" }, label),
      METRICS.map(([k, , , digits]) => {
        const cell = m[k] || {};
        return h("td", { class: "num", title: cell.excluded ? `${cell.counted} counted, ${cell.excluded} excluded` : null },
          fmtNum(cell.mean, digits));
      }),
      h("td", { class: "num" }, lat ? fmtMs(lat.p50) : "—"), h("td", { class: "num" }, lat ? fmtMs(lat.p95) : "—"));
  });
  return table(["Variant", ...METRICS.map(([, label, help]) => ({ text: label, num: true, title: help })),
    { text: "Warm p50", num: true }, { text: "Warm p95", num: true }], rows, { id: "benchmark", "aria-label": "B1–B4 benchmark" });
}

function returnedTable(level) {
  const b4 = level.variants.b4_reranked || {};
  const present = RETURNED_METRICS.filter(([k]) => b4[k]);
  if (!present.length) return null; // a report from before these metrics
  return h("div", null, h("h3", null, "What the agent was given"),
    h("p", { class: "help" }, "The source Runs' returned fragments (B4's order). A reused fragment carries no text and returns 0 tokens."),
    table(["Metric", { text: "Mean", num: true }, { text: "Cases counted", num: true }, { text: "Excluded", num: true }],
      present.map(([k, label, help, digits]) => h("tr", { "data-metric": k },
        h("th", { scope: "row", title: help }, label),
        h("td", { class: "num" }, fmtNum(b4[k].mean, digits)),
        h("td", { class: "num" }, String(b4[k].counted)),
        h("td", { class: "num" }, String(b4[k].excluded)))),
      { id: "returned", "aria-label": "What the agent was given" }));
}

/** Significant only when both agree: the interval excludes 0 and p < 0.05 (few cases rarely are). */
function verdict(c) {
  if (c.ci95_low === null || c.p_value === null) return "—";
  const significant = c.p_value < 0.05 && (c.ci95_low > 0 || c.ci95_high < 0);
  if (!significant) return h("span", { class: "badge muted" }, "not significant");
  return c.ci95_low > 0 ? h("span", { class: "badge ok" }, "B4 better") : h("span", { class: "badge bad" }, "B4 worse");
}

function comparisonsPanel(level) {
  const rows = level.comparisons.map((c) => h("tr", null,
    h("th", { scope: "row" }, `${VARIANT_LABEL[c.variant] || c.variant} − ${VARIANT_LABEL[c.other] || c.other}`),
    h("td", { class: "num" }, String(c.cases)),
    h("td", { class: "num" }, fmtNum(c.mean_diff, 4)),
    // Too few cases: one cell saying so instead of an interval and a p-value that mean nothing.
    ...(c.interval_reason && c.mean_diff !== null
      ? [h("td", { colspan: 2, class: "help" }, c.interval_reason)]
      : [h("td", { class: "num" }, c.ci95_low === null ? "—" : `[${fmtNum(c.ci95_low, 4)}, ${fmtNum(c.ci95_high, 4)}]`),
        h("td", { class: "num" }, fmtNum(c.p_value, 4))]),
    h("td", null, verdict(c))));
  return h("div", null,
    table(["Comparison (nDCG@10)", { text: "Cases", num: true }, { text: "Mean difference", num: true },
      { text: "95% CI (paired bootstrap)", num: true }, { text: "p (sign-flip)", num: true }, { text: "Verdict", title: "significant when the 95% CI excludes 0 and p < 0.05" }], rows,
    { id: "significance", "aria-label": "Significance of B4 against B1–B3" }),
    intervals({
      title: "B4 minus each baseline on nDCG@10", desc: "Mean paired difference with its 95% bootstrap interval; an interval clear of zero is significant.",
      rows: level.comparisons.map((c) => ({ label: `B4 − ${(VARIANT_LABEL[c.other] || c.other).split(" ")[0]}`, mean: c.mean_diff, low: c.ci95_low, high: c.ci95_high })),
      caption: "Dots: mean difference; bars: 95% confidence interval (none under " +
        "a minimum number of cases); dashed line: no difference.",
    }));
}

function missedPanel(missed) {
  const counts = missed.counts || {};
  const panel = h("section", { class: "panel", "aria-labelledby": "missed-h" }, h("h2", { id: "missed-h" }, "Missed evidence"));
  panel.append(h("p", { class: "help" }, "Relevant resources the source Run did not select, by where they were lost."));
  panel.append(hbars({
    title: "Missed evidence by cause", desc: "How many relevant, unselected resources each cause accounts for.",
    rows: Object.keys(MISSED).map((k, i) => ({ label: k.replaceAll("_", " "), value: counts[k] || 0, cls: `c${i + 1}` })),
    format: (v) => String(v),
  }));
  if (missed.items && missed.items.length) {
    panel.append(table(["Case", "Resource", { text: "Relevance", num: true }, "Cause", "Exclusion",
      { text: "Best lexical", num: true }, { text: "Best dense", num: true }, { text: "Best RRF", num: true }, { text: "Best final", num: true }],
    missed.items.map((m) => h("tr", null,
      h("td", null, link(`/evaluation/cases/${encodeURIComponent(m.case_id)}`, m.case_id.slice(0, 12))),
      h("td", { class: "wrap-any" }, h("code", null, m.resource_id)),
      h("td", { class: "num" }, String(m.relevance)),
      h("td", { title: MISSED[m.category] || m.category }, m.category),
      h("td", null, m.exclusion_code ? h("code", null, m.exclusion_code) : "—"),
      h("td", { class: "num" }, fmtNum(m.best_lexical_rank)), h("td", { class: "num" }, fmtNum(m.best_dense_rank)),
      h("td", { class: "num" }, fmtNum(m.best_rrf_rank)), h("td", { class: "num" }, fmtNum(m.best_final_rank)))),
    { id: "missed", "aria-label": "Missed evidence" }));
  } else {
    panel.append(h("p", { class: "muted" }, "No missed evidence: judge resources the Run did not select as relevant to see them here."));
  }
  return panel;
}

function reportPanel(report, levelName, onLevel) {
  const level = report.levels[levelName];
  const levelSelect = h("select", { id: "level", onchange: (e) => onLevel(e.target.value) },
    Object.keys(report.levels).map((name) => h("option", { value: name, selected: name === levelName }, `${name} level`)));
  const chart = groupedBars({
    title: `B1–B4 at ${levelName} level`, desc: "Mean Recall@20, nDCG@10 and MRR of each variant over the judged cases.",
    keys: ["recall@20", "ndcg@10", "mrr"], labels: { "recall@20": "Recall@20", "ndcg@10": "nDCG@10", mrr: "MRR" },
    groups: VARIANTS.map(([v, label]) => ({ label: label.split(" ")[0], values: Object.fromEntries(
      ["recall@20", "ndcg@10", "mrr"].map((k) => [k, level.variants[v] && level.variants[v][k] ? level.variants[v][k].mean : null])) })),
    max: 1, caption: `${level.judged_cases} judged case(s); ${level.unjudged_cases} without a relevant item (excluded from the means).`,
  });
  return actionPanel("report", "Benchmark: B1–B4", h("label", { for: "level", class: "inline" }, "Level", levelSelect),
    h("p", { class: "help" }, `${report.cases} case(s), ${report.reviewed_cases} reviewed. `,
      "These figures make the evaluation pipeline executable; they are a quality gate only once the cases are representative and reviewed."),
    metricTable(level, report.latency_ms), chart, returnedTable(level),
    h("h3", null, "Significance"), comparisonsPanel(level));
}

export async function evaluationPage(main) {
  const q = new URLSearchParams(location.search);
  const project = q.get("project") || "";
  const [{ projects }, { cases }] = await Promise.all([
    call("list_projects"), call("list_evaluation_cases", project ? { project_id: project } : {}),
  ]);
  const scope = project ? { project_id: project } : {};

  const reportBox = h("div");
  let levelName = "unit";
  let report = null;
  const drawReport = () => {
    clear(reportBox);
    if (report) reportBox.append(reportPanel(report, levelName, (name) => { levelName = name; drawReport(); }), missedPanel(report.missed_evidence));
  };
  if (cases.length) {
    try {
      report = await call("evaluation_report", scope);
    } catch (error) {
      reportBox.append(errorBox(error, "The benchmark report failed"));
    }
  }
  drawReport();

  // A download of the daemon's canonical fixture bytes (the file `memcore eval export` writes).
  const exportButton = h("button", { type: "button", id: "export", disabled: !cases.length, onclick: async () => {
    say(`Exporting ${cases.length} case(s)…`);
    try {
      await download(`/ui/api/export${project ? `?project_id=${encodeURIComponent(project)}` : ""}`);
      say(`Exported ${cases.length} case(s).`);
    } catch (error) {
      say(`Export failed: ${error.message}`, "error");
    }
  } }, "Export fixture");

  const fileInput = h("input", { type: "file", id: "import-file", accept: "application/json,.json", class: "visually-hidden" });
  fileInput.addEventListener("change", async () => {
    const file = fileInput.files[0];
    if (!file) return;
    try {
      const text = await file.text();
      JSON.parse(text); // a clear message for a file that is not JSON at all
      const result = JSON.parse(await callText("import_evaluation_set", `{"fixture":${text}}`));
      go(location.pathname + location.search); // redraws (and clears notices) first
      say(`Imported: ${JSON.stringify(result)}`);
    } catch (error) {
      say(error instanceof ApiError ? `Import refused: ${error.message}` : `Not a fixture: ${error.message}`, "error");
    }
    fileInput.value = "";
  });

  const projectSelect = h("select", { id: "eval-project", onchange: (e) => go(`/evaluation${e.target.value ? `?project=${encodeURIComponent(e.target.value)}` : ""}`) },
    h("option", { value: "" }, "All projects"),
    projects.map((p) => h("option", { value: p.project.project_id, selected: p.project.project_id === project }, p.project.project_id)));

  fill(main, 
    h("div", { class: "row spread" }, h("h1", null, "Evaluation"),
      h("div", { class: "row" }, h("label", { for: "eval-project", class: "inline" }, "Project", projectSelect),
        exportButton, h("label", { for: "import-file", class: "button secondary" }, "Import fixture…", fileInput))),
    casesPanel(cases), reportBox, project ? await tuningPanel(project) : null,
    project ? await learningPanel(project) : null);
}
