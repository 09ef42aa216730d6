// Overview: configuration and GPU cards, step-time breakdown per step and on average, the recoverable-time ledger.
import { h, mount, fmtUs, fmtPct, fmtNum, fmtBytes } from "../dom";
import { getJSON, getWhenReady, isPending } from "../api";
import { stackedBars, pie } from "../charts";
import { genericValue } from "../table";
import { exportButtons } from "../export";
import { ledgerSection } from "./ledger";
import { diagnosisHead } from "./verdict";
import type { Ctx } from "../ctx";

/** The breakdown categories in the /overview answer's order (docs/http-api.md), with display names. */
export const STEP_PARTS: [string, string][] = [
  ["kernel_us", "Kernel"], ["memcpy_us", "Memcpy"], ["memset_us", "Memset"], ["communication_us", "Communication"],
  ["runtime_us", "Runtime"], ["dataloader_us", "DataLoader"], ["cpu_exec_us", "CPU Exec"], ["other_us", "Other"],
];
/** Per-step rows shown before "Show all" in per-step tables. */
const STEP_ROWS = 10;
const COLORS = ["#4e79a7", "#f28e2b", "#edc948", "#e15759", "#76b7b2", "#b07aa1", "#59a14f", "#bab0ac"];

/** The GPU summary per device: percentages as percentages and memory in bytes' units, one short list per device
 * (it wraps in a narrow card instead of clipping, as a wide table would). */
function gpuDevicesTable(devs: any): HTMLElement | null {
  if (!Array.isArray(devs) || !devs.length) return null;
  const pct: [string, string][] = [["utilization", "GPU utilization"], ["sm_efficiency", "Est. SM efficiency"],
    ["achieved_occupancy", "Est. achieved occupancy"], ["tensor_core_ratio", "Tensor Cores"]];
  return h("div", { id: "gpu-devices" }, devs.map((x: any) => h("section", { class: "gpu-device" },
    h("h4", null, `GPU ${x?.device ?? "?"}: ${x?.name ?? "unknown"}`),
    h("dl", { class: "kv" },
      h("dt", null, "Memory"), h("dd", null, typeof x?.memory_bytes === "number" ? fmtBytes(x.memory_bytes) : "–"),
      h("dt", null, "Compute capability"), h("dd", null, String(x?.compute_capability ?? "–")),
      pct.map(([k, label]) => [h("dt", null, label), h("dd", null, typeof x?.[k] === "number" ? fmtPct(x[k]) : "–")])))));
}

export async function overviewView(ctx: Ctx, el: HTMLElement): Promise<void> {
  const d = await getJSON<any>("overview", ctx.sel(), { cache: true });
  if (!ctx.alive()) return;
  const steps: any[] = Array.isArray(d.steps) ? d.steps : [];
  const avg = d.average ?? {};
  const noSteps = d.has_steps === false;  // the one row covers the whole trace window
  const notes: string[] = Array.isArray(d.notes) ? d.notes.map(String) : [];
  const cards = h("div", { class: "cards" });
  const env = d.environment && typeof d.environment === "object" ? d.environment : {};
  cards.append(h("section", { class: "card", id: "card-config" }, h("h3", null, "Configuration"),
    h("dl", { class: "kv" }, h("dt", null, "Worker"), h("dd", null, ctx.worker), h("dt", null, "Steps"), h("dd", { id: "steps-count" }, noSteps ? "no steps in this trace (whole trace window)" : String(steps.length)),
      h("dt", null, "Average step time"), h("dd", null, fmtUs(avg.total_us)),
      Object.entries(env).filter(([k, v]) => !(k === "world_size" && (v === null || (env.distributed && env.distributed.world_size === v))))
        .map(([k, v]) => [h("dt", null, k), h("dd", null, typeof v === "object" && v !== null ? genericValue(v) : fmtNum(v))]))));
  if (d.gpu) {
    const g = d.gpu;
    cards.append(h("section", { class: "card", id: "card-gpu" }, h("h3", null, "GPU summary"),
      h("dl", { class: "kv" },
        [["GPU utilization", g.utilization], ["Est. SM efficiency", g.sm_efficiency], ["Est. achieved occupancy", g.achieved_occupancy], ["Kernel time using Tensor Cores", g.tensor_core_ratio]]
          .map(([k, v]) => [h("dt", null, k as string), h("dd", null, fmtPct(v as number))]),
        Object.entries(g).filter(([k]) => !["utilization", "sm_efficiency", "achieved_occupancy", "tensor_core_ratio", "temporal", "devices"].includes(k))
          .map(([k, v]) => [h("dt", null, k), h("dd", null, typeof v === "object" && v !== null ? genericValue(v) : fmtNum(v))])),
      gpuDevicesTable(g.devices), temporalTable(g.temporal)));
  }
  const rf = d.roofline;
  if (rf && typeof rf === "object") {
    cards.append(h("section", { class: "card", id: "card-mfu" }, h("h3", null, "Model FLOPs utilisation"),
      h("dl", { class: "kv" },
        h("dt", null, "MFU"), h("dd", { id: "mfu-value" }, typeof rf.mfu === "number" ? fmtPct(rf.mfu) : `n/a: ${rf.note || "no roof"}`),
        h("dt", null, "HFU"), h("dd", null, typeof rf.hfu === "number" ? fmtPct(rf.hfu) : "–"),
        h("dt", null, "Roof"), h("dd", null, rf.device ? `${rf.device} ${rf.roof} ${typeof rf.peak_tflops === "number" ? rf.peak_tflops + " TFLOP/s" : ""}` : "–"),
        h("dt", null, "Lost to the roofline bound"), h("dd", null, typeof rf.lost_ms === "number" ? fmtUs(rf.lost_ms * 1000) : "–"),
        h("dt", null, ""), h("dd", null, h("button", { type: "button", class: "btn small", onclick: () => ctx.go("roofline") }, "Roofline")))));
  }
  const parts = STEP_PARTS.filter(([k]) => steps.some((s) => (s[k] ?? 0) > 0) || (avg[k] ?? 0) > 0);
  const charts = h("div", { class: "grid2" },
    steps.length ? stackedBars(steps.map((s) => (noSteps ? "whole trace" : String(s.step))), parts.map(([k, label]) => ({ name: label, values: steps.map((s) => Number(s[k]) || 0), color: COLORS[STEP_PARTS.findIndex((p) => p[0] === k)] })), fmtUs, { title: "Step time breakdown" })
      : h("div", { class: "banner info" }, "No ProfilerStep found: the breakdown covers the whole span."),
    pieOfAverage(avg, parts));
  const table = h("table", { class: "data-table", id: "avg-table" },
    h("thead", null, h("tr", null, h("th", null, "Category"), h("th", { class: "num" }, "Time (avg per step)"), h("th", { class: "num" }, "Share"))),
    h("tbody", null, STEP_PARTS.map(([k, label]) => h("tr", null, h("td", null, label), h("td", { class: "num" }, fmtUs(avg[k])),
      h("td", { class: "num" }, avg.total_us ? fmtPct((avg[k] ?? 0) / avg.total_us) : "–")))));
  // a run of several workers: its caveats and its verdict before anything else
  const head = d?.run_ledger ? h("div", { class: "diag-head", id: "diag-head" }) : null;
  const ledgerBox = h("div", { id: "ledger-section" });
  const drawLedger = (x: any) => mount(ledgerBox, ledgerSection(x, ctx.run, ctx.worker, ctx.get("ledger"), (v) => { ctx.set("ledger", v); drawLedger(x); }));
  drawLedger(d);
  mount(el, head, cards, ledgerBox, charts, h("section", { class: "section" }, h("h3", null, "Average step time breakdown"),
      h("div", { class: "table-tools" }, exportButtons(() => `overview-${ctx.run}`, () => ({ header: ["category", "avg_us", "share"],
        rows: STEP_PARTS.map(([k, label]) => [label, avg[k] ?? null, avg.total_us ? (avg[k] ?? 0) / avg.total_us : null]) }))), table),
    notes.length ? h("section", { class: "section", id: "overview-notes" }, h("h3", null, "Notes"),
      h("ul", { class: "recs" }, notes.map((n) => h("li", null, n)))) : null);
  if (head) void diagnosisHead(ctx, head, d.run_ledger.caveats);
  // the run-level ledger fills in as the workers' summaries are computed
  if (isPending(d?.run_ledger)) {
    const done = await getWhenReady<any>("overview", ctx.sel(), ctx.alive, { onPending: drawLedger, still: (x) => isPending(x?.run_ledger) });
    if (done) drawLedger(done);
  }
}

