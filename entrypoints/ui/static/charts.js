// Small inline-SVG charts: stacked bars, horizontal bars, grouped bars and an interval plot.
// Each is a <figure> with a titled, described <svg role="img"> and a text legend; each mark
// carries a <title> so its exact value shows on hover and reaches assistive technology.

import { h, s } from "./lib.js";

let chartSeq = 0;

// A round axis maximum and a tick count that keeps every tick a round number.
const STEPS = [[1, 4], [1.5, 3], [2, 4], [2.5, 5], [4, 4], [5, 5], [10, 5]];

function niceMax(value) {
  return niceAxis(value)[0];
}

function niceAxis(value) {
  if (!(value > 0)) return [1, 4];
  const exp = 10 ** Math.floor(Math.log10(value));
  for (const [m, count] of STEPS) {
    if (m * exp >= value) return [m * exp, count];
  }
  return [10 * exp, 5];
}

function ticks(max, count = 4) {
  return Array.from({ length: count + 1 }, (_, i) => (max * i) / count);
}

function fmtTick(v) {
  if (v === 0) return "0";
  if (Math.abs(v) >= 100) return String(Math.round(v));
  if (Math.abs(v) >= 1) return String(Number(v.toFixed(1)));
  return String(Number(v.toFixed(3)));
}

function frame(title, desc, width, height, body, legend, caption, cls = null) {
  chartSeq += 1;
  const tid = `chart-t${chartSeq}`;
  const did = `chart-d${chartSeq}`;
  const svg = s("svg", { viewBox: `0 0 ${width} ${height}`, role: "img", "aria-labelledby": tid, "aria-describedby": did, class: cls },
    s("title", { id: tid }, title), s("desc", { id: did }, desc), body);
  return h("figure", { class: "chart" }, svg,
    legend && legend.length ? h("ul", { class: "legend" }, legend.map(([cls, label]) =>
      h("li", null, h("span", { class: `swatch ${cls}`, "aria-hidden": "true" }), label))) : null,
    caption ? h("figcaption", null, caption) : null);
}

function yAxis(max, x0, x1, yOf, unit) {
  const count = niceAxis(max)[0] === max ? niceAxis(max)[1] : 4;
  return ticks(max, count).map((t) => s("g", null,
    s("line", { class: "gridline", x1: x0, x2: x1, y1: yOf(t), y2: yOf(t) }),
    s("text", { class: "tick", x: x0 - 6, y: yOf(t) + 4, "text-anchor": "end" }, fmtTick(t) + (t === max && unit ? ` ${unit}` : ""))));
}

/** Columns of stacked segments: ``columns`` = [{label, title, values: {key: number}}]. */
export function stackedBars({ title, desc, keys, labels = {}, columns, unit = "ms", caption }) {
  const W = 760, H = 260, L = 56, R = 12, T = 12, B = 34;
  const totals = columns.map((c) => keys.reduce((a, k) => a + (c.values[k] || 0), 0));
  const max = niceMax(Math.max(0, ...totals));
  const yOf = (v) => T + (H - T - B) * (1 - v / max);
  const band = (W - L - R) / Math.max(columns.length, 1);
  const barW = Math.max(2, Math.min(40, band * 0.7));
  const every = Math.ceil(columns.length / 12);
  const bars = columns.map((c, i) => {
    let acc = 0;
    const x = L + band * i + (band - barW) / 2;
    const segs = keys.map((k, j) => {
      const v = c.values[k] || 0;
      const y1 = yOf(acc + v);
      const rect = s("rect", { class: `c${(j % 10) + 1}`, x, y: y1, width: barW, height: Math.max(0, yOf(acc) - y1) },
        s("title", null, `${c.title || c.label} — ${labels[k] || k}: ${fmtTick(v)} ${unit}`));
      acc += v;
      return rect;
    });
    const label = i % every === 0
      ? s("text", { class: "tick", x: x + barW / 2, y: H - B + 16, "text-anchor": "middle" }, c.label) : null;
    return s("g", null, segs, label);
  });
  const body = [yAxis(max, L, W - R, yOf, unit), s("line", { class: "axis", x1: L, x2: W - R, y1: H - B, y2: H - B }), bars];
  const legend = keys.map((k, j) => [`c${(j % 10) + 1}`, labels[k] || k]);
  return frame(title, desc, W, H, body, legend, caption);
}

