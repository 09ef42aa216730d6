// Distributed: all workers at once (readable at 2 and at 256): a step selector, per-worker bars, a
// step × worker heatmap with drill-down into one worker's step, stragglers, collectives with bandwidth.
import { foldRanks } from "../ranks";
import { pendingNames, summarizingText } from "../progress";
import { h, mount, fmtUs, fmtNum, fmtBytes, fmtPct } from "../dom";
import { getJSON, getWhenReady } from "../api";
import { stackedBarsMany, heatmap } from "../charts";
import { dataTable, Column } from "../table";
import { segmented } from "./widgets";
import { criticalPathSection } from "./critical";
import { pipelineSection } from "./pipeline";
import { flightSection } from "./flight";
import { fmtMs } from "./ledger";
import { diagnosisHead } from "./verdict";
import type { Ctx } from "../ctx";

const PARTS: [string, string, string][] = [["computation_us", "Computation", "#4e79a7"], ["overlap_us", "Overlapping", "#76b7b2"], ["communication_us", "Communication", "#e15759"], ["other_us", "Other", "#bab0ac"]];
const WAIT: [string, string, string][] = [["transfer_us", "Data transfer", "#59a14f"], ["wait_us", "Synchronizing (wait)", "#edc948"]];
const METRICS: [string, string][] = [["computation", "Computation"], ["communication", "Communication"], ["wait", "Wait"]];
type Parts = Record<string, number>;
const BUSBW_TITLE = "bus bandwidth (NCCL-tests): bandwidth x 2(n-1)/n for all-reduce, (n-1)/n for all-gather, reduce-scatter and all-to-all, 1 for broadcast, reduce, send and recv";
const LATENCY_TITLE = "far slower than its bytes need: at most 64 KiB taking 100 us or more per call";
const fmtGbps = (v: any): string => (typeof v === "number" ? `${fmtNum(v)} GB/s` : "–");
const fmtYesNo = (v: any): string => (v === true ? "yes" : v === false ? "no" : "–");
const MAX_CELLS = 16384; // heatmap cells drawn at once (SVG stays responsive)

/** The value a heatmap cell shows: all computation (alone + overlapped), all communication, or wait. */
function metricOf(p: Parts | undefined, metric: string): number {
  if (!p) return NaN;
  const n = (k: string) => (typeof p[k] === "number" ? p[k] : 0);
  if (metric === "communication") return n("communication_us") + n("overlap_us");
  if (metric === "wait") return n("wait_us");
  return n("computation_us") + n("overlap_us");
}

/** "node3_rank00025" → "r25": short worker labels for axes with many workers. */
function workerLabel(w: string): string {
  const m = /rank[_-]?0*(\d+)$/i.exec(w);
  return m ? "r" + m[1] : w;
}

function obj(v: any): Record<string, any> { return v && typeof v === "object" && !Array.isArray(v) ? v : {}; }

let pollToken = 0;

export async function distributedView(ctx: Ctx, el: HTMLElement): Promise<void> {
  // draws what is known at once, then again as more workers' traces are read; resolves when complete
  const token = ++pollToken;
  const q = { run: ctx.run, span: ctx.span, partial: 1 };
  // the run's caveats and verdict, above everything (from /diagnosis, which the critical path reads too)
  const head = h("div", { class: "diag-head", id: "diag-head" });
  let headStarted = false;
  const draw = (x: any, pending: string[]) => {
    if (!headStarted && Object.keys(obj(x?.workers)).length + pending.length > 1) { headStarted = true; void diagnosisHead(ctx, head); }
    return drawDistributed(ctx, el, x, pending, head);
  };
  const d = await getWhenReady<any>("distributed", q, () => ctx.alive() && token === pollToken,
    { onPending: (p) => draw(p, p.pending.map(String)) });
  if (d) return draw(d, []);
}

