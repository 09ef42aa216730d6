// The canvas timeline: draws the backend's tiles, zooms and pans (wheel, drag, W/A/S/D), draws
// flow arrows, hit-tests clicks. Each frame only binary-searches the cached tile, so its cost
// depends on the pixels, not on the number of events in the trace.
import { Tile, Track, EventsRow, BucketsRow, lowerBound, hitEvent, tickStep, fmtTick } from "./tiles";
import { fmtUs, fmtBytes } from "../dom";
import { Mark, drawMarks, markAt } from "./marks";

export interface Selection { track: number; depth: number; idx: number; name: string; cat: string; ts_us: number; dur_us: number }
export interface ViewerHooks {
  fetchTile(start: number, end: number, widthPx: number): Promise<Tile>;
  onSelect(sel: Selection | null, info?: string): void;
  onView?(v0: number, v1: number): void;
  onError(msg: string): void;
  /** A time range was selected (tracks: the chosen track indexes, null for all); null: cleared. */
  onRange?(range: RangeSel | null): void;
  /** The user asked for the list of keys (`?`). */
  onHelp?(): void;
  /** A group header track (merged timeline) was clicked: its owner folds or unfolds the group. */
  onHeader?(track: Track): void;
  /** The tracks were scrolled vertically. */
  onScroll?(): void;
  /** A new tile (asked for by a move, a zoom or `refetch`) was drawn. */
  onTile?(): void;
}

/** A counter track: a value over time drawn as a step area (memory bytes, GPU utilization 0..1, a count). */
export interface Counter { name: string; unit: string; ts_us: number[]; values: number[] }
export interface RangeSel { a: number; b: number; tracks: number[] | null }

/** The end of one step of one worker on the merged timeline (its time on the shared clock). */
export interface StepEnd { worker: string; step: string; t: number; label: string }

/** At most this many flows in view are all drawn; beyond, only the selected event's. */
const FLOWS_SHOWN = 300;
/** The selected event's flows: drawn over the others, in the selection's blue. */
const SELECTED_FLOW = "#1976d2";

const RULER = 26, ROW = 16, TRACK_HEAD = 18, GAP = 6, GUTTER = 200, COUNTER_H = 36;

interface Layout { track: Track; y: number; h: number }
interface CounterLayout { c: Counter; y: number; h: number; max: number }

export class TimelineViewer {
  readonly canvas = document.createElement("canvas");
  private ctx2d: CanvasRenderingContext2D;
  private tile: Tile | null = null;
  private rgb: [number, number, number][] = [];
  private rgba: number[] = [];
  private darker: number[] = [];
  private v0 = 0; private v1 = 1; private scrollY = 0;
  private w = 800; private h = 400; private dpr = 1;
  private layout: Layout[] = [];
  private totalH = 0;
  private pending = false; private queued = false; private forced = false; private frameReq = 0;
  private sel: Selection | null = null;
  private counters: CounterLayout[] = [];
  private marks: Mark[] = [];
  private stepEnds: StepEnd[] = [];
  private collapsed = new Set<number>();
  /** The selected time range, if any. */
  range: RangeSel | null = null;
  private keys = new Set<string>();
  private keyLoop = 0;
  private lastKeyT = 0;
  showFlows = true;
  dark = false;
  stats: { [k: string]: any } = { ruler: [] as string[], frames: 0, lastDrawMs: 0, totalDrawMs: 0, rects: 0, flows: 0, fetches: 0, lastFetchMs: 0 };
  private destroyed = false;
  private ro: ResizeObserver;

  constructor(private wrap: HTMLElement, private hooks: ViewerHooks) {
    this.ctx2d = this.canvas.getContext("2d", { alpha: false })!;
    wrap.appendChild(this.canvas);
    wrap.tabIndex = 0;
    this.ro = new ResizeObserver(() => this.resize());
    this.ro.observe(wrap);
    this.resize();
    this.bindInput();
  }

  destroy(): void { this.destroyed = true; this.ro.disconnect(); cancelAnimationFrame(this.frameReq); cancelAnimationFrame(this.keyLoop); }

  /** The visible window in µs. */
  view(): [number, number] { return [this.v0, this.v1]; }
  /** Tracks of the latest tile (stable for a trace). */
  tracks(): Track[] { return this.tile?.tracks ?? []; }
  extent(): [number, number] { return this.tile ? [this.tile.trace_start_us, this.tile.trace_end_us] : [0, 1]; }

  /** Loads the whole trace, then optionally shows a given window. */
  async init(win?: [number, number]): Promise<void> {
    const t = await this.hooks.fetchTile(NaN, NaN, Math.max(200, Math.round(this.plotW())));
    this.setTile(t);
    const [a, b] = this.extent();
    this.v0 = a; this.v1 = b > a ? b : a + 1;
    if (win && win[1] > win[0]) this.setView(win[0], win[1]); else this.redraw();
  }

  private plotW(): number { return Math.max(50, this.w - GUTTER); }
  private usPerPx(): number { return (this.v1 - this.v0) / this.plotW(); }
  private xOf(t: number): number { return GUTTER + ((t - this.v0) / (this.v1 - this.v0)) * this.plotW(); }
  private tOf(x: number): number { return this.v0 + ((x - GUTTER) / this.plotW()) * (this.v1 - this.v0); }

  private setTile(t: Tile): void {
    this.tile = t;
    this.rgb = t.names.map((n) => nameRGB(n, this.dark));
    this.rgba = this.rgb.map(pack);
    this.darker = this.rgb.map(([r, g, b]) => pack([r * 0.75, g * 0.75, b * 0.75]));
    this.relayout();
  }

