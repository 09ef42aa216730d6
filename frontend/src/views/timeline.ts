// Timeline: toolbar (search, zoom, flows, download), the canvas viewer, event details.
import { h, mount, fmtUs } from "../dom";
import { getJSON, url } from "../api";
import { genericValue } from "../table";
import { exportButtons } from "../export";
import { TimelineViewer, Selection } from "../timeline/viewer";
import { Tile, validateTile } from "../timeline/tiles";
import type { Ctx } from "../ctx";

let current: TimelineViewer | null = null;

export async function timelineView(ctx: Ctx, el: HTMLElement): Promise<void> {
  current?.destroy(); current = null;
  const sel = ctx.sel();
  const wrap = h("div", { class: "tl-wrap", id: "tl-canvas", "aria-label": "timeline: wheel to zoom, drag or W/A/S/D to move, click an event for details" });
  const details = h("div", { class: "tl-details", id: "tl-details" }, h("span", { class: "muted" }, "Click an event to see its details."));
  const results = h("div", { id: "tl-results" });
  const search = h("input", { type: "search", id: "tl-search", placeholder: "Search events by name…", "aria-label": "search events" }) as HTMLInputElement;
  const flows = h("input", { type: "checkbox", id: "tl-flows", checked: true }) as HTMLInputElement;
  const download = h("a", { class: "btn small", id: "tl-download", href: url("trace", sel), download: `${sel.worker || "trace"}.span${sel.span}.pt.trace.json`, title: "the raw trace, for Perfetto or chrome://tracing" }, "⤓ Download trace");
  const status = h("span", { class: "muted", id: "tl-status" });
  mount(el, h("div", { class: "tl" },
    h("div", { class: "toolbar" }, search,
      h("button", { type: "button", class: "btn small", id: "tl-zoom-in", title: "zoom in (W)", onclick: () => v.zoom(0.5) }, "+"),
      h("button", { type: "button", class: "btn small", id: "tl-zoom-out", title: "zoom out (S)", onclick: () => v.zoom(2) }, "-"),
      h("button", { type: "button", class: "btn small", id: "tl-reset", onclick: () => { const [a, b] = v.extent(); v.setView(a, b); } }, "Fit"),
      h("label", null, flows, " flows"), download, status),
    h("div", { class: "tl-help" }, "Wheel: zoom · drag: move · W/S: zoom · A/D: pan · Shift+wheel: scroll tracks · click: details"),
    wrap, details, results));
  let viewTimer = 0;
  const v = new TimelineViewer(wrap, {
    fetchTile: async (a, b, px) => {
      const t = await getJSON<Tile>("timeline", { ...sel, start_us: isFinite(a) ? a.toFixed(3) : undefined, end_us: isFinite(b) ? b.toFixed(3) : undefined, width_px: px });
      const err = validateTile(t);
      if (err) throw new Error(err);
      return t;
    },
    onSelect: (s, info) => showDetails(s, info),
    onView: (a, b) => { clearTimeout(viewTimer); viewTimer = window.setTimeout(() => ctx.set("win", `${a.toFixed(3)},${b.toFixed(3)}`), 300); },
    onError: (m) => { status.textContent = m; },
  });
  v.dark = ctx.dark;
  current = v;
  flows.addEventListener("change", () => { v.showFlows = flows.checked; v.redraw(); });
  (window as any).__gpuscope = Object.assign((window as any).__gpuscope ?? {}, { timeline: v });

  async function showDetails(s: Selection | null, info?: string): Promise<void> {
    if (!s) { mount(details, h("span", { class: "muted" }, info ?? "Nothing selected.")); ctx.set("sel", undefined); return; }
    ctx.set("sel", String(s.idx));
    const head = h("dl", { class: "kv" },
      h("dt", null, "Name"), h("dd", { id: "tl-sel-name" }, s.name), h("dt", null, "Category"), h("dd", null, s.cat),
      h("dt", null, "Start"), h("dd", null, fmtUs(s.ts_us)), h("dt", null, "Duration"), h("dd", null, fmtUs(s.dur_us)),
      h("dt", null, "Track"), h("dd", null, v.tracks()[s.track]?.label ?? String(s.track)));
    mount(details, head, h("p", { class: "muted" }, "loading details…"));
    try {
      const d = await getJSON<any>("event", { ...sel, idx: s.idx });
      if (!ctx.alive()) return;
      const args = d?.args ?? d?.event?.args;
      mount(details, head, h("h3", null, "Args"), args && Object.keys(args).length ? genericValue(args) : h("span", { class: "muted" }, "none"),
        d?.event ? [h("h3", null, "Event"), genericValue(Object.fromEntries(Object.entries(d.event).filter(([k]) => k !== "args")))] : null);
    } catch (e) { mount(details, head, h("p", { class: "muted" }, `No details: ${(e as Error).message}`)); }
  }

  let searchTimer = 0;
  search.addEventListener("input", () => { clearTimeout(searchTimer); searchTimer = window.setTimeout(() => void runSearch(), 250); });
  search.addEventListener("keydown", (e) => { if (e.key === "Enter") { clearTimeout(searchTimer); void runSearch(); } });
  async function runSearch(): Promise<void> {
    const q = search.value.trim();
    ctx.set("q", q || undefined);
    if (!q) { mount(results); return; }
    try {
      const d = await getJSON<any>("timeline/search", { ...sel, query: q, limit: 100 });
      if (!ctx.alive() || q !== search.value.trim()) return;
      const rs: any[] = Array.isArray(d.results) ? d.results : [];
      mount(results, h("h3", null, `${(d.total ?? rs.length).toLocaleString("en-US")} matches for “`, q, "”", rs.length < (d.total ?? 0) ? ` (first ${rs.length})` : ""),
        h("div", { class: "table-tools" }, exportButtons(() => `timeline-search-${q}`, () => ({ header: ["name", "cat", "ts_us", "dur_us", "track"],
          rows: rs.map((r) => [r.name, r.cat ?? "", r.ts_us, r.dur_us, v.tracks()[r.track]?.label ?? r.track]) }))),
        h("table", { class: "data-table", id: "tl-results-table" }, h("thead", null, h("tr", null, ["Name", "Category", "Start", "Duration", "Track"].map((x) => h("th", null, x)))),
          h("tbody", null, rs.map((r) => {
            const tr = h("tr", { class: "clickable" }, h("td", null, String(r.name)), h("td", null, String(r.cat ?? "")), h("td", { class: "num" }, fmtUs(r.ts_us)), h("td", { class: "num" }, fmtUs(r.dur_us)), h("td", null, v.tracks()[r.track]?.label ?? String(r.track)));
            tr.addEventListener("click", () => {
              const pad = Math.max(r.dur_us * 2, 5);
              v.setView(r.ts_us - pad, r.ts_us + r.dur_us + pad);
              v.select({ track: r.track, depth: r.depth, idx: r.idx, name: String(r.name), cat: String(r.cat ?? ""), ts_us: r.ts_us, dur_us: r.dur_us });
            });
            return tr;
          }))));
    } catch (e) { mount(results, h("div", { class: "banner" }, (e as Error).message)); }
  }

  const win = ctx.get("win")?.split(",").map(Number);
  await v.init(win && win.length === 2 && win.every(isFinite) ? [win[0], win[1]] : undefined);
  status.textContent = `${v.tracks().length} tracks · ${v.tracks().reduce((a, t) => a + t.event_count, 0).toLocaleString("en-US")} events`;
  if (ctx.get("q")) { search.value = ctx.get("q")!; void runSearch(); }
}
