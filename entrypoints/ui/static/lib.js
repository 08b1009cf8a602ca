// Shared helpers: the API client, a tiny DOM builder (text only: no HTML strings anywhere),
// formatting, notices and the confirmation dialog.

// This start's token. `memcore ui` opens the page with it in the fragment (#token=…), which no
// browser sends to any server; it is kept in this origin's sessionStorage (other ports and
// sites cannot read it; a reload keeps it) and leaves the address bar and the history at once.
// It goes out only as the Authorization header of this page's own API calls: never a cookie,
// which the browser would send to every port of 127.0.0.1.
const TOKEN_KEY = "memcore-ui-token";

function takeToken() {
  const url = new URL(location.href);
  const fragment = new URLSearchParams(url.hash.slice(1));
  const offered = fragment.get("token") || url.searchParams.get("token");
  if (offered) {
    sessionStorage.setItem(TOKEN_KEY, offered);
    fragment.delete("token");
    url.searchParams.delete("token");
    url.hash = fragment.toString();
    history.replaceState(history.state, "", url.pathname + url.search + url.hash);
  }
  return sessionStorage.getItem(TOKEN_KEY);
}

const TOKEN = takeToken();

function authorized(headers = {}) {
  return TOKEN ? { ...headers, authorization: `Bearer ${TOKEN}` } : headers;
}

/** fetch() for this page's own API: the token as a header, no cookies, no redirects followed
 * (a redirect would be the only way for the header to travel anywhere else). */
function fetchApi(path, init = {}) {
  return fetch(path, { ...init, headers: authorized(init.headers), credentials: "omit", redirect: "error" });
}

export class ApiError extends Error {
  constructor(status, code, message, details) {
    super(message);
    this.status = status;
    this.code = code;
    this.details = details || {};
  }
}

async function decode(reply) {
  let body = null;
  try {
    body = await reply.json();
  } catch {
    throw new ApiError(reply.status, "invalid_response", `the daemon answered ${reply.status} without JSON`);
  }
  if (!reply.ok) {
    const error = (body && body.error) || {};
    throw new ApiError(reply.status, error.code || "error", error.message || `HTTP ${reply.status}`, error.details);
  }
  return body;
}

function post(method, bodyText) {
  return fetchApi(`/v1/${method}`, { method: "POST", headers: { "content-type": "application/json" }, body: bodyText });
}

/** POST /v1/<method>: the daemon's dispatch table, as every other client calls it. */
export async function call(method, request = {}) {
  return decode(await post(method, JSON.stringify(request)));
}

/** The same call with the JSON text passed through untouched both ways. Fixtures need it:
 * their hashes cover canonical JSON, and a JavaScript round trip would turn 1.0 into 1. */
export async function callText(method, bodyText) {
  const reply = await post(method, bodyText);
  if (!reply.ok) return decode(reply); // throws the ApiError
  return reply.text();
}

/** GET a UI-only view (``/ui/api/...``). */
export async function view(path) {
  return decode(await fetchApi(path));
}

/** GET a UI-only file (``/ui/api/...``) and save it as the server names it: the bytes as sent
 * (a Blob, no JSON round trip). A plain link cannot carry the header, so the download is made
 * from the Blob here. */
export async function download(path) {
  const reply = await fetchApi(path);
  if (!reply.ok) return decode(reply); // throws the ApiError
  const blob = await reply.blob();
  const href = URL.createObjectURL(blob);
  const a = h("a", { href, download: attachmentName(reply.headers.get("content-disposition")), class: "hidden" });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(href), 60_000);
  return blob;
}

/** The file name of a Content-Disposition header: RFC 5987's filename* first, then filename. */
export function attachmentName(header) {
  if (!header) return "";
  const extended = /filename\*=UTF-8''([^;\s]+)/i.exec(header);
  if (extended) {
    try {
      return decodeURIComponent(extended[1]);
    } catch {
      // a malformed escape: fall back to the plain name
    }
  }
  const plain = /filename="([^"]*)"/i.exec(header);
  return plain ? plain[1] : "";
}

// -- DOM -----------------------------------------------------------------------------------
export function h(tag, props, ...children) {
  const el = document.createElement(tag);
  setProps(el, props);
  append(el, children);
  return el;
}

const SVG_NS = "http://www.w3.org/2000/svg";
export function s(tag, props, ...children) {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (v !== null && v !== undefined && v !== false) el.setAttribute(k, String(v));
  }
  append(el, children);
  return el;
}

