// History: a job's runs over time (/history, from the per-worker summaries only): the first run slower than the
// noise of the runs before it with its explanation (the job diff against the run before) and a button to that job
// diff, a line of the median step time per run with the threshold, the rule, and a table of the runs.
import { h, mount, fmtNum, fmtPct } from "../dom";
import { getWhenReady } from "../api";
import { summarizingText } from "../progress";
import { pointLine } from "../charts";
import { dataTable, Column } from "../table";
import { segmented, notesBanner } from "./widgets";
import { fmtMs } from "./ledger";
import type { Ctx } from "../ctx";

/** The span of every worker of every run the history reads (the route's default). */
const SPAN = "1";
/** Buckets named in the table's "Where the step goes" column. */
const TOP_BUCKETS = 3;

/** A run's time (ns since the epoch) in UTC to the minute, "2026-10-02 05:33"; "–" when unknown. */
export function fmtRunTime(ns: unknown): string {
  if (typeof ns !== "number" || !(ns > 0)) return "–";
  return new Date(ns / 1e6).toISOString().slice(0, 16).replace("T", " ");
}

/** The `n` largest buckets of a run ("Compute (kernels) 8.10 ms · Exposed comm 1.20 ms"), labelled by `label`. */
export function topBuckets(buckets: unknown, label: Record<string, string>, n = TOP_BUCKETS): string {
  if (!buckets || typeof buckets !== "object") return "–";
  const top = Object.entries(buckets as Record<string, unknown>)
    .filter((e): e is [string, number] => typeof e[1] === "number" && e[1] > 0)
    .sort((a, b) => b[1] - a[1]).slice(0, n);
  return top.length ? top.map(([k, v]) => `${label[k] ?? k.replace(/_/g, " ")} ${fmtMs(v)}`).join(" · ") : "–";
}

export async function historyView(ctx: Ctx, el: HTMLElement): Promise<void> {
  const order = ctx.get("h_order") === "name" ? "name" : "time";
  const match = ctx.get("h_match") ?? "";
  const input = h("input", { type: "search", id: "history-match", placeholder: "nightly-*", value: match, "aria-label": "only the runs whose name matches this glob", size: 18 }) as HTMLInputElement;
  const apply = () => { const v = input.value.trim(); if (v !== match) ctx.go("history", { ...(order === "name" ? { h_order: "name" } : {}), ...(v ? { h_match: v } : {}) }); };
  input.addEventListener("keydown", (e) => { if ((e as KeyboardEvent).key === "Enter") apply(); });
  const out = h("div", { id: "history-out" }, h("p", { class: "muted" }, "Reading the runs' summaries…"));
  mount(el, h("div", { class: "toolbar", id: "history-tools" },
    segmented("Order", [["time", "by time"], ["name", "by name"]], order, (v) => ctx.go("history", { ...(v === "name" ? { h_order: "name" } : {}), ...(match ? { h_match: match } : {}) })),
    h("label", null, "Runs matching ", input), h("button", { type: "button", class: "btn small", id: "history-apply", onclick: apply }, "Apply"),
    h("span", { class: "muted" }, `every run of the log directory, span ${SPAN} of each worker, from the per-worker summaries`)), out);
  const q = { span: SPAN, order, match: match || undefined };
  let d: any;
  try {
    d = await getWhenReady<any>("history", q, ctx.alive,
      { onPending: (p) => mount(out, h("p", { class: "muted", id: "history-pending", role: "status" }, summarizingText(p))) });
  } catch (e) {
    // a glob that matches nothing (404) keeps the tools, so that it can be changed
    if (ctx.alive()) mount(out, h("div", { class: "banner", id: "history-error", role: "alert" }, (e as Error).message));
    return;
  }
  if (!d || !ctx.alive()) return;
  mount(out, renderHistory(ctx, d));
  // the first regressed run's row in sight inside the table's own scroll box
  const tr = out.querySelector<HTMLElement>("#history-table tr.first-regression"), sc = tr?.closest<HTMLElement>(".table-scroll");
  if (tr && sc) sc.scrollTop += tr.getBoundingClientRect().top - sc.getBoundingClientRect().top - sc.clientHeight / 3;
}

