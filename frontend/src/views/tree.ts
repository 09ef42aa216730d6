// A collapsible tree table (modules, diff): nodes have a name, numeric fields and children.
import { h, mount, fmtNum } from "../dom";
import type { Column } from "../table";
import { exportButtons } from "../export";

export interface TreeNode { name: string; children?: TreeNode[]; [k: string]: any }

/** Renders nodes as an indented table; the first `openDepth` levels start expanded (with `focus`: only that
 * root's subtree, its row marked selected). */
export function treeTable(columns: Column[], roots: TreeNode[], openDepth = 1, id?: string, focus?: TreeNode): HTMLElement {
  const body = h("tbody");
  const open = new Set<TreeNode>();
  const shown: [number, TreeNode][] = [];
  const walk = (n: TreeNode, d: number) => { if (d < openDepth) open.add(n); (n.children ?? []).forEach((c) => walk(c, d + 1)); };
  if (focus) walk(focus, 0);
  if (!focus) roots.forEach((r) => walk(r, 0));
  function draw(): void {
    const trs: HTMLElement[] = [];
    const visit = (n: TreeNode, d: number) => {
      const kids = n.children ?? [];
      const tog = h("span", { class: "toggle" }, kids.length ? (open.has(n) ? "▾" : "▸") : "");
      const tr = h("tr", { class: (kids.length ? "clickable" : "") + (n === focus ? " selected" : ""), "data-depth": d, id: n === focus ? "tree-focus" : null }, columns.map((c, i) => h("td", { class: c.numeric ? "num" : "", style: i === 0 ? `padding-left:${8 + d * 16}px` : "" },
        i === 0 ? [tog, c.fmt ? c.fmt(n[c.key], n) : String(n[c.key] ?? "")] : c.fmt ? c.fmt(n[c.key], n) : fmtNum(n[c.key]))));
      if (kids.length) tr.addEventListener("click", () => { if (open.has(n)) open.delete(n); else open.add(n); draw(); });
      trs.push(tr); shown.push([d, n]);
      if (open.has(n)) kids.forEach((k) => visit(k, d + 1));
    };
    shown.length = 0;
    roots.forEach((r) => visit(r, 0));
    mount(body, trs.length ? trs : h("tr", null, h("td", { colspan: columns.length, class: "empty" }, "No data.")));
  }
  draw();
  const tools = h("div", { class: "table-tools" }, h("span", { class: "table-info" }, "click a row to expand or collapse it"),
    exportButtons(() => id ?? "tree", () => ({ header: ["depth", ...columns.map((c) => c.key)], rows: shown.map(([d, n]) => [d, ...columns.map((c) => n[c.key])]) })));
  return h("div", null, tools, h("div", { class: "table-scroll" }, h("table", { class: "data-table tree", id: id ?? null }, h("thead", null, h("tr", null, columns.map((c) => h("th", { class: c.numeric ? "num" : "" }, c.label)))), body)));
}

/** Finds the tree roots in an answer shaped {tree|modules|roots|nodes: ...} or as a node/array. */
export function findRoots(d: any, keys: string[]): TreeNode[] | null {
  for (const k of keys) {
    const v = d?.[k];
    if (Array.isArray(v) && v.length && typeof v[0] === "object" && ("children" in v[0] || "name" in v[0])) return v;
    if (v && typeof v === "object" && !Array.isArray(v) && ("children" in v || "name" in v)) return [v];
  }
  if (Array.isArray(d) && d.length && typeof d[0] === "object") return d;
  if (d && typeof d === "object" && "children" in d) return [d];
  return null;
}

/** The numeric keys present on the first few nodes of a tree (column candidates). */
export function numericKeys(roots: TreeNode[]): string[] {
  const seen = new Set<string>();
  const visit = (n: TreeNode, budget: { left: number }) => {
    if (budget.left-- <= 0) return;
    for (const [k, v] of Object.entries(n)) if (typeof v === "number") seen.add(k);
    (n.children ?? []).forEach((c) => visit(c, budget));
  };
  const b = { left: 200 };
  roots.forEach((r) => visit(r, b));
  return [...seen];
}