async function drawDistributed(ctx: Ctx, el: HTMLElement, d: any, pending: string[], head: HTMLElement): Promise<void> {
  const pendingBox = pending.length ? h("div", { class: "banner info", id: "dist-pending", role: "status" },
    summarizingText(d), h("br"), "The view fills in as they are read; still reading: ", pendingNames(pending)) : null;
  const workers = obj(d?.workers);
  // workers in rank order (names as "node10_rank00080" sort badly as text)
  const devs = obj(d?.devices);
  const rankOf = (w: string): number => (typeof devs[w]?.rank === "number" ? devs[w].rank : Infinity);
  const names = Object.keys(workers).sort((a, b) => (rankOf(a) - rankOf(b)) || a.localeCompare(b, undefined, { numeric: true }));
  const commOps = obj(d?.comm_ops);
  const hasComm = names.some((w) => Array.isArray(commOps[w]) && commOps[w].length);
  const notes: string[] = Array.isArray(d?.notes) ? d.notes.map(String) : [];
  if (pending.length && names.length < 2) {
    mount(el, head, pendingBox, names.length ? h("p", { class: "muted", id: "dist-ready-workers" }, "Read so far: ", names.join(", ")) : null);
    return;
  }
  if (!names.length || (names.length === 1 && !hasComm)) {
    mount(el, h("div", { class: "banner info", id: "no-distributed" },
      names.length === 1 ? `No distributed information: this run has a single worker (${names[0]}) without communication.`
        : "No distributed information: no worker of this run can be read."));
    return;
  }
  const steps = obj(d?.steps);
  const stepNames = Object.keys(steps);
  let step = ctx.get("step") ?? "";
  if (step && !stepNames.includes(step)) step = "";
  let dw = ctx.get("dworker") ?? "";
  if (dw && !names.includes(dw)) dw = "";
  const metric = METRICS.some(([m]) => m === ctx.get("metric")) ? ctx.get("metric")! : "wait";
  const cellKey = ctx.get("cell") ?? "";
  const rerender = () => void distributedView(ctx, el);

  // traces without ProfilerStep: their one step "0" is the whole trace window (the `no_steps` caveat), not a step
  const noSteps = stepNames.length === 1 && Array.isArray(d?.caveats) && d.caveats.some((c: any) => c?.key === "no_steps");
  const stepSel = h("select", { id: "dist-step", "aria-label": "step" },
    h("option", { value: "" }, noSteps ? "Whole trace" : "All steps (mean)"),
    stepNames.map((s) => h("option", { value: s }, noSteps ? "Whole trace window (no steps)" : `Step ${s}`))) as HTMLSelectElement;
  stepSel.value = step;
  stepSel.addEventListener("change", () => { ctx.set("step", stepSel.value || undefined); rerender(); });
  const workerSel = h("select", { id: "dist-worker", "aria-label": "worker" },
    h("option", { value: "" }, "All"), names.map((w) => h("option", { value: w }, w))) as HTMLSelectElement;
  workerSel.value = dw;
  workerSel.addEventListener("change", () => { ctx.set("dworker", workerSel.value || undefined); rerender(); });
  const toolbar = h("div", { class: "toolbar" }, h("label", null, "Step ", stepSel), h("label", null, "Worker ", workerSel),
    h("span", { class: "muted", id: "dist-counts" }, `${names.length} workers · `
      + (noSteps ? "no steps in the traces (whole trace window)" : `${stepNames.length} ${stepNames.length === 1 ? "step" : "steps"}`)));

  // per-worker bars: the mean step, or the chosen step
  const partsOf = (w: string): Parts => (step ? obj(obj(steps[step])[w]) : obj(workers[w])) as Parts;
  const shown = names.filter((w) => !step || obj(steps[step])[w]);
  const scope = step ? `step ${step}` : "mean per step";
  const bars = stackedBarsMany(shown, PARTS.map(([k, label, color]) => ({ name: label, color, values: shown.map((w) => Number(partsOf(w)[k]) || 0) })), fmtUs,
    { title: `Computation / communication per worker (${scope})`, label: workerLabel, id: "dist-bars", highlight: dw });
  const wait = stackedBarsMany(shown, WAIT.map(([k, label, color]) => ({ name: label, color, values: shown.map((w) => Number(partsOf(w)[k]) || 0) })), fmtUs,
    { title: `Communication: transfer vs wait, per worker (${scope})`, label: workerLabel, id: "dist-wait", highlight: dw });

  // step × worker heatmap; a click drills into that worker's step
  const drill = h("section", { class: "section", id: "dist-drill" });
  let selected: [number, number] | null = null;
  const [cw, cs] = cellKey.split("|");
  if (cw && names.includes(cw) && stepNames.includes(cs)) selected = [stepNames.indexOf(cs), names.indexOf(cw)];
  // at most MAX_CELLS cells: a window of steps around the chosen one (or the first ones)
  const maxRows = Math.max(1, Math.floor(MAX_CELLS / Math.max(1, names.length)));
  const at = step ? stepNames.indexOf(step) : selected ? selected[0] : 0;
  const lo = Math.max(0, Math.min(at - Math.floor(maxRows / 2), stepNames.length - maxRows));
  const rowNames = stepNames.slice(lo, lo + maxRows);
  if (selected) selected = selected[0] >= lo && selected[0] < lo + maxRows ? [selected[0] - lo, selected[1]] : null;
  const values = rowNames.map((s) => names.map((w) => metricOf(obj(steps[s])[w] as Parts, metric)));
  const heat = rowNames.length ? heatmap(rowNames, names, values, fmtUs, {
    id: "dist-heatmap", title: `${METRICS.find(([m]) => m === metric)![1]} per step and worker (click a cell for its detail)`,
    colLabel: workerLabel, selected,
    caption: (metric === "wait" ? "time waiting for the slowest worker in collectives" : "") +
      (rowNames.length < stepNames.length ? ` · steps ${rowNames[0]}–${rowNames[rowNames.length - 1]} of ${stepNames.length} (pick a step to move)` : ""),
    onCell: (i, j) => { ctx.set("cell", `${names[j]}|${rowNames[i]}`); rerender(); },
  }) : h("div", { class: "banner info" }, "No steps recorded.");
  const heatTools = h("div", { class: "toolbar" }, segmented("Heatmap", METRICS, metric, (v) => { ctx.set("metric", v); rerender(); }));

  // stragglers: (worker, step) busy longest over the step's median, why, and the step had it run at the median;
  // a row opens the Diff of that worker against the median worker (the row's button: its heatmap cell)
  const strag: any[] = Array.isArray(d?.stragglers) ? d.stragglers : [];
  const stragTable = strag.length ? h("div", { id: "dist-stragglers" }, dataTable([
    { key: "worker", label: "Worker" }, { key: "step", label: "Step" },
    { key: "excess_us", label: "Excess over median", numeric: true, fmt: fmtUs },
    { key: "why", label: "Why", wrap: true, fmt: (v) => (v ? String(v) : "–"), title: "where its step's time exceeds the median rank's" },
    { key: "what_if_ms", label: "Step at the median", numeric: true, fmt: (v) => fmtMs(v), title: "the step's time had this worker run at the median" },
    { key: "busy_us", label: "Busy", numeric: true, fmt: fmtUs, title: "step time minus its own wait in collectives", optional: true },
    { key: "median_us", label: "Median busy", numeric: true, fmt: fmtUs, optional: true },
    { key: "collective", label: "Collective that waited on it", fmt: (v) => (v ? String(v) : "–") },
    { key: "others_wait_us", label: "Others' wait there", numeric: true, fmt: fmtUs },
  ] as Column[], strag, { caption: "Stragglers (click a row: Diff against the median worker)", filterKeys: ["worker", "why"], sortKey: "excess_us", pageSize: 10,
    onRowClick: (r) => { if (!openDiff(ctx, r)) { ctx.set("cell", `${r.worker}|${r.step}`); rerender(); } },
    actions: (r) => h("button", { type: "button", class: "btn small", title: "this worker's step in the heatmap and its detail",
      onclick: (e: Event) => { e.stopPropagation(); ctx.set("cell", `${r.worker}|${r.step}`); if (step && step !== String(r.step)) ctx.set("step", String(r.step)); rerender(); } }, "step detail") }))
    : h("div", { class: "banner info", id: "dist-stragglers" }, typeof d?.withheld === "string" && d.withheld
      ? "No straggler is claimed: the caveat above withholds the cross-rank claims."
      : names.length > 1 ? "No straggler: no worker is busier than its step's median by 50 µs and 1 % of it or more." : "Stragglers need two workers or more.");

  // wait vs transfer per process group: every member of every group, subgroups included
  const groupRows: any[] = [];
  for (const [g, members] of Object.entries<any>(obj(d?.groups))) for (const [w, v] of Object.entries<any>(obj(members))) {
    const t = Number(v?.transfer_us) || 0, wt = Number(v?.wait_us) || 0;
    groupRows.push({ group: g, worker: w, calls: v?.calls ?? null, transfer_us: t, wait_us: wt, wait_share: t + wt > 0 ? wt / (t + wt) : null });
  }
  const groupTable = groupRows.length ? h("div", { id: "dist-groups" }, dataTable([
    { key: "group", label: "Process group", fmt: (v) => foldRanks(String(v ?? "")) }, { key: "worker", label: "Worker" }, { key: "calls", label: "Calls", numeric: true },
    { key: "transfer_us", label: "Transfer", numeric: true, fmt: fmtUs }, { key: "wait_us", label: "Wait", numeric: true, fmt: fmtUs },
    { key: "wait_share", label: "Wait share", numeric: true, fmt: (v) => (typeof v === "number" ? `${(v * 100).toFixed(1)} %` : "–") },
  ] as Column[], groupRows, { caption: "Wait vs transfer per process group", filterKeys: ["group", "worker"], sortKey: "wait_us", pageSize: 20 }))
    : h("div", { class: "banner info", id: "dist-groups" }, "No collective matched across the members of a process group: no wait/transfer split.");
  const cpath = h("section", { class: "section", id: "dist-cpath" });
  const pipe = h("section", { class: "section", id: "dist-pipeline" });
  const flight = h("section", { class: "section", id: "dist-flight" });

  // collectives per worker (the chosen worker, or all)
  const commRows: any[] = [];
  for (const w of dw ? [dw] : names) for (const r of Array.isArray(commOps[w]) ? commOps[w] : []) commRows.push({ worker: w, ...r });
  const commCols: Column[] = [
    { key: "worker", label: "Worker" }, { key: "name", label: "Name" }, { key: "calls", label: "Calls", numeric: true },
    { key: "total_bytes", label: "Total bytes", numeric: true, fmt: fmtBytes }, { key: "avg_bytes", label: "Mean bytes", numeric: true, fmt: fmtBytes },
    { key: "total_latency_us", label: "Total time", numeric: true, fmt: fmtUs }, { key: "avg_latency_us", label: "Mean time", numeric: true, fmt: fmtUs },
    { key: "transfer_us", label: "Transfer", numeric: true, fmt: fmtUs },
    { key: "bandwidth_gbps", label: "Bandwidth", numeric: true, fmt: fmtGbps, title: "algorithm bandwidth: bytes / transfer time" },
    { key: "busbw_gbps", label: "Bus bandwidth", numeric: true, fmt: fmtGbps, title: BUSBW_TITLE },
    { key: "latency_bound", label: "Latency-bound", fmt: fmtYesNo, title: LATENCY_TITLE },
  ];
  const comm = commRows.length ? h("div", { id: "comm-table" }, dataTable(commCols, commRows,
    { caption: `Collectives${dw ? ` of ${dw}` : " per worker"}`, filterKeys: ["name", "worker"], sortKey: "total_latency_us", pageSize: 20 }))
    : h("div", { class: "banner info", id: "comm-table" }, "No communication operators.");

  const devRows = Object.entries<any>(obj(d?.devices)).map(([w, v]) => {
    const peaks = obj(v?.memory_peak);
    const peak = Math.max(-1, ...Object.entries<any>(peaks).filter(([k]) => k !== "CPU").map(([, x]) => Number(x?.allocated) || -1));
    return {
      worker: w, rank: v?.rank ?? "–", world_size: v?.world_size ?? "–", backend: v?.backend ?? "–",
      gpus: Object.entries<any>(obj(v?.gpus)).map(([g, x]) => `${g}: ${x?.name ?? ""}`).join(", ") || "none",
      step_avg_us: typeof v?.step_avg_us === "number" ? v.step_avg_us : null, memory_peak: peak >= 0 ? peak : null,
      events: typeof v?.events === "number" ? v.events : null,
      mfu: typeof v?.mfu === "number" ? v.mfu : null, hfu: typeof v?.hfu === "number" ? v.hfu : null,
    };
  });
  const devices = devRows.length ? h("div", { id: "dist-devices" }, dataTable([
    { key: "worker", label: "Worker" }, { key: "rank", label: "Rank" }, { key: "world_size", label: "World size" },
    { key: "backend", label: "Backend" }, { key: "gpus", label: "GPUs" },
    { key: "step_avg_us", label: "Mean step", numeric: true, fmt: fmtUs }, { key: "memory_peak", label: "GPU memory peak", numeric: true, fmt: fmtBytes },
    { key: "mfu", label: "MFU", numeric: true, fmt: fmtPct, title: "model FLOPs utilisation: the ops' modelled matrix FLOPs over step time x the GPU's matrix roof" },
    { key: "hfu", label: "HFU", numeric: true, fmt: fmtPct, optional: true, title: "every modelled FLOP over step time x the GPU's matrix roof" },
    { key: "events", label: "Events", numeric: true },
  ] as Column[], devRows, { caption: "Workers", filterKeys: ["worker"], sortKey: "worker", sortDesc: false, pageSize: 20 })) : null;

  const errors: any[] = Array.isArray(d?.errors) ? d.errors : [];
  mount(el, head, pendingBox, toolbar,
    errors.length ? h("div", { class: "banner", id: "dist-errors" }, "Some workers could not be read (the others are shown):",
      h("ul", null, errors.map((e) => h("li", null, `${e?.file ?? e?.worker ?? ""}: ${e?.error ?? ""}`)))) : null,
    h("div", { class: "grid2" }, bars, wait),
    h("section", { class: "section" }, heatTools, heat), drill, stragTable, cpath, pipe, flight, groupTable, comm, devices,
    notes.length ? h("section", { class: "section" }, h("h3", null, "Notes"), h("ul", { class: "recs" }, notes.map((n) => h("li", null, n)))) : null);
  if (selected && !pending.length) await showCell(ctx, drill, names[selected[1]], stepNames[selected[0]]);
  if (!pending.length && names.length > 1) await Promise.all([criticalPathSection(ctx, cpath, step), pipelineSection(ctx, pipe, step), flightSection(ctx, flight)]);
}

