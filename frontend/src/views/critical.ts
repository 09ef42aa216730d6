// The run's diagnosis in the Distributed view: per step the cross-rank critical path as a list (rank, segment,
// ms) with a button that opens the timeline on it, and the straggler's why / what-if (the `/diagnosis` route).
import { foldRanks } from "../ranks";
import { h, mount } from "../dom";
import { getWhenReady } from "../api";
import { summarizingText } from "../progress";
import { dataTable, Column } from "../table";
import { fmtMs } from "./ledger";
import type { Ctx } from "../ctx";
import type { Mark } from "../timeline/marks";

/** One row of the critical-path list, from a `/diagnosis` segment. */
export interface PathRow { i: number; rank: string; worker: string; segment: string; ms: number | null; start_us: number; end_us: number; kind: string }

/** The worker's rank as text ("2"), else the worker's name. */
function rankText(rank: any, worker: string): string { return typeof rank === "number" ? String(rank) : worker; }

/** `/diagnosis` segments as list rows: work on one rank, or a collective the late rank made the others wait at. */
export function pathRows(segments: any[]): PathRow[] {
  return (Array.isArray(segments) ? segments : []).filter((s) => s && typeof s === "object").map((s, i): PathRow => {
    const start = Number(s.start_us), end = Number(s.end_us);
    if (s.kind === "collective") {
      const w = String(s.late_worker ?? "");
      const waited = typeof s.waiters === "number" && s.waiters > 0
        ? ` · ${s.waiters} rank${s.waiters === 1 ? "" : "s"} waited ${fmtMs(s.wait_ms_median)} (median), ${fmtMs(s.wait_ms_total)} in all` : "";
      return { i, kind: "collective", rank: rankText(s.late_rank, w), worker: w, ms: typeof s.transfer_ms === "number" ? s.transfer_ms : null,
        segment: `late at ${s.name ?? "collective"} #${s.call ?? "?"} on group ${foldRanks(String(s.group ?? s.pg ?? "?"))}${waited} · transfer`, start_us: start, end_us: end };
    }
    const w = String(s.worker ?? "");
    return { i, kind: "work", rank: rankText(s.rank, w), worker: w, ms: typeof s.ms === "number" ? s.ms : null,
      // `before`: the collective that precedes this work on the path (the work runs from its end), so the rows read
      // "late at #1", "work after #1", "late at #2", ... in time order
      segment: "work" + (s.before ? ` after ${foldRanks(String(s.before))}` : "") + (s.why ? ` (${s.why})` : ""), start_us: start, end_us: end };
  });
}

/** The worker with the most milliseconds on the path (the one to open in the timeline first). */
export function mainWorker(rows: PathRow[]): string | null {
  const by = new Map<string, number>();
  for (const r of rows) if (r.worker) by.set(r.worker, (by.get(r.worker) ?? 0) + Math.max(0, r.end_us - r.start_us));
  let best: string | null = null;
  for (const [w, v] of by) if (best === null || v > by.get(best)!) best = w;
  return best;
}

/** The workers on the path, the one with the most time on it first, then in order of first appearance. */
export function pathWorkers(rows: PathRow[]): string[] {
  const main = mainWorker(rows);
  const seen = [...new Set(rows.map((r) => r.worker).filter((w) => w))];
  return main ? [main, ...seen.filter((w) => w !== main)] : seen;
}

/** Buttons that open the timeline of each worker on the path (at most `max`), with its rank as label. */
export function pathWorkerButtons(ctx: Ctx, rows: PathRow[], step: string, skip: string | null, max = 8): HTMLElement[] {
  const ws = pathWorkers(rows).filter((w) => w !== skip);
  const rank = (w: string) => rows.find((r) => r.worker === w)?.rank ?? w;
  return ws.slice(0, max).map((w) => h("button", { type: "button", class: "btn small cpath-rank", "data-worker": w, title: `the timeline of ${w}, its path segments marked`,
    onclick: () => openPathInTimeline(ctx, rows, w, step) }, `rank ${rank(w)}`));
}

/** Opens the timeline of `worker` on the path's time on it, with the path's segments highlighted (`cpath=step`). */
export function openPathInTimeline(ctx: Ctx, rows: PathRow[], worker: string, step: string): void {
  const mine = rows.filter((r) => r.worker === worker && isFinite(r.start_us) && isFinite(r.end_us));
  const q = new URLSearchParams({ run: ctx.run, worker, span: ctx.span, view: "timeline", cpath: step });
  if (mine.length) {
    const lo = Math.min(...mine.map((r) => r.start_us)), hi = Math.max(...mine.map((r) => r.end_us));
    const pad = Math.max(1, (hi - lo) * 0.02);
    q.set("win", `${(lo - pad).toFixed(3)},${(hi + pad).toFixed(3)}`);
  }
  const u = new URL(location.href);
  u.hash = "#" + q.toString();
  location.assign(u.href);
}

/** The path's summary as a list in time order, one item per run of segments on one rank (its work, where it came
 * late, who waited): `/diagnosis`'s `path_parts` (else its `path` text as one item); null when there is none. */
