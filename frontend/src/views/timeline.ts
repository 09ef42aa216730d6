// Timeline: toolbar (search, zoom, flows, download), the canvas viewer, event details.
import { h, mount, fmtUs } from "../dom";
import { getJSON, getWhenReady, url } from "../api";
import { summarizingText } from "../progress";
import { genericValue, dataTable } from "../table";
import { exportButtons } from "../export";
import { TimelineViewer, Selection, RangeSel, Counter } from "../timeline/viewer";
import { Tile, validateTile, queueCounters } from "../timeline/tiles";
import { pathMarks, pathRows, pathWorkerButtons } from "./critical";
import { mergedTimelineView } from "./timeline_merged";
import type { Ctx } from "../ctx";

let current: TimelineViewer | null = null;

export async function timelineView(ctx: Ctx, el: HTMLElement): Promise<void> {
  current?.destroy(); current = null;
  if (ctx.get("merged") === "1") {
    await mergedTimelineView(ctx, el, () => { ctx.set("merged", undefined); ctx.set("win", undefined); void timelineView(ctx, el); });
    return;
  }
  const sel = ctx.sel();
  const wrap = h("div", { class: "tl-wrap", id: "tl-canvas", "aria-label": "timeline: wheel to zoom, drag or W/A/S/D to move, click an event for details" });
  const details = h("div", { class: "tl-details", id: "tl-details" }, h("span", { class: "muted" }, "Click an event to see its details."));
  const results = h("div", { id: "tl-results" });
  const search = h("input", { type: "search", id: "tl-search", placeholder: "Search events by name…", "aria-label": "search events" }) as HTMLInputElement;
  const flows = h("input", { type: "checkbox", id: "tl-flows", checked: true }) as HTMLInputElement;
  const download = h("a", { class: "btn small", id: "tl-download", href: url("trace", sel), download: `${sel.worker || "trace"}.span${sel.span}.pt.trace.json`, title: "the raw trace, for Perfetto or chrome://tracing" }, "⤓ Download trace");
  const status = h("span", { class: "muted", id: "tl-status" });
  const queueNote = h("span", { class: "muted", id: "tl-queue-note" });
  const cpathBar = h("div", { id: "tl-cpath", class: "toolbar" });
  const summary = h("div", { id: "tl-summary" });
  const occBar = h("div", { id: "tl-occ", class: "toolbar" });
  const keys = h("div", { id: "tl-keys", class: "tl-keys", hidden: true }, h("strong", null, "Keys and mouse"), h("dl", { class: "kv" },
    [["W / S, wheel", "zoom in / out"], ["A / D, drag", "move left / right"], ["Shift+wheel", "scroll the tracks"],
      ["Shift+drag or drag on the ruler", "select a time range (its summary appears below)"], ["F", "frame the selected range or event"],
      ["Esc", "clear the range"], ["click", "an event's details"], ["click a track name", "collapse / expand the track"], ["N / P", "next / previous occurrence"], ["?", "show / hide this list"]]
      .map(([k, d]) => [h("dt", null, h("kbd", null, k)), h("dd", null, d)])));
  const toggleKeys = () => { keys.hidden = !keys.hidden; };
  mount(el, h("div", { class: "tl" },
    h("div", { class: "toolbar" }, search,
      h("button", { type: "button", class: "btn small", id: "tl-zoom-in", title: "zoom in (W)", onclick: () => v.zoom(0.5) }, "+"),
      h("button", { type: "button", class: "btn small", id: "tl-zoom-out", title: "zoom out (S)", onclick: () => v.zoom(2) }, "-"),
      h("button", { type: "button", class: "btn small", id: "tl-reset", onclick: () => { const [a, b] = v.extent(); v.setView(a, b); } }, "Fit"),
      h("label", null, flows, " flows"),
      h("button", { type: "button", class: "btn small", id: "tl-collapse", title: "collapse every track", onclick: () => v.setAllCollapsed(true) }, "Collapse all"),
      h("button", { type: "button", class: "btn small", id: "tl-expand", title: "expand every track", onclick: () => v.setAllCollapsed(false) }, "Expand all"),
      h("button", { type: "button", class: "btn small", id: "tl-keys-btn", title: "keys (?)", onclick: toggleKeys }, "?"),
      h("button", { type: "button", class: "btn small", id: "tl-merged-btn", title: "the run's ranks on one clock-aligned timeline",
        onclick: () => { v.destroy(); ctx.set("merged", "1"); ctx.set("win", undefined); void timelineView(ctx, el); } }, "All ranks"),
      download, status),
    h("div", { class: "tl-help" }, "Wheel: zoom · drag: move · Shift+drag or ruler drag: select a range · F: frame · ?: keys · click: details ", queueNote),
    cpathBar, occBar, keys, wrap, summary, details, results));
  // counter tracks: the queue length per stream comes with each tile, memory and utilization separately
  let queue: Counter[] = [], other: Counter[] = [];
  const showCounters = () => { if (current === v) v.setCounters([...other, ...queue]); };
  let viewTimer = 0;
  const v = new TimelineViewer(wrap, {
    fetchTile: async (a, b, px) => {
      const t = await getJSON<Tile>("timeline", { ...sel, start_us: isFinite(a) ? a.toFixed(3) : undefined, end_us: isFinite(b) ? b.toFixed(3) : undefined, width_px: px });
      const err = validateTile(t);
      if (err) throw new Error(err);
      queue = queueCounters(t.counters);
      queueNote.textContent = queue.length ? "" : typeof t.counters_reason === "string" ? `No queue-length track: ${t.counters_reason}` : "";
      showCounters();
      return t;
    },
    onSelect: (s, info) => showDetails(s, info),
    onView: (a, b) => { clearTimeout(viewTimer); viewTimer = window.setTimeout(() => { ctx.set("win", `${a.toFixed(3)},${b.toFixed(3)}`); void loadCounters(a, b); }, 300); },
    onError: (m) => { status.textContent = m; },
    onRange: (r) => void showRange(r),
    onHelp: toggleKeys,
  });
  v.dark = ctx.dark;
  current = v;
  flows.addEventListener("change", () => { v.showFlows = flows.checked; v.redraw(); });
  (window as any).__gpuscope = Object.assign((window as any).__gpuscope ?? {}, { timeline: v });

  /** The selected range's summary: count, total and self time by name over the chosen tracks. */
  async function showRange(r: RangeSel | null): Promise<void> {
    ctx.set("range", r ? `${r.a.toFixed(3)},${r.b.toFixed(3)}` + (r.tracks ? `,${r.tracks.join(".")}` : "") : undefined);
    if (!r) { mount(summary); return; }
    mount(summary, h("p", { class: "muted" }, "summarising the range…"));
    try {
      const d = await getJSON<any>("timeline/summary", { ...sel, start_us: r.a.toFixed(3), end_us: r.b.toFixed(3), tracks: r.tracks ? r.tracks.join(",") : undefined });
      if (!ctx.alive() || v.range !== r) return;
      const n = r.tracks ? r.tracks.length : v.tracks().length;
      mount(summary, h("h3", { id: "tl-summary-head" }, `Range ${fmtUs(d.start_us)} – ${fmtUs(d.end_us)} (${fmtUs(d.end_us - d.start_us)}) · ${n} track${n === 1 ? "" : "s"} · ${Number(d.events).toLocaleString("en-US")} events`),
        dataTable([{ key: "name", label: "Name" }, { key: "cat", label: "Category" }, { key: "count", label: "Count", numeric: true }, { key: "total_us", label: "Total (in range)", numeric: true, fmt: fmtUs },
          { key: "self_us", label: "Self (in range)", numeric: true, fmt: fmtUs }], Array.isArray(d.rows) ? d.rows : [], { sortKey: "total_us", exportName: `timeline-range-${ctx.run}`, pageSize: 20 }),
        h("button", { type: "button", class: "btn small", id: "tl-range-clear", onclick: () => v.setRange(null) }, "Clear range"));
    } catch (e) { mount(summary, h("div", { class: "banner" }, (e as Error).message)); }
  }

  let counterSeq = 0;
  /** Counter tracks (memory per device, GPU utilization) for the window around [a, b]. */
  async function loadCounters(a: number, b: number): Promise<void> {
    const seq = ++counterSeq, span = b - a, [ta, tb] = v.extent();
    const lo = Math.max(ta, a - span), hi = Math.min(tb, b + span);
    if (!(hi > lo)) return;
    try {
      const d = await getJSON<any>("timeline/counters", { ...sel, start_us: lo.toFixed(3), end_us: hi.toFixed(3), width_px: 1500 });
      if (!ctx.alive() || seq !== counterSeq) return;
      other = (Array.isArray(d.counters) ? d.counters : []) as Counter[];
      showCounters();
    } catch { /* counters are an extra: the events still show */ }
  }

  /** The cross-rank critical path of one step (`/diagnosis`): its segments on this worker marked on the timeline. */
  async function showCriticalPath(step: string, frame: boolean): Promise<void> {
    const clear = h("button", { type: "button", class: "btn small", title: "remove the marks", onclick: () => { v.setMarks([]); mount(cpathBar); ctx.set("cpath", undefined); } }, "✕");
    try {
      const d = await getWhenReady<any>("diagnosis", { run: sel.run, span: sel.span }, ctx.alive,
        { onPending: (p) => mount(cpathBar, h("span", { class: "muted", id: "tl-cpath-pending", role: "status" }, summarizingText(p)), clear) });
      if (!d) return;
      const st = (Array.isArray(d?.steps) ? d.steps : []).find((x: any) => String(x?.step) === step);
      if (!st) { mount(cpathBar, h("span", { class: "muted" }, `No critical path for step ${step}` + (typeof d?.reason === "string" ? `: ${d.reason}` : ".")), clear); return; }
      const { marks, ranks, ms } = pathMarks(st.segments, sel.worker);
      v.setMarks(marks);
      if (!marks.length) {
        mount(cpathBar, h("span", { class: "muted" }, `${sel.worker} is not on the critical path of step ${step}` + (ranks.length ? ` (ranks on it: ${ranks.join(", ")}).` : ".")),
          pathWorkerButtons(ctx, pathRows(st.segments), step, null), clear);
        return;
      }
      const ext = v.marksExtent()!;
      const pad = Math.max(1, (ext[1] - ext[0]) * 0.02);
      mount(cpathBar, h("strong", null, `Critical path of step ${step}`),
        h("span", { id: "tl-cpath-info" }, ` ${marks.length} segment${marks.length === 1 ? "" : "s"} on ${sel.worker}, ${fmtUs(ms * 1000)} of work` +
          (ranks.length > 1 ? ` · ranks on the path: ${ranks.join(", ")}` : "") + " (red bands; click the red bar for each one)"),
        h("button", { type: "button", class: "btn small", id: "tl-cpath-frame", onclick: () => v.setView(ext[0] - pad, ext[1] + pad) }, "Frame the path"),
        pathWorkerButtons(ctx, pathRows(st.segments), step, sel.worker), clear);
      if (frame) v.setView(ext[0] - pad, ext[1] + pad);
    } catch (e) { mount(cpathBar, h("span", { class: "muted" }, `No critical path: ${(e as Error).message}`), clear); }
  }

  /** "Show in timeline": every occurrence of one name, with next / previous. */
  async function showOccurrences(name: string, at: number): Promise<void> {
    try {
      const of = ctx.get("find_of"), shape = ctx.get("find_shape"), op = ctx.get("find_op");
      const d = await getJSON<any>("timeline/occurrences", { ...sel, name, limit: 10000, of, input_shape: shape, op });
      if (!ctx.alive()) return;
      const rs: any[] = Array.isArray(d.results) ? d.results : [];
      if (!rs.length) { mount(occBar, h("span", { class: "muted" }, "No event named “", name, "” in this trace.")); return; }
      let i = Math.min(Math.max(0, at), rs.length - 1);
      const label = h("span", { id: "tl-occ-label" });
      const go = (k: number) => {
        i = (k + rs.length) % rs.length;
        const r = rs[i], pad = Math.max(r.dur_us * 2, 5);
        ctx.set("occ", String(i));
        v.setView(r.ts_us - pad, r.ts_us + r.dur_us + pad);
        v.select({ track: r.track, depth: r.depth, idx: r.idx, name: String(r.name), cat: String(r.cat ?? ""), ts_us: r.ts_us, dur_us: r.dur_us });
        label.textContent = ` occurrence ${i + 1} of ${Number(d.total).toLocaleString("en-US")}` + (rs.length < d.total ? ` (first ${rs.length} listed)` : "") + " ";
      };
      // the row's calls: its input shape, or the op that launched its kernels
      const scope = shape !== undefined ? ` ${shape}` : op !== undefined ? ` launched by ${op}` : "";
      mount(occBar, h("strong", null, name), scope ? h("span", { class: "muted", id: "tl-occ-scope" }, scope) : null,
        h("button", { type: "button", class: "btn small", id: "tl-occ-prev", title: "previous occurrence (P)", onclick: () => go(i - 1) }, "◀ prev"), label,
        h("button", { type: "button", class: "btn small", id: "tl-occ-next", title: "next occurrence (N)", onclick: () => go(i + 1) }, "next ▶"),
        h("button", { type: "button", class: "btn small", onclick: () => { mount(occBar); for (const k of ["find", "occ", "find_of", "find_shape", "find_op"]) ctx.set(k, undefined); } }, "✕"));
      wrap.addEventListener("keydown", (e) => { if (e.key === "n" || e.key === "N") go(i + 1); else if (e.key === "p" || e.key === "P") go(i - 1); });
      go(i);
    } catch (e) { mount(occBar, h("div", { class: "banner" }, (e as Error).message)); }
  }

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
  const selIdx = ctx.get("sel"), rangeArg = ctx.get("range")?.split(","), find = ctx.get("find");
  await v.init(win && win.length === 2 && win.every(isFinite) ? [win[0], win[1]] : undefined);
  status.textContent = `${v.tracks().length} tracks · ${v.tracks().reduce((a, t) => a + t.event_count, 0).toLocaleString("en-US")} events`;
  void loadCounters(...v.view());
  if (ctx.get("q")) { search.value = ctx.get("q")!; void runSearch(); }
  if (rangeArg && rangeArg.length >= 2 && isFinite(+rangeArg[0]) && isFinite(+rangeArg[1]))
    v.setRange({ a: +rangeArg[0], b: +rangeArg[1], tracks: rangeArg[2] ? rangeArg[2].split(".").map(Number).filter((x) => x >= 0 && x < v.tracks().length) : null });
  const cpath = ctx.get("cpath");
  if (cpath) await showCriticalPath(cpath, !win);
  if (find) await showOccurrences(find, Number(ctx.get("occ") ?? 0) || 0);
  else if (selIdx && /^\d+$/.test(selIdx)) {
    // a link to one event: find where it is drawn, select it, and frame it unless the link has a window
    try {
      const r = await getJSON<any>("timeline/locate", { ...sel, idx: selIdx });
      if (!ctx.alive()) return;
      v.select({ track: r.track, depth: r.depth, idx: r.idx, name: String(r.name), cat: String(r.cat ?? ""), ts_us: r.ts_us, dur_us: r.dur_us });
      if (!win) v.frame();
    } catch (e) { status.textContent = `The linked event is not there: ${(e as Error).message}`; }
  }
}
