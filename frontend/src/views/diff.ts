// Diff: pick another profile to compare with; aligned operator tree with deltas and a delta table.
import { h, mount, fmtUs, fmtNum } from "../dom";
import { getJSON } from "../api";
import { dataTable, Column, genericValue } from "../table";
import { treeTable, findRoots, numericKeys, TreeNode } from "./tree";
import type { Ctx } from "../ctx";

export async function diffView(ctx: Ctx, el: HTMLElement): Promise<void> {
  const runSel = h("select", { id: "diff-run", "aria-label": "compare with run" }, ctx.runs.map((r) => h("option", { value: r }, r))) as HTMLSelectElement;
  const workerSel = h("select", { id: "diff-worker", "aria-label": "compare with worker" }) as HTMLSelectElement;
  const spanSel = h("select", { id: "diff-span", "aria-label": "compare with span" }) as HTMLSelectElement;
  const out = h("div", { id: "diff-out" });
  mount(el, h("div", { class: "toolbar" }, h("strong", null, "Baseline: "), `${ctx.run} / ${ctx.worker} / span ${ctx.span}`, h("span", { class: "muted" }, " compared with "),
    h("label", null, "Run ", runSel), h("label", null, "Worker ", workerSel), h("label", null, "Span ", spanSel)), out);
  const fill = (sel: HTMLSelectElement, items: string[], want?: string) => { mount(sel, items.map((x) => h("option", { value: x }, x))); sel.value = want && items.includes(want) ? want : items[items.length - 1] ?? ""; };
  runSel.value = ctx.get("exp_run") && ctx.runs.includes(ctx.get("exp_run")!) ? ctx.get("exp_run")! : ctx.run;
  const loadWorkers = async () => {
    const ws = (await getJSON<{ workers: string[] }>("workers", { run: runSel.value }, { cache: true })).workers.map(String);
    fill(workerSel, ws, ctx.get("exp_worker") ?? ctx.worker);
    await loadSpans();
  };
  const loadSpans = async () => {
    const ss = (await getJSON<{ spans: string[] }>("spans", { run: runSel.value, worker: workerSel.value }, { cache: true })).spans.map(String);
    const want = ctx.get("exp_span") ?? (runSel.value === ctx.run && workerSel.value === ctx.worker ? ss.find((x) => x !== ctx.span) : undefined);
    fill(spanSel, ss, want);
    await compare();
  };
  const compare = async () => {
    ctx.set("exp_run", runSel.value); ctx.set("exp_worker", workerSel.value); ctx.set("exp_span", spanSel.value);
    mount(out, h("p", { class: "muted" }, "comparing…"));
    const d = await getJSON<any>("diff", { ...ctx.sel(), exp_run: runSel.value, exp_worker: workerSel.value, exp_span: spanSel.value }, { cache: true });
    if (!ctx.alive()) return;
    mount(out, renderDiff(d));
  };
  runSel.addEventListener("change", () => { ctx.set("exp_worker", undefined); ctx.set("exp_span", undefined); void loadWorkers().catch(showErr); });
  workerSel.addEventListener("change", () => { ctx.set("exp_span", undefined); void loadSpans().catch(showErr); });
  spanSel.addEventListener("change", () => void compare().catch(showErr));
  const showErr = (e: Error) => mount(out, h("div", { class: "banner" }, e.message));
  await loadWorkers();
}

/** Adds delta_<k> = exp_<k> - base_<k> to every node that has both. */
function addDeltas(n: TreeNode): void {
  for (const k of Object.keys(n)) if (k.startsWith("base_") && typeof n[k] === "number") {
    const e = n["exp_" + k.slice(5)];
    if (typeof e === "number" && n["delta_" + k.slice(5)] === undefined) n["delta_" + k.slice(5)] = e - n[k];
  }
  (n.children ?? []).forEach(addDeltas);
}

const fmtFor = (k: string) => (k.endsWith("_us") ? (k.startsWith("delta") ? (v: any) => (typeof v === "number" ? (v > 0 ? "+" : "") + fmtUs(v) : "–") : fmtUs) : fmtNum);

function renderDiff(d: any): HTMLElement {
  const parts: (HTMLElement | string)[] = [];
  const roots = findRoots(d, ["tree", "root", "nodes"]);
  if (roots && roots.length) {
    roots.forEach(addDeltas);
    const nk = numericKeys(roots).filter((k) => !/(^|_)id$/.test(k));
    parts.push(h("h3", null, "Aligned operator tree"), treeTable([{ key: "name", label: "Operator" }, ...nk.map((k) => ({ key: k, label: k.replace(/_us$/, "").replace(/_/g, " "), numeric: true, fmt: fmtFor(k) }))], roots, 2, "diff-tree"));
  }
  const rows: any[] | null = Array.isArray(d?.rows) ? d.rows : Array.isArray(d?.table) ? d.table : Array.isArray(d?.operators) ? d.operators : null;
  if (rows && rows.length) {
    rows.forEach((r) => addDeltas(r));
    const keys = Array.from(new Set(rows.slice(0, 50).flatMap((r) => Object.keys(r)))).filter((k) => k !== "children");
    const cols: Column[] = keys.map((k) => ({ key: k, label: k.replace(/_/g, " "), numeric: typeof rows[0][k] === "number", fmt: typeof rows[0][k] === "number" ? fmtFor(k) : undefined }));
    const dk = keys.find((k) => k.startsWith("delta") && k.endsWith("_us"));
    parts.push(h("div", { id: "diff-table" }, dataTable(cols, rows, { caption: "Delta by operator", sortKey: dk, rowClass: (r) => (dk && r[dk] > 0 ? "pos" : dk && r[dk] < 0 ? "neg" : "") })));
  }
  if (!parts.length) parts.push(genericValue(d));
  return h("div", null, parts);
}
