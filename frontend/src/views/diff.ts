// Diff: pick another profile to compare with; aligned operator tree with deltas and a delta table.
import { h, mount, fmtUs, fmtNum, arrowTabs, rove } from "../dom";
import { getJSON, getWhenReady } from "../api";
import { summarizingText } from "../progress";
import { dataTable, Column, genericValue } from "../table";
import { groupedBars } from "../charts";
import { treeTable, TreeNode } from "./tree";
import { shareLink } from "../tburl";
import type { Ctx } from "../ctx";
import { renderJobDiff, JobPair } from "./job_diff";

export async function diffView(ctx: Ctx, el: HTMLElement): Promise<void> {
  const runSel = h("select", { id: "diff-run", "aria-label": "compare with run" }, ctx.runs.map((r) => h("option", { value: r }, r))) as HTMLSelectElement;
  const workerSel = h("select", { id: "diff-worker", "aria-label": "compare with worker" }) as HTMLSelectElement;
  const spanSel = h("select", { id: "diff-span", "aria-label": "compare with span" }) as HTMLSelectElement;
  const out = h("div", { id: "diff-out" });
  mount(el, h("div", { class: "toolbar" }, h("strong", null, "Baseline: "), `${ctx.run} / ${ctx.worker} / span ${ctx.span}`, h("span", { class: "muted" }, " compared with "),
    h("label", null, "Run ", runSel), h("label", null, "Worker ", workerSel), h("label", null, "Span ", spanSel)), out);
  const fill = (sel: HTMLSelectElement, items: string[], want?: string) => { mount(sel, items.map((x) => h("option", { value: x }, x))); sel.value = want && items.includes(want) ? want : items[items.length - 1] ?? ""; };
  runSel.value = ctx.get("exp_run") && ctx.runs.includes(ctx.get("exp_run")!) ? ctx.get("exp_run")! : otherRun(ctx.runs, ctx.run);
  // why the compared run has no worker or span to pair with the baseline (then only the Jobs tab compares)
  let noPair = "";
  const loadWorkers = async () => {
    let ws: string[] = [];
    try { ws = (await getJSON<{ workers: string[] }>("workers", { run: runSel.value }, { cache: true })).workers.map(String); noPair = ""; }
    catch (e) { noPair = `run ${runSel.value}'s workers cannot be listed: ${(e as Error).message}`; }
    if (!ctx.alive()) return;
    if (!ws.length && !noPair) noPair = `run ${runSel.value} has no worker to compare with`;
    fill(workerSel, ws, ctx.get("exp_worker") ?? otherWorker(ws, ctx.worker, runSel.value === ctx.run));
    await loadSpans();
  };
  const loadSpans = async () => {
    let ss: string[] = [];
    if (workerSel.value) {
      try { ss = (await getJSON<{ spans: string[] }>("spans", { run: runSel.value, worker: workerSel.value }, { cache: true })).spans.map(String); noPair = ""; }
      catch (e) { noPair = `worker ${workerSel.value}'s spans cannot be listed: ${(e as Error).message}`; }
      if (!ctx.alive()) return;
    }
    const want = ctx.get("exp_span") ?? (runSel.value === ctx.run && workerSel.value === ctx.worker ? ss.find((x) => x !== ctx.span) : undefined);
    fill(spanSel, ss, want);
    await compare();
  };
  const compare = async () => {
    ctx.set("exp_run", runSel.value); ctx.set("exp_worker", workerSel.value || undefined); ctx.set("exp_span", spanSel.value || undefined);
    if (runSel.value === ctx.run && workerSel.value === ctx.worker && spanSel.value === ctx.span) {
      mount(out, h("div", { class: "banner info", id: "diff-same" }, ctx.runs.length > 1 || workerSel.options.length > 1 || spanSel.options.length > 1
        ? "This is the baseline itself: pick another run, worker or span to compare with."
        : "There is only one profile in the log directory: add another run to compare with."));
      return;
    }
    const exp = { run: runSel.value, worker: workerSel.value, span: spanSel.value };
    const q = { ...ctx.sel(), exp_run: exp.run, exp_worker: exp.worker, exp_span: exp.span };
    // the tabs come at once: the worker pair's diff loads in its own tab (and may fail there), while the job-level
    // comparison of the two runs needs no worker pair
    const why = !exp.worker || !exp.span ? noPair || `run ${exp.run} has no worker to compare with` : "";
    const tabs = diffTabs(ctx, q, exp, why);
    mount(out, tabs.el);
    await tabs.ready;
  };
  runSel.addEventListener("change", () => { ctx.set("exp_worker", undefined); ctx.set("exp_span", undefined); void loadWorkers().catch(showErr); });
  workerSel.addEventListener("change", () => { ctx.set("exp_span", undefined); void loadSpans().catch(showErr); });
  spanSel.addEventListener("change", () => void compare().catch(showErr));
  const showErr = (e: Error) => { if (ctx.alive()) mount(out, h("div", { class: "banner" }, e.message)); };
  await loadWorkers();
}