/** The answer of /history: the first regression, the chart and its rule, the runs' table, notes and errors. */
function renderHistory(ctx: Ctx, d: any): HTMLElement {
  const runs: any[] = Array.isArray(d?.runs) ? d.runs : [];
  const reg = d?.regression && typeof d.regression === "object" ? d.regression : null;
  const jd = reg?.jobdiff ?? null;
  const label: Record<string, string> = Object.fromEntries((Array.isArray(jd?.buckets) ? jd.buckets : []).map((b: any) => [String(b.bucket), String(b.label ?? b.bucket)]));
  const names = runs.map((r) => String(r.run));
  const first = reg ? names.indexOf(String(reg.run)) : -1;
  const errors: any[] = Array.isArray(d?.errors) ? d.errors : [];
  const box = regressionBox(ctx, reg, runs[first]);
  const chart = runs.length ? pointLine(names, runs.map((r) => (typeof r.step_ms === "number" ? r.step_ms : null)), fmtMs, {
    id: "history-chart", title: "Median step time per run", name: "median step", guide: runs.map((r) => (typeof r.threshold_ms === "number" ? r.threshold_ms : null)),
    guideName: "threshold (the rule below)", marked: runs.map((r) => r.regressed === true), highlight: first >= 0 ? first : undefined,
    highlightLabel: first >= 0 ? `first regression: ${names[first]}` : undefined,
  }) : h("div", { class: "banner info", id: "history-empty" }, "No run with a recorded step.");
  const rows = runs.map((r, i) => ({
    idx: i + 1, name: String(r.run), time: fmtRunTime(r.time_ns), time_ns: r.time_ns, workers: r.workers, steps: r.steps,
    step_ms: r.step_ms, mad_ms: r.mad_ms, range: typeof r.min_ms === "number" ? `${fmtMs(r.min_ms)} – ${fmtMs(r.max_ms)}` : "–",
    threshold_ms: r.threshold_ms, buckets: topBuckets(r.buckets, label), mfu: r.mfu ?? null, verdict: String(r.verdict ?? ""),
    state: i === first ? "first regression" : r.regressed ? "above" : r.baseline_ms === null || r.baseline_ms === undefined ? "too few before" : "within",
    per_rank: Array.isArray(r.per_rank) ? r.per_rank : [], regressed: r.regressed === true,
  }));
  const cols: Column[] = [
    { key: "idx", label: "#", numeric: true },
    { key: "name", label: "Run" },
    { key: "time", label: "Time (UTC)", title: "the run's earliest trace file's time (its file-name timestamp, else its mtime)" },
    { key: "workers", label: "Ranks", numeric: true },
    { key: "step_ms", label: "Median step", numeric: true, fmt: fmtMs, title: "the median over its steps of each step's time averaged over the ranks" },
    { key: "mad_ms", label: "Spread", numeric: true, fmt: (v) => (typeof v === "number" ? `± ${fmtMs(v)}` : "–"), title: "the steps' median absolute deviation" },
    { key: "range", label: "Min – max", optional: true },
    { key: "threshold_ms", label: "Threshold", optional: true, numeric: true, fmt: fmtMs, title: "the rule's threshold from the runs before it" },
    { key: "buckets", label: "Where the step goes", wrap: true, title: "the ledger's largest buckets, ms per step averaged over the ranks" },
    { key: "mfu", label: "MFU", numeric: true, fmt: (v) => (typeof v === "number" ? fmtPct(v) : "–"), title: "model FLOPs utilization, mean over the ranks (– unknown)" },
    { key: "state", label: "Rule", title: "first regression; above its threshold; within the noise of the runs before it; too few runs before it (the rule under the chart)" },
    { key: "verdict", label: "Verdict", wrap: true, title: "the diagnosis' one line" },
  ];
  const detail = h("div", { id: "history-ranks" });
  const showRanks = (r: any) => {
    const pr: any[] = r.per_rank;
    mount(detail, pr.length > 1 ? dataTable([
      { key: "rank", label: "Rank", numeric: true, fmt: (v) => (v === null || v === undefined ? "–" : String(v)) },
      { key: "worker", label: "Worker" },
      { key: "step_ms", label: "Median step", numeric: true, fmt: fmtMs },
      { key: "mfu", label: "MFU", numeric: true, fmt: (v) => (typeof v === "number" ? fmtPct(v) : "–") },
    ], pr.map((x) => ({ ...x, name: String(x.worker ?? "") })), { caption: `Run ${r.name} per rank`, filterKeys: ["name"], sortKey: "rank", sortDesc: false, exportName: `history-ranks-${r.name}` })
      : h("p", { class: "muted" }, `Run ${r.name} has one rank.`));
  };
  if (first >= 0) showRanks(rows[first]);
  const table = h("div", { id: "history-table" }, dataTable(cols, rows, {
    caption: `${rows.length} runs by ${d?.order === "name" ? "name" : "time"} (click a run for its ranks${first >= 0 ? "; the first regression's are below" : ""})`, filterKeys: ["name", "verdict"], sortKey: "idx", sortDesc: false,
    pageSize: Math.max(50, rows.length), exportName: "history",
    rowClass: (r) => (r.idx - 1 === first ? "first-regression" : r.regressed ? "regressed" : ""),
    onRowClick: (r) => showRanks(r),
    actions: (r) => h("button", { type: "button", class: "btn small", title: `open run ${r.name}'s Overview`, onclick: (e: Event) => { e.stopPropagation(); ctx.open(r.name, "overview"); } }, "open"),
  }));
  return h("div", { class: "history" }, box,
    errors.length ? h("div", { class: "banner", id: "history-errors" }, "Some workers could not be read (the others are counted):",
      h("ul", null, errors.map((e) => h("li", null, `run ${e?.run ?? "?"}: ${e?.file ?? e?.worker ?? ""}: ${e?.error ?? JSON.stringify(e)}`)))) : null,
    chart,
    h("p", { class: "muted rule", id: "history-rule" }, h("strong", null, "Rule: "), String(d?.rule ?? "")),
    notesBanner(d, "history-notes"), table, detail);
}

