// Roofline: the device's roofs (log-log: FLOPs per byte against TFLOP/s), each op group as a point whose area is
// its device time, the table of ops by ms lost to their bound, the kernels' achieved numbers and MFU per step.
import { h, s, mount, fmtNum, fmtPct, colorFor } from "../dom";
import { getJSON } from "../api";
import { dataTable, Column } from "../table";
import { timelineButton } from "./widgets";
import type { Ctx } from "../ctx";

const W = 640, H = 360, L = 56, B = 40, T = 12, R = 12;
const fmtMs = (v: any) => (typeof v === "number" ? `${v.toFixed(v < 10 ? 3 : 1)} ms` : "–");
const fmtTf = (v: any) => (typeof v === "number" ? (v < 0.01 ? v.toExponential(1) : v.toFixed(2)) : "–");

export async function rooflineView(ctx: Ctx, el: HTMLElement): Promise<void> {
  const d = await getJSON<any>("roofline", ctx.sel(), { cache: true });
  if (!ctx.alive()) return;
  const ops: any[] = Array.isArray(d.ops) ? d.ops : [];
  const dev = d.device ?? {};
  const m = d.mfu ?? {};
  const detail = h("div", { id: "roofline-detail", class: "banner info" }, "Click a point to see the op.");
  const head = h("div", { id: "roofline-head", class: "banner info" },
    h("strong", null, dev.product ?? "No peaks"), " ", dev.about ?? "",
    h("br"), `Modelled ops: ${fmtMs(d.modelled_ms)} of device time, no model: ${fmtMs(d.no_model_ms)}. `,
    `Ms lost to the bound (at ${fmtPct(d.fraction)} of it): ${fmtMs(d.lost_ms)}. `,
    m.mfu !== null && m.mfu !== undefined ? h("span", { id: "roofline-mfu" }, `MFU ${(m.mfu * 100).toFixed(1)} %, HFU ${(m.hfu * 100).toFixed(1)} % of the ${m.roof} roof (${fmtNum(m.peak_tflops)} TFLOP/s).`) : h("span", { id: "roofline-mfu" }, `No MFU: ${m.note || "no roof"}`));
  const cols: Column[] = [
    { key: "name", label: "Op" },
    { key: "shapes", label: "Input shapes" },
    { key: "dtype", label: "Dtype" },
    { key: "family", label: "Model" },
    { key: "calls", label: "Calls", numeric: true },
    { key: "device_ms", label: "Device", numeric: true, fmt: fmtMs },
    { key: "tflops", label: "TFLOP/s", numeric: true, fmt: fmtTf },
    { key: "gbps", label: "GB/s", numeric: true, fmt: fmtNum },
    { optional: true, key: "intensity", label: "FLOP/byte", numeric: true, fmt: fmtNum },
    { key: "bound", label: "Bound" },
    { optional: true, key: "roof", label: "Roof" },
    { key: "fraction", label: "Of bound", numeric: true, fmt: fmtPct },
    { key: "lost_ms", label: "Lost", numeric: true, fmt: fmtMs, title: "device time minus the time at the realistic fraction of the bound" },
  ];
  const kcols: Column[] = [
    { key: "kernel", label: "Kernel" },
    { key: "count", label: "Count", numeric: true },
    { key: "device_ms", label: "Device", numeric: true, fmt: fmtMs },
    { key: "tflops", label: "TFLOP/s", numeric: true, fmt: fmtTf },
    { key: "gbps", label: "GB/s", numeric: true, fmt: fmtNum },
    { key: "peak_tflops", label: "Roof TFLOP/s", numeric: true, fmt: fmtNum },
    { key: "fraction", label: "Of roof", numeric: true, fmt: fmtPct },
    { optional: true, key: "tc", label: "Tensor cores", fmt: (v) => (v ? "yes" : "no") },
  ];
  const steps: any[] = Array.isArray(m.steps) ? m.steps : [];
  mount(el, head,
    h("div", { class: "grid2" }, chart(d, ops, (r) => mount(detail,
      h("strong", null, r.name), ` ${r.shapes} ${r.dtype}: ${fmtTf(r.tflops)} TFLOP/s, ${fmtNum(r.gbps)} GB/s, ${fmtPct(r.fraction)} of its ${r.bound} bound, ${fmtMs(r.lost_ms)} lost `,
      timelineButton(ctx, String(r.name)),
      h("button", { type: "button", class: "btn small", onclick: () => ctx.go("kernels", { group_by: "name_op" }) }, "its kernels"))), detail),
    dataTable(cols, ops, { filterKeys: ["name", "family", "shapes"], sortKey: "lost_ms", exportName: `roofline-${ctx.run}`, caption: "Ops by ms lost to their roofline bound", actions: (r) => timelineButton(ctx, String(r.name)) }),
    dataTable(kcols, Array.isArray(d.kernels) ? d.kernels : [], { filterKeys: ["kernel"], sortKey: "device_ms", exportName: `roofline-kernels-${ctx.run}`, caption: "Kernels: achieved against the roof of their ops" }),
    steps.length ? dataTable([
      { key: "step", label: "Step" },
      { key: "ms", label: "Step time", numeric: true, fmt: fmtMs },
      { key: "model_tflop", label: "Model TFLOP", numeric: true, fmt: fmtTf },
      { key: "mfu", label: "MFU", numeric: true, fmt: fmtPct },
      { key: "hfu", label: "HFU", numeric: true, fmt: fmtPct },
    ], steps, { filterKeys: ["step"], sortKey: "step", sortDesc: false, caption: "MFU per step" }) : null);
}