/** The run to compare with by default: the one listed before the baseline's, else after it, else itself. */
export function otherRun(runs: string[], run: string): string {
  const i = runs.indexOf(run);
  if (i > 0) return runs[i - 1];
  return runs.find((r) => r !== run) ?? run;
}

/** The worker to compare with by default: in the baseline's own run another one; elsewhere the same name. */
export function otherWorker(workers: string[], worker: string, sameRun: boolean): string | undefined {
  if (sameRun) return workers.find((w) => w !== worker) ?? worker;
  return workers.includes(worker) ? worker : workers[0];
}

const sgn = (v: any) => (typeof v === "number" ? (v > 0 ? "+" : "") + fmtUs(v) : "–");
const sgnN = (v: any) => (typeof v === "number" ? (v > 0 ? "+" : "") + fmtNum(v) : "–");

/** base/exp/delta sub-objects flattened into base_k / exp_k / delta_k fields. */
function flat(x: any, keys: string[]): Record<string, number | null> {
  const o: Record<string, number | null> = {};
  for (const k of keys) for (const side of ["base", "exp", "delta"]) o[`${side}_${k}`] = typeof x?.[side]?.[k] === "number" ? x[side][k] : null;
  return o;
}

/** One step of two workers of the same run and span (the Distributed view's straggler against the median worker):
 * each one's step length and busy time (the step less its own wait in collectives, as the straggler table
 * counts it), from `/distributed/step`. */
export interface StepBusy { base: { worker: string; length_us: number; busy_us: number }; exp: { worker: string; length_us: number; busy_us: number } }

/** The step's length and busy time on both sides, or null when they are not two workers of one run and span or
 * the run's summaries do not answer (the headline then says the step's own times from the diff). */
async function stepBusy(ctx: Ctx, exp: { run: string; worker: string; span: string }, step: string): Promise<StepBusy | null> {
  if (exp.run !== ctx.run || exp.span !== ctx.span || !exp.worker || exp.worker === ctx.worker) return null;
  const one = async (worker: string) => {
    const d = await getJSON<any>("distributed/step", { run: ctx.run, span: ctx.span, worker, step }, { cache: true });
    const len = Number(d?.end_us) - Number(d?.start_us), wait = Number(d?.parts?.wait_us) || 0;
    if (!isFinite(len)) throw new Error("no step bounds");
    return { worker, length_us: len, busy_us: len - wait };
  };
  try { const [b, e] = await Promise.all([one(ctx.worker), one(exp.worker)]); return { base: b, exp: e }; }
  catch { return null; }
}

const pct = (d: number, b: number) => (b ? ` (${d > 0 ? "+" : ""}${((d / b) * 100).toFixed(1)} %)` : "");

/** The headline of a diff opened on one step: that step's difference, not the whole window's. Two workers of one
 * run wait for each other at their collectives, so their steps last alike: the busy time says the straggler's
 * excess (a 4 ms straggler read +0.3 % in the window's host time). */
