import { test } from "node:test";
import assert from "node:assert/strict";
import { lowerBound, hitEvent, tickStep, validateTile, EventsRow, fmtTick, queueCounters } from "../src/timeline/tiles";
import { readHash, writeHash } from "../src/state";
import { fmtUs, fmtBytes, fmtPct } from "../src/dom";
import { parseCurves } from "../src/views/memory";
import { toCSV, toTSV, fileName } from "../src/export";
import { fileProgressText, pendingNames, summarizingText } from "../src/progress";
import { hostURL, parseHostHash } from "../src/tburl";

test("lowerBound finds the first index >= x", () => {
  const a = [1, 3, 3, 7];
  assert.deepEqual([0, 1, 3, 4, 8].map((x) => lowerBound(a, x)), [0, 0, 1, 3, 4]);
  assert.equal(lowerBound([], 5), 0);
});

test("hitEvent picks the event under a time, with tolerance, or -1", () => {
  const row: EventsRow = { depth: 0, mode: "events", ts_us: [0, 10, 30], dur_us: [5, 10, 1], name: [0, 1, 2], cat: [0, 0, 0], idx: [7, 8, 9] };
  assert.equal(hitEvent(row, 12, 0), 1);
  assert.equal(hitEvent(row, 4.9, 0), 0);
  assert.equal(hitEvent(row, 25, 1), -1);
  assert.equal(hitEvent(row, 29.5, 1), 2);
  assert.equal(hitEvent(row, 100, 1), -1);
});

test("tickStep gives 1/2/5 steps", () => {
  assert.equal(tickStep(1000, 10), 100);
  assert.equal(tickStep(1000, 4), 500);
  assert.equal(tickStep(0.03, 3), 0.01);
});

test("validateTile names the missing part", () => {
  assert.match(validateTile({}) ?? "", /start_us/);
  assert.equal(validateTile({ start_us: 0, end_us: 1, trace_start_us: 0, trace_end_us: 1, width_px: 10, names: [], tracks: [] }), null);
  assert.match(validateTile({ start_us: 0, end_us: 1, trace_start_us: 0, trace_end_us: 1, width_px: 10 }) ?? "", /tracks/);
});

test("hash state round-trips in a stable order, escaping names", () => {
  const st = { view: "timeline", run: "a&b=<c>", worker: "w 1", span: "2", q: "conv#2" };
  const h = writeHash(st);
  assert.ok(h.startsWith("#run="));
  assert.deepEqual(readHash(h), st);
  assert.equal(writeHash({ b: "1", a: "2", run: "r" }), "#run=r&a=2&b=1");
});

test("formatters", () => {
  assert.equal(fmtUs(1500), "1.50 ms");
  assert.equal(fmtUs(2.5e6), "2.50 s");
  assert.equal(fmtUs(0.25), "250 ns");
  assert.equal(fmtUs(null), "–");
  assert.equal(fmtBytes(1536), "1.50 KiB");
  assert.equal(fmtPct(0.256), "25.6 %");
});

test("parseCurves reads the backend's memory curve shape", () => {
  const d = { devices: ["CPU", "GPU0"], default_device: "GPU0", curves: {
    CPU: { ts_us: [0, 5], allocated_bytes: [10, 20], reserved_bytes: [0, 0] },
    GPU0: { ts_us: [1], allocated_bytes: [30], reserved_bytes: [64] } } };
  const c = parseCurves(d);
  assert.deepEqual(c.map((x) => x.device), ["CPU", "GPU0"]);
  assert.deepEqual(c[1].alloc, [30]);
  assert.deepEqual(c[1].reserved, [64]);
  assert.deepEqual(parseCurves({ curves: {} }), []);
});

test("fmtTick: an 85 µs window at 56 ms gives distinct labels in ms", () => {
  const step = tickStep(85, 8);
  const labels = [];
  for (let k = Math.ceil(56000 / step); k * step <= 56085; k++) labels.push(fmtTick(k * step, step, 56085));
  assert.equal(new Set(labels).size, labels.length);
  assert.ok(labels.length >= 4 && labels.every((l) => l.endsWith(" ms")), labels.join());
  assert.equal(fmtTick(56010, 10, 56085), "56.01 ms");
  assert.equal(fmtTick(0.04, 0.005, 0.1), "40 ns");
  assert.equal(fmtTick(2.5e6, 5e5, 3e6), "2.5 s");
});

test("toCSV quotes, keeps raw numbers, defuses formulas; toTSV flattens tabs", () => {
  const csv = toCSV(["name", "total_us"], [["a,b", 1234.5678], ['say "hi"', null], ["=cmd()", 1e-7], [{ x: 1 }, NaN]]);
  assert.equal(csv, 'name,total_us\r\n"a,b",1234.5678\r\n"say ""hi""",\r\n\'=cmd(),1e-7\r\n"{""x"":1}",\r\n');
  assert.equal(toTSV(["a", "b"], [["x\ty", 2]]), "a\tb\nx y\t2\n");
  assert.equal(fileName("Operators — run/1"), "operators-run-1.csv");
});

