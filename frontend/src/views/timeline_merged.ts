// Timeline, merged mode: any subset of the run's ranks on one timeline, one foldable track group per rank, clocks
// aligned by the collectives' common end times (`/clock_offsets`, shown; a toggle turns alignment off). Tiles are
// asked for only for the chosen, unfolded ranks: each rank's own `/timeline` tile of the window moved by its shift.
import { h, mount, fmtUs } from "../dom";
import { getJSON, getWhenReady } from "../api";
import { summarizingText } from "../progress";
import { genericValue } from "../table";
import { TimelineViewer, Selection } from "../timeline/viewer";
import { Tile, validateTile } from "../timeline/tiles";
import { RankClock, MergedPart, rankKey, shiftOf, parseRanks, defaultRanks, rangesText, mergeTiles, tileRows, trackFilter, stepEnds } from "../timeline/merged";
import { pathRows, pathWorkers } from "./critical";
import type { Ctx } from "../ctx";

let current: TimelineViewer | null = null;

/** Cross-rank search: matches listed per rank (the earliest ones), ranks searched at once, rows shown. */
const SEARCH_PER_RANK = 20, SEARCH_PARALLEL = 6, SEARCH_ROWS = 500;

/** The merged timeline of the run's ranks; `back` returns to the single-worker timeline. */
export async function mergedTimelineView(ctx: Ctx, el: HTMLElement, back: () => void): Promise<void> {
  current?.destroy(); current = null;
  const sel = ctx.sel();
  mount(el, h("p", { class: "muted" }, "estimating the ranks' clock offsets…"));
  let d: any;
  try {
    d = await getWhenReady<any>("clock_offsets", { run: sel.run, span: sel.span }, ctx.alive,
      { onPending: (p) => mount(el, h("p", { class: "muted", id: "tl-offsets-pending", role: "status" }, "estimating the ranks' clock offsets: " + summarizingText(p))) });
  } catch (e) { mount(el, h("div", { class: "banner" }, (e as Error).message)); return; }
  if (!d) return;
  const clocks: RankClock[] = Array.isArray(d?.workers) ? d.workers : [];
  const keys = clocks.map(rankKey);
  const byKey = new Map(clocks.map((c, i) => [keys[i], c]));
  const parsed = ctx.get("ranks") ? parseRanks(ctx.get("ranks")!, keys) : defaultRanks(keys);
  let chosen: number[] = typeof parsed === "string" ? defaultRanks(keys) : parsed;
  // groups are folded by default; the first chosen rank starts open so the window has something to show
  const openArg = ctx.get("open");
  const open = new Set<number>(openArg !== undefined ? openArg.split(",").filter(Boolean).map(Number) : chosen.slice(0, 1));
  let aligned = ctx.get("align") !== "0";
  const extents = new Map<string, [number, number]>();
  const cache = new Map<string, { key: string; tile: Tile }>();
  const requests = new Map<string, number>();

  const wrap = h("div", { class: "tl-wrap", id: "tl-canvas", "aria-label": "merged timeline: click a rank's header to unfold it" });
  const details = h("div", { class: "tl-details", id: "tl-details" }, h("span", { class: "muted" }, "Click a rank's header to unfold it, an event for its details."));
  const ranksIn = h("input", { type: "text", id: "tl-ranks", value: rangesText(chosen), size: 16, "aria-label": "ranks to show, e.g. 0-7,12", title: "ranks to show, e.g. 0-7,12" }) as HTMLInputElement;
  const alignBox = h("input", { type: "checkbox", id: "tl-align", checked: aligned }) as HTMLInputElement;
  const status = h("span", { class: "muted", id: "tl-status" });
  const offsets = h("div", { id: "tl-offsets" });
  const msearch = h("input", { type: "search", id: "tl-msearch", placeholder: "Search the chosen ranks…", size: 22,
    "aria-label": "search events by name on every chosen rank", title: "an event name (or part of it) on every chosen rank; click a match to go there" }) as HTMLInputElement;
  const found = h("div", { id: "tl-msearch-results" });
  // which of each rank's tracks are shown (kind and label, e.g. "gpu" or "stream 7, python"), and its step ends
  const tip = "only the tracks whose kind or name holds one of these words (gpu, stream 7, python…)";
  const tracksIn = h("input", { type: "search", id: "tl-mtracks", placeholder: "Tracks: all", size: 14, value: ctx.get("mtracks") ?? "",
    "aria-label": tip, title: tip }) as HTMLInputElement;
  let keep = trackFilter(tracksIn.value);
  const endsBox = h("input", { type: "checkbox", id: "tl-step-ends", checked: ctx.get("ends") !== "0" }) as HTMLInputElement;
  mount(el, h("div", { class: "tl" },
    h("div", { class: "toolbar" }, msearch,
      h("button", { type: "button", class: "btn small", id: "tl-single", title: "back to one worker's timeline", onclick: back }, "◂ One worker"),
      h("label", null, "Ranks ", ranksIn),
      h("button", { type: "button", class: "btn small", id: "tl-ranks-apply", onclick: () => applyRanks() }, "Show"),
      h("button", { type: "button", class: "btn small", id: "tl-ranks-path", title: "the ranks on the critical path of the step with the worst straggler (else the first step)",
        onclick: () => void pathRanks() }, "Critical path ranks"),
      h("label", { title: "place each rank's clock on the reference rank's by the collectives' common end times" }, alignBox, " align clocks"),
      tracksIn,
      h("label", null, endsBox, " step ends"),
      h("button", { type: "button", class: "btn small", id: "tl-unfold-all", onclick: () => { chosen.forEach((k) => open.add(k)); refold(); } }, "Unfold all"),
      h("button", { type: "button", class: "btn small", id: "tl-fold-all", onclick: () => { open.clear(); refold(); } }, "Fold all"),
      h("button", { type: "button", class: "btn small", id: "tl-zoom-in", title: "zoom in (W)", onclick: () => v.zoom(0.5) }, "+"),
      h("button", { type: "button", class: "btn small", id: "tl-zoom-out", title: "zoom out (S)", onclick: () => v.zoom(2) }, "-"),
      h("button", { type: "button", class: "btn small", id: "tl-reset", onclick: () => { const [a, b] = v.extent(); v.setView(a, b); } }, "Fit"),
      status),
    h("div", { class: "tl-help" }, `All ranks on one clock${typeof d?.reference === "string" ? ` (reference: ${d.reference})` : ""}: wheel to zoom, drag to move, click a rank's header to fold or unfold it; only unfolded ranks load.`),
    typeof d?.reason === "string" ? h("div", { class: "banner", id: "tl-offsets-reason" }, `Clocks cannot be aligned: ${d.reason}`) : null,
    found, wrap, offsets, details));

  const label = (c: RankClock): string => {
    const who = c.rank !== null ? `rank ${c.rank} · ${c.worker}` : c.worker;
    const off = typeof c.offset_us === "number" ? `clock ${c.offset_us >= 0 ? "+" : "−"}${fmtUs(Math.abs(c.offset_us))}` : typeof c.shift_us === "number" ? "" : "not aligned";
    return `${who}${off ? ` · ${off}` : ""}${aligned ? "" : " (unaligned)"}`;
  };
  const parts = (): { c: RankClock; k: number }[] => chosen.map((k) => ({ c: byKey.get(k)!, k })).filter((x) => x.c);

  const fetchOne = async (c: RankClock, a: number, b: number, px: number): Promise<Tile> => {
    const shift = shiftOf(c, aligned);
    const lo = isFinite(a) ? (a - shift).toFixed(3) : undefined, hi = isFinite(b) ? (b - shift).toFixed(3) : undefined;
    const key = `${lo}|${hi}|${px}`;
    const hit = cache.get(c.worker);
    if (hit && hit.key === key) return hit.tile;
    requests.set(c.worker, (requests.get(c.worker) ?? 0) + 1);
    const t = await getJSON<Tile>("timeline", { run: sel.run, worker: c.worker, span: sel.span, start_us: lo, end_us: hi, width_px: px });
    const err = validateTile(t);
    if (err) throw new Error(`${c.worker}: ${err}`);
    cache.set(c.worker, { key, tile: t });
    return t;
  };

  /** About how many rows a rank's tracks take: from its last tile, else the mean of the others, else 10. */
  const estRows = (w: string): number => {
    const hit = cache.get(w);
    if (hit) return tileRows(hit.tile);
    const known = [...cache.values()].map((x) => tileRows(x.tile));
    return known.length ? known.reduce((x, y) => x + y, 0) / known.length : 10;
  };
  /** The chosen ranks in view once the tile is drawn: from the first group in view now, the groups whose
   * expected heights (header, plus the tracks when unfolded) fit the viewer's height; and any unfolded rank whose
   * stand-in is in view now. */
  const inView = (ps: { c: RankClock; k: number }[]): Set<string> => {
    const tr = v.tracks(), vis = v.visibleTracks().map((i) => tr[i]).filter((t) => t && t.worker !== undefined);
    const out = new Set(vis.filter((t) => t.id.startsWith("wait:")).map((t) => t.worker!));
    const first = vis.length ? Math.max(0, ps.findIndex((p) => p.c.worker === vis[0].worker)) : 0;
    let y = 0;
    const height = Math.max(200, wrap.clientHeight - 26);
    for (let i = first; i < ps.length && y < height; i++) {
      out.add(ps[i].c.worker);
      y += 24 + (open.has(ps[i].k) ? estRows(ps[i].c.worker) * 16 : 0);
    }
    return out;
  };
  /** An unfolded rank drawn as a stand-in is in view: ask for its tile. */
  const checkView = () => {
    const tr = v.tracks();
    if (v.visibleTracks().some((i) => tr[i]?.id.startsWith("wait:"))) v.refetch();
  };
  let scrollTimer = 0;

  const v = new TimelineViewer(wrap, {
    fetchTile: async (a, b, px) => {
      const ps = parts(), vis = inView(ps);
      // only the unfolded ranks in view are asked for (a window not known yet, the first load: their whole traces);
      // the others out of view stand in as empty tracks of about their height
      const want = ps.map(({ c, k }) => open.has(k) && vis.has(c.worker));
      const tiles = await Promise.all(ps.map(({ c }, i) => want[i] ? fetchOne(c, a, b, px) : Promise.resolve(null)));
      const merged: MergedPart[] = ps.map(({ c, k }, i) => ({ worker: c.worker, label: label(c), shift: shiftOf(c, aligned), tile: tiles[i],
        rows: open.has(k) && !tiles[i] ? estRows(c.worker) : undefined }));
      window.setTimeout(checkView, 80);
      return mergeTiles(merged, a, b, px, extents, keep);
    },
    onScroll: () => { clearTimeout(scrollTimer); scrollTimer = window.setTimeout(checkView, 120); },
    onTile: () => land(),
    onSelect: (s, info) => void showDetails(s, info),
    onView: (a, b) => ctx.set("win", `${a.toFixed(3)},${b.toFixed(3)}`),
    onError: (m) => { status.textContent = m; },
    onHeader: (tr) => {
      const k = chosen[tr.group ?? -1];
      if (k === undefined) return;
      if (open.has(k)) open.delete(k); else open.add(k);
      refold();
    },
  });
  v.dark = ctx.dark;
  current = v;
  (window as any).__gpuscope = Object.assign((window as any).__gpuscope ?? {}, { timeline: v, merged: { requests, shifts: () => Object.fromEntries(parts().map(({ c }) => [c.worker, shiftOf(c, aligned)])) } });

  /** The chosen ranks' step ends on the merged clock, or none when the box is off. */
  const showEnds = () => v.setStepEnds(endsBox.checked ? stepEnds(parts().map(({ c }) => c), aligned) : []);
  let filterTimer = 0;
  tracksIn.addEventListener("input", () => {
    clearTimeout(filterTimer);
    filterTimer = window.setTimeout(() => { ctx.set("mtracks", tracksIn.value.trim() || undefined); keep = trackFilter(tracksIn.value); v.setAllCollapsed(false); v.refetch(); }, 250);
  });
  endsBox.addEventListener("change", () => { ctx.set("ends", endsBox.checked ? undefined : "0"); showEnds(); });

  const showStatus = () => { status.textContent = `${chosen.length} of ${clocks.length} ranks · ${chosen.filter((k) => open.has(k)).length} unfolded`; };
  function refold(): void {
    ctx.set("open", [...open].filter((k) => chosen.includes(k)).join(","));
    showStatus();
    v.setAllCollapsed(false);  // track indexes move when a group folds
    v.refetch();
  }
  function applyRanks(): void {
    const r = parseRanks(ranksIn.value, keys);
    if (typeof r === "string") { status.textContent = r; return; }
    status.textContent = "";
    chosen = r;
    ctx.set("ranks", rangesText(chosen));
    showOffsets();
    showEnds();
    refold();
  }
  /** The ranks on the cross-rank critical path (`/diagnosis`) of the worst step, else of the first one. */
  async function pathRanks(): Promise<void> {
    try {
      const g = await getWhenReady<any>("diagnosis", { run: sel.run, span: sel.span }, ctx.alive, { onPending: (p) => { status.textContent = summarizingText(p); } });
      if (!g) return;
      const steps: any[] = Array.isArray(g?.steps) ? g.steps : [];
      const st = steps.find((x) => String(x?.step) === String(g?.worst?.step)) ?? steps[0];
      const ws = st ? pathWorkers(pathRows(st.segments)) : [];
      const ks = clocks.map((c, i) => (ws.includes(c.worker) ? keys[i] : null)).filter((k): k is number => k !== null);
      if (!ks.length) { status.textContent = `No critical path${typeof g?.reason === "string" ? `: ${g.reason}` : "."}`; return; }
      ranksIn.value = rangesText(ks);
      applyRanks();
      status.textContent = `critical path of step ${st.step}: ${ks.length} rank${ks.length === 1 ? "" : "s"} · ` + status.textContent;
    } catch (e) { status.textContent = `No critical path: ${(e as Error).message}`; }
  }
  ranksIn.addEventListener("keydown", (e) => { if (e.key === "Enter") applyRanks(); });
  alignBox.addEventListener("change", () => {
    aligned = alignBox.checked;
    ctx.set("align", aligned ? undefined : "0");
    showEnds();
    v.refetch();
    if (msearch.value.trim()) void runSearch();  // the matches' times move with the clocks
  });

  /** The chosen ranks' clock offsets: how each was estimated, or why it could not be. */
  function showOffsets(): void {
    const rows = parts().map(({ c }) => h("tr", null,
      h("td", null, c.rank ?? "–"), h("td", null, c.worker),
      h("td", { class: "num" }, typeof c.offset_us === "number" ? fmtUs(c.offset_us) : "–"),
      h("td", { class: "num" }, typeof c.shift_us === "number" ? fmtUs(c.shift_us) : "–"),
      h("td", { class: "num" }, c.collectives || "–"),
      h("td", { class: "num" }, typeof c.spread_us === "number" ? fmtUs(c.spread_us) : "–"),
      h("td", null, c.reason ?? (c.via ? `from ${c.via}` : "reference"))));
    mount(offsets, h("h3", null, "Clock offsets"),
      h("table", { class: "data-table", id: "tl-offsets-table" },
        h("thead", null, h("tr", null, ["Rank", "Worker", "Clock offset", "Timeline shift", "Collectives", "Spread", "Estimated"].map((x) => h("th", null, x)))),
        h("tbody", null, rows)));
  }
  showOffsets();

  async function showDetails(s: Selection | null, info?: string): Promise<void> {
    if (!s) { mount(details, h("span", { class: "muted" }, info ?? "Nothing selected.")); return; }
    const tr = v.tracks()[s.track];
    const worker = tr?.worker ?? "";
    const shift = byKey.get(chosen[tr?.group ?? -1]) ? shiftOf(byKey.get(chosen[tr!.group!])!, aligned) : 0;
    const head = h("dl", { class: "kv" },
      h("dt", null, "Name"), h("dd", { id: "tl-sel-name" }, s.name), h("dt", null, "Worker"), h("dd", null, worker),
      h("dt", null, "Start"), h("dd", null, `${fmtUs(s.ts_us)} (on its own clock ${fmtUs(s.ts_us - shift)})`), h("dt", null, "Duration"), h("dd", null, fmtUs(s.dur_us)),
      h("dt", null, "Track"), h("dd", null, tr?.label ?? String(s.track)));
    mount(details, head, h("p", { class: "muted" }, "loading details…"));
    try {
      const e = await getJSON<any>("event", { run: sel.run, worker, span: sel.span, idx: s.idx });
      if (!ctx.alive()) return;
      const args = e?.args ?? e?.event?.args;
      mount(details, head, h("h3", null, "Args"), args && Object.keys(args).length ? genericValue(args) : h("span", { class: "muted" }, "none"));
    } catch (err) { mount(details, head, h("p", { class: "muted" }, `No details: ${(err as Error).message}`)); }
  }

  /** Searches every chosen rank (its own `/timeline/search`, a few ranks at a time) and lists the matches on the
   * aligned clock, earliest first; a click goes to one. */
  let searchGen = 0, searchTimer = 0;
  async function runSearch(): Promise<void> {
    const q = msearch.value.trim(), gen = ++searchGen;
    ctx.set("mq", q || undefined);
    if (!q) { mount(found); return; }
    const ps = parts();
    const per: { c: RankClock; k: number; total: number; results: any[]; error?: string }[] = [];
    let next = 0;
    const progress = () => { if (gen === searchGen && ctx.alive()) mount(found, h("p", { class: "muted" }, `searching rank ${per.length + 1} of ${ps.length}…`)); };
    progress();
    const one = async (): Promise<void> => {
      while (next < ps.length && gen === searchGen) {
        const { c, k } = ps[next++];
        try {
          const d = await getJSON<any>("timeline/search", { run: sel.run, worker: c.worker, span: sel.span, query: q, limit: SEARCH_PER_RANK }, { cache: true });
          per.push({ c, k, total: Number(d?.total) || 0, results: Array.isArray(d?.results) ? d.results : [] });
        } catch (e) { per.push({ c, k, total: 0, results: [], error: (e as Error).message }); }
        progress();
      }
    };
    await Promise.all(Array.from({ length: Math.min(SEARCH_PARALLEL, ps.length) }, one));
    if (gen !== searchGen || !ctx.alive()) return;
    const total = per.reduce((x, p) => x + p.total, 0), ranksHit = per.filter((p) => p.total > 0).length;
    const rows = per.flatMap((p) => p.results.map((r) => ({ p, r, at: Number(r.ts_us) + shiftOf(p.c, aligned) })))
      .sort((x, y) => x.at - y.at).slice(0, SEARCH_ROWS);
    const errors = per.filter((p) => p.error);
    mount(found,
      h("h3", { id: "tl-msearch-head" }, `${total.toLocaleString("en-US")} matches for “`, q, `” on ${ranksHit} of ${per.length} ranks`,
        rows.length < total ? ` (the earliest ${Math.min(SEARCH_PER_RANK, rows.length)} per rank listed)` : ""),
      errors.length ? h("div", { class: "banner" }, `Not searched: ${errors.map((p) => `${p.c.worker}: ${p.error}`).join("; ")}`) : null,
      // a box of its own that scrolls, so that the timeline stays in sight below it
      rows.length ? h("div", { style: "max-height:15em;overflow:auto" }, h("table", { class: "data-table", id: "tl-msearch-table" },
        h("thead", null, h("tr", null, ["Rank", "Name", aligned ? "Start (aligned)" : "Start (unaligned)", "Duration", "Matches on the rank"].map((x) => h("th", null, x)))),
        h("tbody", null, rows.map(({ p, r, at }) => {
          const tr = h("tr", { class: "clickable", "data-worker": p.c.worker, "data-idx": String(r.idx), title: "go there" },
            h("td", null, p.c.rank !== null ? `rank ${p.c.rank}` : p.c.worker), h("td", null, String(r.name)),
            h("td", { class: "num" }, fmtUs(at)), h("td", { class: "num" }, fmtUs(Number(r.dur_us))), h("td", { class: "num" }, p.total.toLocaleString("en-US")));
          tr.addEventListener("click", () => jumpTo(p.c, p.k, r));
          return tr;
        })))) : null);
  }
  msearch.addEventListener("input", () => { clearTimeout(searchTimer); searchTimer = window.setTimeout(() => void runSearch(), 400); });
  msearch.addEventListener("keydown", (e) => { if (e.key === "Enter") { clearTimeout(searchTimer); void runSearch(); } });

  /** The match being gone to: selected once its rank's tile is drawn (`land`, after each new tile). */
  let pending: { worker: string; own: number; sel: Selection; tries: number } | null = null;
  function jumpTo(c: RankClock, k: number, r: any): void {
    const ts = Number(r.ts_us) + shiftOf(c, aligned), dur = Number(r.dur_us) || 0;
    pending = { worker: c.worker, own: Number(r.track), tries: 0,
      sel: { track: -1, depth: Number(r.depth) || 0, idx: Number(r.idx), name: String(r.name), cat: String(r.cat ?? ""), ts_us: ts, dur_us: dur } };
    open.add(k);
    ctx.set("open", [...open].filter((x) => chosen.includes(x)).join(","));
    showStatus();
    v.setAllCollapsed(false);
    const pad = Math.max(dur * 2, 5);
    v.setView(ts - pad, ts + dur + pad);
    v.refetch();
    wrap.scrollIntoView({ block: "nearest" });
  }
  function land(): void {
    if (!pending) return;
    const tr = v.tracks();
    const i = tr.findIndex((t) => !t.header && t.worker === pending!.worker && t.own_index === pending!.own);
    if (i >= 0) { const s = { ...pending.sel, track: i }; pending = null; v.select(s); return; }
    // the rank is out of view: scroll its group to the top, and ask for its tile there
    const head = tr.findIndex((t) => t.header && t.worker === pending!.worker);
    if (head < 0 || ++pending.tries > 4) { status.textContent = `${pending.worker}'s tracks did not load`; pending = null; return; }
    v.scrollToTrack(head);
    v.refetch();
  }

  const win = ctx.get("win")?.split(",").map(Number);
  showEnds();
  await v.init(win && win.length === 2 && win.every(isFinite) ? [win[0], win[1]] : undefined);
  showStatus();
  if (ctx.get("mq")) { msearch.value = ctx.get("mq")!; void runSearch(); }
}