export function stepHeadline(step: string, row: any, busy: StepBusy | null): HTMLElement {
  const parts: (HTMLElement | string)[] = [h("strong", null, `Step ${step}: `)];
  const delta = (e: number, b: number) => h("span", { class: e > b ? "pos" : e < b ? "neg" : "", id: "diff-step-delta" }, sgn(e - b) + pct(e - b, b));
  if (busy) {
    const { base: b, exp: e } = busy;
    parts.push(delta(e.busy_us, b.busy_us), ` busy (the step less its wait in collectives) on ${e.worker}: ${fmtUs(e.busy_us)} against ${fmtUs(b.busy_us)} on ${b.worker}, the baseline. ` +
      `Its step lasts ${fmtUs(e.length_us)} against ${fmtUs(b.length_us)}: the ranks wait for each other.`);
  } else if (row) {
    const b = Number(row.base?.host_us), e = Number(row.exp?.host_us);
    parts.push(delta(e, b), ` step time: ${fmtUs(e)} compared, ${fmtUs(b)} on the baseline.`);
  } else parts.push(`the baseline has no aligned step ${step}.`);
  return h("div", { class: "banner info", id: "diff-step-head", role: "status" }, parts);
}

/** The backend's diff answer: totals, aligned steps -> phases -> ops, and the op delta table. */
function renderAligned(d: any, step?: string, busy: StepBusy | null = null): HTMLElement {
  const tk = ["host_us", "device_us", "calls"];
  const b = d.base ?? {}, e = d.exp ?? {};
  const cards = h("div", { class: "cards" }, ["host_us", "device_us", "calls"].map((k) => {
    const dv = (e[k] ?? 0) - (b[k] ?? 0);
    const f = k === "calls" ? fmtNum : fmtUs;
    return h("section", { class: "card" }, h("h3", null, k === "host_us" ? "Host time" : k === "device_us" ? "Device time" : "Operator calls"),
      h("dl", { class: "kv" }, h("dt", null, "Baseline"), h("dd", null, f(b[k])), h("dt", null, "Compared"), h("dd", null, f(e[k])),
        h("dt", null, "Delta"), h("dd", { class: dv > 0 ? "pos" : dv < 0 ? "neg" : "" }, (k === "calls" ? sgnN : sgn)(dv), b[k] ? ` (${((dv / b[k]) * 100).toFixed(1)} %)` : "")));
  }));
  const phases: any[] = Array.isArray(d.phases) ? d.phases : [];
  const chart = phases.length ? groupedBars(phases.map((p) => String(p.phase)), [
    { name: "Baseline host", values: phases.map((p) => p.base?.host_us ?? 0), color: "#4e79a7" },
    { name: "Compared host", values: phases.map((p) => p.exp?.host_us ?? 0), color: "#f28e2b" },
    { name: "Baseline device", values: phases.map((p) => p.base?.device_us ?? 0), color: "#76b7b2" },
    { name: "Compared device", values: phases.map((p) => p.exp?.device_us ?? 0), color: "#edc948" }], fmtUs, { title: "Time per phase (all aligned steps)" }) : null;
  const opNode = (o: any): TreeNode => ({ name: String(o.name), ...flat({ base: { host_us: o.base?.host_total_us, device_us: o.base?.device_total_us, calls: o.base?.calls }, exp: { host_us: o.exp?.host_total_us, device_us: o.exp?.device_total_us, calls: o.exp?.calls }, delta: { host_us: o.delta?.host_total_us, device_us: o.delta?.device_total_us, calls: o.delta?.calls } }, tk) });
  const phaseNode = (p: any): TreeNode => ({ name: String(p.phase), ...flat(p, tk), children: (p.ops ?? []).map(opNode) });
  const steps: any[] = Array.isArray(d.steps) ? d.steps : [];
  const roots: TreeNode[] = steps.map((st) => ({ name: `step ${st.base_step ?? "–"} ↔ ${st.exp_step ?? "–"}`, ...flat(st, tk), children: (st.phases ?? []).map(phaseNode) }));
  // a link to one step (the Distributed view's straggler at that step): only its row open, marked
  const fi = step === undefined ? -1 : steps.findIndex((st) => String(st.base_step) === step);
  const cols: Column[] = [{ key: "name", label: "Step / phase / operator" },
    { key: "base_host_us", label: "Base host", numeric: true, fmt: fmtUs }, { key: "exp_host_us", label: "Exp host", numeric: true, fmt: fmtUs }, { key: "delta_host_us", label: "Δ host", numeric: true, fmt: sgn },
    { key: "base_device_us", label: "Base device", numeric: true, fmt: fmtUs }, { key: "exp_device_us", label: "Exp device", numeric: true, fmt: fmtUs }, { key: "delta_device_us", label: "Δ device", numeric: true, fmt: sgn },
    { key: "base_calls", label: "Base calls", numeric: true }, { key: "exp_calls", label: "Exp calls", numeric: true }, { key: "delta_calls", label: "Δ calls", numeric: true, fmt: sgnN }];
  const ops: any[] = Array.isArray(d.ops) ? d.ops : [];
  const okeys = ["calls", "host_self_us", "host_total_us", "device_self_us", "device_total_us"];
  const rows: Record<string, any>[] = ops.map((o) => ({ name: String(o.name), ...flat(o, okeys) }));
  const ocols: Column[] = [{ key: "name", label: "Operator" }, ...okeys.flatMap((k) => ["base", "exp", "delta"].filter((side) => side === "delta" || k === "calls" || k === "host_total_us").map((side) => ({
    key: `${side}_${k}`, label: `${side === "delta" ? "Δ" : side === "base" ? "Base" : "Exp"} ${k.replace(/_us$/, "").replace(/_/g, " ")}`, numeric: true,
    fmt: k === "calls" ? (side === "delta" ? sgnN : fmtNum) : side === "delta" ? sgn : fmtUs })))];
  const notes: string[] = Array.isArray(d.notes) ? d.notes.map(String) : [];
  return h("div", null, step !== undefined ? stepHeadline(step, fi >= 0 ? steps[fi] : null, busy) : null,
    step !== undefined ? h("p", { class: "muted" }, "The whole window compared:") : null, cards, chart,
    h("h3", null, "Aligned steps, phases and operators"),
    step !== undefined ? h("p", { class: "muted", id: "diff-step-note" }, fi >= 0 ? `Step ${step} of the baseline is open and marked.` : `The baseline has no aligned step ${step}.`) : null,
    collapsedTree(cols, roots, fi >= 0 ? roots[fi] : undefined),
    h("div", { id: "diff-table", style: "margin-top:12px" }, dataTable(ocols, rows, { caption: "Operator deltas (largest change first)", rowClass: (r) => (r.delta_host_total_us > 0 ? "pos" : r.delta_host_total_us < 0 ? "neg" : "") })),
    notes.length ? h("ul", { class: "recs muted" }, notes.map((n) => h("li", null, n))) : null);
}

