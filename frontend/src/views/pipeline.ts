// The pipeline schedule in the Distributed view (the `/pipeline` route): per step a stage × time chart of every
// micro-batch's forward and backward (the gaps between them are the bubbles), the schedule, the bubble ratio of
// each step next to the schedule's theoretical one, and each stage's bubble split by cause.
import { h, mount, fmtUs } from "../dom";
import { getWhenReady } from "../api";
import { summarizingText } from "../progress";
import { laneChart, LaneBox } from "../charts";
import { dataTable, Column } from "../table";
import type { Ctx } from "../ctx";

/** Span kind → [name, colours by micro-batch (alternating shades)]. */
const KINDS: Record<string, [string, string[]]> = {
  F: ["Forward", ["#4e79a7", "#6b93bf"]],
  B: ["Backward", ["#f28e2b", "#f5a65b"]],
  I: ["Backward (inputs)", ["#f28e2b", "#f5a65b"]],
  W: ["Backward (weights)", ["#59a14f", "#7dbb74"]],
};
const GAP = "#f4c7c3"; // a bubble: the stage has nothing running
const SPLIT: [string, string, string][] = [
  ["true_idle_ns", "True idle", "nothing to do (warm-up, cool-down), launch gaps"],
  ["p2p_wait_ns", "P2P wait", "inside a send/recv whose peer is not there yet"],
  ["upstream_wait_ns", "Upstream wait", "waiting for the producing stage's activation or gradient"],
  ["p2p_transfer_ns", "Transfer", "inside a send/recv once both sides are there"],
];

function obj(v: any): Record<string, any> { return v && typeof v === "object" && !Array.isArray(v) ? v : {}; }
const pct = (v: any) => (typeof v === "number" && isFinite(v) ? `${(v * 100).toFixed(2)} %` : "–");
const usOf = (ns: any) => (typeof ns === "number" ? ns / 1e3 : null);

