// Kernels: pies of the top kernels, a sortable table grouped by name or name + operator.
import { h, mount, fmtUs, fmtNum, fmtPct } from "../dom";
import { getJSON } from "../api";
import { pie } from "../charts";
import { dataTable, Column } from "../table";
import { segmented } from "./widgets";
import type { Ctx } from "../ctx";

export async function kernelsView(ctx: Ctx, el: HTMLElement): Promise<void> {
  const groupBy = ctx.get("group_by") === "name_op" ? "name_op" : "name";
  const d = await getJSON<any>("kernels", { ...ctx.sel(), group_by: groupBy }, { cache: true });
  if (!ctx.alive()) return;
  const rows: any[] = Array.isArray(d.rows) ? d.rows : [];
  if (!rows.length) {
    mount(el, h("div", { class: "banner info", id: "no-kernels" }, "This profile has no GPU kernels (CPU-only trace)."));
    return;
  }
  const cols: Column[] = [
    { key: "name", label: "Kernel" },
    ...(groupBy === "name_op" ? [{ key: "op", label: "Operator" }] : []),
    { key: "calls", label: "Calls", numeric: true },
    { key: "total_us", label: "Total", numeric: true, fmt: fmtUs },
    { key: "mean_us", label: "Mean", numeric: true, fmt: fmtUs },
    { key: "min_us", label: "Min", numeric: true, fmt: fmtUs },
    { key: "max_us", label: "Max", numeric: true, fmt: fmtUs },
    { key: "blocks_per_sm", label: "Blocks/SM", numeric: true, fmt: fmtNum },
    { key: "achieved_occupancy", label: "Est. achieved occupancy", numeric: true, fmt: fmtPct },
    { key: "tensor_cores", label: "Tensor cores", fmt: (v) => (v === true ? "yes" : v === false ? "no" : fmtNum(v)) },
  ];
  const byTc = new Map<string, number>();
  for (const r of rows) { const k = r.tensor_cores ? "Using Tensor Cores" : "Not using Tensor Cores"; byTc.set(k, (byTc.get(k) ?? 0) + (r.total_us ?? 0)); }
  mount(el,
    h("div", { class: "toolbar" }, segmented("Group by", [["name", "Kernel"], ["name_op", "Kernel + operator"]], groupBy, (v) => { ctx.set("group_by", v); void kernelsView(ctx, el); })),
    h("div", { class: "grid2" },
      pie(rows.map((r) => ({ name: groupBy === "name_op" ? `${r.name} (${r.op})` : String(r.name), value: Number(r.total_us) || 0 })), fmtUs, { title: "Top kernels by total time" }),
      pie([...byTc].map(([name, value]) => ({ name, value })), fmtUs, { title: "Tensor Cores utilization" })),
    dataTable(cols, rows, { filterKeys: ["name", "op"], sortKey: "total_us", exportName: `kernels-${ctx.run}` }));
}