  /** Recomputes track positions (counters first, collapsed tracks show their header only). */
  private relayout(): void {
    let y = 0;
    this.counters = this.counters.map((L) => { const o = { ...L, y }; y += L.h; return o; });
    this.layout = [];
    for (const tr of this.tile?.tracks ?? []) {
      const hh = this.collapsed.has(tr.index) || tr.header ? TRACK_HEAD + GAP : TRACK_HEAD + Math.max(1, tr.depth_count) * ROW + GAP;
      this.layout.push({ track: tr, y, h: hh }); y += hh;
    }
    this.totalH = y;
    // the viewer is as tall as its tracks, up to 72 % of the window (then Shift+wheel/drag scroll)
    const want = Math.max(160, Math.min(RULER + y + 2, Math.round(window.innerHeight * 0.72)));
    if (Math.abs(this.wrap.clientHeight - want) > 2) this.wrap.style.height = want + "px";
    this.scrollY = Math.max(0, Math.min(this.scrollY, Math.max(0, this.totalH - (want - RULER))));
  }

  /** Shows counter tracks above the event tracks. */
  setCounters(list: Counter[]): void {
    this.counters = list.map((c) => ({ c, y: 0, h: COUNTER_H, max: Math.max(c.unit === "fraction" ? 1 : 0, ...c.values.filter(isFinite)) }));
    this.relayout(); this.redraw();
  }
  counterNames(): string[] { return this.counters.map((L) => L.c.name); }

  /** Marks time spans over the event area (e.g. the critical path's segments); [] clears them. */
  setMarks(list: Mark[]): void { this.marks = list; this.redraw(); }
  /** Where each worker's steps end (merged timeline): a dashed line down that worker's tracks at each. */
  setStepEnds(list: StepEnd[]): void { this.stepEnds = list; this.redraw(); }
  /** The marked spans' extent, or null when there is none. */
  marksExtent(): [number, number] | null {
    return this.marks.length ? [Math.min(...this.marks.map((m) => m.a)), Math.max(...this.marks.map((m) => m.b))] : null;
  }

  /** Collapses or expands one track (by index), or all of them. */
  toggleTrack(i: number, collapse?: boolean): void {
    if (collapse ?? !this.collapsed.has(i)) this.collapsed.add(i); else this.collapsed.delete(i);
    this.relayout(); this.redraw();
  }
  setAllCollapsed(collapse: boolean): void {
    this.collapsed.clear();
    if (collapse) for (const tr of this.tracks()) this.collapsed.add(tr.index);
    this.relayout(); this.redraw();
  }
  isCollapsed(i: number): boolean { return this.collapsed.has(i); }
  /** The indexes of the tracks at least partly in view (vertically). */
  visibleTracks(): number[] {
    const top = this.scrollY, bottom = this.scrollY + this.h - RULER;
    return this.layout.filter((L) => L.y + L.h > top && L.y < bottom).map((L) => L.track.index);
  }
  trackY(i: number): number | null { const L = this.layout[i]; return L ? RULER + L.y - this.scrollY : null; }
  /** Scrolls the tracks so that track `i` is at the top (as far as they scroll). */
  scrollToTrack(i: number): void {
    const L = this.layout[i];
    if (!L) return;
    const y = Math.max(0, Math.min(Math.max(0, this.totalH - (this.h - RULER)), L.y));
    if (y !== this.scrollY) { this.scrollY = y; this.hooks.onScroll?.(); }
    this.redraw();
  }

  /** Selects a time range (and its tracks), or clears it with null. */
  setRange(r: RangeSel | null): void {
    this.range = r && r.b > r.a ? r : null;
    this.hooks.onRange?.(this.range); this.redraw();
  }

  /** F: zooms to the selected range, else to the selected event. */
  frame(): void {
    if (this.range) { const pad = (this.range.b - this.range.a) * 0.05; this.setView(this.range.a - pad, this.range.b + pad); return; }
    if (this.sel) { const pad = Math.max(this.sel.dur_us * 0.25, 1); this.setView(this.sel.ts_us - pad, this.sel.ts_us + this.sel.dur_us + pad); }
  }

  /** Sets the visible window (clamped to the trace, at least 10 ns wide) and redraws. */
  setView(a: number, b: number): void {
    const [ta, tb] = this.extent();
    const span = Math.max(0.01, Math.min(b - a, (tb - ta) * 1.2 || 1));
    let c0 = a, c1 = a + span;
    const pad = (tb - ta) * 0.1;
    if (c0 < ta - pad) { c0 = ta - pad; c1 = c0 + span; }
    if (c1 > tb + pad) { c1 = tb + pad; c0 = c1 - span; }
    this.v0 = c0; this.v1 = c1;
    this.hooks.onView?.(c0, c1);
    this.redraw();
    this.maybeFetch();
  }

  zoom(factor: number, atX?: number): void {
    const t = this.tOf(atX ?? GUTTER + this.plotW() / 2);
    this.setView(t - (t - this.v0) * factor, t + (this.v1 - t) * factor);
  }
  pan(dxPx: number, dyPx = 0): void {
    if (dyPx) {
      const y = Math.max(0, Math.min(Math.max(0, this.totalH - (this.h - RULER)), this.scrollY + dyPx));
      if (y !== this.scrollY) { this.scrollY = y; this.hooks.onScroll?.(); }
    }
    const d = dxPx * this.usPerPx();
    this.setView(this.v0 + d, this.v1 + d);
  }