test("fileProgressText: reading, queued, nothing for done", () => {
  const all = { files_done: 3, files_total: 9 };
  assert.equal(fileProgressText({ state: "reading", file: "r/w.json", bytes_done_est: 12.3e6, bytes_total: 837e6, rate_bps: 68e6, eta_s: 12.1, all }),
    "Reading r/w.json: ≈ 12.3 MB of 837 MB (68.0 MB/s, about 12 s left) · 3 of 9 files loaded");
  assert.equal(fileProgressText({ state: "queued", file: "r/w.json", bytes_total: 5e6, position: 2, all }), "Waiting to read r/w.json (5.0 MB), place 2 in the queue · 3 of 9 files loaded");
  assert.equal(fileProgressText({ state: "done", file: "x" }), null);
});

test("summarizingText: how many are summarized of all, and the server's estimate of the time left", () => {
  assert.equal(summarizingText({ pending: ["w3", "w4"], progress: { done: 6, total: 8, eta_s: 3.6 } }),
    "6 of 8 workers summarized, about 4 s left… (`gpuscope summarize LOGDIR` computes the summaries ahead of time)");
  assert.match(summarizingText({ pending: ["w0"], progress: { done: 0, total: 1, eta_s: null } }), /^0 of 1 workers summarized, estimating the time left…/);
  assert.match(summarizingText({ pending: ["w0"], progress: { done: 3, total: 4, eta_s: 0.2 } }), /^3 of 4 workers summarized, less than a second left…/);
  assert.match(summarizingText({ pending: ["w0", "w1"] }), /^0 of 2 workers summarized, estimating/);
});

test("pendingNames: all of a few, the first ones and a count of many", () => {
  assert.equal(pendingNames(["a", "b"]), "a, b");
  const many = Array.from({ length: 64 }, (_, i) => `r${i}`);
  assert.equal(pendingNames(many), "r0, r1, r2, r3, r4, r5 and 58 more");
});

test("TensorBoard URL state: p.gpuscope.* entries written and read back, others kept", () => {
  const u = hostURL("http://h:6006/#gpuscope&p.gpuscope.run=old&p.other.x=1", { run: "a b&c", view: "kernels" });
  assert.equal(u, "http://h:6006/#gpuscope&p.other.x=1&p.gpuscope.run=a%20b%26c&p.gpuscope.view=kernels");
  assert.deepEqual(parseHostHash(new URL(u).hash), { run: "a b&c", view: "kernels" });
  assert.equal(hostURL("http://h:6006/", { run: "r" }), "http://h:6006/#gpuscope&p.gpuscope.run=r");
  assert.deepEqual(parseHostHash("#gpuscope&p.gpuscope.run=%E0%A4%A"), {});
});

test("queueCounters: one track per device and stream, in time order, malformed events skipped", () => {
  const ev = (pid: number, tid: number, ts: number, n: any) => ({ ph: "C", name: `Queue length stream ${tid}`, pid, tid, ts, args: { queue_length: n } });
  const one = queueCounters([ev(0, 7, 40, 0), ev(0, 7, 12, 1), ev(0, 20, 5, 2), { ph: "X", ts: 1 }, ev(0, 7, 50, "x")]);
  assert.deepEqual(one, [
    { name: "Queue length stream 7", unit: "count", ts_us: [12, 40], values: [1, 0] },
    { name: "Queue length stream 20", unit: "count", ts_us: [5], values: [2] },
  ]);
  const two = queueCounters([ev(1, 7, 3, 4), ev(0, 7, 2, 1)]);
  assert.deepEqual(two.map((c) => c.name), ["GPU 0 queue stream 7", "GPU 1 queue stream 7"]);
  assert.deepEqual(queueCounters(undefined), []);
});

test("nameColors: one colour per name, twenty names apart; legendNames keep where long names differ", async () => {
  const { nameColors, legendNames } = await import("../src/charts");
  const a = nameColors();
  const names = Array.from({ length: 20 }, (_, i) => `op${i}`);
  const first = names.map(a);
  assert.equal(new Set(first).size, 20);
  assert.deepEqual(names.slice().reverse().map(a), first.slice().reverse());  // asked again: the same colours
  assert.notEqual(nameColors()("op5"), a("op5"));  // another view starts its own order
  const k = (f: string) => `void at::native::vectorized_elementwise_kernel<4, at::native::${f}<float>, at::detail::Array<char*, 3> >`;
  const got = legendNames([k("CUDAFunctor_add"), k("MulFunctor"), "aten::mm", "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x128_16x4_tn_align4>"]);
  assert.ok(got.every((x) => x.length <= 40), JSON.stringify(got));
  assert.ok(got[0].startsWith("void at::nat") && got[0].includes("CUDAFunctor_add"), got[0]);
  assert.ok(got[1].includes("MulFunctor"), got[1]);
  assert.equal(got[2], "aten::mm");
  assert.equal(got[3], "void cutlass::Kernel<cutlass_80_tensoro…");  // nothing shares its start: its start
  assert.equal(new Set(got).size, got.length);
});