/** Steps shown in the aligned tree before "Show all". */
const STEP_ROOTS = 10;

/** The aligned tree with its first STEP_ROOTS steps, and a button for all of them when there are more. */
function collapsedTree(cols: Column[], roots: TreeNode[], focus?: TreeNode): HTMLElement {
  const box = h("div", { id: "diff-tree-box" });
  const draw = (all: boolean) => mount(box, treeTable(cols, all ? roots : roots.slice(0, STEP_ROOTS), 1, "diff-tree", focus),
    all ? null : h("p", { class: "muted" }, `The first ${STEP_ROOTS} of ${roots.length} aligned steps. `,
      h("button", { type: "button", class: "btn small", id: "diff-tree-all", onclick: () => draw(true) }, `Show all ${roots.length} steps`)));
  draw(roots.length <= STEP_ROOTS + 2 || (focus !== undefined && roots.indexOf(focus) >= STEP_ROOTS));
  return box;
}

/** The `/diff` answer (its shape is the route's: docs/http-api.md), else what came, as it is. */
function renderDiff(d: any, step?: string, busy: StepBusy | null = null): HTMLElement {
  return d && typeof d === "object" && Array.isArray(d.steps) && d.base && d.exp ? renderAligned(d, step, busy) : h("div", null, genericValue(d));
}

/** The diff's tabs: steps/phases/operators (the answer of /diff), kernels (/diff/kernels) and the whole job's ranks
 * (/jobdiff of the two runs), each fetched when first shown; the tab is kept in the URL as `diff_tab`. `noPair`:
 * why there is no worker pair to compare (then the first two tabs say so, and the Jobs tab still compares the runs);
 * a worker pair's failing diff shows in its tab, the others stay usable. */