  /** Selects an event (e.g. from search) and scrolls its track into view. */
  select(sel: Selection | null): void {
    this.sel = sel;
    if (sel) {
      const L = this.layout[sel.track];
      if (L && (L.y < this.scrollY || L.y + L.h > this.scrollY + this.h - RULER)) this.scrollY = Math.max(0, L.y - 20);
    }
    this.hooks.onSelect(sel);
    this.redraw();
  }

  /** Asks for the current window's tile again (its content changed: a group folded, clocks realigned). */
  refetch(): void { this.maybeFetch(true); }

  /** Requests a new tile when the view leaves the cached one or needs finer detail (or `force`). */
  private maybeFetch(force = false): void {
    const t = this.tile;
    if (!t) return;
    const span = this.v1 - this.v0;
    const covered = this.v0 >= t.start_us - 1e-9 && this.v1 <= t.end_us + 1e-9;
    const [ta, tb] = this.extent();
    const atEdges = (this.v0 <= ta || t.start_us <= ta) && (this.v1 >= tb || t.end_us >= tb);
    const fineEnough = t.bucket_us <= this.usPerPx() * 1.01 || (t.end_us - t.start_us) <= span * 1.01 && t.bucket_us <= this.usPerPx() * 1.5;
    const tooFine = t.bucket_us < this.usPerPx() / 4;
    if ((covered || atEdges) && fineEnough && !tooFine && !force) return;
    if (this.pending) { this.queued = true; this.forced ||= force; return; }
    this.pending = true;
    const a = this.v0 - span, b = this.v1 + span;
    const px = Math.round(this.plotW() * 3);
    const t0 = performance.now();
    this.hooks.fetchTile(a, b, px).then((tile) => {
      if (this.destroyed) return;
      this.stats.fetches++; this.stats.lastFetchMs = performance.now() - t0;
      this.setTile(tile); this.redraw();
      this.hooks.onTile?.();
    }).catch((e) => this.hooks.onError((e as Error).message)).finally(() => {
      this.pending = false;
      if (this.queued) { const f = this.forced; this.queued = false; this.forced = false; this.maybeFetch(f); }
    });
  }

  private resize(): void {
    const r = this.wrap.getBoundingClientRect();
    this.dpr = window.devicePixelRatio || 1;
    this.w = Math.max(100, Math.floor(r.width)); this.h = Math.max(100, Math.floor(r.height));
    this.canvas.width = Math.floor(this.w * this.dpr); this.canvas.height = Math.floor(this.h * this.dpr);
    this.canvas.style.width = this.w + "px"; this.canvas.style.height = this.h + "px";
    this.redraw();
  }

  redraw(): void {
    if (this.frameReq || this.destroyed) return;
    this.frameReq = requestAnimationFrame(() => { this.frameReq = 0; this.draw(); });
  }

  /** Draws one frame now (exposed for the benchmark). */
  /** Draws one frame now (exposed for the benchmark). Slices and buckets are written straight
   * into a pixel buffer (cost bounded by the canvas area, not by the event count); text, flows,
   * selection and the ruler are drawn on top with the canvas API. */
  draw(): void {
    const t0 = performance.now();
    const c = this.ctx2d, W = this.w, H = this.h, dpr = this.dpr;
    const th = this.theme();
    c.setTransform(1, 0, 0, 1, 0, 0);
    const pw = this.canvas.width, ph = this.canvas.height;
    if (!this.img || this.img.width !== pw || this.img.height !== ph) { this.img = c.createImageData(pw, ph); this.px = new Uint32Array(this.img.data.buffer); }
    const px = this.px!;
    px.fill(th.bg);
    let rects = 0;
    const labels: [number, number, number, string][] = [];
    const tile = this.tile;
    const clipTop = Math.ceil(RULER * dpr), gx = Math.round(GUTTER * dpr);
    if (tile) {
      const upp = this.usPerPx();
      for (let li = 0; li < this.layout.length; li++) {
        const L = this.layout[li];
        const y0 = RULER + L.y - this.scrollY;
        if (y0 > H || y0 + L.h < RULER) continue;
        this.fill(0, pw, Math.max(clipTop, Math.round(y0 * dpr)), Math.min(ph, Math.round((y0 + L.h - GAP / 2) * dpr)), li % 2 ? th.bg : th.track);
        this.fill(0, pw, Math.max(clipTop, Math.round((y0 + L.h - GAP / 2) * dpr)), Math.max(clipTop, Math.round((y0 + L.h - GAP / 2) * dpr) + 1), th.line);
        if (this.collapsed.has(L.track.index) || L.track.header) continue;
        for (const row of L.track.rows) {
          const ry = y0 + TRACK_HEAD + row.depth * ROW;
          if (ry > H || ry + ROW < RULER) continue;
          const ya = Math.max(clipTop, Math.round((ry + 1) * dpr)), yb = Math.min(ph, Math.round((ry + ROW - 1) * dpr));
          if (yb <= ya) continue;
          // paint one scanline of the row, then copy it down the row's height
          const base = ya * pw;
          px.copyWithin(base + gx, (ya - 1) * pw + gx, ya * pw);
          rects += row.mode === "events" ? this.rasterEvents(row, base, upp, gx, pw, labels, ry) : this.rasterBuckets(row, base, tile, gx, pw, th.bgRGB);
          for (let y = ya + 1; y < yb; y++) px.copyWithin(y * pw + gx, base + gx, base + pw);
        }
      }
      this.fill(gx - 1, gx, clipTop, ph, th.line);
    }
    c.putImageData(this.img!, 0, 0);
    c.setTransform(dpr, 0, 0, dpr, 0, 0);
    c.font = "11px system-ui,sans-serif"; c.textBaseline = "middle";
    if (tile) {
      c.save(); c.beginPath(); c.rect(0, RULER, W, H - RULER); c.clip();
      for (let li = 0; li < this.layout.length; li++) {
        const L = this.layout[li], y0 = RULER + L.y - this.scrollY;
        if (y0 > H || y0 + L.h < RULER) continue;
        if (L.track.header) {  // a rank's group (merged timeline): its label runs across the plot
          c.fillStyle = th.fg; c.font = "bold 11px system-ui,sans-serif";
          c.fillText((L.track.folded ? "▸ " : "▾ ") + L.track.label, 4, y0 + TRACK_HEAD / 2);
          c.font = "11px system-ui,sans-serif";
          continue;
        }
        const shut = this.collapsed.has(L.track.index);
        c.fillStyle = th.fg; c.fillText((shut ? "▸ " : "▾ ") + clip(L.track.label, GUTTER - 22), 4, y0 + TRACK_HEAD / 2);
        if (!shut) { c.fillStyle = th.muted; c.fillText(`${L.track.kind.toUpperCase()} · ${L.track.event_count.toLocaleString("en-US")} events`, 16, y0 + TRACK_HEAD / 2 + 14); }
      }
      for (const C of this.counters) {
        const y0 = RULER + C.y - this.scrollY;
        if (y0 > H || y0 + C.h < RULER) continue;
        this.drawCounter(C, y0, th);
      }
      c.beginPath(); c.rect(GUTTER, RULER, W - GUTTER, H - RULER); c.clip();
      c.fillStyle = "#111";
      for (const [x, w, y, name] of labels) c.fillText(clip(name, w - 6), x + 3, y + ROW / 2);
      if (this.showFlows && tile.flows) this.drawFlows(tile, th.muted); else this.stats.flows = 0;
      this.stats.marks = this.marks.length ? drawMarks(c, this.marks, (t) => this.xOf(t), GUTTER, W, RULER, H) : 0;
      this.drawStepEnds(th.fgCss);
      if (this.sel) this.drawSelection(th.fgCss);
      if (this.range) this.drawRange(th.fgCss);
      c.restore();
    } else {
      c.fillStyle = th.muted; c.font = "13px system-ui,sans-serif"; c.fillText("loading…", GUTTER + 10, RULER + 20);
    }
    this.drawRuler(th.bgCss, th.fgCss, th.muted, th.lineCss);
    const dt = performance.now() - t0;
    this.stats.frames++; this.stats.lastDrawMs = dt; this.stats.totalDrawMs += dt; this.stats.rects = rects;
  }

