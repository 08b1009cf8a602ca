// The router: every page has its own address; links inside the app navigate without a reload.

import { clear, fill, errorBox, h, unsay } from "./lib.js";
import { caseView } from "./case.js";
import { evaluationPage } from "./evaluation.js";
import { retrievalPage, runPage } from "./retrieval.js";
import { heartbeat, runtimePage } from "./runtime.js";

const ROUTES = [
  [/^\/(runtime)?$/, "runtime", () => runtimePage],
  [/^\/retrieval$/, "retrieval", () => retrievalPage],
  [/^\/retrieval\/runs\/([^/]+)$/, "retrieval", (m) => (main) => runPage(main, decodeURIComponent(m[1]))],
  [/^\/evaluation$/, "evaluation", () => evaluationPage],
  [/^\/evaluation\/cases\/([^/]+)$/, "evaluation", (m) => (main) => caseView(main, decodeURIComponent(m[1]))],
];

let current = null; // the page's cleanup (listeners on document), if any

async function render() {
  const main = document.getElementById("main");
  if (current) current();
  current = null;
  unsay();
  const path = location.pathname;
  for (const [re, nav, make] of ROUTES) {
    const m = path.match(re);
    if (!m) continue;
    for (const a of document.querySelectorAll("[data-nav]")) {
      if (a.dataset.nav === nav) a.setAttribute("aria-current", "page");
      else a.removeAttribute("aria-current");
    }
    fill(main, h("p", { class: "muted" }, "Loading…"));
    try {
      current = (await make(m)(main)) || null;
    } catch (error) {
      fill(main, errorBox(error, "This page could not be loaded"));
    }
    return;
  }
  fill(main, h("h1", null, "Not found"), h("p", null, "No page at this address."));
}

export function navigate(href, { replace = false } = {}) {
  if (replace) history.replaceState(null, "", href);
  else history.pushState(null, "", href);
  render().then(() => {
    if (!replace) document.getElementById("main").focus({ preventScroll: false });
  });
}

document.addEventListener("click", (event) => {
  const a = event.target.closest("a[href]");
  if (!a || a.target || a.hasAttribute("download") || event.defaultPrevented) return;
  if (event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) return;
  const url = new URL(a.href, location.href);
  if (url.origin !== location.origin || url.pathname.startsWith("/v1/") || url.pathname.startsWith("/static/")) return;
  event.preventDefault();
  navigate(url.pathname + url.search);
});

window.addEventListener("popstate", () => render());
window.memcoreNavigate = navigate; // pages import navigate lazily through this to avoid a cycle
render();
heartbeat(); // an open page keeps an on-demand daemon from stopping idle
