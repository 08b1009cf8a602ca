// A ranker learned from judgments (issue 32): `eval learn` on the project's reviewed cases, the
// latest learning's cross-validated gain and most important features, and its model put in use
// with one action when the guard proposed it (docs/evaluation.md).

import { actionPanel, ApiError, busyButton, call, clear, errorBox, facts, fmtNum, h, say } from "./lib.js";

function gainText(r) {
  if (r.gain === null) return "—";
  return `${r.gain >= 0 ? "+" : ""}${fmtNum(r.gain, 4)} [${fmtNum(r.gain_low, 4)}, ${fmtNum(r.gain_high, 4)}], p ${fmtNum(r.p_value, 3)}`;
}

// memory_core/evaluation/learning.py MIN_TEXT_SHARE: under it, the text columns were mostly
// missing in training while every activation computes them.
const MIN_TEXT_SHARE = 0.9;

// The share of the window units learned from that had their text (null: a learning kept before
// it was counted).
function textShare(r) {
  return r.text_units === null || r.text_units === undefined || !r.training_rows ? null : r.text_units / r.training_rows;
}

function learningFacts(r, onApply) {
  const share = textShare(r);
  const held = r.current_metrics && r.cross_validated
    ? `${fmtNum(r.current_metrics.ndcg_at_10, 4)} → ${fmtNum(r.cross_validated.ndcg_at_10, 4)}` : "—";
  return h("div", { id: "learn-result" },
    h("p", { id: "learn-verdict", class: r.proposed ? "ok" : "help" }, r.verdict),
    facts([
      ["Learned", `${r.created_at} on ${r.cases} judged cases (${r.folds}-fold cross-validation, ${r.level} level)`],
      share === null ? null
        : ["Window units with their text", `${r.text_units} of ${r.training_rows} (${(100 * share).toFixed(1)} %)`],
      ["nDCG@10 now → learned (held out)", held],
      ["Cross-validated gain, 95 % interval", gainText(r)],
      ["Most important features", r.importances.length
        ? r.importances.slice(0, 5).map((f) => `${f.feature} ${fmtNum(f.share, 2)}`).join(", ") : "—"],
      // Older learnings (one setting, before the grid) carry no choice.
      ["Setting chosen (all cases; per fold)", r.chosen_setting
        ? `${r.chosen_setting}; ${(r.fold_settings || []).join(" | ")}` : "—"],
      ["Model", r.model_digest ? `${r.model_digest.slice(0, 12)} (${r.feature_revision})` : "—"],
    ]),
    // Only a trained model was trained without the missing text columns. The reasons are
    // candidate_passages' (evaluation/passages.py), as the CLI gives them.
    share !== null && share < MIN_TEXT_SHARE && r.model_digest
      ? h("p", { class: "msg warn", role: "status", id: "learn-text-warning" },
        `Only ${(100 * share).toFixed(1)} % of the window units learned from had their text (the others': no span `
        + "recorded, as their Run predates spans; the resource not in the frozen corpus; the resource changed after "
        + "it was indexed; or its frozen body unreadable): the model was trained with their text columns missing, "
        + "while every activation computes them. Record new Runs and learn again.")
      : null,
    r.proposed ? h("button", { type: "button", id: "learn-apply", onclick: () => onApply(r) }, "Rank with this model") : null);
}

export async function learningPanel(project) {
  const box = h("div", { id: "learning" });
  const show = (r) => { clear(box); box.append(learningFacts(r, apply)); };
  async function apply(r) {
    try {
      const view = await call("set_profile_from_learning", { project_id: project, learn_id: r.learn_id });
      say(`Applied: project ${project} now ranks with ${view.reranker} (version ${view.in_use.version}).`);
    } catch (error) {
      say(error instanceof ApiError ? `Not applied: ${error.message}` : error.message, "error");
    }
  }
  const learnButton = busyButton("learn", "Learn from reviewed cases", "Learning a ranker from the reviewed cases…",
    async () => {
      const r = await call("learn_project", { project_id: project });
      show(r);
      say(`Learned: ${r.verdict}`);
    },
    (error) => { clear(box); box.append(errorBox(error, "Learning refused")); });
  try {
    const latest = (await call("list_learnings", { project_id: project })).learnings[0];
    if (latest) show(latest); else box.append(h("p", { class: "help" }, "No learning yet."));
  } catch (error) {
    box.append(errorBox(error, "The learnings could not be read"));
  }
  return actionPanel("learning", "Learned ranker", learnButton,
    h("p", { class: "help" }, "Learns a ranker (LightGBM lambdarank) over every candidate's recorded scores and ranks, ",
      "cross-validated against the ranking now; proposed only when the nDCG@10 gain's 95 % interval lies above 0."),
    box);
}
