// The backend's level-of-detail tile format (documented in tb_plugin/views/timeline.py) and
// pure helpers over it.

export interface EventsRow { depth: number; mode: "events"; ts_us: number[]; dur_us: number[]; name: number[]; cat: number[]; idx: number[] }
export interface BucketsRow { depth: number; mode: "buckets"; px: number[]; count: number[]; busy: number[]; name: number[]; cat: number[] }
export type Row = EventsRow | BucketsRow;
export interface Track {
  index: number; id: string; kind: "cpu" | "gpu"; pid: number; tid: number; process: string; thread: string;
  label: string; depth_count: number; event_count: number; rows: Row[];
  /** Merged timeline only: the worker the track belongs to, its group (rank) place, whether it is the group's
   * header (folded: no tile asked for it) and the track's index in the worker's own tile. */
  worker?: string; group?: number; header?: boolean; folded?: boolean; own_index?: number;
}
export interface Flows { id: number[]; cat: number[]; from_track: number[]; from_depth: number[]; from_us: number[]; to_track: number[]; to_depth: number[]; to_us: number[] }
export interface Tile {
  start_us: number; end_us: number; trace_start_us: number; trace_end_us: number; width_px: number; bucket_us: number;
  names: string[]; cats: string[]; tracks: Track[]; flows?: Flows; truncated?: boolean;
  /** Chrome counter events ("ph": "C") of the CUDA queue length per (device, stream); the reason when none. */
  counters?: any[]; counters_reason?: string | null;
}

/** The queue-length counter events of a tile as counter tracks (one per device and stream, in time order);
 * the device is named only when the tile has several. Malformed events are skipped. */
export function queueCounters(events: any): { name: string; unit: string; ts_us: number[]; values: number[] }[] {
  const by = new Map<string, { name: string; pid: number; ts_us: number[]; values: number[] }>();
  for (const e of Array.isArray(events) ? events : []) {
    const v = e?.args?.queue_length;
    if (!e || e.ph !== "C" || typeof e.ts !== "number" || typeof v !== "number" || !isFinite(v)) continue;
    const key = `${e.pid}|${e.tid}|${e.name}`;
    if (!by.has(key)) by.set(key, { name: String(e.name ?? `Queue length stream ${e.tid}`), pid: Number(e.pid), ts_us: [], values: [] });
    const c = by.get(key)!;
    c.ts_us.push(e.ts); c.values.push(v);
  }
  const devices = new Set([...by.values()].map((c) => c.pid));
  return [...by.values()].sort((a, b) => a.pid - b.pid || a.name.localeCompare(b.name, undefined, { numeric: true })).map((c) => {
    const order = c.ts_us.map((_, i) => i).sort((i, j) => c.ts_us[i] - c.ts_us[j]);
    return { name: devices.size > 1 ? `GPU ${c.pid} ${c.name.replace(/^Queue length/, "queue")}` : c.name, unit: "count",
      ts_us: order.map((i) => c.ts_us[i]), values: order.map((i) => c.values[i]) };
  });
}

/** Checks the parts of a tile the viewer relies on; returns an error text or null. */
export function validateTile(t: any): string | null {
  if (!t || typeof t !== "object") return "the timeline answer is not an object";
  for (const k of ["start_us", "end_us", "trace_start_us", "trace_end_us", "width_px"]) if (typeof t[k] !== "number") return `the timeline answer lacks the number "${k}"`;
  if (!Array.isArray(t.tracks) || !Array.isArray(t.names)) return 'the timeline answer lacks "tracks" or "names"';
  return null;
}

/** First index i with a[i] >= x in an ascending array. */
export function lowerBound(a: ArrayLike<number>, x: number): number {
  let lo = 0, hi = a.length;
  while (lo < hi) { const m = (lo + hi) >>> 1; if (a[m] < x) lo = m + 1; else hi = m; }
  return lo;
}

/** Index of the event in an events row covering time t (within tol µs), or -1. */
export function hitEvent(row: EventsRow, t: number, tol: number): number {
  const i = lowerBound(row.ts_us, t + tol) - 1;
  let best = -1, bestDist = Infinity;
  for (let j = Math.max(0, i - 2); j <= Math.min(row.ts_us.length - 1, i + 1); j++) {
    const a = row.ts_us[j], b = a + row.dur_us[j];
    const dist = t < a ? a - t : t > b ? t - b : 0;
    if (dist <= tol && dist < bestDist) { best = j; bestDist = dist; }
  }
  return best;
}

/** "Nice" tick step (1/2/5 × 10^k) for about `n` ticks over `span`. */
export function tickStep(span: number, n: number): number {
  const raw = span / Math.max(1, n);
  const p = Math.pow(10, Math.floor(Math.log10(raw)));
  for (const m of [1, 2, 5, 10]) if (m * p >= raw) return m * p;
  return 10 * p;
}

/** A ruler label for time `t` (µs) on ticks `step` µs apart: the unit suits the labels' size and
 * the decimals the step, so neighbouring ticks never read the same. */
export function fmtTick(t: number, step: number, largest: number = Math.abs(t)): string {
  const units: [number, string][] = [[1e6, "s"], [1e3, "ms"], [1, "µs"], [1e-3, "ns"]];
  const [size, name] = units.find(([u]) => largest >= u) ?? units[units.length - 1];
  const dec = Math.max(0, Math.min(9, Math.ceil(-Math.log10(step / size) - 1e-9)));
  const v = t / size;
  return (Math.abs(v) < 0.5 * Math.pow(10, -dec) ? 0 : v).toFixed(dec) + " " + name;
}