/** Fills `box` with the run's pipeline schedule; leaves it empty when the run has none (a data-parallel job). */
export async function pipelineSection(ctx: Ctx, box: HTMLElement, viewStep: string): Promise<void> {
  let d: any;
  try {
    d = await getWhenReady<any>("pipeline", { run: ctx.run, span: ctx.span }, ctx.alive, { onPending: (p) => mount(box, h("h3", null, "Pipeline schedule"),
      h("p", { class: "muted", id: "pipe-pending", role: "status" }, summarizingText(p))) });
  } catch (e) { if (ctx.alive()) mount(box, h("h3", null, "Pipeline schedule"), h("div", { class: "banner" }, (e as Error).message)); return; }
  if (!d) return;
  const steps: any[] = Array.isArray(d?.steps) ? d.steps.filter((s: any) => s && typeof s === "object") : [];
  if (!steps.length) { mount(box); box.dataset.reason = String(d?.reason ?? ""); return; }
  const names = steps.map((s) => String(s.step));
  const wanted = ctx.get("pstep") ?? viewStep;
  const cur = Math.max(0, names.indexOf(wanted));
  const step = steps[cur];
  const workers: string[] = Array.isArray(d.workers) ? d.workers.map(String) : [];
  const chart: any[] = Array.isArray(step.chart) ? step.chart : [];
  const lanes = chart.map((_, i) => `stage ${i}` + (workers[i] ? ` · ${workers[i].replace(/^.*rank0*(\d+)$/i, "r$1")}` : ""));
  const boxes: LaneBox[] = [];
  chart.forEach((row: any[], i) => (Array.isArray(row) ? row : []).forEach((x) => {
    if (!Array.isArray(x) || x.length < 5) return;
    const [kind, mb, stage, a, b] = x;
    const [kname, colors] = KINDS[kind] ?? [String(kind), ["#bab0ac", "#bab0ac"]];
    const v = typeof stage === "number" && stage >= 0 && stage !== i ? ` (virtual stage ${stage})` : "";
    boxes.push({ lane: i, start: a / 1e3, end: b / 1e3, color: colors[Number(mb) % 2], label: `${kind}${mb}`,
      title: `${kname} of micro-batch ${mb}${v}\n${fmtUs(a / 1e3)} – ${fmtUs(b / 1e3)} (${fmtUs((b - a) / 1e3)})`,
      attrs: { "data-kind": String(kind), "data-mb": Number(mb), "data-stage": i } });
  }));
  const kindsShown = [...new Set(boxes.map((b) => String(b.attrs?.["data-kind"])))].filter((k) => KINDS[k]);
  const legend = [...kindsShown.map((k) => ({ name: KINDS[k][0], color: KINDS[k][1][0] })), { name: "Bubble (idle)", color: GAP }];
  const sched = String(d.schedule ?? "unknown");
  const shape = `${d.stages} stages · ${d.microbatches} micro-batches` + (Number(d.virtual_stages) > 1 ? ` · ${d.virtual_stages} stages per rank` : "");
  const stepSel = h("select", { id: "pipe-step", "aria-label": "pipeline step" }, names.map((n) => h("option", { value: n }, `Step ${n}`))) as HTMLSelectElement;
  stepSel.value = names[cur];
  stepSel.addEventListener("change", () => { ctx.set("pstep", stepSel.value); void pipelineSection(ctx, box, viewStep); });

  const ratioRows = steps.map((s) => ({ step: String(s.step), bubble_ratio: s.bubble_ratio, theoretical_ratio: s.theoretical_ratio,
    window_us: typeof s.end_ns === "number" && typeof s.start_ns === "number" ? (s.end_ns - s.start_ns) / 1e3 : null }));
  const ratios = h("div", { id: "pipe-ratios" }, dataTable([
    { key: "step", label: "Step" },
    { key: "bubble_ratio", label: "Bubble ratio", numeric: true, fmt: pct, title: "idle time of all stages / (stages × the step's window)" },
    { key: "theoretical_ratio", label: `Theoretical (${sched})`, numeric: true, fmt: pct, title: "the schedule's ratio with equal stages and free communication" },
    { key: "window_us", label: "Step window", numeric: true, fmt: fmtUs, title: "first span's start to last span's end over all stages" },
  ] as Column[], ratioRows, { caption: "Bubble ratio per step", filterKeys: ["step"], sortKey: "step", sortDesc: false, pageSize: 10,
    onRowClick: (r) => { ctx.set("pstep", r.step); void pipelineSection(ctx, box, viewStep); } }));

  const splitRows = (Array.isArray(step.stages) ? step.stages : []).map((st: any) => {
    const on = Object.entries<any>(obj(st?.waiting_on)).map(([k, v]) => `stage ${k}: ${fmtUs(usOf(v))}`).join(", ");
    const row: Record<string, any> = { stage: st?.stage, worker: String(st?.worker ?? ""), idle_us: usOf(st?.idle_ns), waiting_on: on || "–" };
    for (const [k] of SPLIT) row[k.replace("_ns", "_us")] = usOf(st?.[k]);
    return row;
  });
  const split = h("div", { id: "pipe-split" }, dataTable([
    { key: "stage", label: "Stage", numeric: true }, { key: "worker", label: "Worker" },
    { key: "idle_us", label: "Idle", numeric: true, fmt: fmtUs, title: "the step's window minus the stage's busy time" },
    ...SPLIT.map(([k, label, title]) => ({ key: k.replace("_ns", "_us"), label, numeric: true, fmt: fmtUs, title })),
    { key: "waiting_on", label: "Upstream wait on", wrap: true },
  ] as Column[], splitRows, { caption: `Bubble split per stage (step ${names[cur]})`, filterKeys: ["worker"], sortKey: "stage", sortDesc: false, pageSize: 20 }));

  const theory = typeof step.theoretical_ratio === "number" ? ` · theoretical ${pct(step.theoretical_ratio)}` : "";
  mount(box, h("h3", null, "Pipeline schedule"),
    h("div", { class: "toolbar" }, h("label", null, "Step ", stepSel),
      h("span", { id: "pipe-schedule", "data-schedule": sched }, `Schedule: ${sched}`), h("span", { class: "muted" }, shape),
      h("span", { id: "pipe-ratio", "data-ratio": String(step.bubble_ratio ?? ""), "data-theoretical": String(step.theoretical_ratio ?? "") },
        `Bubble ratio ${pct(step.bubble_ratio)}${theory}`)),
    d.schedule_reason ? h("p", { class: "muted" }, `Schedule not recognised: ${d.schedule_reason}`) : null,
    Number(d.steps_dropped) > 0 ? h("p", { class: "muted" }, `${d.steps_dropped} later steps are not analysed (the summaries keep the first ones).`) : null,
    laneChart(lanes, boxes, fmtUs, { id: "pipe-chart", title: `Stage × time, step ${names[cur]} (coloured: each micro-batch's forward and backward; pink: bubbles)`,
      xmax: typeof step.end_ns === "number" ? (step.end_ns - step.start_ns) / 1e3 : undefined, gapColor: GAP, gapName: "bubble", legend }),
    ratios, split);
}
