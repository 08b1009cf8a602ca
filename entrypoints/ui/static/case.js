// One Evaluation Case: relevance 0–3 per retrieved unit (keyboard: j/k, 0–3, x, s), each unit
// shown with its text from the frozen corpus, a missed-evidence picker over the frozen corpus
// that shows the matching passages, and saving with compare-and-set: a stale editor is told,
// keeps its edits on screen and can rebase them onto the newer version.

import {
  actionPanel, ApiError, call, clear, fill, errorBox, facts, fmtNum, fmtTime, h, link, say, short, table, unsay,
} from "./lib.js";
import { VARIANTS } from "./evaluation.js";
import { METRICS } from "./metrics.js";

const GRADES = [0, 1, 2, 3];
const GRADE_HELP = { 0: "not relevant", 1: "marginally relevant", 2: "relevant", 3: "highly relevant" };
const TEXT_INPUTS = new Set(["text", "search", "number", "email", "url", "password"]);
const unitKey = (id) => `u:${id}`;
const resourceKey = (id) => `r:${id}`;

function judgmentMap(judgments) {
  const map = new Map();
  for (const j of judgments) {
    map.set(j.unit_id ? unitKey(j.unit_id) : resourceKey(j.resource_id), { relevance: j.relevance, note: j.note ?? null });
  }
  return map;
}

function toRequest(map) {
  return [...map.entries()].map(([key, j]) => {
    const out = key.startsWith("u:") ? { unit_id: key.slice(2) } : { resource_id: key.slice(2) };
    out.relevance = j.relevance;
    if (j.note) out.note = j.note;
    return out;
  });
}

function same(a, b) {
  return (a === undefined && b === undefined) || (a !== undefined && b !== undefined && a.relevance === b.relevance && (a.note ?? null) === (b.note ?? null));
}

/** The edits of ``draft`` against ``base``: key -> new value (undefined: removed). */
function changes(base, draft) {
  const out = new Map();
  for (const key of new Set([...base.keys(), ...draft.keys()])) {
    if (!same(base.get(key), draft.get(key))) out.set(key, draft.get(key));
  }
  return out;
}

function gradeControl(name, value, onPick, label) {
  const group = h("div", { class: "grades", role: "radiogroup", "aria-label": label });
  const options = [["", "–", "unjudged"], ...GRADES.map((g) => [String(g), String(g), GRADE_HELP[g]])];
  for (const [v, text, help] of options) {
    const input = h("input", { type: "radio", name, value: v, checked: String(value ?? "") === v, "aria-label": `${text === "–" ? "unjudged" : `relevance ${text}`} (${help})`,
      onchange: () => onPick(v === "" ? null : Number(v)) });
    group.append(h("label", { title: help }, input, h("span", { "aria-hidden": "true" }, text)));
  }
  return group;
}

function setGrade(group, value) {
  for (const input of group.querySelectorAll("input")) input.checked = input.value === String(value ?? "");
}

/** A candidate's text as the frozen corpus holds it (verified against its unit hash by the
 * daemon), or, plainly, why it is not shown: never text that merely sits at the same offsets. */
function unitPassage(passage) {
  if (!passage) return null;
  if (passage.text === null) {
    return h("p", { class: "small passage-missing", "data-passage-status": passage.status }, passage.note);
  }
  return h("div", { class: "passage", "data-passage-status": passage.status,
    title: `characters ${passage.start}–${passage.end} of ${passage.resource_id}` }, passage.text);
}

/** A search passage: its heading path, then its text with the match marked. */
function searchPassage(passage) {
  const before = passage.text.slice(0, passage.match_start - passage.start);
  const match = passage.text.slice(passage.match_start - passage.start, passage.match_end - passage.start);
  const after = passage.text.slice(passage.match_end - passage.start);
  return h("li", { "data-start": passage.start, "data-end": passage.end },
    passage.heading_path.length ? h("span", { class: "sub" }, passage.heading_path.join(" › ")) : null,
    h("div", { class: "passage" }, before, h("mark", null, match), after));
}

