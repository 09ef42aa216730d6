// The merged timeline of several ranks: pure helpers that pick the ranks, place each rank's clock on the
// reference rank's (the `/clock_offsets` shifts) and merge the ranks' own tiles into one tile for the viewer.
import { Tile, Track, Row, Flows, BucketsRow } from "./tiles";

/** One worker of `/clock_offsets`. */
export interface RankClock {
  worker: string; rank: number | null; shift_us: number | null; raw_shift_us: number | null; offset_us: number | null;
  collectives: number; spread_us: number | null; via: string | null; reason: string | null;
  /** Its steps on its own timeline (none for a trace without ProfilerStep). */
  steps?: { step: string; start_us: number; end_us: number }[];
}

/** Where each chosen worker's steps end on the merged clock (its step ends moved by its shift). */
export function stepEnds(clocks: RankClock[], aligned: boolean): { worker: string; step: string; t: number; label: string }[] {
  return clocks.flatMap((c) => (Array.isArray(c.steps) ? c.steps : []).map((s) => ({
    worker: c.worker, step: String(s.step), t: Number(s.end_us) + shiftOf(c, aligned), label: `step ${s.step} ends` })))
    .filter((e) => isFinite(e.t));
}

/** A rank of the merged timeline: its tile (null while folded or out of view) and the shift applied to its
 * times; `rows`: an unfolded rank out of view, drawn as one empty track about as tall as its tracks would be. */
export interface MergedPart { worker: string; label: string; shift: number; tile: Tile | null; rows?: number }

/** About how many rows a tile's tracks take (a track's header and gap count as about 1.5 rows). */
export function tileRows(t: Tile): number { return t.tracks.reduce((s, x) => s + Math.max(1, x.depth_count) + 1.5, 0); }

/** The number a worker is picked by: its rank, else its place in the list. */
export function rankKey(c: RankClock, i: number): number { return c.rank ?? i; }

/** The shift placing a worker's times on the reference's timeline: the estimated one when aligned (the raw
 * clock difference where no estimate exists), else the raw clock difference (0 where the origin is unknown). */
export function shiftOf(c: RankClock, aligned: boolean): number {
  if (aligned && typeof c.shift_us === "number") return c.shift_us;
  return typeof c.raw_shift_us === "number" ? c.raw_shift_us : 0;
}

/** Parses "0-7,12,40-47" into the chosen keys (ascending, only those in `keys`), or an error text. */
export function parseRanks(text: string, keys: number[]): number[] | string {
  const have = new Set(keys), out = new Set<number>();
  for (const part of text.split(",").map((x) => x.trim()).filter(Boolean)) {
    const m = /^(\d+)(?:\s*-\s*(\d+))?$/.exec(part);
    if (!m) return `“${part}” is not a rank or a range of ranks (e.g. 0-7,12)`;
    const a = Number(m[1]), b = m[2] === undefined ? a : Number(m[2]);
    if (b < a) return `the range “${part}” is empty`;
    for (let k = a; k <= Math.min(b, a + 100000); k++) if (have.has(k)) out.add(k);
  }
  if (!out.size) return "none of these ranks is in the run";
  return [...out].sort((x, y) => x - y);
}

/** The default choice: the first `n` ranks. */
export function defaultRanks(keys: number[], n = 8): number[] { return [...keys].sort((a, b) => a - b).slice(0, n); }

/** A ranks' list as short text: "0-7,12". */
export function rangesText(keys: number[]): string {
  const s = [...keys].sort((a, b) => a - b), out: string[] = [];
  for (let i = 0; i < s.length;) {
    let j = i;
    while (j + 1 < s.length && s[j + 1] === s[j] + 1) j++;
    out.push(j > i ? `${s[i]}-${s[j]}` : String(s[i]));
    i = j + 1;
  }
  return out.join(",");
}

/** A track filter from its text: comma-separated terms, a track is kept when its kind and label ("gpu stream 7",
 * "cpu thread 12 (python)") hold any of them (case-insensitive); null when the text has no term (all kept). */
export function trackFilter(text: string): ((t: Track) => boolean) | null {
  const terms = text.split(",").map((x) => x.trim().toLowerCase()).filter(Boolean);
  if (!terms.length) return null;
  return (t) => { const s = `${t.kind} ${t.label}`.toLowerCase(); return terms.some((x) => s.includes(x)); };
}

/** One tile of the window [a, b] from the parts: per part a group header track (`group` = the part's place;
 * `header`), then the part's own tracks (those `keep` keeps, all without it) with their times moved by its shift;
 * names, categories and flows re-indexed (a flow with an end on a track left out is left out). `extents` holds
 * each worker's trace extent from earlier tiles (for folded parts). */
