// Modules: the module hierarchy (python_function module events) as a collapsible tree with times.
import { h, mount, fmtUs, fmtNum } from "../dom";
import { getJSON } from "../api";
import { treeTable, findRoots, numericKeys } from "./tree";
import { icicle } from "../icicle";
import { notesBanner, segmented } from "./widgets";
import type { Ctx } from "../ctx";

export async function modulesView(ctx: Ctx, el: HTMLElement): Promise<void> {
  const d = await getJSON<any>("modules", ctx.sel(), { cache: true });
  if (!ctx.alive()) return;
  const roots = findRoots(d, ["modules", "tree", "roots", "nodes", "rows"]);
  if (!roots || !roots.length) {
    mount(el, h("div", { class: "banner info", id: "no-modules" }, "No module information in this profile (needs python_function events from with_stack=True)."),
      notesBanner(d, "modules-notes"));
    return;
  }
  const nk = numericKeys(roots).filter((k) => !/(^|_)id$/.test(k));
  const hasDevice = (function any(ns: any[]): boolean { return ns.some((n) => (n.device_total_us ?? 0) > 0 || any(n.children ?? [])); })(roots);
  const size = hasDevice && ctx.get("size") === "device" ? "device" : "host";
  const key = size === "device" ? "device_total_us" : "host_total_us";
  mount(el, h("div", { class: "toolbar" }, segmented("Size by", hasDevice ? [["host", "Host time"], ["device", "Device time"]] : [["host", "Host time"]], size,
      (v) => { ctx.set("size", v); void modulesView(ctx, el); })),
    typeof d.note === "string" ? h("div", { class: "banner info", id: "modules-note", role: "status" }, d.note) : null,
    notesBanner(d, "modules-notes"),
    icicle(roots, (n) => Number(n[key]) || 0, fmtUs, { id: "modules-icicle", title: `Module icicle, sized by ${size} time (click to zoom)`, rootName: "all modules" }),
    h("h3", null, "Module view"),
    treeTable([{ key: "name", label: "Module" }, ...nk.map((k) => ({ key: k, label: k.replace(/_us$/, "").replace(/_/g, " "), numeric: true, fmt: k.endsWith("_us") ? fmtUs : fmtNum }))], roots, 2, "modules-tree"));
}