export function pathSummary(step: any): HTMLElement | null {
  const parts: string[] = Array.isArray(step?.path_parts) ? step.path_parts.map(String).filter((x: string) => x)
    : typeof step?.path === "string" && step.path ? [step.path] : [];
  return parts.length ? h("ol", { class: "cpath-text", id: "cpath-text", "aria-label": "the path in words, in time order" },
    parts.map((x) => h("li", null, x))) : null;
}

/** The critical-path section: a step picker (the chosen Distributed step, else the step a fix would save most in). */
export async function criticalPathSection(ctx: Ctx, box: HTMLElement, step: string): Promise<void> {
  mount(box, h("h3", null, "Critical path across ranks"), h("p", { class: "muted" }, "loading…"));
  let d: any;
  try {
    d = await getWhenReady<any>("diagnosis", { run: ctx.run, span: ctx.span }, ctx.alive, { onPending: (p) => mount(box, h("h3", null, "Critical path across ranks"),
      h("p", { class: "muted", id: "cpath-pending", role: "status" }, summarizingText(p))) });
  } catch (e) { if (ctx.alive()) mount(box, h("h3", null, "Critical path across ranks"), h("div", { class: "banner" }, (e as Error).message)); return; }
  if (!d) return;
  const steps: any[] = Array.isArray(d?.steps) ? d.steps.filter((s: any) => s && typeof s === "object") : [];
  const notes: string[] = Array.isArray(d?.notes) ? d.notes.map(String) : [];
  const noteList = notes.length ? h("ul", { class: "recs muted" }, notes.map((n) => h("li", null, n))) : null;
  if (!steps.length) {
    mount(box, h("h3", null, "Critical path across ranks"), h("div", { class: "banner info", id: "cpath-none" },
      typeof d?.reason === "string" ? `No critical path: ${d.reason}` : "No critical path: no collective links the ranks in this span."), noteList);
    return;
  }
  const names = steps.map((s) => String(s.step));
  const worst = typeof d?.worst?.step === "string" ? d.worst.step : null;
  const want = ctx.get("cstep") ?? (step && names.includes(step) ? step : worst ?? names[0]);
  const cur = steps[Math.max(0, names.indexOf(want))];
  const stepName = String(cur.step);
  const rows = pathRows(cur.segments);
  const sel = h("select", { id: "cpath-step", "aria-label": "critical path of step" },
    names.map((s) => h("option", { value: s }, `Step ${s}` + (s === worst ? " (most to win)" : "")))) as HTMLSelectElement;
  sel.value = stepName;
  sel.addEventListener("change", () => { ctx.set("cstep", sel.value); void criticalPathSection(ctx, box, step); });
  const main = mainWorker(rows);
  const open = main ? h("button", { type: "button", class: "btn small", id: "cpath-open-timeline",
    title: "the timeline of the rank with the most time on the path, its path segments highlighted",
    onclick: () => openPathInTimeline(ctx, rows, main, stepName) }, `Open the path in the timeline (${main})`) : null;
  const st = cur.straggler && typeof cur.straggler === "object" ? cur.straggler : null;
  mount(box, h("h3", null, "Critical path across ranks"),
    h("div", { class: "toolbar" }, h("label", null, "Step ", sel), open, pathWorkerButtons(ctx, rows, stepName, main),
      h("span", { class: "muted" }, `step ${fmtMs(cur.step_ms)} (median over the ranks)`)),
    pathSummary(cur),
    st ? h("p", { id: "cpath-straggler" }, h("strong", null, `Straggler: ${st.worker}`),
      ` ${fmtMs(st.excess_ms)} busier than the median rank (${st.median_worker ?? "–"})` + (st.why ? `: ${st.why}` : "") +
      `. At the median the step would take ${fmtMs(st.what_if_ms)} instead of ${fmtMs(st.step_ms)}.`) : null,
    h("div", { id: "cpath-list" }, dataTable([
      { key: "i", label: "#", numeric: true, fmt: (v) => String(v + 1) },
      { key: "rank", label: "Rank" },
      { key: "segment", label: "Segment", wrap: true },
      { key: "ms", label: "ms", numeric: true, fmt: (v) => fmtMs(v), title: "work: its time on the rank; collective: its transfer time" },
    ] as Column<PathRow>[], rows, { caption: `The path of step ${stepName}, in time order`, filterKeys: ["rank", "segment"], sortKey: "i", sortDesc: false,
      pageSize: 25, exportName: `critical-path-${ctx.run}-step${stepName}` })),
    noteList);
}

/** The path segments on one worker as timeline marks (its work, and the collectives it arrived last at), the
 * ranks on the path, and the ms of work on this worker. */
export function pathMarks(segments: any, worker: string): { marks: Mark[]; ranks: string[]; ms: number } {
  const rows = pathRows(Array.isArray(segments) ? segments : []);
  const ranks = [...new Set(rows.map((r) => r.rank))];
  const mine = rows.filter((r) => r.worker === worker && isFinite(r.start_us) && isFinite(r.end_us) && r.end_us >= r.start_us);
  const ms = mine.filter((r) => r.kind === "work").reduce((a, r) => a + (r.ms ?? 0), 0);
  return { marks: mine.map((r) => ({ a: r.start_us, b: r.end_us, label: `#${r.i + 1} ${r.segment}` })), ranks, ms };
}