export function mergeTiles(parts: MergedPart[], a: number, b: number, px: number, extents: Map<string, [number, number]>,
  keep: ((t: Track) => boolean) | null = null): Tile {
  const names: string[] = [], cats: string[] = [], nameIx = new Map<string, number>(), catIx = new Map<string, number>();
  const intern = (table: string[], ix: Map<string, number>, s: string) => { let i = ix.get(s); if (i === undefined) { i = table.length; table.push(s); ix.set(s, i); } return i; };
  const tracks: Track[] = [];
  const flows: Flows = { id: [], cat: [], from_track: [], from_depth: [], from_us: [], to_track: [], to_depth: [], to_us: [] };
  let lo = Infinity, hi = -Infinity;
  for (const p of parts) {
    if (p.tile) extents.set(p.worker, [p.tile.trace_start_us, p.tile.trace_end_us]);
    const ext = extents.get(p.worker);
    if (ext) { lo = Math.min(lo, ext[0] + p.shift); hi = Math.max(hi, ext[1] + p.shift); }
  }
  if (!(hi > lo)) { lo = isFinite(a) ? a : 0; hi = isFinite(b) && b > lo ? b : lo + 1; }
  const s = isFinite(a) ? a : lo, e = isFinite(b) ? b : hi, mb = (e - s) / Math.max(1, px);
  parts.forEach((p, g) => {
    const t = p.tile;
    const kept = t ? (keep ? t.tracks.filter(keep) : t.tracks) : [];
    const events = kept.reduce((s, x) => s + x.event_count, 0);
    const label = t && keep ? `${p.label} · ${kept.length} of ${t.tracks.length} tracks` : p.label;
    tracks.push({ index: tracks.length, id: `group:${p.worker}`, kind: "cpu", pid: 0, tid: 0, process: "", thread: "", label,
      depth_count: 0, event_count: events, rows: [], worker: p.worker, group: g, header: true, folded: !t && p.rows === undefined });
    if (!t && p.rows !== undefined) {
      tracks.push({ index: tracks.length, id: `wait:${p.worker}`, kind: "cpu", pid: 0, tid: 0, process: "", thread: "",
        label: "loads when scrolled into view", depth_count: Math.max(1, Math.round(p.rows - 1.5)), event_count: 0, rows: [], worker: p.worker, group: g });
    }
    if (!t) return;
    const at = new Map<number, number>();  // the track's index in its own tile -> in the merged one
    const nmap = t.names.map((n) => intern(names, nameIx, n)), cmap = t.cats.map((c) => intern(cats, catIx, c));
    for (const tr of kept) {
      const rows: Row[] = tr.rows.map((r) => r.mode === "events"
        ? { ...r, ts_us: r.ts_us.map((x) => x + p.shift), name: r.name.map((i) => nmap[i]), cat: r.cat.map((i) => cmap[i]) }
        : rebucket(r, t.start_us + p.shift, t.bucket_us, s, mb, nmap, cmap));
      at.set(tr.index, tracks.length);
      tracks.push({ ...tr, index: tracks.length, rows, worker: p.worker, group: g, own_index: tr.index });
    }
    const f = t.flows;
    if (f) for (let i = 0; i < f.id.length; i++) {
      const fa = at.get(f.from_track[i]), fb = at.get(f.to_track[i]);
      if (fa === undefined || fb === undefined) continue;
      flows.id.push(f.id[i]); flows.cat.push(cmap[f.cat[i]] ?? 0);
      flows.from_track.push(fa); flows.from_depth.push(f.from_depth[i]); flows.from_us.push(f.from_us[i] + p.shift);
      flows.to_track.push(fb); flows.to_depth.push(f.to_depth[i]); flows.to_us.push(f.to_us[i] + p.shift);
    }
  });
  return { start_us: s, end_us: e, trace_start_us: lo, trace_end_us: hi, width_px: px, bucket_us: mb, names, cats, tracks, flows };
}

/** A buckets row of a tile starting at `s0` (µs, shifted) with buckets of `b0` µs, on the merged tile's buckets
 * (start `s`, width `b`): each bucket goes to the merged bucket holding its start; the first of several wins. */
function rebucket(r: BucketsRow, s0: number, b0: number, s: number, b: number, nmap: number[], cmap: number[]): BucketsRow {
  const out: BucketsRow = { depth: r.depth, mode: "buckets", px: [], count: [], busy: [], name: [], cat: [] };
  for (let i = 0; i < r.px.length; i++) {
    const k = Math.floor((s0 + r.px[i] * b0 - s) / b + 1e-6);
    if (out.px.length && out.px[out.px.length - 1] >= k) continue;
    out.px.push(k); out.count.push(r.count[i]); out.busy.push(r.busy[i]); out.name.push(nmap[r.name[i]]); out.cat.push(cmap[r.cat[i]]);
  }
  return out;
}