/** The first regressed run: how much slower, its diagnosis, the job diff's first lines and a button to that diff. */
function regressionBox(ctx: Ctx, reg: any, run: any): HTMLElement {
  if (!reg) return h("section", { class: "regression none", id: "history-regression", "data-run": "" },
    h("h3", null, "No run is slower than the noise of the runs before it."));
  const lines: any[] = Array.isArray(reg.jobdiff?.lines) ? reg.jobdiff.lines : [];
  const delta = typeof reg.delta_ms === "number" ? `${reg.delta_ms >= 0 ? "+" : ""}${fmtMs(reg.delta_ms)}` : "–";
  const mfu = reg.jobdiff?.mfu;
  return h("section", { class: "regression", id: "history-regression", "data-run": String(reg.run), role: "status" },
    h("h3", null, `First regression: run ${reg.run}`),
    h("p", { id: "history-regression-step" }, `Median step ${fmtMs(reg.step_ms)}, ${delta} over the median of the runs before it (${fmtMs(reg.baseline_ms)}; threshold ${fmtMs(reg.threshold_ms)}).`),
    h("p", { id: "history-cause" }, h("strong", null, `Against run ${reg.previous}: `), reg.cause ? String(reg.cause) : "the job diff names no bucket that changed."),
    lines.length > 1 ? h("ol", { class: "recs", id: "history-lines", start: 2 }, lines.slice(1, 4).map((l) => h("li", null, String(l.text ?? "")))) : null,
    mfu && (typeof mfu.a === "number" || typeof mfu.b === "number") ? h("p", { class: "muted" }, `MFU ${typeof mfu.a === "number" ? fmtPct(mfu.a) : "–"} → ${typeof mfu.b === "number" ? fmtPct(mfu.b) : "–"}`) : null,
    run?.verdict ? h("p", { class: "muted", id: "history-verdict" }, `Its diagnosis: ${run.verdict}`) : null,
    h("button", { type: "button", class: "btn", id: "history-open-jobdiff", title: "the Diff view's Jobs (all ranks) tab: every rank of the two runs",
      onclick: () => ctx.open(String(reg.previous), "diff", { span: SPAN, exp_run: String(reg.run), exp_span: SPAN, diff_tab: "jobs" }) },
    `Open the job diff: ${reg.previous} → ${reg.run}`),
    fmtNum(reg.jobdiff?.a?.ranks) !== "–" ? h("span", { class: "muted" }, ` (${fmtNum(reg.jobdiff.a.ranks)} → ${fmtNum(reg.jobdiff?.b?.ranks)} ranks)`) : null);
}