function diffTabs(ctx: Ctx, q: Record<string, string>, exp: { run: string; worker: string; span: string }, noPair: string): { el: HTMLElement; ready: Promise<void> } {
  const ops = h("div", { id: "diff-ops" });
  const kbox = h("div", { id: "diff-kernels" });
  const jbox = h("div", { id: "diff-jobs" });
  const loaded = new Set<string>();
  const tabOps = h("button", { type: "button", class: "tab", role: "tab", id: "diff-tab-ops" }, "Steps and operators");
  const tabK = h("button", { type: "button", class: "tab", role: "tab", id: "diff-tab-kernels" }, "Kernels");
  const tabJ = h("button", { type: "button", class: "tab", role: "tab", id: "diff-tab-jobs", title: "every rank of the two runs, from their summaries" }, "Jobs (all ranks)");
  const load = (box: HTMLElement, what: string, fetch: () => Promise<HTMLElement>, then?: () => void): Promise<void> => {
    if (noPair && box !== jbox) {
      mount(box, h("div", { class: "banner info", "data-nopair": "1" }, `No worker pair to compare: ${noPair}. The Jobs (all ranks) tab compares every rank of the two runs.`));
      return Promise.resolve();
    }
    mount(box, h("p", { class: "muted" }, what));
    return fetch().then((el) => { if (ctx.alive()) { mount(box, el); then?.(); } })
      .catch((e: Error) => {
        if (!ctx.alive()) return;
        mount(box, h("div", { class: "banner", "data-failed": "1" }, e.message,
          box === jbox ? null : h("span", null, " · ", h("a", { href: "#", class: "diff-to-jobs", onclick: (ev: Event) => { ev.preventDefault(); show("jobs"); } }, "compare every rank of the two runs (Jobs tab)"))));
      });
  };
  const show = (which: string): Promise<void> => {
    ctx.set("diff_tab", which === "ops" ? undefined : which);
    tabOps.setAttribute("aria-selected", String(which === "ops"));
    tabK.setAttribute("aria-selected", String(which === "kernels"));
    tabJ.setAttribute("aria-selected", String(which === "jobs"));
    ops.hidden = which !== "ops";
    kbox.hidden = which !== "kernels";
    jbox.hidden = which !== "jobs";
    rove(nav);
    if (loaded.has(which)) return Promise.resolve();
    loaded.add(which);
    if (which === "ops") return load(ops, "comparing…", async () => {
      const step = ctx.get("dstep");
      const [d, busy] = await Promise.all([getJSON<any>("diff", q, { cache: true }), step === undefined ? null : stepBusy(ctx, exp, step)]);
      return renderDiff(d, step, busy);
    },
      // a step's diff: its headline in sight (the step's row is marked in the tree below)
      () => { const head = ops.querySelector("#diff-step-head"); if (head) head.scrollIntoView({ block: "nearest" }); else ops.querySelector("#tree-focus")?.scrollIntoView({ block: "center" }); });
    if (which === "kernels") return load(kbox, "comparing kernels…", async () => renderKernelDiff(ctx, await getJSON<any>("diff/kernels", q, { cache: true }), exp));
    if (which === "jobs") {
      // with no worker pair there is no span chosen: each worker's first span, as the route's default
      const pair: JobPair = { run: ctx.run, span: ctx.span, exp_run: exp.run, exp_span: exp.span || "1" };
      return load(jbox, "comparing every rank of the two runs…", async () => {
        const d = await getWhenReady<any>("jobdiff", { ...pair }, ctx.alive,
          { onPending: (p) => mount(jbox, h("p", { class: "muted", id: "jobdiff-pending", role: "status" }, summarizingText(p))) });
        return d ? renderJobDiff(d, pair) : h("div");
      });
    }
    return Promise.resolve();
  };
  tabOps.addEventListener("click", () => show("ops"));
  tabK.addEventListener("click", () => show("kernels"));
  tabJ.addEventListener("click", () => show("jobs"));
  const nav = h("nav", { class: "tabs", role: "tablist", id: "diff-tabs" }, tabOps, tabK, tabJ);
  arrowTabs(nav);
  const want = ctx.get("diff_tab");
  const ready = show(want === "kernels" || want === "jobs" ? want : "ops");
  return { el: h("div", null, nav, ops, kbox, jbox), ready };
}

