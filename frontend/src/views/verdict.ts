// The answer first: at the top of a multi-rank run's Overview and Distributed view, what the diagnosis cannot know
// (its caveats, those that withhold the cross-rank claims marked) and then its verdict, the sentence
// `gpuscope diagnose` prints first (`/diagnosis`: `caveats`, `verdict`; docs/diagnosis.md).
import { h, mount } from "../dom";
import { getWhenReady } from "../api";
import { summarizingText } from "../progress";
import type { Ctx } from "../ctx";

export interface Caveat { key: string; text: string; withholds: boolean }

/** The caveats of an answer (`caveats`: [{key, text, withholds}]), malformed entries left out. */
export function asCaveats(v: any): Caveat[] {
  return (Array.isArray(v) ? v : []).filter((c) => c && typeof c === "object" && typeof c.text === "string" && c.text)
    .map((c) => ({ key: String(c.key ?? ""), text: c.text, withholds: c.withholds === true }));
}

/** The caveat block: one item per caveat, a withholding one marked; null when there is none. */
export function caveatBlock(cavs: Caveat[]): HTMLElement | null {
  if (!cavs.length) return null;
  return h("section", { class: "caveats", id: "diag-caveats", "aria-label": "What this diagnosis cannot know" },
    h("h3", null, "What this diagnosis cannot know"),
    h("ul", null, cavs.map((c) => h("li", { "data-key": c.key, class: c.withholds ? "withholds" : null },
      c.withholds ? h("span", { class: "tag", title: "no waiting for other ranks, straggler, what-if or sync skew is claimed" }, "cross-rank claims withheld") : null,
      c.text))));
}

/** The verdict line: the report's sentence (`kind` as `data-kind`), or `waiting` while there is none yet. */
export function verdictLine(v: any, waiting?: string): HTMLElement {
  const text = v && typeof v === "object" && typeof v.text === "string" && v.text ? v.text : null;
  const kind = text ? String(v.kind ?? "none") : "pending";
  return h("p", { class: "verdict", id: "diag-verdict", "data-kind": kind, role: "status" },
    h("strong", null, "Verdict: "), text ?? waiting ?? "waiting for the run's diagnosis…");
}

/** Fills `box` with the caveats and the verdict: `caveats` (what the view's own answer holds) at once, then those of
 * `/diagnosis` with its verdict as soon as the run's summaries are there. */
export async function diagnosisHead(ctx: Ctx, box: HTMLElement, caveats: any = []): Promise<void> {
  const first = caveatBlock(asCaveats(caveats));
  mount(box, first, verdictLine(null));
  let d: any;
  try {
    d = await getWhenReady<any>("diagnosis", { run: ctx.run, span: ctx.span }, ctx.alive,
      { onPending: (p) => mount(box, first, verdictLine(null, summarizingText(p))) });
  } catch (e) {
    if (ctx.alive()) mount(box, first, verdictLine(null, `no verdict: ${(e as Error).message}`));
    return;
  }
  if (!d || !ctx.alive()) return;
  mount(box, caveatBlock(asCaveats(d.caveats)), verdictLine(d.verdict ?? { text: "no verdict in this answer", kind: "none" }));
}