  private img: ImageData | null = null;
  private px: Uint32Array | null = null;
  private themeCache: { key: string; v: Theme } | null = null;

  /** The theme colours (CSS variables), as CSS text and as packed pixels; cached per theme. */
  private theme(): Theme {
    const key = document.body.className;
    if (this.themeCache?.key === key) return this.themeCache.v;
    const css = getComputedStyle(document.body);
    const get = (n: string, d: string) => css.getPropertyValue(n).trim() || d;
    const bgCss = get("--bg", "#ffffff"), fgCss = get("--fg", "#202124"), lineCss = get("--line", "#dadce0"), trackCss = get("--track", "#f1f3f4");
    const bgRGB = parseHex(bgCss);
    const v: Theme = { bgCss, fgCss, lineCss, fg: fgCss, muted: get("--muted", "#5f6368"), bg: pack(bgRGB), bgRGB, line: pack(parseHex(lineCss)), track: pack(parseHex(trackCss)) };
    this.themeCache = { key, v };
    return v;
  }

  /** Fills device-pixel rows [y0, y1) between columns [x0, x1) with a packed colour. */
  private fill(x0: number, x1: number, y0: number, y1: number, col: number): void {
    const px = this.px!, pw = this.canvas.width;
    x0 = Math.max(0, x0 | 0); x1 = Math.min(pw, x1 | 0);
    if (x1 <= x0) return;
    for (let y = y0; y < y1; y++) px.fill(col, y * pw + x0, y * pw + x1);
  }

  /** Paints columns [a, b) of the scanline starting at `base`. */
  private span(base: number, a: number, b: number, col: number): void {
    const px = this.px!;
    for (let x = base + a, e = base + b; x < e; x++) px[x] = col;
  }

  private rasterEvents(row: EventsRow, base: number, upp: number, gx: number, pw: number, labels: [number, number, number, string][], ry: number): number {
    const ts = row.ts_us, du = row.dur_us, names = row.name, n = ts.length, dpr = this.dpr;
    // rows never overlap within a depth and are sorted by start: one step back catches an event
    // that began before the window
    let i = Math.max(0, lowerBound(ts, this.v0) - 1);
    const v0 = this.v0, scale = dpr / upp, x0 = GUTTER * dpr, cols = this.rgba;
    let drawn = 0, lastEnd = -1;
    for (; i < n; i++) {
      const xa = x0 + (ts[i] - v0) * scale;
      if (xa >= pw) break;
      const xb = xa + du[i] * scale;
      if (xb < gx) continue;
      let a = Math.max(gx, Math.floor(xa)), b = Math.min(pw, Math.ceil(xb));
      if (b <= a) b = a + 1;
      if (b <= lastEnd) continue;          // fully inside the pixel already painted
      if (a < lastEnd) a = lastEnd;
      const col = cols[names[i]] ?? 0xff888888;
      // a 1-device-px darker edge separates wide neighbours
      if (b - a > 3 * dpr) { this.span(base, a, b - 1, col); this.span(base, b - 1, b, this.darker[names[i]] ?? col); }
      else this.span(base, a, b, col);
      lastEnd = b; drawn++;
      if ((b - a) / dpr > 36) labels.push([a / dpr, (b - a) / dpr, ry, this.tile!.names[names[i]] ?? ""]);
    }
    return drawn;
  }

