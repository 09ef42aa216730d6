// Memory: allocated/reserved curve per device (drag to zoom, peak marked); the selected range
// filters the memory events and statistics tables.
import { h, mount, fmtUs, fmtBytes, fmtNum } from "../dom";
import { getJSON } from "../api";
import { lineChart, LineSeries } from "../charts";
import { dataTable, Column, genericValue } from "../table";
import type { Ctx } from "../ctx";

interface DeviceCurve { device: string; t: number[]; alloc: number[]; reserved: number[] }

const T_KEYS = ["ts_us", "t_us", "time_us", "ts", "t", "x"];
const A_KEYS = ["allocated", "total_allocated", "allocated_bytes", "alloc", "y"];
const R_KEYS = ["reserved", "total_reserved", "reserved_bytes"];
const pick = (o: any, keys: string[]) => { for (const k of keys) if (o && o[k] !== undefined) return o[k]; return undefined; };

/** Normalises the curve answer (several plausible shapes) into one series per device. */
export function parseCurves(d: any): DeviceCurve[] {
  const src = d?.curves ?? (Array.isArray(d?.devices) && typeof d.devices[0] === "string" ? null : d?.devices) ?? d?.rows ?? d;
  const out: DeviceCurve[] = [];
  const add = (device: string, v: any) => {
    const c: DeviceCurve = { device, t: [], alloc: [], reserved: [] };
    if (Array.isArray(v)) {
      for (const p of v) {
        if (Array.isArray(p)) { c.t.push(+p[0]); c.alloc.push(+p[1]); c.reserved.push(p.length > 2 ? +p[2] : NaN); }
        else if (p && typeof p === "object") { c.t.push(+pick(p, T_KEYS)); c.alloc.push(+pick(p, A_KEYS)); c.reserved.push(+(pick(p, R_KEYS) ?? NaN)); }
      }
    } else if (v && typeof v === "object") {
      const t = pick(v, T_KEYS), a = pick(v, A_KEYS), r = pick(v, R_KEYS);
      if (Array.isArray(t) && Array.isArray(a)) { c.t = t.map(Number); c.alloc = a.map(Number); c.reserved = Array.isArray(r) ? r.map(Number) : []; }
      else return;
    } else return;
    out.push(c);
  };
  if (Array.isArray(src)) src.forEach((x: any, i: number) => { if (x && typeof x === "object" && !Array.isArray(x) && (x.device ?? x.name) !== undefined) add(String(x.device ?? x.name), x.points ?? x.curve ?? x); else add(String(i), x); });
  else if (src && typeof src === "object") for (const [k, v] of Object.entries(src)) if (!["metadata", "peaks", "start_us", "end_us", "devices", "default_device", "total_bytes", "points"].includes(k)) add(k, v);
  return out.filter((c) => c.t.length);
}