function pieOfAverage(avg: any, parts: [string, string][]): HTMLElement {
  return pie(parts.map(([k, label]) => ({ name: label, value: Number(avg[k]) || 0, color: COLORS[STEP_PARTS.findIndex((p) => p[0] === k)] })), fmtUs, { title: "Average step", top: 8 });
}

/** HTA's temporal breakdown: per device, the average step and each step split into GPU idle / compute / non-compute. */
function temporalTable(tb: any): HTMLElement | null {
  const devices: any[] = tb && Array.isArray(tb.devices) ? tb.devices : [];
  if (!devices.length) return null;
  const cell = (r: any, k: string) => h("td", { class: "num" }, `${fmtUs(r?.[`${k}_us`])} (${fmtPct(r?.[`${k}_share`])})`);
  const row = (dev: any, step: string, r: any) => h("tr", step === "average" ? { class: "avg" } : null,
    h("td", null, `GPU ${dev.device}`), h("td", null, step), cell(r, "idle"), cell(r, "compute"), cell(r, "non_compute"));
  const nSteps = Math.max(0, ...devices.map((d) => (Array.isArray(d.steps) ? d.steps.length : 0)));
  const body = h("tbody");
  const more = h("p", { class: "muted" });
  const fill = (limit: number) => {
    mount(body, devices.flatMap((d) => [row(d, "average", d.average),
      ...(Array.isArray(d.steps) ? d.steps : []).slice(0, limit).map((s: any) => row(d, String(s.step), s))]));
    if (limit >= nSteps) { more.replaceChildren(); return; }
    mount(more, `The first ${limit} of ${nSteps} steps. `, h("button", { type: "button", class: "btn small", id: "gpu-temporal-all",
      onclick: () => fill(Infinity) }, `Show all ${nSteps} steps`));
  };
  fill(nSteps > STEP_ROWS + 2 ? STEP_ROWS : Infinity);
  return h("div", { id: "gpu-temporal" },
    h("h4", null, "GPU time: idle / compute / non-compute (HTA temporal breakdown)"),
    h("table", { class: "data-table" },
      h("thead", null, h("tr", null, h("th", null, "Device"), h("th", null, "Step"), h("th", { class: "num" }, "Idle"),
        h("th", { class: "num" }, "Compute"), h("th", { class: "num" }, "Non-compute"))),
      body), more,
    typeof tb.idle_threshold === "number" ? h("p", { class: "muted" },
      `Non-compute: communication kernels, memcpy, memset. A recommendation is given above ${fmtPct(tb.idle_threshold)} idle.`) : null);
}