/** Opens the Diff view: the median worker of that step as the baseline, the straggler compared with it (the
 * deltas are its excess), in this run and span, on that step. */
function openDiff(ctx: Ctx, r: any): boolean {
  const pair = obj(r?.diff);
  if (typeof pair.worker !== "string" || typeof pair.exp_worker !== "string") return false;
  const worker = pair.worker;
  const q = new URLSearchParams({ run: ctx.run, worker, span: ctx.span, view: "diff", exp_run: ctx.run, exp_worker: pair.exp_worker, exp_span: ctx.span,
    dstep: String(pair.step ?? r.step) });
  const u = new URL(location.href);
  u.hash = "#" + q.toString();
  location.assign(u.href);
  return true;
}

/** The drill-down: one worker's step, its parts and each collective with wait and transfer. */
async function showCell(ctx: Ctx, box: HTMLElement, worker: string, step: string): Promise<void> {
  mount(box, h("h3", null, `${worker} · step ${step}`), h("p", { class: "muted" }, "loading…"));
  let d: any;
  try { d = await getJSON<any>("distributed/step", { run: ctx.run, span: ctx.span, worker, step }, { cache: true }); }
  catch (e) { if (ctx.alive()) mount(box, h("h3", null, `${worker} · step ${step}`), h("div", { class: "banner" }, (e as Error).message)); return; }
  if (!ctx.alive()) return;
  const parts = obj(d?.parts);
  const kv = h("dl", { class: "kv" }, [...PARTS, ...WAIT].map(([k, label]) => [h("dt", null, label), h("dd", { "data-key": k }, fmtUs(parts[k]))]));
  const rows: any[] = Array.isArray(d?.collectives) ? d.collectives : [];
  const open = h("button", { type: "button", class: "btn small", id: "dist-open-timeline",
    onclick: () => {
      const q = new URLSearchParams({ run: ctx.run, worker, span: ctx.span, view: "timeline" });
      if (typeof d?.start_us === "number" && typeof d?.end_us === "number") q.set("win", `${d.start_us.toFixed(3)},${d.end_us.toFixed(3)}`);
      const u = new URL(location.href);
      u.hash = "#" + q.toString();
      location.assign(u.href);
    } }, "Open this step in the timeline");
  mount(box, h("h3", null, `${worker} · step ${step}`),
    h("div", { class: "toolbar" }, open, h("span", { class: "muted" }, `${fmtUs(d?.start_us)} – ${fmtUs(d?.end_us)}`)), kv,
    rows.length ? h("div", { id: "dist-drill-table" }, dataTable([
      { key: "name", label: "Collective" }, { key: "call", label: "Call #", numeric: true },
      { key: "duration_us", label: "Duration", numeric: true, fmt: fmtUs }, { key: "transfer_us", label: "Transfer", numeric: true, fmt: fmtUs },
      { key: "wait_us", label: "Wait", numeric: true, fmt: fmtUs }, { key: "bytes", label: "Bytes", numeric: true, fmt: fmtBytes },
      { key: "bandwidth_gbps", label: "Bandwidth", numeric: true, fmt: fmtGbps, title: "algorithm bandwidth: bytes / transfer time" },
      { key: "busbw_gbps", label: "Bus bandwidth", numeric: true, fmt: fmtGbps, title: BUSBW_TITLE },
      { key: "latency_bound", label: "Latency-bound", fmt: fmtYesNo, title: LATENCY_TITLE },
    ] as Column[], rows, { caption: "Collectives in this step", sortKey: "wait_us", pageSize: 20 })) : h("p", { class: "muted" }, "No collective in this step."));
}