const ALIGN_TITLE: Record<string, string> = {
  name: "same name under the same op path",
  structure: "renamed: the same place (k-th kernel) under the same op path",
  unmatched: "only on one side",
};

/** A link to the timeline of one side, framed on the kernel's first occurrence and selecting it. */
function timelineLink(side: any, where: { run: string; worker: string; span: string }, label: string, id: string): HTMLElement | null {
  if (!side || typeof side.first_us !== "number") return null;
  const dur = typeof side.first_dur_us === "number" ? side.first_dur_us : 0;
  const pad = Math.max(dur * 2, 5);
  const href = shareLink({ ...where, view: "timeline", sel: String(side.first_idx), win: `${(side.first_us - pad).toFixed(3)},${(side.first_us + dur + pad).toFixed(3)}` });
  return h("a", { href, target: "_blank", rel: "noopener", class: "btn small", "data-side": id, title: `open ${label} at this kernel's first run` }, label + " ⤷");
}

/** The kernel rows of /diff/kernels in the backend's order (largest |Δ| first), each with links to both timelines. */
function renderKernelDiff(ctx: Ctx, d: any, exp: { run: string; worker: string; span: string }): HTMLElement {
  const src: any[] = Array.isArray(d?.rows) ? d.rows : [];
  const rows = src.map((r) => ({
    name: String(r.base?.name ?? r.exp?.name ?? ""),
    exp_name: r.base && r.exp && r.exp.name !== r.base.name ? String(r.exp.name) : "",
    align: String(r.align ?? ""),
    path: r.base && r.exp && r.exp.path !== r.base.path ? `${r.base.path || "(no op)"} → ${r.exp.path || "(no op)"}` : String(r.path ?? ""),
    base_count: r.base?.count ?? null, exp_count: r.exp?.count ?? null,
    base_total_us: r.base?.total_us ?? null, exp_total_us: r.exp?.total_us ?? null,
    delta_us: r.delta_us ?? null, delta_mean_us: r.delta_mean_us ?? null, raw: r,
  }));
  const cols: Column[] = [
    { key: "name", label: "Kernel" }, { key: "exp_name", label: "Renamed to" },
    { key: "align", label: "Aligned by", fmt: (v) => String(v), title: "name / structure / unmatched" },
    { key: "path", label: "Op path", fmt: (v) => (v ? String(v) : "(no op)"), title: "the op / module path that launched it (base → compared when it moved)" },
    { key: "base_count", label: "Base count", numeric: true }, { key: "exp_count", label: "Exp count", numeric: true },
    { key: "base_total_us", label: "Base total", numeric: true, fmt: fmtUs }, { key: "exp_total_us", label: "Exp total", numeric: true, fmt: fmtUs },
    { key: "delta_us", label: "Δ total", numeric: true, fmt: sgn }, { key: "delta_mean_us", label: "Δ mean", numeric: true, fmt: sgn, optional: true },
  ];
  const b = d?.base ?? {}, e = d?.exp ?? {};
  const notes: string[] = Array.isArray(d?.notes) ? d.notes.map(String) : [];
  return h("div", null,
    h("p", { class: "muted", id: "diff-kernels-totals" }, `Baseline: ${fmtNum(b.kernels)} kernels, ${fmtUs(b.device_us)} · compared: ${fmtNum(e.kernels)} kernels, ${fmtUs(e.device_us)}`),
    h("div", { id: "diff-kernel-table" }, dataTable(cols, rows, {
      caption: "Kernel deltas (largest change first)", filterKeys: ["name", "exp_name", "path"], exportName: "kernel_diff",
      rowClass: (r) => `align-${r.align} ` + (r.delta_us > 0 ? "pos" : r.delta_us < 0 ? "neg" : ""),
      actions: (r) => h("span", { title: ALIGN_TITLE[r.align] ?? "" }, timelineLink(r.raw.base, ctx.sel(), "baseline", "base"), " ", timelineLink(r.raw.exp, exp, "compared", "exp")),
    })),
    notes.length ? h("ul", { class: "recs muted" }, notes.map((n) => h("li", null, n))) : null);
}