  private rasterBuckets(row: BucketsRow, base: number, tile: Tile, gx: number, pw: number, bg: [number, number, number]): number {
    const p = row.px, b = tile.bucket_us, s0 = tile.start_us, scale = (this.plotW() * this.dpr) / (this.v1 - this.v0), x0 = GUTTER * this.dpr;
    const lo = Math.max(0, lowerBound(p, Math.floor((this.v0 - s0) / b) - 1));
    let drawn = 0, lastEnd = -1;
    for (let i = lo; i < p.length; i++) {
      const xa = x0 + (s0 + p[i] * b - this.v0) * scale;
      if (xa >= pw) break;
      let a = Math.max(gx, Math.floor(xa)), e = Math.min(pw, Math.ceil(xa + b * scale));
      if (e <= a) e = a + 1;
      if (e <= lastEnd) continue;
      if (a < lastEnd) a = lastEnd;
      const rgb = this.rgb[row.name[i]] ?? [136, 136, 136], al = 0.35 + 0.65 * Math.min(1, row.busy[i]);
      this.span(base, a, e, pack([bg[0] + (rgb[0] - bg[0]) * al, bg[1] + (rgb[1] - bg[1]) * al, bg[2] + (rgb[2] - bg[2]) * al]));
      lastEnd = e; drawn++;
    }
    return drawn;
  }

  private rowY(track: number, depth: number): number | null {
    const L = this.layout[track];
    if (!L) return null;
    return RULER + L.y - this.scrollY + TRACK_HEAD + depth * ROW + ROW / 2;
  }

  private drawFlows(tile: Tile, color: string): void {
    const f = tile.flows!;
    // every visible flow when few are visible (at most FLOWS_SHOWN); the selected event's are drawn over them in
    // the selection's colour, and alone when more are visible
    const vis: number[] = [];
    for (let i = 0; i < f.id.length; i++) {
      const xa = this.xOf(f.from_us[i]), xb = this.xOf(f.to_us[i]);
      if ((xa < GUTTER && xb < GUTTER) || (xa > this.w && xb > this.w)) continue;
      vis.push(i);
      if (vis.length > FLOWS_SHOWN) break;
    }
    const s = this.sel, mine: number[] = [];
    if (s) for (let i = 0; i < f.id.length; i++) {
      if ((f.from_track[i] === s.track && f.from_depth[i] === s.depth && f.from_us[i] >= s.ts_us && f.from_us[i] <= s.ts_us + s.dur_us) ||
        (f.to_track[i] === s.track && f.to_depth[i] === s.depth && f.to_us[i] >= s.ts_us && f.to_us[i] <= s.ts_us + s.dur_us)) mine.push(i);
    }
    const many = vis.length > FLOWS_SHOWN, isMine = new Set(mine);
    const rest = many ? [] : vis.filter((i) => !isMine.has(i));
    this.stats.flows = rest.length + mine.length;
    this.strokeFlows(f, rest, color, 1, 0.8);
    this.stats.flowsSelected = this.strokeFlows(f, mine, SELECTED_FLOW, 2, 1);
    this.stats.flowsHidden = many;
  }

  /** Draws flows `list` as curves with arrow heads; how many were in view. */
  private strokeFlows(f: NonNullable<Tile["flows"]>, list: number[], color: string, width: number, alpha: number): number {
    const c = this.ctx2d;
    c.save();
    c.strokeStyle = color; c.fillStyle = color; c.lineWidth = width; c.globalAlpha = alpha;
    c.beginPath();
    const heads: [number, number][] = [];
    let shown = 0;
    for (const i of list) {
      const xa = this.xOf(f.from_us[i]), xb = this.xOf(f.to_us[i]);
      if ((xa < GUTTER && xb < GUTTER) || (xa > this.w && xb > this.w)) continue;
      const ya = this.rowY(f.from_track[i], f.from_depth[i]), yb = this.rowY(f.to_track[i], f.to_depth[i]);
      if (ya === null || yb === null) continue;
      if ((ya < RULER && yb < RULER) || (ya > this.h && yb > this.h)) continue;
      const mx = (xa + xb) / 2;
      c.moveTo(xa, ya); c.bezierCurveTo(mx, ya, mx, yb, xb, yb);
      if (heads.length < 5000) heads.push([xb, yb]);
      shown++;
    }
    c.stroke();
    c.beginPath();
    for (const [x, y] of heads) { c.moveTo(x, y); c.lineTo(x - 5, y - 3); c.lineTo(x - 5, y + 3); c.closePath(); }
    c.fill();
    c.restore();
    return shown;
  }

