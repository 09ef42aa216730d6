// Modules: the module hierarchy (python_function module events) as a collapsible tree with times.
import { h, mount, fmtUs, fmtNum } from "../dom";
import { getJSON } from "../api";
import { treeTable, findRoots, numericKeys } from "./tree";
import type { Ctx } from "../ctx";

export async function modulesView(ctx: Ctx, el: HTMLElement): Promise<void> {
  const d = await getJSON<any>("modules", ctx.sel(), { cache: true });
  if (!ctx.alive()) return;
  const roots = findRoots(d, ["modules", "tree", "roots", "nodes", "rows"]);
  if (!roots || !roots.length) {
    mount(el, h("div", { class: "banner info", id: "no-modules" }, "No module information in this profile (needs python_function events from with_stack=True)."));
    return;
  }
  const nk = numericKeys(roots).filter((k) => !/(^|_)id$/.test(k));
  mount(el, h("h3", null, "Module view"),
    treeTable([{ key: "name", label: "Module" }, ...nk.map((k) => ({ key: k, label: k.replace(/_us$/, "").replace(/_/g, " "), numeric: true, fmt: k.endsWith("_us") ? fmtUs : fmtNum }))], roots, 2, "modules-tree"));
}
