// An icicle (top-down flame) chart of a tree: each node's width is its share of its parent's value
// (host or device time), children left to right; a click zooms into a node, the path above it
// zooms back out. Plain HTML boxes with fixed-size text, so labels stay readable at any width.
import { h, mount, colorFor } from "./dom";

export interface INode { name: string; children?: INode[]; [k: string]: any }

const ROW_H = 20, MAX_DEPTH = 14, MIN_FRAC = 0.002;

/** The chart; `value(n)` sizes a node (a parent at least as wide as its children together). */
export function icicle(roots: INode[], value: (n: INode) => number, fmt: (v: number) => string, opts: { id?: string; title?: string; rootName?: string } = {}): HTMLElement {
  const top: INode = roots.length === 1 ? roots[0] : { name: opts.rootName ?? "all", children: roots };
  const val = (n: INode): number => {
    const own = value(n);
    const kids = (n.children ?? []).reduce((a, c) => a + val(c), 0);
    return Math.max(isFinite(own) ? own : 0, kids);
  };
  const memo = new Map<INode, number>();
  const v = (n: INode) => { let x = memo.get(n); if (x === undefined) { x = val(n); memo.set(n, x); } return x; };
  const crumbs = h("div", { class: "ic-crumbs" });
  const box = h("div", { class: "ic-box", role: "img", "aria-label": opts.title ?? "icicle chart" });
  const fig = h("figure", { class: "chart-box icicle", id: opts.id ?? null }, opts.title ? h("figcaption", null, opts.title) : null, crumbs, box);
  const path: INode[] = [top];
  function draw(): void {
    const root = path[path.length - 1], total = v(root);
    mount(crumbs, path.map((n, i) => [i ? " › " : "", i === path.length - 1 ? h("strong", null, n.name) :
      h("a", { href: "#", class: "ic-crumb", onclick: (e: Event) => { e.preventDefault(); path.length = i + 1; draw(); } }, n.name)]));
    const nodes: HTMLElement[] = [];
    let depth = 0;
    const visit = (n: INode, d: number, x0: number, w: number) => {
      if (d >= MAX_DEPTH || w < MIN_FRAC) return;
      depth = Math.max(depth, d + 1);
      const nv = v(n), share = total > 0 ? nv / total : 0;
      const el = h("div", {
        class: "ic-node", style: `left:${(x0 * 100).toFixed(4)}%;width:${(w * 100).toFixed(4)}%;top:${d * ROW_H}px;background:${colorFor(n.name)}`,
        title: `${n.name}\n${fmt(nv)} (${(share * 100).toFixed(1)} % of ${root.name})`, "data-depth": d,
      }, h("span", null, n.name));
      if (n !== root) el.addEventListener("click", () => { const chain = chainTo(root, n); if (chain) { path.push(...chain); draw(); } });
      nodes.push(el);
      let x = x0;
      for (const c of n.children ?? []) {
        const cw = nv > 0 ? (v(c) / nv) * w : 0;
        visit(c, d + 1, x, cw); x += cw;
      }
    };
    visit(root, 0, 0, 1);
    box.style.height = depth * ROW_H + "px";
    mount(box, nodes);
  }
  draw();
  return fig;
}

/** The nodes from just below `from` down to `to` (for the breadcrumb), or null. */
function chainTo(from: INode, to: INode): INode[] | null {
  for (const c of from.children ?? []) {
    if (c === to) return [c];
    const sub = chainTo(c, to);
    if (sub) return [c, ...sub];
  }
  return null;
}

/** A prefix tree of call stacks (frames outermost first): leaves carry the stacks' values. */
export function stackTree(name: string, stacks: { frames: string[]; values: Record<string, number> }[]): INode {
  const root: INode = { name, children: [] };
  const add = (n: INode, values: Record<string, number>) => { for (const [k, x] of Object.entries(values)) n[k] = (n[k] ?? 0) + x; };
  for (const s of stacks) {
    let n = root;
    add(n, s.values);
    for (const f of s.frames) {
      let c = (n.children ??= []).find((x) => x.name === f);
      if (!c) { c = { name: f, children: [] }; n.children!.push(c); }
      n = c;
      add(n, s.values);
    }
  }
  return root;
}