  private drawCounter(C: CounterLayout, y0: number, th: Theme): void {
    const c = this.ctx2d, { ts_us: ts, values: vs } = C.c, top = y0 + 3, hh = C.h - 8;
    c.fillStyle = th.bgCss; c.fillRect(0, y0, this.w, C.h);
    c.fillStyle = th.lineCss; c.fillRect(0, y0 + C.h - 1, this.w, 1);
    const last = vs.length ? vs[Math.min(vs.length - 1, Math.max(0, lowerBound(ts, this.v1) - 1))] : 0;
    const fmtV = (v: number) => fmtCounter(C.c.unit, v);
    c.fillStyle = th.fg; c.fillText(clip(C.c.name, GUTTER - 8), 4, y0 + 9);
    c.fillStyle = th.muted; c.fillText(`max ${fmtV(C.max)}`, 4, y0 + 23);
    if (!ts.length || !(C.max > 0)) return;
    c.save(); c.beginPath(); c.rect(GUTTER, y0, this.w - GUTTER, C.h); c.clip();
    const Y = (v: number) => top + hh - (Math.max(0, v) / C.max) * hh;
    c.beginPath(); c.moveTo(GUTTER, top + hh);
    let i = Math.max(0, lowerBound(ts, this.v0) - 1), prevY = Y(vs[i] ?? 0);
    c.lineTo(GUTTER, prevY);
    for (; i < ts.length; i++) {
      const x = Math.max(GUTTER, this.xOf(ts[i]));
      if (x > this.w) break;
      const y = Y(vs[i]);
      c.lineTo(x, prevY); c.lineTo(x, y); prevY = y;
    }
    c.lineTo(this.w, prevY); c.lineTo(this.w, top + hh); c.closePath();
    c.fillStyle = C.c.unit === "fraction" ? "rgba(89,161,79,.55)" : C.c.name.includes("reserved") ? "rgba(245,124,0,.45)" : "rgba(25,118,210,.5)";
    c.fill(); c.restore();
    void last;
  }

  private drawRange(fg: string): void {
    const r = this.range!, c = this.ctx2d;
    const xa = Math.max(GUTTER, this.xOf(r.a)), xb = Math.min(this.w, this.xOf(r.b));
    if (xb <= xa) return;
    const spans: [number, number][] = r.tracks === null ? [[RULER, this.h]] : r.tracks.map((i) => {
      const L = this.layout[i]; return L ? [RULER + L.y - this.scrollY, L.h] as [number, number] : [0, 0] as [number, number];
    }).map(([y, hh]) => [y, y + hh] as [number, number]);
    c.fillStyle = "rgba(25,118,210,.16)";
    for (const [ya, yb] of spans) if (yb > ya) c.fillRect(xa, ya, xb - xa, yb - ya);
    c.strokeStyle = fg; c.lineWidth = 1; c.beginPath();
    c.moveTo(xa + 0.5, RULER); c.lineTo(xa + 0.5, this.h); c.moveTo(xb - 0.5, RULER); c.lineTo(xb - 0.5, this.h); c.stroke();
  }

  /** The step ends (`setStepEnds`) in view: per worker a dashed line over its group's tracks with the step's name
   * beside it on the group's header row (where it fits); `stats.stepEnds` lists what was drawn. */
  private drawStepEnds(fg: string): void {
    const drawn: { worker: string; step: string; x: number }[] = [];
    if (this.stepEnds.length) {
      const span = new Map<string, [number, number, number]>();  // worker -> top, bottom, header's middle
      for (const L of this.layout) {
        const w = L.track.worker;
        if (w === undefined) continue;
        const y0 = RULER + L.y - this.scrollY, y1 = y0 + L.h - GAP / 2;
        const s = span.get(w);
        if (!s) span.set(w, [y0, y1, L.track.header ? y0 + TRACK_HEAD / 2 : NaN]);
        else { s[0] = Math.min(s[0], y0); s[1] = Math.max(s[1], y1); if (L.track.header) s[2] = y0 + TRACK_HEAD / 2; }
      }
      const c = this.ctx2d, lastLabel = new Map<string, number>();
      c.save();
      c.strokeStyle = fg; c.fillStyle = fg; c.globalAlpha = 0.7; c.lineWidth = 1; c.setLineDash([4, 3]);
      c.font = "10px system-ui,sans-serif";
      for (const e of this.stepEnds) {
        const s = span.get(e.worker), x = Math.round(this.xOf(e.t)) + 0.5;
        if (!s || x < GUTTER || x > this.w || s[1] < RULER || s[0] > this.h) continue;
        c.beginPath(); c.moveTo(x, Math.max(RULER, s[0])); c.lineTo(x, Math.min(this.h, s[1])); c.stroke();
        const text = e.label, tw = c.measureText(text).width;
        if (isFinite(s[2]) && x - 3 - tw > Math.max(GUTTER, lastLabel.get(e.worker) ?? -Infinity)) {
          c.fillText(text, x - 3 - tw, s[2]);
          lastLabel.set(e.worker, x);
        }
        drawn.push({ worker: e.worker, step: e.step, x });
      }
      c.restore();
    }
    this.stats.stepEnds = drawn;
  }

  private drawSelection(fg: string): void {
    const s = this.sel!, y = this.rowY(s.track, s.depth);
    if (y === null) return;
    const c = this.ctx2d, xa = this.xOf(s.ts_us), xb = Math.max(xa + 2, this.xOf(s.ts_us + s.dur_us));
    c.strokeStyle = fg; c.lineWidth = 2;
    c.strokeRect(Math.max(GUTTER, xa) - 1, y - ROW / 2, Math.min(this.w, xb) - Math.max(GUTTER, xa) + 2, ROW);
  }

