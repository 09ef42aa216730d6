// Operators: pies of the top operators by the chosen metric, a sortable table, call stacks on click.
import { h, mount, fmtUs } from "../dom";
import { getJSON } from "../api";
import { pie, nameColors } from "../charts";
import { dataTable, Column } from "../table";
import { notesBanner, segmented, timelineButton } from "./widgets";
import { icicle, stackTree } from "../icicle";
import type { Ctx } from "../ctx";

const METRICS: [string, string][] = [["device_self_us", "Device self"], ["device_total_us", "Device total"], ["host_self_us", "Host self"], ["host_total_us", "Host total"]];

export async function operatorsView(ctx: Ctx, el: HTMLElement): Promise<void> {
  const groupBy = ctx.get("group_by") === "name_shape" ? "name_shape" : "name";
  const d = await getJSON<any>("operators", { ...ctx.sel(), group_by: groupBy }, { cache: true });
  if (!ctx.alive()) return;
  const rows: any[] = Array.isArray(d.rows) ? d.rows : [];
  const hasDevice = rows.some((r) => (r.device_total_us ?? 0) > 0);
  const metric = ctx.get("metric") ?? (hasDevice ? "device_self_us" : "host_self_us");
  const stackBox = h("div", { id: "op-stack" });
  const cols: Column[] = [
    { key: "name", label: "Name" },
    ...(groupBy === "name_shape" ? [{ key: "input_shape", label: "Input shape", fmt: (v: any) => (typeof v === "string" ? v : JSON.stringify(v ?? "")) }] : []),
    { key: "calls", label: "Calls", numeric: true },
    ...(hasDevice ? [{ key: "device_self_us", label: "Device self", numeric: true, fmt: fmtUs }, { key: "device_total_us", label: "Device total", numeric: true, fmt: fmtUs }] : []),
    { key: "host_self_us", label: "Host self", numeric: true, fmt: fmtUs },
    { key: "host_total_us", label: "Host total", numeric: true, fmt: fmtUs },
    { key: "tc_eligible", label: "TC eligible", fmt: (v) => (v === true ? "yes" : v === false ? "no" : "–") },
    { key: "has_call_stack", label: "Stack", fmt: (v) => (v ? "view" : "") },
  ];
  let selected: HTMLTableRowElement | null = null;
  const table = dataTable(cols, rows, {
    filterKeys: ["name"], sortKey: metric, sortDesc: true, exportName: `operators-${ctx.run}`, actions: (r) => timelineButton(ctx, String(r.name), { of: "operators",
      input_shape: groupBy === "name_shape" ? (typeof r.input_shape === "string" ? r.input_shape : JSON.stringify(r.input_shape)) : undefined }),
    onRowClick: async (r, tr) => {
      selected?.classList.remove("selected"); selected = tr; tr.classList.add("selected");
      if (r.has_call_stack === false) { mount(stackBox, h("h3", null, "Call stacks of ", h("code", null, r.name)), h("p", { class: "muted" }, "No call stack recorded for this operator (profile with with_stack=True).")); return; }
      mount(stackBox, h("h3", null, "Call stacks of ", h("code", null, r.name)), h("p", { class: "muted" }, "loading…"));
      try {
        const st = await getJSON<any>("operators/stack", { ...ctx.sel(), name: r.name, input_shape: groupBy === "name_shape" ? (typeof r.input_shape === "string" ? r.input_shape : JSON.stringify(r.input_shape)) : undefined });
        mount(stackBox, h("h3", null, "Call stacks of ", h("code", null, r.name)), stackIcicle(String(r.name), st, hasDevice), renderStacks(st));
      } catch (e) { mount(stackBox, h("div", { class: "banner" }, (e as Error).message)); }
    },
  });
  const top = rows.slice().sort((a, b) => (b[metric] ?? 0) - (a[metric] ?? 0));
  const colorOf = nameColors();  // one colour per operator in both pies
  mount(el,
    h("div", { class: "toolbar" },
      segmented("Group by", [["name", "Operator"], ["name_shape", "Operator + input shape"]], groupBy, (v) => { ctx.set("group_by", v); void operatorsView(ctx, el); }),
      segmented("Pie metric", hasDevice ? METRICS : METRICS.filter((m) => m[0].startsWith("host")), metric, (v) => { ctx.set("metric", v); void operatorsView(ctx, el); })),
    notesBanner(d, "operators-notes"),
    h("div", { class: "grid2" },
      pie(top.map((r) => ({ name: opLabel(r, groupBy), value: Number(r[metric]) || 0 })), fmtUs, { title: `Top operators by ${METRICS.find((m) => m[0] === metric)?.[1] ?? metric} time`, colorOf }),
      pie(rows.slice().sort((a, b) => (b.calls ?? 0) - (a.calls ?? 0)).map((r) => ({ name: opLabel(r, groupBy), value: Number(r.calls) || 0 })), (v) => `${v} calls`, { title: "Top operators by calls", colorOf })),
    table, stackBox);
}

function opLabel(r: any, groupBy: string): string {
  return groupBy === "name_shape" && r.input_shape ? `${r.name} ${typeof r.input_shape === "string" ? r.input_shape : JSON.stringify(r.input_shape)}` : String(r.name);
}

/** Renders the stack answer: a list of {stack, calls, ...} or of strings, or a plain object. */
function renderStacks(st: any): HTMLElement {
  const list: any[] = Array.isArray(st) ? st : Array.isArray(st?.stacks) ? st.stacks : Array.isArray(st?.rows) ? st.rows : [];
  if (!list.length) return h("p", { class: "muted" }, "No call stack recorded for this operator (profile with with_stack=True).");
  return h("div", null, list.map((x) => {
    const frames = typeof x === "string" ? x.split(";") : Array.isArray(x) ? x : x?.call_stack ?? x?.stack ?? [];
    const text = (Array.isArray(frames) ? frames.map(String) : String(frames).split(";")).filter(Boolean).join("\n");
    const meta = x && typeof x === "object" && !Array.isArray(x) ? Object.entries(x).filter(([k]) => !["stack", "call_stack", "name", "input_shape", "tc_eligible"].includes(k))
      .map(([k, v]) => `${k.replace(/_us$/, "").replace(/_/g, " ")}: ${typeof v === "number" && k.endsWith("_us") ? fmtUs(v) : String(v)}`).join(" · ") : "";
    return h("div", null, meta ? h("div", { class: "muted" }, meta) : null, h("pre", { class: "stack" }, text || "(empty stack)"));
  }));
}

/** The operator's call stacks as an icicle (outermost frame on top), sized by device or host time. */
function stackIcicle(name: string, st: any, device: boolean): HTMLElement | null {
  const list: any[] = Array.isArray(st) ? st : Array.isArray(st?.stacks) ? st.stacks : Array.isArray(st?.rows) ? st.rows : [];
  const key = device ? "device_total_us" : "host_total_us";
  const stacks = list.filter((x) => x && typeof x === "object" && Array.isArray(x.call_stack) && x.call_stack.length)
    .map((x) => ({ frames: (x.call_stack as unknown[]).map(String).reverse(), values: { v: Number(x[key]) || 0 } }));
  if (!stacks.length) return null;
  return icicle([stackTree(name, stacks)], (n) => Number(n.v) || 0, fmtUs, { id: "stack-icicle", title: `Call stacks, sized by ${device ? "device" : "host"} time (outermost frame on top; click to zoom)` });
}
