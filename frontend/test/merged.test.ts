import { test } from "node:test";
import assert from "node:assert/strict";
import { parseRanks, rangesText, shiftOf, mergeTiles, RankClock, trackFilter, stepEnds } from "../src/timeline/merged";
import { Tile } from "../src/timeline/tiles";

const clock = (o: Partial<RankClock>): RankClock => ({ worker: "w", rank: 0, shift_us: 0, raw_shift_us: 0, offset_us: 0, collectives: 0, spread_us: null, via: null, reason: null, ...o });

test("parseRanks reads ranks and ranges, keeps those in the run, and says what is wrong", () => {
  assert.deepEqual(parseRanks("0-3, 7,2", [0, 1, 2, 3, 4, 5, 6, 7]), [0, 1, 2, 3, 7]);
  assert.deepEqual(parseRanks("60-70", [0, 63, 64]), [63, 64]);
  assert.match(parseRanks("a", [0]) as string, /not a rank/);
  assert.match(parseRanks("5-2", [0]) as string, /empty/);
  assert.match(parseRanks("9", [0]) as string, /none of these/);
  assert.equal(rangesText([7, 0, 1, 2, 3, 12]), "0-3,7,12");
});

test("shiftOf: the estimate when aligned, the raw clock difference otherwise or when there is no estimate", () => {
  const c = clock({ shift_us: 5, raw_shift_us: 1239.5 });
  assert.equal(shiftOf(c, true), 5);
  assert.equal(shiftOf(c, false), 1239.5);
  assert.equal(shiftOf(clock({ shift_us: null, raw_shift_us: 40 }), true), 40);
  assert.equal(shiftOf(clock({ shift_us: null, raw_shift_us: null }), false), 0);
});

function tile(names: string[], ts: number[], start: number, end: number, px: number): Tile {
  return { start_us: start, end_us: end, trace_start_us: 0, trace_end_us: 100, width_px: px, bucket_us: (end - start) / px, names, cats: ["cpu_op"],
    tracks: [{ index: 0, id: "1:1", kind: "cpu", pid: 1, tid: 1, process: "", thread: "", label: "python", depth_count: 2, event_count: ts.length,
      rows: [{ depth: 0, mode: "events", ts_us: ts, dur_us: ts.map(() => 1), name: ts.map((_, i) => i % names.length), cat: ts.map(() => 0), idx: ts.map((_, i) => i) },
        { depth: 1, mode: "buckets", px: [0, 4], count: [2, 1], busy: [1, 0.5], name: [0, 0], cat: [0, 0] }] }],
    flows: { id: [1], cat: [0], from_track: [0], from_depth: [0], from_us: [10], to_track: [0], to_depth: [1], to_us: [12] } };
}

test("mergeTiles: a header per rank, the open ranks' tracks moved by their shift, tables and flows re-indexed", () => {
  // window [100, 200] at 10 px (10 µs buckets); rank b is shifted by +50, so its tile was asked for [50, 150]
  const ta = tile(["x", "y"], [110, 120], 100, 200, 10), tb = tile(["y", "z"], [60], 50, 150, 10);
  const ext = new Map<string, [number, number]>([["c", [0, 300]]]);
  const m = mergeTiles([{ worker: "a", label: "rank 0", shift: 0, tile: ta }, { worker: "b", label: "rank 1", shift: 50, tile: tb },
    { worker: "c", label: "rank 2", shift: -10, tile: null }], 100, 200, 10, ext);
  assert.deepEqual(m.tracks.map((t) => [t.index, t.worker, t.header ?? false, t.folded ?? false]),
    [[0, "a", true, false], [1, "a", false, false], [2, "b", true, false], [3, "b", false, false], [4, "c", true, true]]);
  assert.deepEqual(m.names, ["x", "y", "z"]);
  const rb = m.tracks[3].rows[0] as any;
  assert.deepEqual(rb.ts_us, [110]);      // 60 + 50
  assert.deepEqual(rb.name, [1]);         // "y"
  assert.deepEqual((m.tracks[3].rows[1] as any).px, [0, 4]);  // same buckets: 50 + 50 = 100 = the window's start
  assert.deepEqual(m.flows!.from_track, [1, 3]);
  assert.deepEqual(m.flows!.from_us, [10, 60]);
  assert.deepEqual([m.trace_start_us, m.trace_end_us], [-10, 290]);  // c's extent from earlier tiles, shifted
  assert.equal(m.bucket_us, 10);
});

test("mergeTiles: an unfolded rank out of view stands in as one empty track of about its rows", () => {
  const m = mergeTiles([{ worker: "a", label: "rank 0", shift: 0, tile: null, rows: 12.5 }], 0, 10, 10, new Map());
  assert.deepEqual(m.tracks.map((t) => [t.header ?? false, t.folded ?? false, t.depth_count, t.rows.length]), [[true, false, 0, 0], [false, false, 11, 0]]);
});

test("trackFilter and mergeTiles(keep): only the tracks whose kind or label holds a term, flows to a track left out dropped", () => {
  const t = tile(["x"], [110], 100, 200, 10);
  const gpu = { ...t.tracks[0], index: 1, id: "0:7", kind: "gpu" as const, label: "stream 7" };
  t.tracks.push(gpu);
  t.flows = { id: [1, 2], cat: [0, 0], from_track: [0, 0], from_depth: [0, 0], from_us: [110, 111], to_track: [1, 0], to_depth: [0, 1], to_us: [120, 112] };
  assert.equal(trackFilter(" , "), null);
  const keep = trackFilter("GPU, nothing")!;
  assert.equal(keep(gpu), true);
  assert.equal(keep(t.tracks[0]), false);
  const m = mergeTiles([{ worker: "a", label: "rank 0", shift: 0, tile: t }], 100, 200, 10, new Map(), keep);
  assert.deepEqual(m.tracks.map((x) => [x.index, x.header ?? false, x.label, x.own_index]), [[0, true, "rank 0 · 1 of 2 tracks", undefined], [1, false, "stream 7", 1]]);
  assert.deepEqual(m.flows!.id, []);  // each flow has an end on the python track left out
  const all = mergeTiles([{ worker: "a", label: "rank 0", shift: 0, tile: t }], 100, 200, 10, new Map());
  assert.deepEqual(all.flows!.from_track, [1, 1]);
  assert.deepEqual(all.flows!.to_track, [2, 1]);
  assert.equal(all.tracks[0].label, "rank 0");
});

test("stepEnds: each worker's step ends moved by its shift (aligned or raw), none for a worker without steps", () => {
  const a = clock({ worker: "a", shift_us: 0, steps: [{ step: "1", start_us: 0, end_us: 100 }, { step: "2", start_us: 100, end_us: 250 }] });
  const b = clock({ worker: "b", shift_us: 40, raw_shift_us: 1000, steps: [{ step: "1", start_us: 5, end_us: 60 }] });
  const c = clock({ worker: "c" });
  assert.deepEqual(stepEnds([a, b, c], true).map((e) => [e.worker, e.step, e.t, e.label]),
    [["a", "1", 100, "step 1 ends"], ["a", "2", 250, "step 2 ends"], ["b", "1", 100, "step 1 ends"]]);
  assert.deepEqual(stepEnds([b], false).map((e) => e.t), [1060]);
});