export async function memoryView(ctx: Ctx, el: HTMLElement): Promise<void> {
  const range: [number, number] | null = ctx.get("range") ? (ctx.get("range")!.split(",").map(Number) as [number, number]) : null;
  // the backend downsamples to a fixed number of points: ask again for a selected range
  const curveAns = await getJSON<any>("memory/curve", { ...ctx.sel(), start_us: range?.[0], end_us: range?.[1] }, { cache: true });
  if (!ctx.alive()) return;
  const curves = parseCurves(curveAns);
  if (!curves.length) { mount(el, h("div", { class: "banner info", id: "no-memory" }, "No memory events in this profile (profile with profile_memory=True).")); return; }
  let device = ctx.get("device") ?? (typeof curveAns?.default_device === "string" ? curveAns.default_device : curves[0].device);
  if (!curves.some((c) => c.device === device)) device = curves[0].device;
  const devSel = h("select", { id: "mem-device", "aria-label": "device" }, curves.map((c) => h("option", { value: c.device }, c.device))) as HTMLSelectElement;
  devSel.value = device;
  devSel.addEventListener("change", () => { ctx.set("device", devSel.value); ctx.set("range", undefined); void memoryView(ctx, el); });
  const cur = curves.find((c) => c.device === device)!;
  const series: LineSeries[] = [{ name: "Allocated", x: cur.t, y: cur.alloc, color: "#1976d2" }];
  // a trace without the allocator's "Total Reserved" (or with 0 throughout) has no reserved curve
  const hasReserved = cur.reserved.some((v) => isFinite(v) && v > 0) || (curveAns?.peaks?.[device]?.reserved_bytes ?? 0) > 0;
  if (hasReserved) series.push({ name: "Reserved", x: cur.t, y: cur.reserved.map((v) => (isFinite(v) ? v : 0)), color: "#f57c00" });
  const chart = lineChart(series, fmtUs, fmtBytes, {
    title: `Memory usage on ${device}` + (range ? ` (${fmtUs(range[0])} – ${fmtUs(range[1])})` : ""), range, yBase: 1024,
    onSelect: (a, b) => { ctx.set("range", `${a.toFixed(1)},${b.toFixed(1)}`); void memoryView(ctx, el); },
    onReset: () => { ctx.set("range", undefined); void memoryView(ctx, el); },
  });
  const tables = h("div", { id: "mem-tables" }, h("p", { class: "muted" }, "loading…"));
  const peak = curveAns?.peaks?.[device];
  const total = curveAns?.total_bytes?.[device];
  mount(el, h("div", { class: "cards" }, h("section", { class: "card", id: "mem-peak" }, h("h3", null, `Peak memory on ${device}`), h("dl", { class: "kv" },
      h("dt", null, "Allocated"), h("dd", null, fmtBytes(peak?.allocated_bytes ?? Math.max(0, ...cur.alloc)), peak?.allocated_ts_us !== undefined ? ` at ${fmtUs(peak.allocated_ts_us)}` : ""),
      h("dt", null, "Reserved"), hasReserved ? h("dd", null, fmtBytes(peak?.reserved_bytes ?? null), peak?.reserved_ts_us !== undefined && peak?.reserved_ts_us !== null ? ` at ${fmtUs(peak.reserved_ts_us)}` : "")
        : h("dd", { class: "muted", id: "mem-no-reserved" }, "not recorded in this trace"),
      total ? [h("dt", null, "Device memory"), h("dd", null, fmtBytes(total))] : null))),
    h("div", { class: "toolbar" }, h("label", null, "Device ", devSel),
    h("span", { class: "muted" }, "Drag on the chart to select a time range (filters the tables), double-click to reset."),
    range ? h("button", { type: "button", class: "btn small", id: "mem-reset", onclick: () => { ctx.set("range", undefined); void memoryView(ctx, el); } }, "Reset range") : null),
    chart, tables);
  const params = { ...ctx.sel(), start_us: range?.[0], end_us: range?.[1], device };
  const [events, stats] = await Promise.all([getJSON<any>("memory/events", params).catch((e) => e), getJSON<any>("memory/stats", params).catch((e) => e)]);
  if (!ctx.alive()) return;
  mount(tables, statsPart(stats, device), eventsPart(events, device));
}

const BYTES = /bytes|size|alloc|reserv|increase|memory/i;
function columnsFor(rows: any[]): Column[] {
  const keys = Array.from(new Set(rows.slice(0, 50).flatMap((r) => Object.keys(r))));
  return keys.map((k) => {
    const num = rows.some((r) => typeof r[k] === "number");
    return { key: k, label: k.replace(/_bytes$|_us$/, "").replace(/_/g, " "), numeric: num, fmt: num ? (k.endsWith("_us") ? fmtUs : BYTES.test(k) && !/count|calls|addr/i.test(k) ? fmtBytes : k === "addr" ? (v: any) => (typeof v === "number" ? "0x" + v.toString(16) : "–") : fmtNum) : undefined };
  });
}

function rowsFor(d: any, device: string, keys: string[]): any[] | null {
  if (d instanceof Error) return null;
  for (const k of keys) {
    const v = d?.[k];
    if (Array.isArray(v)) return v;
    if (v && typeof v === "object" && Array.isArray(v[device])) return v[device];
  }
  if (d && typeof d === "object" && Array.isArray(d[device])) return d[device];
  if (d?.devices && Array.isArray(d.devices[device])) return d.devices[device];
  if (Array.isArray(d)) return d;
  return null;
}

function statsPart(d: any, device: string): HTMLElement {
  if (d instanceof Error) return h("div", { class: "banner" }, d.message);
  const rows = rowsFor(d, device, ["rows", "stats", "operators"]);
  if (rows) return h("div", { id: "mem-stats" }, dataTable(columnsFor(rows), rows, { caption: "Memory statistics by operator", filterKeys: ["name", "operator"] }));
  const per = d?.devices?.[device] ?? d?.[device] ?? d;
  return h("div", { id: "mem-stats", class: "section" }, h("h3", null, "Memory statistics"), genericValue(per));
}

function eventsPart(d: any, device: string): HTMLElement {
  if (d instanceof Error) return h("div", { class: "banner" }, d.message);
  const rows = rowsFor(d, device, ["rows", "events"]) ?? [];
  return h("div", { id: "mem-events" }, dataTable(columnsFor(rows), rows, { caption: "Memory events (allocations and frees)", filterKeys: ["name", "operator", "op"], pageSize: 50 }));
}
