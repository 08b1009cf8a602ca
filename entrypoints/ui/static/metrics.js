// The metrics as memory_core/evaluation/metric_registry.py declares them: the UI server puts the
// registry in the page (entrypoints/ui/app.py, page_shell), so a metric registered there shows in
// the tables without a change here. Each entry: [name, label, definition, digits].
const registry = JSON.parse(document.getElementById("metric-registry")?.textContent || "[]");
const entry = (m) => [m.name, m.label, `${m.definition} (${m.source})`, m.digits];

// Metrics of a ranking (judged against the judgments, or of the ranking alone): one column each.
export const METRICS = registry.filter((m) => m.kind !== "returned").map(entry);
// What the source Run returned to the agent (B4's order): docs/evaluation.md.
export const RETURNED_METRICS = registry.filter((m) => m.kind === "returned").map(entry);