  private drawRuler(bg: string, fg: string, muted: string, line: string): void {
    const c = this.ctx2d, span = this.v1 - this.v0;
    c.fillStyle = bg; c.fillRect(0, 0, this.w, RULER);
    c.fillStyle = line; c.fillRect(0, RULER - 1, this.w, 1);
    const step = tickStep(span, Math.max(2, Math.floor(this.plotW() / 110)));
    c.font = "11px system-ui,sans-serif"; c.textBaseline = "middle";
    c.strokeStyle = line; c.beginPath();
    const largest = Math.max(Math.abs(this.v0), Math.abs(this.v1));
    const labels: string[] = [];
    const boxes: [number, number][] = [];
    for (let k = Math.ceil(this.v0 / step); k * step <= this.v1; k++) {
      const t = k * step, x = Math.round(this.xOf(t)) + 0.5;
      if (x < GUTTER) continue;
      const text = fmtTick(t, step, largest);
      c.moveTo(x, RULER - 8); c.lineTo(x, RULER);
      // a label reads right of its tick; one the canvas's edge would cut reads left of it, unless that runs into
      // the label before (then the tick stays unlabelled)
      const tw = c.measureText(text).width;
      let left = x + 3;
      if (left + tw > this.w - 1) {
        left = x - 3 - tw;
        if (left < GUTTER || (boxes.length && left < boxes[boxes.length - 1][1] + 4)) continue;
      }
      c.fillStyle = muted; c.fillText(text, left, RULER / 2 - 2);
      labels.push(text);
      boxes.push([left, left + tw]);
    }
    this.stats.ruler = labels;
    this.stats.rulerBoxes = boxes;
    c.stroke();
    if (this.range) {
      const xa = Math.max(GUTTER, this.xOf(this.range.a)), xb = Math.min(this.w, this.xOf(this.range.b));
      if (xb > xa) { c.fillStyle = "rgba(25,118,210,.35)"; c.fillRect(xa, 0, xb - xa, RULER - 1); }
    }
    c.fillStyle = fg; c.fillText(this.range ? `range ${fmtUs(this.range.b - this.range.a)}` : `window ${fmtUs(span)}`, 6, RULER / 2);
  }

  /** Finds what is under a canvas point: an event, a bucket, or nothing. */
  hitTest(x: number, y: number): { sel: Selection | null; info?: string } {
    const tile = this.tile;
    if (!tile || x < GUTTER || y < RULER) return { sel: null };
    const M = y < RULER + 6 ? markAt(this.marks, this.tOf(x)) : null;
    if (M) return { sel: null, info: `Critical path: ${M.label} (${fmtUs(M.b - M.a)})` };
    const yy = y - RULER + this.scrollY;
    const C = this.counters.find((K) => yy >= K.y && yy < K.y + K.h);
    if (C) {
      const t = this.tOf(x), i = Math.max(0, lowerBound(C.c.ts_us, t + 1e-9) - 1), v = C.c.values[i] ?? 0;
      return { sel: null, info: `${C.c.name}: ${fmtCounter(C.c.unit, v)} at ${fmtUs(t)}` };
    }
    const li = this.layout.findIndex((L) => yy >= L.y && yy < L.y + L.h);
    if (li < 0) return { sel: null };
    const L = this.layout[li];
    if (this.collapsed.has(L.track.index)) return { sel: null };
    const depth = Math.floor((yy - L.y - TRACK_HEAD) / ROW);
    const row = L.track.rows.find((r) => r.depth === depth);
    if (!row) return { sel: null };
    const t = this.tOf(x);
    if (row.mode === "events") {
      const j = hitEvent(row, t, this.usPerPx() * 2);
      if (j < 0) return { sel: null };
      return { sel: { track: li, depth, idx: row.idx[j], name: tile.names[row.name[j]] ?? "", cat: tile.cats[row.cat[j]] ?? "", ts_us: row.ts_us[j], dur_us: row.dur_us[j] } };
    }
    const p = Math.floor((t - tile.start_us) / tile.bucket_us);
    const k = lowerBound(row.px, p);
    if (row.px[k] === p) return { sel: null, info: `${row.count[k]} events here (mostly ${tile.names[row.name[k]] ?? "?"}); zoom in to pick one.` };
    return { sel: null };
  }