/** One bar per row, horizontally: ``rows`` = [{label, value, cls?}]. */
export function hbars({ title, desc, rows, unit = "", caption, format = fmtTick, width = 560 }) {
  const rowH = 24, R = 80, T = 6;
  const L = Math.min(280, 20 + 7.5 * Math.max(4, ...rows.map((r) => String(r.label).length)));
  const W = width, H = T * 2 + rowH * Math.max(rows.length, 1);
  const max = niceMax(Math.max(0, ...rows.map((r) => r.value || 0)));
  const xOf = (v) => L + (W - L - R) * (v / max);
  const body = rows.map((r, i) => {
    const y = T + i * rowH;
    return s("g", null,
      s("text", { x: L - 8, y: y + rowH / 2 + 4, "text-anchor": "end" }, r.label),
      s("rect", { class: r.cls || `c${(i % 10) + 1}`, x: L, y: y + 4, width: Math.max(0, xOf(r.value || 0) - L), height: rowH - 8 },
        s("title", null, `${r.label}: ${format(r.value || 0)}${unit ? ` ${unit}` : ""}`)),
      s("text", { class: "tick", x: xOf(r.value || 0) + 6, y: y + rowH / 2 + 4 }, `${format(r.value || 0)}${unit ? ` ${unit}` : ""}`));
  });
  return frame(title, desc, W, H, [s("line", { class: "axis", x1: L, x2: L, y1: T, y2: H - T }), body], null, caption, "hbars");
}

/** Groups of bars: ``groups`` = [{label, values: {key: number|null}}] over ``keys``. */
export function groupedBars({ title, desc, keys, labels = {}, groups, max = null, caption }) {
  const W = 760, H = 260, L = 48, R = 12, T = 12, B = 34;
  const top = max ?? niceMax(Math.max(0, ...groups.flatMap((g) => keys.map((k) => g.values[k] || 0))));
  const yOf = (v) => T + (H - T - B) * (1 - v / top);
  const band = (W - L - R) / Math.max(groups.length, 1);
  const barW = Math.min(34, (band * 0.8) / keys.length);
  const body = groups.map((g, i) => {
    const x0 = L + band * i + (band - barW * keys.length) / 2;
    return s("g", null, keys.map((k, j) => {
      const v = g.values[k];
      const missing = v === null || v === undefined;
      return s("rect", { class: `c${(j % 10) + 1}`, x: x0 + j * barW, y: yOf(missing ? 0 : v), width: barW - 2,
        height: missing ? 0 : Math.max(0, yOf(0) - yOf(v)) },
      s("title", null, `${g.label} — ${labels[k] || k}: ${missing ? "n/a" : fmtTick(v)}`));
    }), s("text", { x: L + band * i + band / 2, y: H - B + 18, "text-anchor": "middle" }, g.label));
  });
  const legend = keys.map((k, j) => [`c${(j % 10) + 1}`, labels[k] || k]);
  return frame(title, desc, W, H, [yAxis(top, L, W - R, yOf, ""), s("line", { class: "axis", x1: L, x2: W - R, y1: H - B, y2: H - B }), body], legend, caption);
}

/** Point estimates with intervals around zero: ``rows`` = [{label, mean, low, high}]. */
export function intervals({ title, desc, rows, caption }) {
  const rowH = 30, L = 120, R = 20, T = 8, B = 26;
  const W = 760, H = T + B + rowH * Math.max(rows.length, 1);
  const values = rows.flatMap((r) => [r.low, r.high, r.mean]).filter((v) => v !== null && v !== undefined);
  const span = niceMax(Math.max(0.01, ...values.map(Math.abs)));
  const xOf = (v) => L + (W - L - R) * ((v + span) / (2 * span));
  const body = rows.map((r, i) => {
    const y = T + i * rowH + rowH / 2;
    const known = r.mean !== null && r.mean !== undefined;
    return s("g", null,
      s("text", { x: L - 8, y: y + 4, "text-anchor": "end" }, r.label),
      known && r.low !== null ? s("line", { class: "ci", x1: xOf(r.low), x2: xOf(r.high), y1: y, y2: y }) : null,
      known ? s("circle", { class: `c${(i % 10) + 1}`, cx: xOf(r.mean), cy: y, r: 5 },
        s("title", null, `${r.label}: ${fmtTick(r.mean)} ` +
          (r.low === null || r.low === undefined ? "(no interval: too few cases)" : `(95% CI ${fmtTick(r.low)} to ${fmtTick(r.high)})`)))
        : s("text", { class: "tick", x: xOf(0) + 8, y: y + 4 }, "no judged cases"));
  });
  const axis = [-span, -span / 2, 0, span / 2, span].map((t) => s("text", { class: "tick", x: xOf(t), y: H - 8, "text-anchor": "middle" }, fmtTick(t)));
  return frame(title, desc, W, H, [s("line", { class: "zero", x1: xOf(0), x2: xOf(0), y1: T, y2: H - B }), axis, body], null, caption);
}
