// Kernels: pies of the top kernels, a sortable table grouped by name or name + operator.
import { h, mount, fmtUs, fmtNum, fmtPct, fmtBytes } from "../dom";
import { getJSON } from "../api";
import { pie, nameColors } from "../charts";
import { dataTable, Column } from "../table";
import { notesBanner, segmented, timelineButton } from "./widgets";
import type { Ctx } from "../ctx";

export async function kernelsView(ctx: Ctx, el: HTMLElement): Promise<void> {
  const gb = ctx.get("group_by");
  const groupBy = gb === "name_op" || gb === "name_op_config" ? gb : "name";
  const d = await getJSON<any>("kernels", { ...ctx.sel(), group_by: groupBy }, { cache: true });
  if (!ctx.alive()) return;
  const rows: any[] = Array.isArray(d.rows) ? d.rows : [];
  if (!rows.length) {
    mount(el, h("div", { class: "banner info", id: "no-kernels" }, "This profile has no GPU kernels (CPU-only trace)."));
    return;
  }
  const cols: Column[] = [
    { key: "name", label: "Kernel" },
    ...(groupBy !== "name" ? [{ key: "op", label: "Operator" }] : []),
    { key: "calls", label: "Calls", numeric: true },
    { key: "total_us", label: "Total", numeric: true, fmt: fmtUs },
    { key: "mean_us", label: "Mean", numeric: true, fmt: fmtUs, optional: groupBy === "name_op_config" },
    { optional: true, key: "min_us", label: "Min", numeric: true, fmt: fmtUs },
    { optional: true, key: "max_us", label: "Max", numeric: true, fmt: fmtUs },
    { optional: true, key: "blocks_per_sm", label: "Blocks/SM", numeric: true, fmt: fmtNum },
    { optional: groupBy === "name_op_config", key: "achieved_occupancy", label: "Est. achieved occupancy", numeric: true, fmt: fmtPct },
    { optional: true, key: "tensor_cores", label: "Tensor cores", fmt: (v) => (v === true ? "yes" : v === false ? "no" : fmtNum(v)) },
    { key: "grid", label: "Grid", fmt: varies((v) => String(v)), optional: groupBy !== "name_op_config" },
    { key: "block", label: "Block", fmt: varies((v) => String(v)), optional: groupBy !== "name_op_config" },
    { key: "registers_per_thread", label: "Registers/thread", numeric: true, fmt: varies(fmtNum) },
    { key: "shared_memory", label: "Shared memory", numeric: true, fmt: varies(fmtBytes), title: "bytes per block, static + dynamic (as Kineto records it)" },
    // only traces from our CUPTI converter split it (Kineto records the total only)
    ...(rows.some((r) => "static_shared_memory" in r) ? [
      { optional: true, key: "static_shared_memory", label: "Static shared memory", numeric: true, fmt: varies(fmtBytes), title: "bytes per block, declared in the kernel" },
      { optional: true, key: "dynamic_shared_memory", label: "Dynamic shared memory", numeric: true, fmt: varies(fmtBytes), title: "bytes per block, given at launch" },
    ] : []),
    { key: "theoretical_occupancy", label: "Theoretical occupancy", numeric: true, fmt: fmtPct, title: "the occupancy the launch configuration allows on its GPU (CUDA occupancy calculator)" },
    ...(groupBy !== "name_op_config" ? [{ optional: true, key: "launch_configs", label: "Launch configs", numeric: true }] : []),
  ];
  const colorOf = nameColors();
  const byTc = new Map<string, number>();
  for (const r of rows) { const k = r.tensor_cores ? "Using Tensor Cores" : "Not using Tensor Cores"; byTc.set(k, (byTc.get(k) ?? 0) + (r.total_us ?? 0)); }
  mount(el,
    h("div", { class: "toolbar" }, segmented("Group by", [["name", "Kernel"], ["name_op", "Kernel + operator"], ["name_op_config", "Kernel + operator + launch config"]], groupBy, (v) => { ctx.set("group_by", v); void kernelsView(ctx, el); })),
    notesBanner(d, "kernels-notes"),
    h("div", { class: "grid2" },
      // one colour per name across both pies (the kernels' and Tensor Cores' never share one)
      pie(rows.map((r) => ({ name: groupBy !== "name" ? `${r.name} (${r.op})` + (groupBy === "name_op_config" ? ` ${r.grid ?? ""} ${r.block ?? ""}` : "") : String(r.name), value: Number(r.total_us) || 0 })), fmtUs, { title: "Top kernels by total time", colorOf }),
      pie([...byTc].map(([name, value]) => ({ name, value })), fmtUs, { title: "Tensor Cores utilization", colorOf })),
    dataTable(cols, rows, { filterKeys: ["name", "op"], sortKey: "total_us", exportName: `kernels-${ctx.run}`, actions: (r) => timelineButton(ctx, String(r.name), { of: "kernels", op: groupBy !== "name" && r.op !== undefined && r.op !== null ? String(r.op) : undefined }) }));
}

/** A launch-configuration cell: "varies" when the group's launches differ in it. */
function varies(f: (v: any) => string): (v: any, r: any) => string {
  return (v, r) => (v === null || v === undefined ? ((r?.launch_configs ?? 1) > 1 ? "varies" : "–") : f(v));
}