  private bindInput(): void {
    const wrap = this.wrap;
    wrap.addEventListener("wheel", (e) => {
      e.preventDefault();
      const r = this.canvas.getBoundingClientRect();
      if (e.shiftKey) { this.pan(0, e.deltaY); return; }
      const dy = e.deltaMode === 1 ? e.deltaY * 16 : e.deltaY;
      this.zoom(Math.exp(dy * 0.002), e.clientX - r.left);
    }, { passive: false });
    let drag: { x: number; y: number; moved: boolean } | null = null;
    let rsel: { x0: number; y0: number; ruler: boolean } | null = null;
    const local = (e: MouseEvent) => { const r = this.canvas.getBoundingClientRect(); return [e.clientX - r.left, e.clientY - r.top]; };
    const rangeFrom = (e: MouseEvent): RangeSel => {
      const [x, y] = local(e), r = rsel!;
      const a = this.tOf(Math.max(GUTTER, Math.min(r.x0, x))), b = this.tOf(Math.max(GUTTER, Math.max(r.x0, x)));
      if (r.ruler) return { a, b, tracks: null };
      const ya = Math.min(r.y0, y) - RULER + this.scrollY, yb = Math.max(r.y0, y) - RULER + this.scrollY;
      return { a, b, tracks: this.layout.filter((L) => L.y + L.h > ya && L.y < yb).map((L) => L.track.index) };
    };
    wrap.addEventListener("mousedown", (e) => {
      wrap.focus();
      const [x, y] = local(e);
      if (x < GUTTER && y >= RULER) {  // a track header: collapse / expand it
        const yy = y - RULER + this.scrollY, L = this.layout.find((K) => yy >= K.y && yy < K.y + TRACK_HEAD);
        if (L?.track.header) { this.hooks.onHeader?.(L.track); e.preventDefault(); } else if (L) { this.toggleTrack(L.track.index); e.preventDefault(); }
        return;
      }
      if (y < RULER || e.shiftKey || e.altKey) { rsel = { x0: Math.max(GUTTER, x), y0: y, ruler: y < RULER }; e.preventDefault(); return; }
      drag = { x: e.clientX, y: e.clientY, moved: false };
    });
    window.addEventListener("mousemove", (e) => {
      if (rsel) { const r = rangeFrom(e); this.range = r.b > r.a ? r : null; this.redraw(); return; }
      if (!drag) return;
      const dx = e.clientX - drag.x, dy = e.clientY - drag.y;
      if (Math.abs(dx) + Math.abs(dy) > 2) drag.moved = true;
      if (drag.moved) { this.pan(-dx, -dy); drag.x = e.clientX; drag.y = e.clientY; }
    });
    window.addEventListener("mouseup", (e) => {
      if (rsel) {
        const r = rangeFrom(e); rsel = null;
        this.setRange(Math.abs(this.xOf(r.b) - this.xOf(r.a)) >= 3 && (r.tracks === null || r.tracks.length) ? r : null);
        return;
      }
      if (!drag) return;
      const moved = drag.moved; drag = null;
      if (moved) return;
      const r = this.canvas.getBoundingClientRect();
      const hit = this.hitTest(e.clientX - r.left, e.clientY - r.top);
      this.sel = hit.sel; this.hooks.onSelect(hit.sel, hit.info); this.redraw();
    });
    wrap.addEventListener("keydown", (e) => {
      if (e.key === "?") { e.preventDefault(); this.hooks.onHelp?.(); return; }
      if (e.key === "Escape") { this.setRange(null); return; }
      if (e.key === "f" || e.key === "F") { e.preventDefault(); this.frame(); return; }
      const k = e.key.toLowerCase();
      if (!"wasd".includes(k) || k.length !== 1) return;
      e.preventDefault();
      if (!this.keys.has(k)) { this.keys.add(k); if (!this.keyLoop) { this.lastKeyT = performance.now(); this.keyLoop = requestAnimationFrame(this.keyTick); } }
    });
    wrap.addEventListener("keyup", (e) => this.keys.delete(e.key.toLowerCase()));
    wrap.addEventListener("blur", () => this.keys.clear());
  }

  private keyTick = (now: number): void => {
    const dt = Math.min(0.1, (now - this.lastKeyT) / 1000 || 0.016); this.lastKeyT = now;
    if (!this.keys.size || this.destroyed) { this.keyLoop = 0; return; }
    let f = 1, dx = 0;
    if (this.keys.has("w")) f *= Math.exp(-2.5 * dt);
    if (this.keys.has("s")) f *= Math.exp(2.5 * dt);
    if (this.keys.has("a")) dx -= this.plotW() * 0.8 * dt;
    if (this.keys.has("d")) dx += this.plotW() * 0.8 * dt;
    if (f !== 1) this.zoom(f);
    if (dx) this.pan(dx);
    this.keyLoop = requestAnimationFrame(this.keyTick);
  };
}

function clip(text: string, px: number): string {
  const max = Math.floor(px / 6.2);
  if (max <= 1) return "";
  return text.length <= max ? text : text.slice(0, max - 1) + "…";
}

interface Theme { bgCss: string; fgCss: string; lineCss: string; fg: string; muted: string; bg: number; bgRGB: [number, number, number]; line: number; track: number }

/** Packs an RGB triple into a little-endian RGBA pixel (opaque). */
function pack([r, g, b]: [number, number, number]): number {
  return ((255 << 24) | (Math.round(b) << 16) | (Math.round(g) << 8) | Math.round(r)) >>> 0;
}

function parseHex(css: string): [number, number, number] {
  const m = /^#([0-9a-f]{3}|[0-9a-f]{6})$/i.exec(css.trim());
  if (!m) { const r = /rgba?\((\d+),\s*(\d+),\s*(\d+)/.exec(css); return r ? [+r[1], +r[2], +r[3]] : [255, 255, 255]; }
  const h = m[1].length === 3 ? m[1].split("").map((x) => x + x).join("") : m[1];
  return [parseInt(h.slice(0, 2), 16), parseInt(h.slice(2, 4), 16), parseInt(h.slice(4, 6), 16)];
}

/** A stable colour for an event name (hash to hue), as RGB. */
export function nameRGB(name: string, dark: boolean): [number, number, number] {
  let hsh = 2166136261;
  for (let i = 0; i < name.length; i++) { hsh ^= name.charCodeAt(i); hsh = Math.imul(hsh, 16777619); }
  const hue = ((hsh >>> 0) % 360) / 360, sat = dark ? 0.45 : 0.6, lig = dark ? 0.52 : 0.7;
  const q = lig < 0.5 ? lig * (1 + sat) : lig + sat - lig * sat, p = 2 * lig - q;
  const ch = (t: number) => { t = (t + 1) % 1; const v = t < 1 / 6 ? p + (q - p) * 6 * t : t < 0.5 ? q : t < 2 / 3 ? p + (q - p) * (2 / 3 - t) * 6 : p; return v * 255; };
  return [ch(hue + 1 / 3), ch(hue), ch(hue - 1 / 3)];
}

/** A counter's value as text: a share in %, a count, or bytes. */
function fmtCounter(unit: string, v: number): string {
  return unit === "fraction" ? `${Math.round(v * 100)} %` : unit === "count" ? String(Math.round(v)) : fmtBytes(v);
}