export async function caseView(main, caseId) {
  let detail = await call("get_evaluation_case", { case_id: caseId });
  let base = judgmentMap(detail.judgments.judgments);
  let draft = new Map(base);
  let version = detail.case.judgment_version;
  let currentIndex = 0;
  const rows = []; // {key, tr, group, marker}
  const candidates = detail.trace.candidates;
  const passages = new Map(detail.passages.map((p) => [p.unit_id, p]));
  const selectedResources = new Set(candidates.filter((c) => c.disposition === "selected").map((c) => c.resource_id));
  const retrievedResources = new Set(candidates.map((c) => c.resource_id));

  const conflictBox = h("div", { id: "conflict" });
  const dirtyLabel = h("span", { class: "muted small", id: "dirty", "aria-live": "polite" });
  const saveButton = h("button", { type: "button", id: "save", onclick: () => save() }, "Save judgments");
  const reviewButton = h("button", { type: "button", class: "secondary", id: "review", onclick: () => review() });
  const versionLabel = h("span", { id: "version" });
  const metricsBox = h("div");
  const resourceBox = h("div");

  function refreshStatus() {
    const pending = changes(base, draft);
    dirtyLabel.textContent = pending.size ? `${pending.size} unsaved change(s)` : "no unsaved changes";
    saveButton.disabled = pending.size === 0;
    versionLabel.textContent = `v${version}`;
    const reviewed = detail.case.reviewed;
    reviewButton.textContent = reviewed ? "Mark not reviewed" : "Mark reviewed";
    reviewButton.disabled = pending.size > 0;
    reviewButton.title = pending.size ? "save your changes first" : "";
    for (const r of rows) {
      setGrade(r.group, draft.get(r.key)?.relevance);
      const was = base.get(r.key);
      r.marker.textContent = same(was, draft.get(r.key)) ? "" : `changed (saved: ${was ? was.relevance : "unjudged"})`;
    }
  }

  function pick(key, relevance) {
    if (relevance === null) draft.delete(key);
    else draft.set(key, { relevance, note: draft.get(key)?.note ?? base.get(key)?.note ?? null });
    refreshStatus();
    drawResources();
  }

  function focusRow(index, focus = true) {
    if (!rows.length) return;
    currentIndex = Math.max(0, Math.min(rows.length - 1, index));
    rows.forEach((r, i) => {
      r.tr.tabIndex = i === currentIndex ? 0 : -1;
      r.tr.classList.toggle("current", i === currentIndex);
      if (i === currentIndex) r.tr.setAttribute("aria-current", "true");
      else r.tr.removeAttribute("aria-current");
    });
    if (focus) rows[currentIndex].tr.focus();
  }

  // -- units ----------------------------------------------------------------------------
  const unitRows = candidates.map((c, i) => {
    const key = unitKey(c.unit_id);
    const group = gradeControl(`grade-${i}`, draft.get(key)?.relevance, (v) => pick(key, v), `Relevance of ${c.unit_id}`);
    const marker = h("span", { class: "changed" });
    const tr = h("tr", { tabindex: i === 0 ? 0 : -1, "data-unit-id": c.unit_id, class: c.disposition === "selected" ? "selected" : null,
      onfocusin: () => { if (currentIndex !== i) focusRow(i); } },
    h("td", { class: "num" }, String(c.final_rank)),
    h("td", { class: "wrap-any" }, h("code", null, c.unit_id), c.heading_path.length ? h("span", { class: "sub" }, c.heading_path.join(" › ")) : null,
      unitPassage(passages.get(c.unit_id))),
    h("td", { class: "num hide-narrow" }, fmtNum(c.lexical_rank)), h("td", { class: "num hide-narrow" }, fmtNum(c.dense_rank)),
    h("td", { class: "num hide-narrow" }, fmtNum(c.rrf_rank)),
    h("td", null, c.disposition === "selected" ? h("span", { class: "badge ok" }, `selected · ${c.delta_action}`) : h("code", { class: "small" }, c.exclusion_code)),
    h("td", { class: "nowrap" }, group, marker));
    rows.push({ key, tr, group, marker });
    return tr;
  });

  // -- resources: judged ones and the missed-evidence picker ------------------------------
  const resourceGroups = new Map();
  function drawResources() {
    const keys = [...new Set([...draft.keys(), ...base.keys()])].filter((k) => k.startsWith("r:")).sort();
    const active = document.activeElement;
    const refocus = active && resourceBox.contains(active) && active.name ? [active.name, active.value] : null;
    clear(resourceBox);
    resourceGroups.clear();
    if (!keys.length) {
      resourceBox.append(h("p", { class: "muted", id: "no-resource-judgments" }, "No resource judgments yet: search the frozen corpus below to add evidence the Run missed."));
      return;
    }
    resourceBox.append(table(["Resource", "In the Run", "Relevance", ""], keys.map((key) => {
      const id = key.slice(2);
      const current = draft.get(key);
      const was = base.get(key);
      const group = gradeControl(`res-${id}`, current?.relevance, (v) => pick(key, v), `Relevance of resource ${id}`);
      resourceGroups.set(key, group);
      const status = selectedResources.has(id) ? h("span", { class: "badge ok" }, "selected")
        : retrievedResources.has(id) ? h("span", { class: "badge warn" }, "retrieved, not selected")
          : h("span", { class: "badge bad" }, "not retrieved");
      return h("tr", { "data-resource-id": id },
        h("td", { class: "wrap-any" }, h("code", null, id)), h("td", null, status),
        h("td", { class: "nowrap" }, group, same(was, current) ? null
          : h("span", { class: "changed" }, `changed (saved: ${was ? was.relevance : "none"})`)),
        h("td", null, current ? h("button", { type: "button", class: "link", onclick: () => pick(key, null) }, "Remove") : null));
    }), { id: "resource-judgments", "aria-label": "Resource judgments" }));
    if (refocus) {
      const again = resourceBox.querySelector(`input[name="${CSS.escape(refocus[0])}"][value="${CSS.escape(refocus[1])}"]`);
      if (again) again.focus();
    }
  }

  const searchInput = h("input", { type: "search", id: "corpus-search", placeholder: "resource path or text", "aria-describedby": "corpus-help" });
  const addGrade = h("select", { id: "missed-grade", "aria-label": "Relevance for added resources" },
    GRADES.filter((g) => g > 0).map((g) => h("option", { value: String(g), selected: g === 2 }, `${g} — ${GRADE_HELP[g]}`)));
  const results = h("div", { id: "corpus-results", "aria-live": "polite" });
  let nextCursor = null;

  async function search(more = false) {
    const request = { case_id: caseId, limit: 10 };
    const text = searchInput.value.trim();
    if (text) request.text = text;
    if (more && nextCursor) request.cursor = nextCursor;
    let page;
    try {
      page = await call("search_corpus_resources", request);
    } catch (error) {
      fill(results, errorBox(error, "Search failed"));
      return;
    }
    nextCursor = page.next_cursor;
    if (!more) clear(results);
    let list = results.querySelector("ul");
    if (!list) {
      results.append(h("p", { class: "help" }, `${page.total_resources} resource(s) in the frozen corpus.`));
      list = h("ul", { class: "stack", "aria-label": "Matching resources" });
      results.append(list);
    }
    if (!page.resources.length && !more) list.append(h("li", { class: "muted" }, "No resource matches."));
    for (const m of page.resources) {
      const id = m.resource.resource_id;
      list.append(h("li", { "data-resource-id": id },
        h("div", { class: "row" }, h("code", null, id),
          m.selected ? h("span", { class: "badge ok" }, "selected by the Run") : m.retrieved ? h("span", { class: "badge warn" }, "retrieved") : h("span", { class: "badge muted" }, "not retrieved"),
          h("button", { type: "button", class: "secondary", onclick: () => {
            pick(resourceKey(id), Number(addGrade.value));
            say(`Added ${id} with relevance ${addGrade.value} (not saved yet).`);
          } }, "Add as evidence")),
        m.passages.length ? h("ul", { class: "passages", "aria-label": `Where ${id} matches` }, m.passages.map(searchPassage))
          : m.snippet ? h("div", { class: "small muted wrap-any" }, m.snippet) : null));
    }
    const oldMore = results.querySelector(".more");
    if (oldMore) oldMore.remove();
    if (nextCursor) results.append(h("button", { type: "button", class: "secondary more", onclick: () => search(true) }, "More results"));
  }

  // -- per-case metrics --------------------------------------------------------------------
  function drawMetrics() {
    const unit = detail.metrics.unit || {};
    fill(metricsBox, table(["Variant", ...METRICS.slice(0, 3).map(([, l]) => ({ text: l, num: true }))],
      VARIANTS.map(([v, label]) => h("tr", null, h("th", { scope: "row" }, label),
        METRICS.slice(0, 3).map(([k]) => h("td", { class: "num" }, fmtNum(unit[v] ? unit[v][k] : null))))),
    { id: "case-metrics", "aria-label": "This case's metrics at unit level" }),
    detail.missed_evidence.length ? h("p", { class: "small" }, "Missed: ", detail.missed_evidence.map((m) => `${m.resource_id} (${m.category.replaceAll("_", " ")})`).join("; "))
      : h("p", { class: "muted small" }, "No missed evidence."));
  }

  // -- saving, conflicts and review ---------------------------------------------------------
  async function reloadDetail() {
    detail = await call("get_evaluation_case", { case_id: caseId });
    version = detail.case.judgment_version;
    base = judgmentMap(detail.judgments.judgments);
  }

  function showConflict(current, mine) {
    const pending = changes(base, draft);
    fill(conflictBox, h("div", { class: "msg warn", role: "alert" },
      h("h2", null, "Someone else saved these judgments first"),
      h("p", null, `You edited version ${mine}; version ${current ?? "newer"} is saved now. Nothing of yours was saved, and your ${pending.size} change(s) are still shown below.`),
      h("div", { class: "row" },
        h("button", { type: "button", id: "conflict-reload", onclick: () => rebase(true) }, `Load version ${current ?? "latest"} and keep my edits`),
        h("button", { type: "button", class: "secondary", id: "conflict-discard", onclick: () => rebase(false) }, "Discard my edits"))));
    conflictBox.scrollIntoView({ block: "nearest" });
  }

  async function rebase(keep) {
    const mine = changes(base, draft);
    await reloadDetail();
    draft = new Map(base);
    if (keep) {
      for (const [key, value] of mine) {
        if (value === undefined) draft.delete(key);
        else draft.set(key, value);
      }
    }
    clear(conflictBox);
    refreshStatus();
    drawResources();
    drawMetrics();
    say(keep ? `Loaded version ${version}; your edits are applied on top and marked “changed”. Review and save.` : `Loaded version ${version}.`);
  }

  async function save() {
    saveButton.disabled = true;
    try {
      const saved = await call("replace_evaluation_judgments", { case_id: caseId, expected_judgment_version: version, judgments: toRequest(draft) });
      await reloadDetail();
      draft = new Map(base);
      clear(conflictBox);
      refreshStatus();
      drawResources();
      drawMetrics();
      say(`Saved judgments as version ${saved.version ?? version}.`);
    } catch (error) {
      if (error instanceof ApiError && error.code === "evaluation_judgment_conflict") {
        unsay();
        showConflict(error.details.current_version, version);
      } else {
        say(`Save failed: ${error.message}`, "error");
      }
      refreshStatus();
    }
  }

  async function review() {
    try {
      const updated = await call("mark_evaluation_reviewed", { case_id: caseId, expected_judgment_version: version, reviewed: !detail.case.reviewed });
      detail.case = updated.case || updated;
      refreshStatus();
      say(detail.case.reviewed ? `Marked version ${version} reviewed.` : "Marked not reviewed.");
    } catch (error) {
      if (error instanceof ApiError && error.code === "evaluation_judgment_conflict") showConflict(error.details.current_version, version);
      else say(`Could not change the review: ${error.message}`, "error");
    }
  }

  // -- keyboard ----------------------------------------------------------------------------
  function onKey(event) {
    if (event.defaultPrevented || event.ctrlKey || event.metaKey || event.altKey) return;
    const t = event.target;
    if (t instanceof HTMLTextAreaElement || t instanceof HTMLSelectElement || (t instanceof HTMLInputElement && TEXT_INPUTS.has(t.type))) return;
    if (document.getElementById("confirm").open) return;
    const key = event.key;
    if (key === "j" || key === "k") {
      focusRow(currentIndex + (key === "j" ? 1 : -1));
    } else if (GRADES.map(String).includes(key) && rows.length) {
      pick(rows[currentIndex].key, Number(key));
    } else if (key === "x" && rows.length) {
      pick(rows[currentIndex].key, null);
    } else if (key === "s") {
      if (!saveButton.disabled) save();
    } else if (key === "/") {
      searchInput.focus();
    } else {
      return;
    }
    event.preventDefault();
  }
  document.addEventListener("keydown", onKey);

  const c = detail.case;
  fill(main, 
    h("p", null, link("/evaluation", "← Evaluation")),
    h("h1", { class: "wrap-any" }, `“${c.query}”`),
    conflictBox,
    h("div", { class: "grid" },
      h("section", { class: "panel", "aria-labelledby": "case-h" }, h("h2", { id: "case-h" }, "Case"), facts([
        ["Case", h("code", null, c.case_id)],
        ["Project", c.project_id],
        ["Source Run", link(`/retrieval/runs/${encodeURIComponent(c.source_run_id)}`, c.source_run_id)],
        ["Corpus", h("span", null, short(c.corpus_id, 16), ` — ${detail.corpus.resources.length} resource(s), frozen`)],
        ["Judgments", h("span", null, versionLabel, detail.judgment_history.length ? ` (${detail.judgment_history.length} version(s) stored)` : "")],
        ["Created", fmtTime(c.created_at)],
        ["Provenance", c.provenance],
      ])),
      h("section", { class: "panel", "aria-labelledby": "cm-h" }, h("h2", { id: "cm-h" }, "This case"), metricsBox)),
    actionPanel("units", "Relevance of retrieved units", h("div", { class: "row" }, dirtyLabel, reviewButton, saveButton),
      h("p", { class: "help", id: "shortcuts" }, "Keyboard: ", h("span", { class: "kbd" }, "j"), " / ", h("span", { class: "kbd" }, "k"),
        " next / previous unit, ", h("span", { class: "kbd" }, "0"), "–", h("span", { class: "kbd" }, "3"), " grade it, ",
        h("span", { class: "kbd" }, "x"), " unjudged, ", h("span", { class: "kbd" }, "s"), " save, ",
        h("span", { class: "kbd" }, "/"), " search the corpus. 0 not relevant · 1 marginal · 2 relevant · 3 highly relevant."),
      table([{ text: "Final", num: true }, "Unit", { text: "B1", num: true, title: "lexical rank", class: "hide-narrow" },
        { text: "B2", num: true, title: "dense rank", class: "hide-narrow" }, { text: "B3", num: true, title: "RRF rank", class: "hide-narrow" }, "Disposition", "Relevance"], unitRows, { id: "units", "aria-label": "Retrieved units" })),
    h("section", { class: "panel", "aria-labelledby": "res-h" },
      h("h2", { id: "res-h" }, "Missed evidence and resource judgments"), resourceBox,
      h("h3", null, "Search the frozen corpus"),
      h("form", { class: "filters", role: "search", "aria-label": "Search the frozen corpus", onsubmit: (e) => { e.preventDefault(); search(false); } },
        h("label", { for: "corpus-search" }, "Resource path or text", searchInput),
        h("label", { for: "missed-grade" }, "Relevance", addGrade),
        h("button", { type: "submit" }, "Search")),
      h("p", { class: "help", id: "corpus-help" }, "Searches the corpus as the Run saw it (frozen), not the live sources."),
      results));
  refreshStatus();
  drawResources();
  drawMetrics();
  focusRow(0, false);
  return () => document.removeEventListener("keydown", onKey);
}
