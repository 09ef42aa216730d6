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

/** A "show in timeline" button: opens the timeline on every occurrence of `name`. */
export function timelineButton(ctx: Ctx, name: string): HTMLElement {
  return h("button", { type: "button", class: "btn small tl-jump", title: "show its occurrences in the timeline (next / previous)",
    onclick: (e: Event) => { e.stopPropagation(); ctx.go("timeline", { find: name }); }, "aria-label": "show in timeline" }, "⤷");
}
