// Tuning (issue 18): the project's ranking profile, `eval tune` on its reviewed cases with the
// cross-validated verdict, and the proposal applied with one action (docs/evaluation.md).

import { actionPanel, ApiError, busyButton, call, clear, errorBox, facts, fmtNum, h, say, table } from "./lib.js";

function profileFacts(view) {
  const used = view.in_use;
  return facts([
    ["In use", used ? `version ${used.version} (${used.source})` : "the engine's defaults"],
    ["Ranking profile", view.ranking_profile],
    ["Reranker", view.reranker],
  ]);
}

function resultPanel(result, onApply) {
  const rows = [];
  if (result.current_metrics && result.cross_validated) {
    const now = result.current_metrics, cv = result.cross_validated;
    for (const [label, m] of [["current", now], ["tuned (held out)", cv]]) {
      rows.push(h("tr", { "data-row": label === "current" ? "current" : "tuned" }, h("th", { scope: "row" }, label),
        [m.ndcg_at_10, m.recall_at_20, m.mrr].map((v) => h("td", { class: "num" }, fmtNum(v, 4)))));
    }
  }
  const gain = result.gain === null ? "—"
    : `${result.gain >= 0 ? "+" : ""}${fmtNum(result.gain, 4)} [${fmtNum(result.gain_low, 4)}, ${fmtNum(result.gain_high, 4)}], p ${fmtNum(result.p_value, 3)}`;
  return h("div", { id: "tune-result" },
    h("p", { id: "tune-verdict", class: result.proposed ? "ok" : "help" }, result.verdict),
    facts([
      ["Cases", `${result.cases} judged (${result.excluded_cases} without a relevant item left out)`],
      ["Settings searched", `${result.grid_size} (${result.folds}-fold cross-validation, ${result.level} level)`],
      ["nDCG@10 gain, 95 % interval", gain],
      ["Best on all cases", result.best ? Object.entries(result.best).map(([k, v]) => `${k}=${v}`).join(", ") : "—"],
      ["Not searched", result.not_searched.join(", ")],
    ]),
    rows.length ? table(["", { text: "nDCG@10", num: true }, { text: "Recall@20", num: true }, { text: "MRR", num: true }], rows, { id: "tune-metrics" }) : null,
    result.proposed ? h("button", { type: "button", id: "tune-apply", onclick: () => onApply(result) }, "Apply the proposal") : null);
}

export async function tuningPanel(project) {
  const profileBox = h("div", { id: "profile" });
  const resultBox = h("div");
  const draw = (view) => { clear(profileBox); profileBox.append(profileFacts(view)); };
  const apply = async (result) => {
    try {
      const view = await call("set_project_profile", { project_id: project, from_tune: result.tune_id });
      draw(view);
      say(`Applied: project ${project} now ranks with version ${view.in_use.version} (${view.ranking_profile}).`);
    } catch (error) {
      say(error instanceof ApiError ? `Not applied: ${error.message}` : error.message, "error");
    }
  };
  const tuneButton = busyButton("tune", "Tune on reviewed cases", "Tuning on the reviewed cases…",
    async () => {
      clear(resultBox);
      const result = await call("tune_project", { project_id: project });
      resultBox.append(resultPanel(result, apply));
      say(`Tuned: ${result.verdict}`);
    },
    (error) => resultBox.append(errorBox(error, "Tuning refused")));
  try {
    draw(await call("show_project_profile", { project_id: project }));
  } catch (error) {
    profileBox.append(errorBox(error, "The profile could not be read"));
  }
  return actionPanel("tuning", "Ranking profile and tuning", tuneButton,
    h("p", { class: "help" }, "Searches the fusion settings on this project's reviewed cases from their stored traces, ",
      "cross-validated; a proposal only when the nDCG@10 gain's 95 % interval lies above 0."),
    profileBox, resultBox);
}
