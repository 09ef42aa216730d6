// Distributed: computation/communication per worker as stacked bars, per step, and the comm-op table.
import { h, mount, fmtUs, fmtNum, fmtBytes } from "../dom";
import { getJSON } from "../api";
import { stackedBars } from "../charts";
import { dataTable, Column, genericValue } from "../table";
import type { Ctx } from "../ctx";

const PARTS: [string, string, string][] = [["computation_us", "Computation", "#4e79a7"], ["overlap_us", "Overlapping", "#76b7b2"], ["communication_us", "Communication", "#e15759"], ["other_us", "Other", "#bab0ac"]];

export async function distributedView(ctx: Ctx, el: HTMLElement): Promise<void> {
  const d = await getJSON<any>("distributed", { run: ctx.run, span: ctx.span }, { cache: true });
  if (!ctx.alive()) return;
  const workers = d?.workers && typeof d.workers === "object" ? d.workers : {};
  const names = Object.keys(workers);
  if (!names.length) { mount(el, h("div", { class: "banner info", id: "no-distributed" }, "No distributed information: this run has a single worker without communication.")); return; }
  const parts: HTMLElement[] = [];
  parts.push(stackedBars(names, PARTS.map(([k, label, color]) => ({ name: label, color, values: names.map((w) => Number(workers[w][k]) || 0) })), fmtUs, { title: "Computation / communication per worker" }));
  parts.push(stepsPart(d.steps));
  parts.push(commPart(d.comm_ops));
  const hasWait = names.some((w) => typeof workers[w].wait_us === "number");
  const wait = hasWait ? stackedBars(names, [["transfer_us", "Data transfer", "#59a14f"], ["wait_us", "Synchronizing (wait)", "#edc948"]]
    .map(([k, label, color]) => ({ name: label, color, values: names.map((w) => Number(workers[w][k]) || 0) })), fmtUs, { title: "Communication: transfer vs wait, per worker" }) : null;
  const notes: string[] = Array.isArray(d.notes) ? d.notes.map(String) : [];
  const devRows = d.devices && typeof d.devices === "object" ? Object.entries<any>(d.devices).map(([w, v]) => ({
    worker: w, rank: v?.rank ?? "–", world_size: v?.world_size ?? "–", backend: v?.backend ?? "–",
    gpus: v?.gpus && typeof v.gpus === "object" ? Object.entries<any>(v.gpus).map(([g, x]) => `${g}: ${x?.name ?? ""}`).join(", ") || "none" : "none",
  })) : [];
  const devices = devRows.length ? h("div", { id: "dist-devices" }, dataTable([{ key: "worker", label: "Worker" }, { key: "rank", label: "Rank" }, { key: "world_size", label: "World size" },
    { key: "backend", label: "Backend" }, { key: "gpus", label: "GPUs" }], devRows, { caption: "Workers", filterKeys: ["worker"], sortKey: "worker", sortDesc: false })) : h("div");
  mount(el, h("div", { class: "grid2" }, parts[0], wait), h("div", { class: "grid2" }, parts[1], devices), parts[2],
    notes.length ? h("section", { class: "section" }, h("h3", null, "Notes"), h("ul", { class: "recs" }, notes.map((n) => h("li", null, n)))) : null);
}

/** steps: {step: {worker: {..._us}}} → stacked bars per (step, worker); anything else shown as data. */
function stepsPart(steps: any): HTMLElement {
  if (!steps || typeof steps !== "object" || !Object.keys(steps).length) return h("div", { class: "banner info" }, "No per-step data.");
  const cats: string[] = [], rows: any[] = [];
  for (const [step, per] of Object.entries<any>(steps)) {
    if (per && typeof per === "object" && !Array.isArray(per)) for (const [w, v] of Object.entries<any>(per)) {
      if (v && typeof v === "object") { cats.push(`${step} · ${w}`); rows.push(v); }
    }
  }
  if (!rows.length) return h("div", { class: "section" }, h("h3", null, "Per step"), genericValue(steps));
  const keys = PARTS.filter(([k]) => rows.some((r) => typeof r[k] === "number"));
  // one bar per (step, worker): the grid would be unreadable past a few dozen
  const use = keys.length ? keys : Object.keys(rows[0]).filter((k) => typeof rows[0][k] === "number").map((k, i) => [k, k, ["#4e79a7", "#e15759", "#76b7b2", "#bab0ac"][i % 4]] as [string, string, string]);
  return stackedBars(cats, use.map(([k, label, color]) => ({ name: label, color, values: rows.map((r) => Number(r[k]) || 0) })), fmtUs, { title: "Per step and worker" });
}

function commPart(ops: any): HTMLElement {
  let rows: any[] = [];
  if (Array.isArray(ops)) rows = ops;
  else if (ops && typeof ops === "object") for (const [w, v] of Object.entries<any>(ops)) {
    if (Array.isArray(v)) rows.push(...v.map((r) => ({ worker: w, ...r })));
    else if (v && typeof v === "object") for (const [name, r] of Object.entries<any>(v)) rows.push({ worker: w, name, ...(typeof r === "object" ? r : { value: r }) });
  }
  if (!rows.length) return h("div", { class: "banner info" }, "No communication operators.");
  const keys = Array.from(new Set(rows.slice(0, 50).flatMap((r) => Object.keys(r))));
  const cols: Column[] = keys.map((k) => ({ key: k, label: k.replace(/_/g, " "), numeric: typeof rows[0][k] === "number", fmt: k.endsWith("_us") ? fmtUs : /bytes/.test(k) ? fmtBytes : undefined }));
  return h("div", { id: "comm-table" }, dataTable(cols, rows, { caption: "Communication operators", filterKeys: ["name", "worker"], sortKey: keys.find((k) => k.endsWith("_us")) }));
}
export { fmtNum };
