// Small shared controls.
import { h } from "../dom";
import type { Ctx } from "../ctx";

/** A labelled group of toggle buttons; calls onPick with the chosen value. */
export function segmented(label: string, options: [string, string][], current: string, onPick: (v: string) => void): HTMLElement {
  return h("span", { class: "seg-wrap" }, h("span", { class: "muted" }, label + " "),
    h("span", { class: "seg", role: "group", "aria-label": label }, options.map(([v, text]) =>
      h("button", { type: "button", "aria-pressed": String(v === current), "data-value": v, onclick: () => { if (v !== current) onPick(v); } }, text))));
}

/** The view answer's `notes` (plain text, e.g. on CUDA-graph replays) as an info banner; null when none. */
export function notesBanner(d: any, id: string): HTMLElement | null {
  const notes: string[] = Array.isArray(d?.notes) ? d.notes.map(String) : [];
  return notes.length ? h("div", { class: "banner info", id, role: "status" }, h("ul", { class: "recs" }, notes.map((n) => h("li", null, n)))) : null;
}

/** Which of a name's events a table row counts: the operator table's calls (of one input shape), or the kernels
 * (launched by one op); none: every event of the name. */
export interface RowScope { of: "operators" | "kernels"; input_shape?: string; op?: string }

/** A "show in timeline" button: opens the timeline on every occurrence of `name`, of the row's `scope` when given
 * (a 48-call row opens "occurrence 1 of 48", not of every event of its name). */
export function timelineButton(ctx: Ctx, name: string, scope?: RowScope): HTMLElement {
  const params: Record<string, string> = { find: name };
  if (scope) {
    params.find_of = scope.of;
    if (scope.input_shape !== undefined) params.find_shape = scope.input_shape;
    if (scope.op !== undefined) params.find_op = scope.op;
  }
  return h("button", { type: "button", class: "btn small tl-jump", title: "show its occurrences in the timeline (next / previous)",
    onclick: (e: Event) => { e.stopPropagation(); ctx.go("timeline", params); }, "aria-label": "show in timeline" }, "⤷");
}