function setProps(el, props) {
  for (const [k, v] of Object.entries(props || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") el.className = v;
    else if (k === "text") el.textContent = v;
    else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "dataset") Object.assign(el.dataset, v);
    else if (k in el && typeof v !== "string") el[k] = v;
    else el.setAttribute(k, v === true ? "" : String(v));
  }
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

/** Replace ``el``'s children (null and false children are skipped, as in ``h``). */
export function fill(el, ...children) {
  clear(el);
  append(el, children);
  return el;
}

export function clear(el) {
  while (el.firstChild) el.firstChild.remove();
  return el;
}

/** A panel headed by an h2 (``${id}-h``, which labels it) on one row with its ``actions``
 * (buttons, a filter), then ``children``: every panel with actions is laid out here. */
export function actionPanel(id, title, actions, ...children) {
  return h("section", { class: "panel", "aria-labelledby": `${id}-h` },
    h("div", { class: "row spread" }, h("h2", { id: `${id}-h` }, title), actions), ...children);
}

export function table(headers, rows, props = {}) {
  const head = h("tr", null, headers.map((c) => {
    const spec = typeof c === "string" ? { text: c } : c;
    const cls = [spec.num ? "num" : null, spec.class].filter(Boolean).join(" ") || null;
    return h("th", { scope: "col", class: cls, title: spec.title }, spec.text);
  }));
  return h("div", { class: "table-wrap" }, h("table", props, h("thead", null, head), h("tbody", null, rows)));
}

export function facts(pairs) {
  return h("dl", { class: "facts" }, pairs.filter(Boolean).map(([k, v]) => [h("dt", null, k), h("dd", null, v)]));
}

export function link(href, text, props = {}) {
  return h("a", { href, ...props }, text);
}

// -- formatting ----------------------------------------------------------------------------
export function fmtNum(value, digits = 3) {
  if (value === null || value === undefined) return "—";
  if (Number.isInteger(value)) return String(value);
  return Number(value).toFixed(digits);
}

export function fmtMs(value) {
  if (value === null || value === undefined) return "—";
  if (value >= 100) return `${Math.round(value)} ms`;
  return value >= 1 ? `${Number(value).toFixed(1)} ms` : `${Number(value).toFixed(2)} ms`;
}

export function fmtBytes(value) {
  if (value === null || value === undefined) return "—";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let v = value;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i += 1;
  }
  return i === 0 ? `${v} B` : `${v.toFixed(1)} ${units[i]}`;
}

export function fmtTime(iso) {
  if (!iso) return "—";
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return iso;
  return d.toLocaleString(undefined, { dateStyle: "medium", timeStyle: "medium" });
}

export function fmtDuration(seconds) {
  const s = Math.floor(seconds);
  const parts = [[Math.floor(s / 86400), "d"], [Math.floor((s % 86400) / 3600), "h"],
    [Math.floor((s % 3600) / 60), "m"], [s % 60, "s"]];
  const shown = parts.filter(([n], i) => n > 0 || i === 3);
  return shown.slice(0, 2).map(([n, u]) => `${n}${u}`).join(" ");
}

export function short(hash, n = 12) {
  return hash ? h("code", { title: hash }, hash.slice(0, n)) : "—";
}

export function statusBadge(status) {
  const kind = { succeeded: "ok", failed: "bad", running: "warn" }[status] || "muted";
  return h("span", { class: `badge ${kind}` }, status);
}

// -- notices and dialogs -------------------------------------------------------------------
const notice = () => document.getElementById("notice");

export function say(text, kind = "ok") {
  fill(notice(), h("div", { class: `msg ${kind}`, role: kind === "error" ? "alert" : null }, text));
}

export function unsay() {
  clear(notice());
}

/** A button that runs one long call (a tuning, a learning): disabled while it runs, with ``busy``
 * said meanwhile; ``run`` makes the call and draws its result, ``refused(error)`` draws a refusal. */
export function busyButton(id, label, busy, run, refused) {
  const button = h("button", { type: "button", id, onclick: async () => {
    button.disabled = true;
    say(busy);
    try {
      await run();
    } catch (error) {
      refused(error);
    } finally {
      button.disabled = false;
    }
  } }, label);
  return button;
}

export function errorBox(error, title = "The daemon refused the request") {
  const code = error instanceof ApiError ? error.code : "error";
  return h("div", { class: "msg error", role: "alert" },
    h("strong", null, title), " ", h("code", null, code), h("div", null, error.message));
}

/** A modal confirmation (a real <dialog>: focus is trapped and Escape cancels). */
export function confirmDialog({ title, body, ok = "Confirm" }) {
  const dialog = document.getElementById("confirm");
  document.getElementById("confirm-title").textContent = title;
  fill(document.getElementById("confirm-body"), body);
  document.getElementById("confirm-ok").textContent = ok;
  dialog.returnValue = "";
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok"), { once: true });
    dialog.showModal();
  });
}