/** The log-log roofline chart: x FLOPs/byte, y TFLOP/s; the memory roof's slope and each compute roof. */
function chart(d: any, ops: any[], onPick: (r: any) => void): HTMLElement {
  const pts = ops.filter((r) => r.intensity > 0 && r.tflops > 0);
  const roofs: Record<string, number> = d.device?.roofs_tflops ?? {};
  const bw = d.device?.bandwidth_gbps;
  const peakMax = Math.max(1, ...Object.values(roofs));
  const xs = pts.map((r) => r.intensity), ys = pts.map((r) => r.tflops);
  const x0 = Math.pow(10, Math.floor(Math.log10(Math.min(0.01, ...xs)))), x1 = Math.pow(10, Math.ceil(Math.log10(Math.max(1000, ...xs))));
  const y0 = Math.pow(10, Math.floor(Math.log10(Math.min(0.001, ...ys)))), y1 = Math.pow(10, Math.ceil(Math.log10(Math.max(peakMax, ...ys) * 1.5)));
  const px = (x: number) => L + ((Math.log10(x) - Math.log10(x0)) / (Math.log10(x1) - Math.log10(x0))) * (W - L - R);
  const py = (y: number) => H - B - ((Math.log10(y) - Math.log10(y0)) / (Math.log10(y1) - Math.log10(y0))) * (H - B - T);
  const svg = s("svg", { viewBox: `0 0 ${W} ${H}`, class: "roofline", role: "img", id: "roofline-chart" });
  for (let e = Math.log10(x0); e <= Math.log10(x1); e++) svg.appendChild(s("text", { x: px(10 ** e), y: H - B + 16, "text-anchor": "middle", class: "axis" }, `1e${e}`));
  for (let e = Math.log10(y0); e <= Math.log10(y1); e++) svg.appendChild(s("text", { x: L - 6, y: py(10 ** e) + 4, "text-anchor": "end", class: "axis" }, `1e${e}`));
  svg.appendChild(s("text", { x: (W + L) / 2, y: H - 6, "text-anchor": "middle", class: "axis" }, "FLOPs per byte"));
  svg.appendChild(s("text", { x: 12, y: (H - B) / 2, class: "axis", transform: `rotate(-90 12 ${(H - B) / 2})`, "text-anchor": "middle" }, "TFLOP/s"));
  for (const [name, peak] of Object.entries(roofs)) {
    const knee = bw ? (peak * 1e12) / (bw * 1e9) : x0;
    svg.appendChild(s("line", { x1: px(Math.max(knee, x0)), x2: px(x1), y1: py(peak), y2: py(peak), stroke: colorFor(name), "stroke-width": 1.5, class: "roof" }, s("title", null, `${name}: ${peak} TFLOP/s`)));
    svg.appendChild(s("text", { x: W - R - 2, y: py(peak) - 3, "text-anchor": "end", class: "axis" }, name));
  }
  if (bw) {
    const top = (peakMax * 1e12) / (bw * 1e9);
    svg.appendChild(s("line", { x1: px(x0), y1: py(Math.max((x0 * bw) / 1000, y0)), x2: px(top), y2: py(peakMax), stroke: "#555", "stroke-width": 1.5, class: "roof" }, s("title", null, `memory: ${bw} GB/s`)));
  }
  const total = pts.reduce((a, r) => a + (r.device_ms || 0), 0) || 1;
  for (const r of pts) {
    const rad = 3 + 20 * Math.sqrt((r.device_ms || 0) / total);
    svg.appendChild(s("circle", { cx: px(r.intensity), cy: py(r.tflops), r: rad, fill: colorFor(String(r.family)), "fill-opacity": 0.55, class: "pt", onclick: () => onPick(r) },
      s("title", null, `${r.name} ${r.shapes} ${r.dtype}\n${fmtTf(r.tflops)} TFLOP/s at ${fmtNum(r.intensity)} FLOP/byte, ${fmtMs(r.device_ms)}`)));
  }
  return h("figure", { class: "chart-box" }, h("figcaption", null, "Roofline: ops under the device's roofs (area: device time)"), svg);
}
