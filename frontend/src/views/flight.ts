// The flight recorder's telemetry of the whole job (the /telemetry routes, docs/flight-recorder.md) in the
// Distributed view: the stragglers by the stated rule, the captures the triggers started with their reason (each a
// link to that capture's Distributed view), and a rank × step heatmap of the whole run, downsampled by the backend.
import { h, mount } from "../dom";
import { getJSON } from "../api";
import { heatmap } from "../charts";
import { dataTable, Column } from "../table";
import { segmented } from "./widgets";
import type { Ctx } from "../ctx";

const METRICS: [string, string][] = [
  ["work_ms", "Work"], ["wall_ms", "Wall"], ["data_ms", "Data wait"], ["comm_ms", "Collectives"], ["gpu_ms", "GPU"],
];
const MAX_CELLS = 16384; // cells drawn at once (SVG stays responsive)
const MAX_COLS = 200;

const parentOf = (run: string): string => { const i = run.lastIndexOf("/"); return i < 0 ? "." : run.slice(0, i); };
const ms = (v: number): string => (isFinite(v) ? `${v.toFixed(v >= 100 ? 0 : 1)} ms` : "–");
const arr = (v: any): any[] => (Array.isArray(v) ? v : []);

/** Opens another run's Distributed view (a capture's), as a link of the page's own URL state. */
function openRun(run: string): void {
  const u = new URL(location.href);
  u.hash = "#" + new URLSearchParams({ run, span: "1", view: "distributed" }).toString();
  location.assign(u.href);
}

/** Fills `box` with the telemetry of this run's job: the run's own folder, its parent (a capture's run), or the
 * folder picked; leaves it empty when the logdir holds no telemetry. */
export async function flightSection(ctx: Ctx, box: HTMLElement): Promise<void> {
  let runs: string[];
  try { runs = arr((await getJSON<any>("telemetry/runs", {}, { cache: true }))?.runs).map(String); } catch { return; }
  if (!ctx.alive() || !runs.length) return;
  const picked = ctx.get("trun");
  const trun = picked && runs.includes(picked) ? picked
    : runs.includes(ctx.run) ? ctx.run : runs.includes(parentOf(ctx.run)) ? parentOf(ctx.run) : runs[0];
  const metric = ctx.get("tmetric") ?? "work_ms";
  let d: any, hm: any;
  try {
    d = await getJSON<any>("telemetry", { run: trun });
    const ranks = Math.max(1, arr(d?.ranks).length);
    const cols = Math.max(1, Math.min(MAX_COLS, Math.floor(MAX_CELLS / ranks)));
    hm = await getJSON<any>("telemetry/heatmap", { run: trun, metric, max_steps: cols });
  } catch (e) {
    if (ctx.alive()) mount(box, h("h3", null, "Flight recorder"), h("div", { class: "banner" }, (e as Error).message));
    return;
  }
  if (!ctx.alive()) return;
  const rerender = () => void flightSection(ctx, box);
  const pick = runs.length > 1 ? h("label", null, "Telemetry of ",
    h("select", { id: "flight-run", onchange: (ev: Event) => { ctx.set("trun", (ev.target as HTMLSelectElement).value); rerender(); } },
      runs.map((r) => h("option", { value: r, selected: r === trun }, r === "." ? "(the logdir)" : r)))) : null;
  const tools = h("div", { class: "toolbar" }, pick,
    segmented("Metric", METRICS, metric, (v) => { ctx.set("tmetric", v); rerender(); }));

  const rankStarts = arr(hm?.rank_starts).map(Number);
  const stepStarts = arr(hm?.step_starts).map(Number);
  const cells = arr(hm?.cells).map((row) => arr(row).map((v) => (typeof v === "number" ? v : NaN)));
  const bin = Number(hm?.step_bin) || 1;
  const steps = Number(hm?.steps) || 0;
  const heat = cells.length && stepStarts.length ? heatmap(rankStarts.map(String), stepStarts.map(String), cells, ms, {
    id: "flight-heatmap",
    title: `${METRICS.find(([m]) => m === metric)?.[1] ?? metric} per rank over the whole run (${hm?.agg ?? "max"} of ${bin} step${bin > 1 ? "s" : ""} per cell)`,
    rowLabel: (r) => `rank ${r}`, colLabel: (c) => `s${c}`,
    cellTitle: (i, j, text) => `rank ${rankStarts[i]} · steps ${stepStarts[j]}–${Math.min(steps, stepStarts[j] + bin) - 1}\n${text}`,
    caption: metric === "work_ms" ? "work: wall time minus time in collectives (what the rank did, not what it waited for)" : "",
  }) : h("div", { class: "banner info" }, "No steps recorded.");

  const lines: string[] = [];
  for (const c of arr(d?.chronic)) lines.push(`chronic straggler: rank ${c.rank}, late in ${c.late_steps} steps (${(100 * Number(c.late_frac)).toFixed(0)} %), +${ms(Number(c.excess_ms))} on average`);
  for (const o of arr(d?.occasional)) {
    const b = arr(o.bursts).slice(0, 5).map((x: any) => `steps ${x.first}–${x.last} (+${ms(Number(x.excess_ms))})`).join("; ");
    lines.push(`occasional straggler: rank ${o.rank}, late in ${o.late_steps} steps; bursts: ${b}`);
  }
  if (!lines.length) lines.push("no straggler");
  const strag = h("div", { id: "flight-stragglers" }, h("ul", { class: "recs" }, lines.map((t) => h("li", null, t))),
    h("p", { class: "muted" }, `rule: ${String(d?.rule ?? "")}`));

  const caps = arr(d?.captures).map((c: any) => ({
    step: c.step, rule: String(c.rule ?? ""), why: String(c.why ?? ""), run: String(c.run ?? c.dir ?? ""),
    ranks: arr(c.captured).map((x: any) => `${x.rank} (${x.role})`).join(", "),
  }));
  const capTable = caps.length ? h("div", { id: "flight-captures" }, dataTable([
    { key: "step", label: "Step", numeric: true }, { key: "rule", label: "Rule" },
    { key: "why", label: "Why", wrap: true }, { key: "ranks", label: "Ranks captured" },
  ] as Column[], caps, {
    caption: "Captures the triggers started", filterKeys: ["rule", "why"], sortKey: "step", sortDesc: false, pageSize: 20,
    actions: (r) => (r.run === ctx.run ? h("span", { class: "muted" }, "shown") : h("button", { type: "button", class: "btn small",
      title: "this capture's Distributed view (its diagnosis: critical path and stragglers)", onclick: () => openRun(r.run) }, "open")),
  })) : h("p", { class: "muted", id: "flight-captures" }, "No capture ran.");

  mount(box, h("h3", null, "Flight recorder"),
    h("p", { class: "muted" }, `${arr(d?.ranks).length} ranks, ${steps} steps of telemetry in ${trun === "." ? "the logdir" : trun}`),
    tools, heat, strag, capTable);
}
